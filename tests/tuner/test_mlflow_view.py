"""MLflow as a user meets a study: a training-kind experiment whose trials are top-level runs with their key figures,
a stored view of the runs table that selects them, and the URLs to open. Trials are built with Optuna's
`create_trial` (no tuner run), logged through `StudyTracker` into a sqlite store and checked through the REST API of a
real `mlflow server` on 127.0.0.1 (loopback only); the page itself through headless Chromium when it is installed."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from datetime import datetime, timedelta

import pytest
from mlflow import MlflowClient
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from runners.tracking import EXPERIMENT_KIND_TAG, TRAINING_KIND, MlflowTracker
from tuner.tracking import (
    KIND_TAG,
    STUDY_RUN_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    VIEW_TAG_PREFIX,
    NullStudyTracker,
    StudyTracker,
    make_study_tracker,
    trial_metrics,
    view_id,
)
from tuner.ui_snapshot import dump_dom, find_browser, run_metrics, run_tags, served, study_runs

STUDY = "view-study"
EXPERIMENT = "view-test"
FIT = {"llama-server": "exact", "vLLM": "approximate", "SGLang": "none"}
DIST = {
    "drafter": CategoricalDistribution(["ngram", "suffix"]),
    "ngram.gamma": IntDistribution(1, 16),
    "suffix.gamma": IntDistribution(1, 16),
}
OK = {"vram_gib": -6.0, "context_tokens": -2048.0, "regressions": 0.0, "no_success": 0.0}
T0 = datetime(2026, 12, 1, 12, 0, 0)


def _trial(number: int, state: TrialState, value: float | None, params: dict, attrs: dict, cons: dict | None):
    """A finished FrozenTrial as the tuner leaves it (constraints also kept as `constraint.*` user attributes)."""
    attrs = {**attrs, **{f"constraint.{k}": v for k, v in (cons or {}).items()}}
    trial = create_trial(
        state=state,
        value=value,
        params=params,
        distributions={k: DIST[k] for k in params},
        user_attrs=attrs,
        constraints=cons,
    )
    trial.number = number
    trial.datetime_start, trial.datetime_complete = T0 + timedelta(minutes=number), T0 + timedelta(minutes=number + 1)
    return trial


def _candidate(**extra) -> dict:
    """User attributes of a measured candidate (None where the tuner may leave a figure out)."""
    return {
        "role": "candidate",
        "measure": "replay",
        "host": "ci-host",
        "duplicate_of": None,
        "acceptance_rate": 0.61,
        "mean_accepted_length": 2.4,
        "decode_tokens_per_s": 310.0,
        "memory_bytes": 3 * 1024**3,
        "success_rate": 1.0,
        "successes": 4,
        "tasks_run": 4,
        "tasks_total": 4,
        "largest_context": 32768,
        "max_context_tokens": 9000,
        "agent_time_s": 12.5,
        "server_fit": FIT,
        "generation_s": {"baseline": {"wall": 5.5, "cpu": 9.0}, "candidate": {"wall": 4.0, "cpu": 7.5}},
        "task_values": [[0, 0.7], [1, 0.8], [2, 0.75], [3, 0.9]],
        "acceptance_by_position": [0.8, 0.6, 0.4],
        "cost_ratios": {"draft": 0.08, "verify": 1.1},
        "engine": {"drafter": "ngram", "gamma": 4},
        "regressions": [],
        "diverged_tasks": [],
        **extra,
    }


def study_trials() -> list[FrozenTrial]:
    """A baseline, two complete candidates (one breaks the VRAM ceiling), one pruned and one failed."""
    baseline = {
        "role": "baseline",
        "measure": "recording",
        "seconds_per_success": 1.2,
        "success_rate": 1.0,
        "successes": 4,
        "tasks_run": 4,
        "tasks_total": 4,
        "memory_bytes": 2 * 1024**3,
        "speedup_low": None,
        "server_fit": None,
    }
    fast = _candidate(
        seconds_per_success=0.8, off_seconds_per_success=1.1, speedup=1.375, speedup_low=1.21, speedup_high=1.52
    )
    big = _candidate(
        measure="live",
        seconds_per_success=1.0,
        off_seconds_per_success=1.15,
        speedup=1.15,
        speedup_low=None,
        speedup_high=None,
        duplicate_of=1,
    )
    pruned = _candidate(seconds_per_success=1.6, speedup=0.7, tasks_run=2, reason="pruned after 2 of 4 task runs")
    failed = {"role": "candidate", "reason": "error: RuntimeError: injected", "host": "ci-host", "server_fit": FIT}
    return [
        _trial(0, TrialState.COMPLETE, 1.2, {}, baseline, OK),
        _trial(1, TrialState.COMPLETE, 0.8, {"drafter": "ngram", "ngram.gamma": 4}, fast, OK),
        _trial(2, TrialState.COMPLETE, 1.0, {"drafter": "suffix", "suffix.gamma": 8}, big, {**OK, "vram_gib": 0.5}),
        _trial(3, TrialState.PRUNED, None, {"drafter": "ngram", "ngram.gamma": 2}, pruned, OK),
        _trial(4, TrialState.FAIL, None, {"drafter": "suffix", "suffix.gamma": 3}, failed, None),
    ]


def _log(uri: str, study_dir, trials) -> StudyTracker:
    tracker = StudyTracker(uri=uri, experiment=EXPERIMENT, study_dir=study_dir)
    assert tracker.open_study(STUDY, {"tuner": {"trials": 4}}, {"hardware": "rtx4060", "model": "tiny"}) is False
    for trial in trials:
        tracker.log_trial(trial)
    tracker.log_study({"best_seconds_per_success": 0.8, "best_trial": 1, "wall_s": None}, {"best_drafter": "ngram"})
    tracker.finish("FINISHED")
    return tracker


def _get(base: str, path: str, **query) -> dict:
    with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(query)}", timeout=10) as response:
        return json.loads(response.read())


def _search(base: str, experiment_id: str, filter_string: str = "") -> list[dict]:
    body = json.dumps({"experiment_ids": [experiment_id], "filter": filter_string, "max_results": 1000}).encode()
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/runs/search", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read()).get("runs", [])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(REST base URL, the study's tracker, experiment) with the trials logged and a real `mlflow server` on them."""
    root = tmp_path_factory.mktemp("mlflow-view")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = _log(uri, root / "runs" / STUDY, study_trials())
    with served(uri) as base:
        experiment = _get(base, "/api/2.0/mlflow/experiments/get-by-name", experiment_name=EXPERIMENT)["experiment"]
        yield base, tracker, experiment


