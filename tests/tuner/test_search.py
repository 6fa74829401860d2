"""The tuner end to end on real swe-lite tasks with the bundled models: objective, baseline, constraints,
pruning, failed trials, confirmation and exports (behaviour only, never wall-clock)."""

from __future__ import annotations

import json
import math

import optuna
import pytest

from engine.drafters.ngram import NgramDrafter
from tuner.search import execute


def _trials(root):
    return [json.loads(line) for line in (root / "trials.jsonl").read_text().splitlines()]


def test_study_measures_off_once_then_candidates_confirms_and_exports(tune, tmp_path):
    cfg = tune(
        "tuner.trials=3",
        "tuner.confirm=true",
        "tuner.confirm_limit=3",
        "tuner.confirm_repeats=1",
        "tuner.measure_drift=true",
        "study.pruner=none",
    )
    summary = execute(cfg)
    root = tmp_path / "runs" / "t"
    rows = _trials(root)
    assert [r["role"] for r in rows] == ["baseline", "candidate", "candidate", "candidate"]
    base = rows[0]
    assert base["number"] == 0 and base["state"] == "COMPLETE" and base["params"] == {}
    assert base["user_attrs"]["engine"]["drafter"] == "none"
    baseline = json.loads((root / "baseline.json").read_text())
    assert baseline["trial_number"] == 0 and len(baseline["runs"]) == 2
    assert baseline["drift"]["agent_time_pct"] is not None  # OFF re-measured at the end
    for row in rows[1:]:
        assert row["state"] == "COMPLETE", row
        attrs = row["user_attrs"]
        assert row["params"]["drafter"] in ("ngram", "suffix")
        assert attrs["engine"]["drafter"] == row["params"]["drafter"]
        # The objective is the runner's seconds per success, and exact acceptance keeps every answer.
        assert attrs["seconds_per_success"] == pytest.approx(row["value"])
        assert attrs["regressions"] == [] and attrs["diverged_tasks"] == []
        assert attrs["tasks_run"] == attrs["tasks_total"] == 2
        assert len(attrs["task_values"]) == 2  # one paired value per task, reported by step
        assert attrs["constraint.vram_gib"] < 0 and attrs["constraint.regressions"] <= 0
    best = summary["best"]
    assert best is not None and best["value"] == min(r["value"] for r in rows[1:])
    confirmation = json.loads((root / "confirmation.json").read_text())
    assert confirmation["trial"] == best["number"] and confirmation["task_runs"] == 3
    assert confirmation["regressions"] == [] and confirmation["diverged_tasks"] == []
    held_out = set(confirmation["instance_ids"])
    assert not held_out & set(baseline["instance_ids"])  # confirmed on other tasks than searched
    exported = {p.name for p in (root / "best").iterdir()}
    expected = {"spectune.yaml", "llama-server.args", "vllm-speculative-config.json", "sglang.args", "README.md"}
    assert expected <= exported
    assert {p.name for p in (root / "plots").iterdir()} >= {"optimization_history.png", "seconds_vs_memory.png"}

    # Same command, same study: nothing re-measured, nothing lost, the confirmation reused.
    again = execute(cfg)
    assert _trials(root) == rows
    assert again["resumed"] and again["best"]["number"] == best["number"]
    assert json.loads((root / "baseline.json").read_text())["runs"] == baseline["runs"]


def test_a_tiny_ceiling_makes_every_trial_infeasible_and_says_which_constraint(tune, tmp_path):
    summary = execute(tune("tuner.trials=2", "hardware.vram_gib=0.001"))  # 1 MiB: not even the weights fit
    rows = _trials(tmp_path / "runs" / "t")
    candidates = [r for r in rows if r["role"] == "candidate"]
    assert len(candidates) == 2
    for row in candidates:
        assert row["state"] == "COMPLETE" and "vram_gib" in row["violated"]
        assert "context_tokens" in row["violated"]  # and no context fits either
    assert summary["best"] is None and "exports" not in summary


def test_a_slow_candidate_is_pruned_before_the_end(tune, tmp_path, monkeypatch):
    original = NgramDrafter.propose

    def slow(self, *args, **kwargs):
        import time

        time.sleep(0.05)  # every draft step: the candidate is slower than OFF on every task
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "propose", slow)
    execute(
        tune(
            "task.limit=8",
            "tuner.trials=1",
            "study.prune_startup_steps=2",
            "study.prune_p=0.1",
            drafters={"ngram": {"gamma": 4}},
        )
    )
    [candidate] = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    assert candidate["state"] == "PRUNED", candidate
    assert candidate["user_attrs"]["tasks_run"] < 8
    assert all(v > 1.0 for _, v in candidate["user_attrs"]["task_values"])
    assert candidate["reason"].startswith("pruned after")


def test_a_crashing_trial_is_recorded_as_failed_and_the_study_goes_on(tune, tmp_path, monkeypatch):
    original, calls = NgramDrafter.propose, []

    def crash_in_the_first_trial(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected drafter fault")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "propose", crash_in_the_first_trial)
    summary = execute(tune("tuner.trials=2", drafters={"ngram": {"gamma": [2, 4]}}))
    first, second = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    assert first["state"] == "FAIL" and first["reason"].startswith("error: task ")
    assert first["reason"].endswith("RuntimeError: injected drafter fault")
    assert second["state"] == "COMPLETE"  # the study went on
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'runs' / 't' / 'study.db'}")
    assert "CandidateCrashed" in study.trials[first["number"]].user_attrs["traceback"]
    assert summary["best"]["number"] == second["number"]


def test_mtp_and_combined_trials_load_the_bundled_module_and_count_it_in_memory(tune, tmp_path):
    drafters = {"mtp": {"gamma": [2]}, "mtp+ngram": {"gamma": [3], "policy": ["extend"]}}
    execute(tune("tuner.trials=4", "study.pruner=none", "task.limit=1", drafters=drafters))
    rows = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    base = next(r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "baseline")
    assert {r["params"]["drafter"] for r in rows} == {"mtp", "mtp+ngram"}
    for row in rows:
        attrs = row["user_attrs"]
        assert row["state"] == "COMPLETE", row
        assert attrs["regressions"] == [] and attrs["diverged_tasks"] == []
        assert attrs["acceptance_rate"] > 0  # the module proposed and the target kept some of it
        # the module's weights and its per-position state are counted on top of OFF's estimate
        assert attrs["memory_estimate_bytes"] > base["user_attrs"]["memory_estimate_bytes"]


def test_no_success_is_infinitely_slow_and_infeasible_never_zero(tune, tmp_path):
    execute(tune("tuner.trials=1", "agent.max_steps=1"))  # one turn cannot solve a task
    rows = _trials(tmp_path / "runs" / "t")
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'runs' / 't' / 'study.db'}")
    for row in rows:
        assert row["state"] == "COMPLETE" and row["value"] is None  # inf in the storage, null in JSON
        assert "no_success" in row["violated"]
        assert math.isinf(study.trials[row["number"]].value)


def test_bad_tuner_values_fail_before_anything_loads(tune):
    for override, text in (
        ("study.pruner=median", "wilcoxon"),
        ("tuner.confirm_repeats=0", "confirm_repeats"),
        ("+space.drafters.medusa={}", "medusa"),
        ("study.storage=redis", "journal"),
    ):
        with pytest.raises(ValueError, match=text):
            execute(tune(override))
