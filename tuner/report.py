"""What the user sees while a study runs: a progress bar with ETA, one line per finished trial, the table.

`s/success` is a trial's objective: seconds per success at the recording's OFF speed (the reference ÷ the
trial's paired speedup; OFF's own for trial 0), so rows compare across trials whatever the machine did between.
"""

from __future__ import annotations

import math
from typing import Any

from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from common.units import GIB
from tuner import constraints
from tuner.study import reason, role

COLUMNS = ("#", "drafter", "knobs", "s/success", "speedup", "95% interval", "accept", "mem GiB", "how", "state")


def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def knobs(trial: FrozenTrial) -> str:
    """The trial's parameters without the drafter prefix: `gamma=4 min_match=2`."""
    parts = []
    for key, value in trial.params.items():
        if key == "drafter":
            continue
        name = key.split(".", 1)[-1]
        parts.append(f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={value}")
    return " ".join(parts)


def state(trial: FrozenTrial) -> str:
    """COMPLETE, PRUNED (after N), FAIL (reason), infeasible (which constraint), or a reused duplicate."""
    if trial.user_attrs.get("reused") and trial.state != TrialState.FAIL:
        return f"duplicate of {trial.user_attrs.get('duplicate_of')}"
    if trial.state == TrialState.COMPLETE:
        broken = constraints.violated(trial)
        return f"infeasible: {', '.join(broken)}" if broken else "complete"
    if trial.state == TrialState.PRUNED:
        return f"pruned ({trial.user_attrs.get('tasks_run', '?')} tasks)"
    return f"{trial.state.name.lower()}: {reason(trial) or 'killed (heartbeat)'}"[:60]


def objective(trial: FrozenTrial) -> float | None:
    """A complete trial's finite value (a pruned trial's stored value is its last reported ratio, not this)."""
    if trial.state != TrialState.COMPLETE or trial.value is None or not math.isfinite(trial.value):
        return None
    return trial.value


def cells(trial: FrozenTrial) -> list[str]:
    """One table row."""
    a = trial.user_attrs
    drafter = "OFF" if role(trial) == "baseline" else str(trial.params.get("drafter", "?"))
    memory = a.get("memory_bytes")
    low, high = a.get("speedup_low"), a.get("speedup_high")
    return [
        str(trial.number),
        drafter,
        knobs(trial),
        _num(objective(trial), ".3f"),
        _num(a.get("speedup"), ".2f") + ("x" if a.get("speedup") is not None else ""),
        "-" if low is None or high is None else f"[{low:.2f}, {high:.2f}]",
        _num(a.get("acceptance_rate"), ".2f"),
        _num(memory / GIB if memory else None, ".2f"),
        str(a.get("measure") or "-"),
        state(trial),
    ]


def trials_table(trials: list[FrozenTrial], title: str, best: FrozenTrial | int | None = None) -> Table:
    """Every finished trial; the best feasible one marked."""
    if isinstance(best, FrozenTrial):
        best = best.number
    table = Table(title=title, title_justify="left")
    for name in COLUMNS:
        numeric = name in ("#", "s/success", "speedup", "95% interval", "accept", "mem GiB")
        table.add_column(name, justify="right" if numeric else "left")
    for t in trials:
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and role(t) != "finish":
            table.add_row(*cells(t), style="bold green" if t.number == best else None)
    return table


class StudyProgress:
    """A trials bar (ETA from the finished ones) and the running trial's task bar."""

    def __init__(self, console: Console, trials: int, enabled: bool = True) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
            transient=True,
        )
        self.trials = self.progress.add_task("trials", total=trials)
        self.tasks = self.progress.add_task("tasks", total=None, visible=False)

    def __enter__(self) -> StudyProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def task_done(self, number: int, done: int, total: int) -> None:
        """A task of trial `number` finished."""
        self.progress.update(self.tasks, description=f"trial {number}", completed=done, total=total, visible=True)

    def trial_done(self, trial: FrozenTrial) -> None:
        """Print the trial's row and advance the trials bar."""
        if role(trial) == "finish":
            return
        n, drafter, knob, sps, speedup, interval, accept, memory, measure, how = cells(trial)
        self.console.print(
            f"trial {n:>3}  {drafter:<8} {knob:<36} {sps:>8} s/success  {speedup:>6} {interval:<14} accept {accept}  "
            f"{memory} GiB  {measure:<9} {how}",
            highlight=False,
        )
        self.progress.advance(self.trials)
        self.progress.update(self.tasks, visible=False)
