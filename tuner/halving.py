"""`study.pruner=halving`: asynchronous successive halving over a trial's task runs, cheap fidelity first.

A trial reports one paired ratio per task run (candidate ÷ OFF time, at the task's stable position). At each rung,
after `min_tasks` x `reduction`^k task runs, it goes on only if the mean of its ratios so far is among the best
1/`reduction` of every trial that reached that rung (at least the best one), the recording's OFF (ratio 1 on every
task) included; otherwise it is pruned there. Every trial runs its tasks in the same shuffled order, so a rung
compares the same tasks across trials. Unlike the Wilcoxon pruner, which stops a trial only once it is surely worse
than the best, halving stops it as soon as it ranks low: fewer task runs, at the risk of dropping a good point that
started badly (what `python -m bench tuner --pruners` measures).
"""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import FrozenTrial, TrialState


class TaskHalvingPruner(optuna.pruners.BasePruner):
    """Successive halving on the mean paired ratio of the first task runs (lower is better)."""

    def __init__(self, min_tasks: int = 2, reduction: int = 3) -> None:
        if min_tasks < 1 or reduction < 2:
            raise ValueError(f"halving needs min_tasks >= 1 and reduction >= 2, got {min_tasks} and {reduction}")
        self.min_tasks, self.reduction = min_tasks, reduction

    def rungs(self, runs: int) -> list[int]:
        """The task-run counts below `runs` at which a trial is judged (the objective asks no pruner after its last)."""
        out, r = [], self.min_tasks
        while r < runs:
            out.append(r)
            r *= self.reduction
        return out

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether `trial` stops at the rung it has just reached (False between rungs)."""
        reached = len(trial.intermediate_values)
        if reached not in self.rungs(reached + 1):
            return False
        mine = _mean_of_first(trial, reached)
        # asynchronous: rank among every trial that reached this rung so far (a running one included)
        others = [
            _mean_of_first(t, reached)
            for t in study.get_trials(deepcopy=False)
            if t.number != trial.number and _reached(t, reached)
        ]
        competing = sorted([*others, mine])
        keep = max(len(competing) // self.reduction, 1)
        return mine > competing[keep - 1]


def _reached(trial: FrozenTrial, runs: int) -> bool:
    """Whether `trial` reported at least `runs` task runs (a running trial counts once it has)."""
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) and (
        len(trial.intermediate_values) >= runs
    )


def _mean_of_first(trial: FrozenTrial, runs: int) -> float:
    """The mean of a trial's first `runs` ratios, in the order of the tasks' stable positions."""
    return statistics.fmean(v for _, v in sorted(trial.intermediate_values.items())[:runs])
