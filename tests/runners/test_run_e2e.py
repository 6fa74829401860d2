"""The runner end to end on real swe-lite tasks with a tiny random model: files, numbers, MLflow, flags.

A random model writes junk, so its episodes end on format errors: what is checked here is the
measurement machinery (both sides run, accounting identities, greedy ON == OFF token for token,
MLflow runs), not solving. The scripted expert's end-to-end solving is tests/agents/test_expert.py.
"""

import json
from pathlib import Path

import pytest

from runners.compare import Baseline, Comparison
from runners.config import agent_config
from runners.models import load_models
from runners.run import execute
from runners.summary import SIDE_KEYS
from runners.workload import Workload
from tasks.environment import make_environment
from tasks.suites import load_suite
from tests.conftest import runner_config


def _cfg(tmp: Path, target: Path, *overrides: str):
    return runner_config(
        tmp,
        f"model.target={target}",
        "model.draft=null",
        "task.limit=2",
        "agent.max_new_tokens=24",
        "agent.max_format_errors=2",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        *overrides,
    )


@pytest.fixture(scope="module")
def ngram_run(tiny_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    summary = execute(_cfg(tmp, tiny_dir, "engine.drafter=ngram", "run.name=ngram", "task.split=dev"))
    return tmp, summary


def test_summary_file_has_every_key_with_sane_values(ngram_run):
    tmp, returned = ngram_run
    out = tmp / "ngram"
    summary = json.loads((out / "summary.json").read_text())  # strict JSON: no NaN/Infinity tokens
    assert summary == json.loads(json.dumps(returned))
    for key in ("baseline", "candidate", "regressions", "improvements", "lossy", "repeats", "per_task", "provenance"):
        assert key in summary
    for side in ("baseline", "candidate"):
        s = summary[side]
        assert set(SIDE_KEYS) <= s.keys()
        assert s["unsupported"] is None
        assert s["tasks"] == 2 and 0 <= s["successes"] <= s["tasks"]
        assert 0.0 <= s["success_rate"] <= 1.0 and 0.0 <= s["acceptance_rate"] <= 1.0
        assert s["reused_tokens"] + s["prefilled_tokens"] == s["prompt_tokens"] > 0
        assert s["reused_tokens"] > 0  # later turns reuse the history's KV
        assert s["draft_limit_steps"] == 0  # only a draft model has a context of its own to fill
        assert s["agent_time_s"] > 0 and s["peak_memory_bytes"] > 0 and s["max_context_tokens"] > 0
        assert len(s["seconds_per_success_repeats"]) == 1
    assert summary["lossy"] is False and summary["repeats"] == 1
    prov = summary["provenance"]
    assert prov["suite_hash"] and prov["libraries"]["torch"].startswith("2.13") and prov["seed"] == 0
    assert summary["hardware"]["vram_ceiling_bytes"] == 16 * 2**30
    assert summary["hardware"]["timings_measured_on"] == "cpu"
    assert [r["instance_id"] for r in summary["per_task"]] == [
        json.loads(line)["instance_id"] for line in (out / "per_task.jsonl").read_text().splitlines()
    ]


def test_greedy_exact_on_and_off_produce_the_same_tokens(ngram_run):
    _, summary = ngram_run
    assert summary["greedy"] is True
    assert all(row["first_divergence"] is None for row in summary["per_task"])
    assert summary["diverged_tasks"] == []
    raw = [json.loads(line) for line in (ngram_run[0] / "ngram" / "repeats.jsonl").read_text().splitlines()]
    by_side = {(r["side"], r["instance_id"]): r["generated_ids"] for r in raw}
    for row in summary["per_task"]:
        base = by_side[("baseline", row["instance_id"])]
        assert base and base == by_side[("candidate", row["instance_id"])]
    assert summary["candidate"]["acceptance_rate"] > 0  # ngram drafted and was accepted


def test_history_is_never_prefilled_twice(ngram_run):
    raw = [json.loads(line) for line in (ngram_run[0] / "ngram" / "repeats.jsonl").read_text().splitlines()]
    for run in raw:
        stats = run["stats"]
        # Several turns, each given the whole conversation; yet every conversation token is computed at most once.
        assert run["steps"] >= 2
        assert stats["prompt_tokens"] > run["max_context_tokens"]
        assert stats["prefilled_tokens"] <= run["max_context_tokens"]


def test_outputs_trajectories_and_predictions(ngram_run):
    out = ngram_run[0] / "ngram"
    for side in ("baseline", "candidate"):
        preds = [json.loads(line) for line in (out / f"predictions-{side}.jsonl").read_text().splitlines()]
        assert len(preds) == 2 and set(preds[0]) == {"instance_id", "model_name_or_path", "model_patch"}
        trajectories = sorted((out / "trajectories" / side / "r0").glob("*.json"))
        assert len(trajectories) == 2
        assert json.loads(trajectories[0].read_text())["instance_id"] == preds[0]["instance_id"]
    assert (out / "acceptance_by_position.png").stat().st_size > 0 and (out / "task_times.png").exists()


def test_mlflow_has_parent_and_child_runs_with_metrics(ngram_run):
    from mlflow import MlflowClient

    tmp, summary = ngram_run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")
    exp = client.get_experiment_by_name("spectune")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    children = {r.data.tags["side"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    assert set(children) == {"baseline", "candidate"}
    for side, run in children.items():
        assert run.data.metrics["acceptance_rate"] == pytest.approx(summary[side]["acceptance_rate"])
        assert run.data.metrics["success_rate"] == pytest.approx(summary[side]["success_rate"])
        assert run.data.tags["lossy"] == "false"
        assert len(client.get_metric_history(run.info.run_id, "task_time_s")) == 2
    assert parents[0].info.status == "FINISHED"


def test_lossy_candidate_is_flagged_and_missing_draft_is_unsupported(tiny_dir, tmp_path):
    lossy = execute(
        _cfg(tmp_path, tiny_dir, "engine.acceptance=topk", "run.name=lossy", "task.limit=1", "tracking.enabled=false")
    )
    assert lossy["lossy"] is True and lossy["config"]["engine"]["acceptance"] == "topk"
    unsupported = execute(
        _cfg(tmp_path, tiny_dir, "engine=draft_model", "run.name=nodraft", "task.limit=1", "tracking.enabled=false")
    )
    reason = unsupported["candidate"]["unsupported"]
    assert reason and "draft" in reason
    assert unsupported["candidate"]["seconds_per_success"] is None and unsupported["candidate"]["tasks"] == 0
    assert unsupported["baseline"]["tasks"] == 1  # the baseline is still measured
    assert not (tmp_path / "mlflow.db").exists()  # tracking off: a null tracker writes nothing


def test_library_reuses_a_measured_baseline_and_stops_when_closed(tiny_dir, tmp_path):
    from omegaconf import OmegaConf

    from runners.config import engine_config

    cfg = _cfg(tmp_path, tiny_dir, "run.name=lib", "tracking.enabled=false")
    models = load_models(str(tiny_dir), None)
    instances = load_suite("swe-lite", "dev", limit=2)
    env = make_environment("swe-lite")
    work = Workload(models, instances, env, agent_config(cfg.agent), warmup=False)
    first = Comparison(work.with_(instances=instances[:1]), None, tmp_path / "a")
    outcomes = list(first)
    assert len(outcomes) == 1 and outcomes[0].candidate is None and outcomes[0].baseline is not None
    candidate = engine_config(OmegaConf.create({**OmegaConf.to_container(cfg.engine), "drafter": "suffix"}))
    second = Comparison(work, candidate, tmp_path / "b", baseline=Baseline.from_outcomes(outcomes))
    assert second.baseline_engine is None  # OFF is not measured again
    iterator = iter(second)
    got = next(iterator)
    iterator.close()  # stop after the current task
    assert got.baseline is outcomes[0].baseline and got.candidate is not None
    assert got.first_divergence is None
    assert not (tmp_path / "b" / "trajectories" / "candidate" / "r0" / f"{instances[1].instance_id}.json").exists()


def test_ctrl_c_writes_a_partial_summary(tiny_dir, tmp_path, monkeypatch):
    real_run = Comparison.run

    def interrupted(self):
        iterator = real_run(self)
        yield next(iterator)  # one task finishes, then the user presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(Comparison, "run", interrupted)
    summary = execute(_cfg(tmp_path, tiny_dir, "run.name=cut", "tracking.enabled=false"))
    written = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["partial"] is True and written["partial"] is True
    assert written["baseline"]["tasks"] == 1 and len(written["per_task"]) == 1