def test_the_experiment_is_a_training_one_and_every_trial_a_top_level_run_with_its_figures(study):
    base, tracker, experiment = study
    tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    assert tags[EXPERIMENT_KIND_TAG] == TRAINING_KIND == "custom_model_development"

    exp_id, study_run, trials = study_runs(base, EXPERIMENT, STUDY)
    assert exp_id == experiment["experiment_id"] == tracker.experiment_id
    assert [int(run_tags(r)[TRIAL_TAG]) for r in trials] == [0, 1, 2, 3, 4]
    everything = _search(base, exp_id)
    assert len(everything) == 6  # the study run and five trials: no run hidden in a collapsed group
    for run in everything:
        assert "mlflow.parentRunId" not in run_tags(run)
    assert run_metrics(study_run)["best_seconds_per_success"] == 0.8
    assert "wall_s" not in run_metrics(study_run)  # None: skipped

    by = {int(run_tags(r)[TRIAL_TAG]): r for r in trials}
    for run in by.values():
        t = run_tags(run)
        assert (t[STUDY_TAG], t[KIND_TAG], t[STUDY_RUN_TAG]) == (STUDY, "trial", study_run["info"]["run_id"])
        assert t["hardware"] == "rtx4060"  # the study's tags travel with each trial
    states = {n: (r["info"]["status"], run_tags(r)["state"]) for n, r in by.items()}
    assert states == {
        0: ("FINISHED", "COMPLETE"),
        1: ("FINISHED", "COMPLETE"),
        2: ("FINISHED", "COMPLETE"),
        3: ("FINISHED", "PRUNED"),
        4: ("FAILED", "FAIL"),
    }

    base_run, fast, big, pruned, failed = (by[n] for n in range(5))
    assert run_tags(base_run)["role"] == "baseline" and run_tags(base_run)["measure"] == "recording"
    assert run_metrics(base_run)["seconds_per_success"] == 1.2
    assert not any(k.startswith("fit.") for k in run_tags(base_run))  # server_fit None: skipped

    m = run_metrics(fast)
    assert m["seconds_per_success"] == 0.8 and m["off_seconds_per_success"] == 1.1
    assert (m["speedup"], m["speedup_low"], m["speedup_high"]) == (1.375, 1.21, 1.52)
    assert (m["acceptance_rate"], m["mean_accepted_length"], m["memory_gib"]) == (0.61, 2.4, 3.0)
    assert m["memory_bytes"] == 3 * 1024**3 and m["objective_seconds_per_success"] == 0.8
    assert (m["tasks_run"], m["tasks_total"], m["successes"], m["success_rate"]) == (4, 4, 4, 1.0)
    assert m["generation_s.candidate.wall"] == 4.0 and m["generation_s.baseline.cpu"] == 9.0
    assert m["constraint_vram_gib"] == -6.0 and m["cost_draft"] == 0.08
    t = run_tags(fast)
    assert (t["fit.llama-server"], t["fit.vLLM"], t["fit.SGLang"]) == ("exact", "approximate", "none")
    assert (t["measure"], t["host"], t["role"]) == ("replay", "ci-host", "candidate")
    assert "duplicate_of" not in t and "reason" not in t and "violated" not in t
    assert {p["key"]: p["value"] for p in fast["data"]["params"]}["ngram.gamma"] == "4"

    assert "speedup_low" not in run_metrics(big) and "speedup_high" not in run_metrics(big)  # None: skipped
    t = run_tags(big)
    assert (t["duplicate_of"], t["violated"], t["measure"]) == ("1", "vram_gib", "live")
    assert run_tags(pruned)["reason"] == "pruned after 2 of 4 task runs" and run_metrics(pruned)["tasks_run"] == 2
    assert run_tags(failed)["reason"] == "error: RuntimeError: injected"
    assert "violated" not in run_tags(failed)  # it recorded no constraints; its reason says what happened
    assert "seconds_per_success" not in run_metrics(failed)


