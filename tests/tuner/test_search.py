"""The tuner end to end on real swe-lite tasks with the bundled models: the recording, paired trials (replay and
live), duplicates, pruning, failed trials, per-server winners, the ON/OFF decision and best/ (behaviour only,
never wall-clock)."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
from pathlib import Path

import optuna
import pytest
import torch

from common.errors import UnsupportedConfig
from engine.drafters.ngram import NgramDrafter
from export.per_server import folder_name
from tests.tuner.conftest import PROJECT
from tuner.search import execute
from tuner.setup import resolve_clock


def _trials(root):
    return [json.loads(line) for line in (root / "trials.jsonl").read_text().splitlines()]


def test_study_records_off_once_pairs_every_trial_confirms_and_exports_per_server(tune, tmp_path):
    cfg = tune(
        "tuner.trials=3",
        "tuner.confirm=true",
        "tuner.confirm_limit=3",
        "tuner.confirm_repeats=1",
        "study.pruner=none",
    )
    summary = execute(cfg)
    root = tmp_path / "runs" / "t"
    rows = _trials(root)
    assert [r["role"] for r in rows] == ["baseline", "candidate", "candidate", "candidate"]
    base = rows[0]
    assert base["number"] == 0 and base["state"] == "COMPLETE" and base["params"] == {}
    assert base["user_attrs"]["engine"]["drafter"] == "none" and base["user_attrs"]["measure"] == "recording"
    baseline = json.loads((root / "baseline.json").read_text())
    assert baseline["trial_number"] == 0 and len(baseline["runs"]) == 2
    assert all(run["conversation"]["turns"] for run in baseline["runs"])  # every turn kept for the replays
    reference = base["value"]
    for row in rows[1:]:
        assert row["state"] == "COMPLETE", row
        attrs = row["user_attrs"]
        assert row["params"]["drafter"] in ("ngram", "suffix")
        assert attrs["measure"] == "replay" and attrs["divergences"] == [] and attrs["live_tasks"] == []
        # Paired inside the trial: OFF was measured again, and the value is the reference over the paired speedup.
        assert attrs["off_seconds_per_success"] > 0 and attrs["speedup"] > 0
        assert row["value"] == pytest.approx(reference / attrs["speedup"])
        assert set(attrs["generation_s"]) == {"baseline", "candidate"}
        assert {"wall", "cpu"} <= set(attrs["generation_s"]["candidate"])
        assert attrs["regressions"] == [] and attrs["diverged_tasks"] == []
        assert attrs["tasks_run"] == attrs["tasks_total"] == 2
        assert len(attrs["task_values"]) == 2  # one paired ratio per task, reported by step
        assert set(attrs["server_fit"]) == {"llama-server", "vLLM", "SGLang", "TensorRT-LLM"}
    winners = summary["winners"]
    assert set(winners) == {"spectune", "llama-server", "vLLM", "SGLang", "TensorRT-LLM"}
    best = summary["best"]
    assert best is not None and best["value"] == min(r["value"] for r in rows[1:])
    assert winners["spectune"]["trial"] == best["number"]
    [confirmation] = summary["confirmations"].values()  # lookups map onto every server: one winner, one confirmation
    assert confirmation["trial"] == best["number"] and confirmation["task_runs"] == 3
    assert not set(confirmation["instance_ids"]) & set(baseline["instance_ids"])  # held out from the search
    for target, decision in winners.items():
        low = confirmation["speedup_interval"]["low"]
        assert decision["on"] == (low is not None and low > 1.0), (target, decision)
        folder = root / "best" / folder_name(target)
        readme = (folder / "README.md").read_text()
        assert decision["reason"] in " ".join(readme.split()), target
    args = (root / "best" / "llama-server" / "llama-server.args").read_text()
    assert ("--spec-type none" in args) != winners["llama-server"]["on"]
    if _has_converter():  # the bundled target converted for the export: run.sh starts with no placeholder
        model = next(line for line in args.splitlines() if line.startswith("-m "))
        assert model.endswith(".gguf") and Path(model[3:]).is_file(), model
        readme = " ".join((root / "best" / "llama-server" / "README.md").read_text().split())
        assert "converted to GGUF unquantized (convert_hf_to_gguf.py) for this export" in readme
    index = (root / "best" / "README.md").read_text()
    assert all(f"| {target} | {'ON' if d['on'] else 'OFF'} " in index for target, d in winners.items())
    assert {p.name for p in (root / "plots").iterdir()} >= {"optimization_history.png", "seconds_vs_memory.png"}

    # spectune.yaml's rerun command works as printed: it names best/ (not the folder best/ was drafted in) and the
    # runner takes every key of the saved config (run.resume and run.overwrite included)
    header = (root / "best" / "spectune" / "spectune.yaml").read_text().splitlines()[2]
    command = header.removeprefix("#   ")
    assert f"--config-path {(root / 'best' / 'spectune').resolve()} " in command and ".new" not in command
    rerun = subprocess.run(command, shell=True, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert (tmp_path / "runs" / "t-confirmed" / "summary.json").is_file()

    # Same command, same study: nothing re-measured, nothing lost, the confirmation reused.
    again = execute(cfg)
    assert _trials(root) == rows
    assert again["resumed"] and again["best"]["number"] == best["number"]
    assert json.loads((root / "baseline.json").read_text())["runs"] == baseline["runs"]
    assert again["confirmations"] == summary["confirmations"]


def _has_converter() -> bool:
    from serving.gguf import converter_dir

    try:
        converter_dir()
    except FileNotFoundError:
        return False
    return True


def test_a_measured_point_is_not_measured_again_and_a_small_space_is_exhausted(tune, tmp_path):
    # layer_skip with one knob of three values: three points. The first run measures one of them.
    drafters = {"layer_skip": {"layers": [1, 2, 3]}}
    cfg = tune("tuner.trials=1", "study.pruner=none", "task.limit=1", drafters=drafters)
    execute(cfg)
    root = tmp_path / "runs" / "t"
    [first] = [r for r in _trials(root) if r["role"] == "candidate"]
    # The sampler proposes that same point again (queued here, as TPE might): it is recorded, not re-measured,
    # and an unmeasured point of the drafter is queued in its place; a budget of five measures the other two.
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{root / 'study.db'}")
    study.enqueue_trial(first["params"], skip_if_exists=False)
    execute(tune("tuner.trials=5", "study.pruner=none", "task.limit=1", drafters=drafters))
    rows = {r["number"]: r for r in _trials(root) if r["role"] == "candidate"}
    copies = [r for r in rows.values() if r["user_attrs"].get("reused")]
    assert first["number"] in [c["user_attrs"]["duplicate_of"] for c in copies]
    for copy in copies:  # the sampler may propose a measured point again too: each copy is its source's value
        source = rows[copy["user_attrs"]["duplicate_of"]]
        assert copy["params"] == source["params"] and copy["value"] == source["value"]
        assert copy["state"] == source["state"] == "COMPLETE"
        assert "task_values" not in copy["user_attrs"]  # nothing was measured for it
    measured = [r for r in rows.values() if not r["user_attrs"].get("reused")]
    assert sorted(r["params"]["layer_skip.layers"] for r in measured) == [1, 2, 3]  # each point once
    assert len(measured) < 5  # the study stopped when the space was exhausted, budget left or not


def test_live_measurement_runs_the_agent_on_both_sides_in_the_trial(tune, tmp_path):
    execute(tune("tuner.trials=1", "task.limit=2", "study.pruner=none", "tuner.measure=live", drafters={"ngram": {}}))
    [row] = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    assert row["user_attrs"]["measure"] == "live" and row["state"] == "COMPLETE"
    trajectories = tmp_path / "runs" / "t" / "trials" / f"{row['number']:04d}" / "trajectories"
    assert {p.name for p in trajectories.iterdir()} == {"baseline", "candidate"}  # OFF ran again, in the trial
    assert row["user_attrs"]["off_seconds_per_success"] > 0


def test_replay_is_chosen_only_where_the_candidate_provably_keeps_off_tokens():
    from engine.engine import EngineConfig
    from tuner.objective import measure_mode

    greedy, sampled = EngineConfig(drafter="ngram"), EngineConfig(drafter="ngram", temperature=0.7)
    assert measure_mode("auto", greedy, lossy=False) == "replay"
    assert measure_mode("auto", greedy, lossy=True) == "live"  # a lossy rule may change tokens
    assert measure_mode("auto", sampled, lossy=False) == "live"  # sampling draws other tokens
    assert measure_mode("live", greedy, lossy=False) == "live"


def test_a_slow_candidate_is_pruned_before_the_end(tune, tmp_path, monkeypatch):
    original = NgramDrafter.propose

    def slow(self, *args, **kwargs):
        import time

        time.sleep(0.02)  # every draft step: the candidate is slower than OFF on every task
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "propose", slow)
    execute(
        tune(
            "task.limit=8",
            "tuner.trials=1",
            "tuner.clock=wall",  # a sleep costs no CPU time: on the cpu clock this candidate could even look fast
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
    first, second = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"][:2]
    assert first["state"] == "FAIL" and first["reason"].startswith("error: ")
    assert first["reason"].endswith("RuntimeError: injected drafter fault")
    assert second["state"] == "COMPLETE"  # the study went on
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'runs' / 't' / 'study.db'}")
    assert "injected drafter fault" in study.trials[first["number"]].user_attrs["traceback"]
    assert summary["best"]["number"] == second["number"]


def _refuse_the_first_ngram(monkeypatch, exc: Exception) -> None:
    """NgramDrafter raises `exc` when the first candidate's engine is built (OFF drafts with none), then works."""
    original, calls = NgramDrafter.__init__, []

    def init(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise exc
        original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "__init__", init)


