"""MLflow tracking of a run (parent + one child per side, metrics, params, tags, artifacts), the null tracker, plots."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from runners import plots
from runners.tracking import (
    MlflowTracker,
    NullTracker,
    TrackingConfigError,
    default_uri,
    finish_or_report,
    flatten_params,
    make_tracker,
    split_values,
    truncate,
)

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TASKS = ["proj__a-1", "proj__b-2", "proj__c-3"]
REPEATS = 2
LONG = "x" * 7000  # over MLflow's param value limit in every version


def per_task(side_offset: float) -> list[dict]:
    """One entry per task per repeat, steps as a running index (what the runner passes)."""
    out = []
    for repeat in range(REPEATS):
        for i, iid in enumerate(TASKS):
            step = repeat * len(TASKS) + i
            out.append(
                {"instance_id": iid, "step": step, "time_s": side_offset + step, "success": i != 1, "repeat": repeat}
            )
    return out


def side_summary(spp: float | None, acceptance: float, unsupported: str | None = None) -> dict:
    """A summary.json side with the keys the issue lists."""
    return {
        "seconds_per_success": spp,
        "seconds_per_success_repeats": [spp, None] if spp is not None else [None, None],
        "success_rate": 2 / 3,
        "successes": 4,
        "tasks": 6,
        "acceptance_rate": acceptance,
        "mean_accepted_length": 1.75,
        "decode_tokens_per_s": 123.5,
        "reused_tokens": 900,
        "prefilled_tokens": 300,
        "peak_memory_bytes": 1 << 20,
        "context_exceeded": 0,
        "max_context_tokens": 2048,
        "evaluation_s": 4.25,
        "time_s": {"prefill": 1.5, "decode": 6.0, "tools": 2.0},
        "unsupported": unsupported,
        "per_position": {"drafted": [10, 6, 0], "accepted": [8, 3, 0]},
    }


CANDIDATE_POSITIONS = {"drafted": [10, 6, 0], "accepted": [8, 3, 0]}
SUMMARY = {
    "baseline": side_summary(None, 0.0),
    "candidate": side_summary(12.5, 0.6875),
    "per_task": [
        {
            "instance_id": iid,
            "baseline": {"times": [10.0 + i, 11.0 + i], "successes": [True, i != 1]},
            "candidate": {"times": [8.0 + i, 9.0 + i], "successes": [i != 2, True]},
        }
        for i, iid in enumerate(TASKS)
    ],
}
PARAMS = {"engine": {"drafter": "ngram", "gamma": 4, "sampling": {"temperature": 0.0}}, "lossy": False, "note": LONG}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A whole run logged through make_tracker's default backend; returns (client, parent run, children, run_dir)."""
    from mlflow import MlflowClient

    runs_root = tmp_path_factory.mktemp("runs")
    run_dir = runs_root / "demo"
    (run_dir / "trajectories").mkdir(parents=True)
    (run_dir / "trajectories" / "proj__a-1.json").write_text("{}")
    (run_dir / "summary.json").write_text(json.dumps(SUMMARY))
    tracker = make_tracker(True, None, "spectune-test", run_dir)
    assert isinstance(tracker, MlflowTracker)
    tags = {"hardware": "cpu", "model": "tiny", "task": "swe-lite", "lossy": False}
    tracker.start("demo", PARAMS, tags)
    tracker.log_side(
        "baseline",
        {"drafter": "none"},
        {},
        SUMMARY["baseline"],
        per_task(0.0),
        {"drafted": [], "accepted": []},
    )
    tracker.log_side(
        "candidate",
        {"drafter": "ngram", "gamma": 4},
        {},
        SUMMARY["candidate"],
        per_task(0.5),
        CANDIDATE_POSITIONS,
    )
    tracker.log_comparison({"regressions": ["proj__c-3"], "improvements": [], "seconds_per_success_ratio": 0.8})
    tracker.log_artifacts([run_dir / "summary.json", run_dir / "trajectories"])
    tracker.log_plots(SUMMARY)
    tracker.finish()
    tracker.finish()  # idempotent
    client = MlflowClient(tracking_uri=default_uri(run_dir))
    experiment = client.get_experiment_by_name("spectune-test")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, f"expected one parent run, got {len(parents)}"
    children = {r.data.tags["side"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    return client, parents[0], children, run_dir


def test_default_backend_is_sqlite_beside_the_run_folders(logged):
    _, parent, _, run_dir = logged
    assert (run_dir.parent / "mlflow.db").is_file(), "default database must be <runs root>/mlflow.db"
    assert parent.info.artifact_uri.startswith((run_dir.parent / "mlartifacts").as_uri()), parent.info.artifact_uri


def test_one_parent_two_nested_children(logged):
    _, parent, children, _ = logged
    assert set(children) == {"baseline", "candidate"}
    for side, run in children.items():
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id, f"{side} is not nested under the parent"
        assert run.info.run_name == f"demo/{side}"
        assert run.info.status == "FINISHED"
    assert parent.info.run_name == "demo"
    assert parent.info.status == "FINISHED"


def test_tags_on_parent_and_inherited_by_children(logged):
    _, parent, children, _ = logged
    for run in (parent, *children.values()):
        assert run.data.tags["hardware"] == "cpu"
        assert run.data.tags["model"] == "tiny"
        assert run.data.tags["task"] == "swe-lite"
        assert run.data.tags["lossy"] == "false", "lossy must be the string true/false"
    assert children["candidate"].data.tags["side"] == "candidate"


def test_side_metrics_equal_the_summary(logged):
    _, _, children, _ = logged
    metrics = children["candidate"].data.metrics
    expected = {k: v for k, v in SUMMARY["candidate"].items() if isinstance(v, int | float) and v is not None}
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value), key
    assert metrics["time_s.decode"] == 6.0, "nested summary values get dotted metric keys"
    assert "unsupported" not in children["candidate"].data.tags


def test_none_is_skipped_not_logged_as_nan(logged):
    client, _, children, _ = logged
    baseline = children["baseline"]
    assert "seconds_per_success" not in baseline.data.metrics
    assert all(not math.isnan(v) for v in baseline.data.metrics.values())
    history = client.get_metric_history(children["candidate"].info.run_id, "seconds_per_success_repeats")
    assert [(m.step, m.value) for m in history] == [(0, 12.5)], "the None repeat must be skipped"


def test_per_task_history_one_point_per_task_per_repeat(logged):
    client, _, children, _ = logged
    for side, offset in (("baseline", 0.0), ("candidate", 0.5)):
        run_id = children[side].info.run_id
        times = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "task_time_s"))
        assert times == [(t["step"], t["time_s"]) for t in per_task(offset)], side
        success = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "task_success"))
        assert success == [(t["step"], float(t["success"])) for t in per_task(offset)], side
        assert len(times) == len(TASKS) * REPEATS