def test_the_stored_view_selects_the_trials_and_the_urls_open_it(study):
    base, tracker, experiment = study
    exp_id = experiment["experiment_id"]
    tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    envelope = json.loads(tags[VIEW_TAG_PREFIX + view_id(STUDY)])
    assert envelope["name"] == f"spectune trials: {STUDY}" and isinstance(envelope["createdAt"], int)
    state = json.loads(envelope["state"])
    _, _, trials = study_runs(base, EXPERIMENT, STUDY)
    trial_ids = [r["info"]["run_id"] for r in trials]

    # The view's filter, run by the server, selects exactly the trials; its sort puts the best speedup first.
    selected = _search(base, exp_id, state["searchFilter"])
    assert sorted(r["info"]["run_id"] for r in selected) == sorted(trial_ids)
    assert state["orderByKey"] == "metrics.`speedup`" and state["orderByAsc"] is False
    columns = state["selectedColumns"]
    for key in ("speedup", "speedup_low", "speedup_high", "seconds_per_success", "off_seconds_per_success"):
        assert f"metrics.`{key}`" in columns
    for key in ("acceptance_rate", "memory_gib"):
        assert f"metrics.`{key}`" in columns
    for key in ("drafter", "ngram.gamma", "suffix.gamma"):
        assert f"params.`{key}`" in columns
    for key in ("state", "measure", "fit.llama-server", "fit.vLLM", "fit.SGLang", "reason", "duplicate_of"):
        assert f"tags.`{key}`" in columns
    assert not any("engine." in c for c in columns)  # the engine's settings stay on the run page
    # Every column names something the trials carry (a typo would show an empty column).
    carried = set()
    for run in selected:
        carried |= {f"metrics.`{k}`" for k in run_metrics(run)}
        carried |= {f"params.`{p['key']}`" for p in run["data"].get("params", [])}
        carried |= {f"tags.`{k}`" for k in run_tags(run)}
    assert set(columns) <= carried
    assert state["columnOrder"] == columns and set(state["columnWidths"]) == set(columns)

    urls = tracker.view_urls(base)
    assert set(urls) == {"trials", "compare", "study"}
    trials_url = urllib.parse.urlsplit(urls["trials"])
    assert f"{trials_url.scheme}://{trials_url.netloc}" == base
    route, _, query = trials_url.fragment.partition("?")
    assert route == f"/experiments/{exp_id}/runs"
    assert urllib.parse.parse_qs(query) == {"workflowType": ["machine_learning"], "viewStateShareKey": [view_id(STUDY)]}
    route, _, query = urllib.parse.urlsplit(urls["compare"]).fragment.partition("?")
    assert route == "/compare-runs"
    q = urllib.parse.parse_qs(query)
    assert json.loads(q["runs"][0]) == trial_ids and json.loads(q["experiments"][0]) == [exp_id]
    assert q["workflowType"] == ["machine_learning"]
    study_run = run_tags(study_runs(base, EXPERIMENT, STUDY)[1])
    assert study_run[KIND_TAG] == "study"
    assert f"/experiments/{exp_id}/runs/" in urls["study"]
    assert tracker.view_urls()["trials"].startswith("http://127.0.0.1:5000/#/experiments/")  # mlflow ui's default