def test_a_value_error_while_making_a_candidate_is_a_failed_trial_with_its_traceback_not_unsupported(
    tune, tmp_path, monkeypatch
):
    _refuse_the_first_ngram(monkeypatch, ValueError("injected bug"))
    execute(tune("tuner.trials=2", drafters={"ngram": {"gamma": [2, 4]}}))
    first, second = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"][:2]
    assert first["state"] == "FAIL" and first["reason"] == "error: ValueError: injected bug", first["reason"]
    assert second["state"] == "COMPLETE"  # the study went on
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'runs' / 't' / 'study.db'}")
    logged = study.trials[first["number"]].user_attrs["traceback"]
    assert "ValueError: injected bug" in logged and "in init" in logged, "the trial's log must keep the traceback"


def test_a_candidate_the_backend_cannot_run_is_an_unsupported_trial(tune, tmp_path, monkeypatch):
    _refuse_the_first_ngram(monkeypatch, UnsupportedConfig("these models cannot run it"))
    execute(tune("tuner.trials=2", drafters={"ngram": {"gamma": [2, 4]}}))
    first, second = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"][:2]
    assert first["state"] == "FAIL" and first["reason"] == "unsupported: these models cannot run it"
    assert second["state"] == "COMPLETE"


def test_mtp_and_combined_trials_load_the_bundled_module_and_count_it_in_memory(tune, tmp_path):
    drafters = {"mtp": {"gamma": [2]}, "mtp+ngram": {"gamma": [3], "policy": ["extend"]}}
    summary = execute(tune("tuner.trials=2", "study.pruner=none", "task.limit=1", drafters=drafters))
    rows = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    base = next(r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "baseline")
    assert {r["params"]["drafter"] for r in rows} == {"mtp", "mtp+ngram"}
    for row in rows:
        attrs = row["user_attrs"]
        assert row["state"] == "COMPLETE", row
        assert attrs["regressions"] == [] and attrs["diverged_tasks"] == [] and attrs["divergences"] == []
        assert attrs["acceptance_rate"] > 0  # the module proposed and the target kept some of it
        # the module's weights and its per-position state are counted on top of OFF's estimate
        assert attrs["memory_estimate_bytes"] > base["user_attrs"]["memory_estimate_bytes"]
    # vLLM, SGLang and TensorRT-LLM run neither: their winners are empty and they are told to run without speculation
    for server in ("vLLM", "SGLang", "TensorRT-LLM"):
        assert summary["winners"][server]["trial"] is None and not summary["winners"][server]["on"]
        assert "no feasible configuration" in summary["winners"][server]["reason"]
    combined = next(r for r in rows if r["params"]["drafter"] == "mtp+ngram")
    assert combined["user_attrs"]["server_fit"] == {
        "llama-server": "none",
        "vLLM": "none",
        "SGLang": "none",
        "TensorRT-LLM": "none",
    }


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
        ("study.sampler=cmaes", "tpe"),
        ("tuner.confirm_repeats=0", "confirm_repeats"),
        ("tuner.measure=sometimes", "replay"),
        ("tuner.clock=sundial", "wall"),
        ("tuner.revisit=never", "skip"),
        ("tuner.serve=triton", "llama-server"),
        ("+space.drafters.medusa={}", "medusa"),
        ("study.storage=redis", "journal"),
    ):
        with pytest.raises(ValueError, match=text):
            execute(tune(override))