def test_acceptance_by_position(logged):
    client, _, children, _ = logged
    candidate = children["candidate"]
    assert candidate.data.metrics["acceptance_pos_0"] == pytest.approx(0.8)
    assert candidate.data.metrics["acceptance_pos_1"] == pytest.approx(0.5)
    assert "acceptance_pos_2" not in candidate.data.metrics, "a position never drafted has no rate"
    history = client.get_metric_history(candidate.info.run_id, "acceptance_by_position")
    assert sorted((m.step, m.value) for m in history) == [(0, pytest.approx(0.8)), (1, pytest.approx(0.5))]
    assert not any(k.startswith("acceptance_pos") for k in children["baseline"].data.metrics)


def test_params_flattened_and_truncated(logged):
    _, parent, children, _ = logged
    params = parent.data.params
    assert params["engine.drafter"] == "ngram"
    assert params["engine.gamma"] == "4"
    assert params["engine.sampling.temperature"] == "0.0"
    assert params["lossy"] == "false"
    assert len(params["note"]) <= 6000 and "truncated, 7000 chars" in params["note"]
    assert children["candidate"].data.params == {"drafter": "ngram", "gamma": "4"}


def test_comparison_on_parent(logged):
    _, parent, _, _ = logged
    assert parent.data.metrics["seconds_per_success_ratio"] == pytest.approx(0.8)
    assert parent.data.metrics["regressions"] == 1 and parent.data.tags["regressions"] == "proj__c-3"
    assert parent.data.metrics["improvements"] == 0


def test_artifacts_and_plots(logged):
    client, parent, _, run_dir = logged
    run_id = parent.info.run_id
    root = {a.path for a in client.list_artifacts(run_id)}
    assert {"summary.json", "trajectories", "plots"} <= root, root
    assert {a.path for a in client.list_artifacts(run_id, "trajectories")} == {"trajectories/proj__a-1.json"}
    logged_plots = {a.path for a in client.list_artifacts(run_id, "plots")}
    assert logged_plots == {f"plots/{plots.ACCEPTANCE_PNG}", f"plots/{plots.TASK_TIMES_PNG}"}
    for name in (plots.ACCEPTANCE_PNG, plots.TASK_TIMES_PNG):
        assert (run_dir / name).read_bytes().startswith(PNG_MAGIC), f"{name} missing from the run folder"


