"""study.pruner=halving on real in-memory Optuna studies: its rungs, who goes past a rung, its one-line errors."""

from __future__ import annotations

import optuna
import pytest

from common.errors import ConfigError
from tuner import study as studies
from tuner.halving import TaskHalvingPruner
from tuner.projection import EARLIEST_PRUNE


def test_rungs_grow_by_the_reduction_and_never_fall_on_the_last_task_run():
    pruner = TaskHalvingPruner(min_tasks=2, reduction=3)
    assert pruner.rungs(24) == [2, 6, 18]
    assert pruner.rungs(8) == [2, 6]
    assert pruner.rungs(2) == []  # a trial of two task runs is never judged
    assert TaskHalvingPruner(min_tasks=1, reduction=2).rungs(9) == [1, 2, 4, 8]


def _run(study: optuna.Study, ratios: list[float]) -> tuple[str, int]:
    """One trial reporting `ratios` task by task (stable positions 0, 1, ...) as the tuner's objective does."""
    trial = study.ask()
    for step, ratio in enumerate(ratios):
        trial.report(ratio, step)
        if step + 1 < len(ratios) and trial.should_prune():  # as the objective: never after the last task run
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return "pruned", step + 1
    study.tell(trial, sum(ratios) / len(ratios))
    return "complete", len(ratios)


def test_a_trial_goes_past_a_rung_only_among_the_best_third_the_recording_included():
    study = optuna.create_study(direction="minimize", pruner=studies.make_pruner("halving", 0.1, 2, 3))
    assert _run(study, [1.0] * 8) == ("complete", 8)  # the recording's OFF: ratio 1 on every task
    # at 2 task runs only the best of two goes on (2 // 3 -> at least one): 0.9 beats OFF's 1.0
    assert _run(study, [0.9, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]) == ("complete", 8)
    # its first two average 1.0: behind 0.9, and of three only the best goes on, however well it would end
    assert _run(study, [1.2, 0.8, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]) == ("pruned", 2)
    # the mean of the first runs decides, not the last value: 0.7 then 1.1 is 0.9, tied with the best, and goes on
    assert _run(study, [0.7, 1.1, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7]) == ("complete", 8)
    # at 6 task runs (rung 2) a trial worse than the best third of those that reached it stops there
    assert _run(study, [0.85, 0.85, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3]) == ("pruned", 6)


def test_a_rung_compares_every_trial_on_the_same_first_task_runs():
    study = optuna.create_study(direction="minimize", pruner=studies.make_pruner("halving", 0.1, 2, 2))
    _run(study, [1.0] * 4)
    assert _run(study, [0.95, 0.95, 2.0, 2.0]) == ("complete", 4)  # the best of two at its rung, worse after it
    # at rung 2 the earlier trial counts with its first two runs (0.95), not its whole mean (1.475): 0.97 stops
    assert _run(study, [0.97, 0.97, 0.5, 0.5]) == ("pruned", 2)


@pytest.mark.parametrize(("steps", "reduction"), [(2, 1), (0, 3)])
def test_bad_halving_values_are_refused(steps, reduction):
    with pytest.raises(ValueError, match="halving needs"):
        TaskHalvingPruner(min_tasks=steps, reduction=reduction)


def test_an_unknown_pruner_names_every_allowed_one_and_the_projection_knows_each():
    with pytest.raises(ConfigError) as bad:
        studies.make_pruner("median", 0.1, 2)
    assert all(name in str(bad.value) for name in ("wilcoxon", "halving", "none"))
    assert set(EARLIEST_PRUNE) == set(studies.PRUNERS)
    assert EARLIEST_PRUNE["halving"](0.1, 2, 8) == 2 and EARLIEST_PRUNE["halving"](0.1, 8, 8) is None