def test_a_server_backend_is_timed_on_the_wall_clock_and_a_cpu_clock_is_refused(tune):
    """The server decodes in its own process: this one's CPU seconds would read ~1.000x for every candidate."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # where auto reads the cpu clock for the engine
        assert resolve_clock("auto", "cpu") == "cpu"
        assert resolve_clock("auto", "cpu", decodes_in_process=False) == "wall"
    finally:
        torch.set_num_threads(threads)
    assert resolve_clock("wall", "cpu", decodes_in_process=False) == "wall"
    with pytest.raises(ValueError) as refused:  # before anything loads: no model, no server binary needed
        execute(tune("engine.backend=llama-server", "space=llama-server", "tuner.clock=cpu"))
    assert "\n" not in str(refused.value) and "use tuner.clock=wall (or auto)" in str(refused.value)


def test_serve_names_the_servers_and_tuner_finish_finishes_a_study_explicitly(tune, tmp_path):
    from tuner.finish import execute as finish_study

    cfg = tune("tuner.trials=1", "tuner.serve=[llama-server]", drafters={"ngram": {"gamma": [3]}, "layer_skip": {}})
    summary = execute(cfg)
    assert set(summary["winners"]) == {"spectune", "llama-server"}  # only the server asked for
    rows = [r for r in _trials(tmp_path / "runs" / "t") if r["role"] == "candidate"]
    assert {r["params"]["drafter"] for r in rows} == {"ngram"}  # layer_skip: no llama-server equivalent
    before = _trials(tmp_path / "runs" / "t")
    again = finish_study(cfg)  # `python -m tuner.finish`: the same finish, once more, nothing re-measured
    assert again["winners"] == summary["winners"] and _trials(tmp_path / "runs" / "t") == before
    assert (tmp_path / "runs" / "t" / "best" / "llama-server" / "llama-server.args").is_file()
    assert not (tmp_path / "runs" / "t" / "best" / "vllm").exists()


def test_the_cpu_clock_times_generation_on_cpu_seconds_and_both_clocks_are_kept(tune, tmp_path):
    execute(tune("tuner.trials=1", "tuner.clock=cpu", "study.pruner=none", drafters={"ngram": {"gamma": [3]}}))
    base, row = _trials(tmp_path / "runs" / "t")
    attrs = row["user_attrs"]
    assert attrs["clock"] == base["user_attrs"]["clock"] == "cpu"
    assert attrs["speedup"] == pytest.approx(attrs["speedup_by_clock"]["cpu"])
    assert set(attrs["speedup_by_clock"]) == {"wall", "cpu"}
    assert row["value"] == pytest.approx(base["value"] / attrs["speedup"])
    gen = attrs["generation_s"]["candidate"]
    assert 0 < gen["cpu"] and 0 < gen["wall"]


def test_revisit_repeat_measures_a_point_again_and_pools_its_repeats(tune, tmp_path):
    drafters = {"layer_skip": {"layers": [1, 2]}}
    execute(tune("tuner.trials=1", "study.pruner=none", "task.limit=3", drafters=drafters))
    root = tmp_path / "runs" / "t"
    [first] = [r for r in _trials(root) if r["role"] == "candidate"]
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{root / 'study.db'}")
    study.enqueue_trial(first["params"], skip_if_exists=False)
    execute(tune("tuner.trials=2", "study.pruner=none", "task.limit=3", "tuner.revisit=repeat", drafters=drafters))
    again = next(r for r in _trials(root) if r["role"] == "candidate" and r["number"] > first["number"])
    assert again["params"] == first["params"] and not again["user_attrs"].get("reused")  # measured, not copied
    own, earlier = again["user_attrs"]["speedup_repeats"], first["user_attrs"]["speedup_repeats"]
    assert sorted(again["user_attrs"]["speedup_repeats_pooled"]) == sorted(own + earlier)
    assert again["user_attrs"]["speedup"] == pytest.approx(statistics.median(own + earlier))