def test_killed_status_sticks_and_logging_after_finish_fails(logged):
    client, _, _, run_dir = logged
    tracker = make_tracker(True, default_uri(run_dir), "spectune-killed", run_dir)
    tracker.start("interrupted", {"seed": 0}, {"lossy": True})
    tracker.finish("KILLED")
    tracker.finish("FINISHED")  # a later finish does not overwrite the status
    run = client.get_run(tracker.parent_run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["lossy"] == "true"
    with pytest.raises(RuntimeError, match="finished"):
        tracker.log_comparison({"ratio": 1.0})
    with pytest.raises(ValueError, match="FINISHED"):
        tracker.finish("DONE")


def test_deleted_experiment_and_bad_uri_are_config_errors(logged, tmp_path):
    client, _, _, run_dir = logged
    client.delete_experiment(client.create_experiment("gone"))
    with pytest.raises(TrackingConfigError, match="deleted"):
        make_tracker(True, default_uri(run_dir), "gone", run_dir)
    with pytest.raises(TrackingConfigError, match=r"tracking\.uri"):
        make_tracker(True, "nosuchscheme://host", "x", tmp_path / "r")


def test_null_tracker_does_nothing_creates_nothing_imports_no_mlflow(tmp_path):
    """In a fresh interpreter (mlflow is imported by the other tests here) with an empty working directory."""
    script = f"""
import sys
from pathlib import Path
from runners.tracking import NullTracker, make_tracker
t = make_tracker(False, None, "x", Path("runs/demo"))
assert isinstance(t, NullTracker)
t.start("demo", {PARAMS!r}, {{"lossy": True}})
t.log_side("candidate", {{}}, {{}}, {SUMMARY["candidate"]!r}, [], {CANDIDATE_POSITIONS!r})
t.log_comparison({{"regressions": []}})
t.log_artifacts([Path("summary.json")])
t.log_plots({SUMMARY!r})
t.finish("KILLED")
t.finish()
assert "mlflow" not in sys.modules, "the null tracker imported mlflow"
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == [], "the null tracker created files"


def test_flatten_params_rejects_colliding_keys():
    assert flatten_params({"a": {"b": 1}, "c": [1, 2], "d": None, "e": {}}) == {
        "a.b": "1",
        "c": "[1, 2]",
        "d": "null",
        "e": "{}",
    }
    assert flatten_params({"a.b": 1, "a": {"b": 1}}) == {"a.b": "1"}, "same key, same value: logged once"
    with pytest.raises(ValueError, match=r"a\.b"):
        flatten_params({"a.b": 1, "a": {"b": 2}})
    assert flatten_params({"x:y": 1}) == {"x_y": "1"}, "characters MLflow rejects are replaced"


def test_truncate_keeps_the_limit_and_says_so():
    assert truncate("short", 10) == "short"
    cut = truncate("y" * 600, 500)
    assert len(cut) == 500 and cut.endswith("[truncated, 600 chars]")


def test_split_values_skips_none_and_non_finite():
    metrics, tags = split_values({"a": None, "b": float("nan"), "c": float("inf"), "d": 2, "e": "why", "f": True})
    assert metrics == {"d": [(0, 2.0)]}
    assert tags == {"e": "why", "f": "true"}
    ids, id_tags = split_values({"regressions": []}, lists_are_ids=True)
    assert ids == {"regressions": [(0, 0.0)]} and id_tags == {"regressions": ""}


def test_plots_say_why_when_empty():
    fig = plots.acceptance_by_position({"per_position": {"drafted": [0], "accepted": [0]}})
    assert isinstance(fig, Figure)
    assert "no drafted tokens" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    fig = plots.task_times({"per_task": [{"instance_id": "a", "baseline": {"times": [1.0]}, "candidate": {}}]})
    assert "no task has times" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    with pytest.raises(ValueError, match="drafted"):
        plots.acceptance_by_position({"per_position": {"drafted": [1, 2], "accepted": [1]}})


def test_task_times_groups_by_outcome():
    fig = plots.task_times(SUMMARY)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    # Success over repeats, OFF vs ON: proj__a-1 2/2 vs 2/2, proj__b-2 1/2 vs 2/2, proj__c-3 2/2 vs 1/2.
    assert labels[1:] == ["solved by both (1)", "better with ON (1)", "worse with ON (1)"], labels
    assert "ON faster on 3 of 3 tasks" in fig.axes[0].get_title()


class _Recorder(NullTracker):
    """A tracker that records how it was finished and can be told to fail."""

    def __init__(self, fail_finish: bool = False) -> None:
        self.finished: list[str] = []
        self.fail_finish = fail_finish

    def finish(self, status: str = "FINISHED") -> None:
        self.finished.append(status)
        if self.fail_finish:
            raise OSError("tracking server gone")


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, line: str) -> None:
        self.lines.append(line)


def test_a_tracking_failure_is_one_line_and_the_run_ends_failed():
    tracker, console = _Recorder(), _Lines()
    finish_or_report(tracker, "KILLED", console, lambda: None)
    assert tracker.finished == ["KILLED"] and console.lines == []

    def broken() -> None:
        raise ValueError("bad metric")

    tracker = _Recorder()
    finish_or_report(tracker, "FINISHED", console, broken, where="runs/s")
    assert tracker.finished == ["FAILED"]
    assert console.lines == ["[red]MLflow logging failed:[/] ValueError: bad metric (results are in runs/s)"]

    console.lines.clear()
    tracker = _Recorder(fail_finish=True)  # neither finish works: still never raises
    finish_or_report(tracker, "FINISHED", console, lambda: None)
    assert tracker.finished == ["FINISHED", "FAILED"]
    assert console.lines == [
        "[red]MLflow logging failed:[/] OSError: tracking server gone (results are in the run folder)"
    ]
