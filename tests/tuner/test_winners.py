"""Per-server winners, the ON/OFF decision and best/ from synthetic trials (no models): each server gets the best
configuration it can run, an interval that includes 1 exports speculation off with the reason, and one process
at a time takes a study's finish claim."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from engine.engine import EngineConfig
from export.per_server import write_index, write_target
from export.record import ExportRecord
from tuner import constraints
from tuner.claims import claim, release
from tuner.winners import SPECTUNE, Winner, decide, pick_winners

FEASIBLE = {name: -1.0 for name in constraints.CONSTRAINTS}
SERVERS = ("llama-server", "vLLM", "SGLang")


def _trial(number: int, value: float, engine: EngineConfig, *, feasible: bool = True, **attrs):
    trial = create_trial(
        state=TrialState.COMPLETE,
        value=value,
        params={"drafter": engine.drafter},
        distributions={"drafter": CategoricalDistribution([engine.drafter])},
        user_attrs={"role": "candidate", "engine": asdict(engine), "speedup": 1.0 / value, **attrs},
    )
    for name, v in FEASIBLE.items():
        trial.set_constraint(name, v if feasible else 1.0)
    trial.number = number
    return trial


def test_each_server_gets_the_best_configuration_it_can_run():
    trials = [
        _trial(1, 0.50, EngineConfig(drafter="layer_skip")),  # fastest: no server has early exit
        _trial(2, 0.60, EngineConfig(drafter="mtp")),  # llama-server runs it (draft-mtp), vLLM / SGLang do not
        _trial(3, 0.70, EngineConfig(drafter="ngram")),  # every server
        _trial(4, 0.40, EngineConfig(drafter="suffix"), feasible=False),  # fastest of all, but infeasible
    ]
    winners = pick_winners(trials, SERVERS)
    assert winners[SPECTUNE].trial.number == 1
    assert winners["llama-server"].trial.number == 2 and winners["llama-server"].fit.fit == "approximate"
    assert winners["vLLM"].trial.number == 3 and winners["SGLang"].trial.number == 3
    only = pick_winners(trials[:1], SERVERS)  # nothing a server can run: no winner, and the decision says so
    decision = decide(only["vLLM"], None, min_speedup=1.0, max_regressions=0)
    assert not decision.on and decision.trial is None and "no feasible configuration vLLM can run" in decision.reason


def test_a_trial_on_another_gguf_file_or_kv_type_wins_for_llama_server_only():
    trials = [
        _trial(1, 0.50, EngineConfig(drafter="suffix"), changes_numbers=True),  # a Q4_K_M file with a q8_0 KV cache
        _trial(2, 0.70, EngineConfig(drafter="ngram"), changes_numbers=False),  # the reference file and KV type
    ]
    winners = pick_winners(trials, SERVERS)
    assert winners[SPECTUNE].trial.number == 1 and winners["llama-server"].trial.number == 1
    assert winners["vLLM"].trial.number == 2 and winners["SGLang"].trial.number == 2  # they run no GGUF / KV type


def _confirmed(low: float | None, high: float | None, regressions: tuple[str, ...] = ()) -> dict:
    pooled = None if low is None else (low + high) / 2
    return {
        "complete": True,
        "speedup": pooled,
        "speedup_interval": {"pooled": pooled, "low": low, "high": high, "confidence": 0.95},
        "speedup_repeats": [pooled],
        "regressions": list(regressions),
    }


@pytest.mark.parametrize(
    ("confirmation", "on", "words"),
    [
        (_confirmed(1.02, 1.20), True, "lies above 1"),
        (_confirmed(0.97, 1.20), False, "does not lie above 1"),  # the interval includes 1: not a speedup
        (_confirmed(0.70, 0.90), False, "does not lie above 1"),
        (_confirmed(None, None), False, "no interval"),
        (_confirmed(1.10, 1.30, regressions=("task-a",)), False, "regression"),
    ],
)
def test_speculation_is_exported_on_only_when_the_confirmed_interval_lies_above_the_threshold(confirmation, on, words):
    winner = Winner("llama-server", _trial(3, 0.7, EngineConfig(drafter="ngram"), speedup_low=1.1, speedup_high=1.3))
    decision = decide(winner, confirmation, min_speedup=1.0, max_regressions=0)
    assert decision.on is on and words in decision.reason, decision.reason
    stricter = decide(winner, _confirmed(1.02, 1.20), min_speedup=1.05, max_regressions=0)
    assert not stricter.on and "above 1.05" in stricter.reason


def test_without_a_confirmation_the_search_trials_own_interval_decides_and_says_so():
    inside = Winner(SPECTUNE, _trial(3, 0.7, EngineConfig(drafter="ngram"), speedup_low=0.95, speedup_high=1.2))
    above = Winner(SPECTUNE, _trial(3, 0.7, EngineConfig(drafter="ngram"), speedup_low=1.05, speedup_high=1.2))
    assert not decide(inside, None, min_speedup=1.0, max_regressions=0).on
    decision = decide(above, None, min_speedup=1.0, max_regressions=0)
    assert decision.on and decision.reason.startswith("not confirmed")


def _record(engine: EngineConfig, confirmed: dict) -> ExportRecord:
    return ExportRecord(
        engine=engine,
        model_name="m",
        target="/models/target",
        draft="/models/draft",
        hardware="rtx4060",
        measured_on="cpu",
        context=4096,
        confirmed=confirmed,
        cost_ratios=None,
        composed_config={"engine": asdict(engine)},
    )


def test_an_off_decision_writes_the_server_without_speculation_and_the_reason(tmp_path: Path):
    engine = EngineConfig(drafter="ngram", gamma=5)
    winner = Winner("llama-server", _trial(3, 0.7, engine, speedup_low=1.1, speedup_high=1.3))
    off = decide(winner, _confirmed(0.95, 1.10), min_speedup=1.0, max_regressions=0)
    record = _record(engine, _confirmed(0.95, 1.10))
    write_target(tmp_path / "off", "llama-server", record, {**off.to_dict(), "off_record": record})
    args = (tmp_path / "off" / "llama-server.args").read_text()
    assert "--spec-type none" in args and "ngram-simple" not in args
    readme = " ".join((tmp_path / "off" / "README.md").read_text().split())
    assert "speculation OFF" in readme and off.reason in readme and "ngram gamma=5" in readme
    on = decide(winner, _confirmed(1.05, 1.30), min_speedup=1.0, max_regressions=0)
    write_target(tmp_path / "on", "llama-server", record, {**on.to_dict(), "off_record": record})
    assert "--spec-type ngram-simple" in (tmp_path / "on" / "llama-server.args").read_text()
    index = write_index(tmp_path, [{"target": "llama-server", "engine": asdict(engine), "decision": on.to_dict()}], [])
    assert "| llama-server | ON " in index.read_text()


def test_one_process_at_a_time_takes_the_finish_claim(tmp_path):
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    first = claim(study, storage)
    assert first is not None
    assert claim(study, storage) is None  # a live claim is held: a second finisher stays out
    release(storage, first, "finished the study")
    again = claim(study, storage)  # finishing again later is allowed (confirmations are reused)
    assert again is not None and again.number != first.number
    release(storage, again, "finished the study")
    tokens = [t for t in study.get_trials() if t.user_attrs.get("role") == "finish"]
    assert all(t.state == TrialState.FAIL for t in tokens)  # never COMPLETE: samplers and best_trial ignore them