def test_a_resumed_study_logs_only_new_trials_and_widens_its_view(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trials = study_trials()
    _log(uri, tmp_path / "runs" / STUDY, trials[:3])
    again = StudyTracker(uri=uri, experiment=EXPERIMENT, study_dir=tmp_path / "runs" / STUDY)
    assert again.open_study(STUDY, {"tuner": {"trials": 4}}, {"hardware": "rtx4060"}) is True
    for trial in trials:  # the first three were logged before the "kill"
        again.log_trial(trial)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{KIND_TAG}` = 'trial'")
    assert sorted(int(r.data.tags[TRIAL_TAG]) for r in runs) == [0, 1, 2, 3, 4]
    assert all(r.data.tags[STUDY_TAG] == STUDY for r in runs)  # also those logged after reopening
    state = json.loads(json.loads(exp.tags[VIEW_TAG_PREFIX + view_id(STUDY)])["state"])
    assert "tags.`reason`" in state["selectedColumns"]  # first seen on a trial logged after the resume
    assert len(again.view_urls()["compare"]) > 0


def test_the_runners_experiment_is_a_training_one_and_a_chosen_kind_stays(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("made-before")  # an experiment from before the kind was set
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    for name in ("fresh", "made-before", "chosen"):
        MlflowTracker(uri=uri, experiment=name, run_dir=tmp_path / "run")
    kinds = {e.name: e.tags.get(EXPERIMENT_KIND_TAG) for e in client.search_experiments()}
    assert kinds["fresh"] == kinds["made-before"] == TRAINING_KIND
    assert kinds["chosen"] == "genai_development"
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == TRAINING_KIND
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_without_tracking_there_is_nothing_to_open(tmp_path):
    tracker = make_study_tracker(False, None, EXPERIMENT, tmp_path)
    assert isinstance(tracker, NullStudyTracker) and tracker.view_urls() == {}
    assert tracker.open_study(STUDY, {}, {}) is False


def test_trial_metrics_skip_what_a_trial_did_not_measure():
    failed = study_trials()[4]
    metrics = trial_metrics(failed)
    assert set(metrics) == {"regressions", "diverged_tasks"}  # counts (zero); no figure it never measured


def test_figures_are_rounded_for_the_table_and_the_objective_counts_and_bytes_are_exact():
    attrs = {"seconds_per_success": 0.5931298830002257, "speedup": 1.0768161, "memory_bytes": 3 * 1024**3 + 1}
    trial = _trial(7, TrialState.COMPLETE, 0.5931298830002257, {}, {**attrs, "tasks_run": 123457}, OK)
    m = {k: v[0][1] for k, v in trial_metrics(trial).items()}
    assert (m["seconds_per_success"], m["speedup"], m["memory_gib"]) == (0.5931, 1.077, 3.0)
    assert m["objective_seconds_per_success"] == 0.5931298830002257  # the value Optuna minimised, as it was
    assert (m["memory_bytes"], m["tasks_run"]) == (3 * 1024**3 + 1, 123457)


@pytest.mark.skipif(find_browser() is None, reason="no chromium binary on PATH (apt-get install -y chromium)")
def test_the_trials_view_shows_the_trials_and_their_figures_in_chromium(study):
    base, tracker, _ = study
    # Wide enough for every column: the runs table draws only the columns inside the window.
    page = dump_dom(tracker.view_urls(base)["trials"], width=4800)
    assert f"spectune trials: {STUDY}" in page  # the stored view is the one open
    for number, name in enumerate(["baseline", "ngram", "suffix", "ngram", "suffix"]):
        assert f"{STUDY}/{number:04d}-{name}" in page  # every trial is a row, none folded away
    for header in ("speedup", "speedup_low", "seconds_per_success", "acceptance_rate", "memory_gib", "fit.vLLM"):
        assert f">{header}<" in page
    for value in ("1.375", "approximate", "pruned after 2 of 4 task runs", "error: RuntimeError: injected"):
        assert value in page
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "5 matching runs" in text  # the runs table, not the GenAI overview
    assert "Sort: speedup" in page and "No data available" not in page
