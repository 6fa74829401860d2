"""The projected wall time of a study and `tuner.budget`: no trial starts that the projection says cannot finish.

The projection is arithmetic over what the study measured: the recording's seconds per task run (live: agent and
grading, as OFF ran; replay: generation only, what a replayed side redoes), then, once candidates finished, this
run's mean seconds per candidate trial. `BudgetStop`, an Optuna callback, stops starting trials when the next one
and the reserved confirmation and export would overrun the budget, and records why on the study, so the finish
can say how much of the space was covered. Not a scheduler: a trial that started always finishes.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from time import monotonic
from time import time as epoch
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from rich.console import Console

from common.errors import ConfigError
from export.fit import server_names
from runners.backends import backend_class
from runners.outcomes import SideRun
from tasks.sandbox.owner import owner_token
from tuner import study as studies
from tuner.baseline import BaselineRecord
from tuner.winners import pick_winners

PROJECTION = "projection"  # study user attribute: the first projection of the run that finished the study
PROJECTION_AGAIN = "projection_again"  # study user attribute: the projection made after the sampler's startup trials
BUDGET_STOP = "budget_stop"  # study user attribute: why the budget stopped the search (absent: it did not)
# A margin for writing best/ and the plots after the confirmations, not a measurement of this run: on the bundled
# models they took about 1 s of a 10 s finish (the rest the confirmation), so a tenfold margin.
EXPORT_S = 10.0
# The share of candidate trials that run all their task runs under the Wilcoxon pruner, before this run has measured
# any: 39 of 160 in the ten default studies `python -m bench tuner-speed` ran on both backends (2026-12-06, 5 to 24
# of 100 per study); the others stopped at the pruner's earliest step or one later. A prior only: the projection
# made again after the startup trials uses this run's own seconds, pruning included.
UNPRUNED_PRIOR = 0.25
SIDES = 2  # every candidate trial and every confirmation runs OFF and ON on the same task runs
_BUDGET = re.compile(r"(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?")


def parse_budget(value: Any) -> float | None:
    """`tuner.budget` in seconds: `2h`, `90m`, `1h30m`, `45s` or plain seconds (`5400`); None for no limit."""
    if value is None:
        return None
    text = str(value).strip().lower().replace(" ", "")
    seconds: float | None = None
    try:
        seconds = float(text)
    except ValueError:
        match = _BUDGET.fullmatch(text)
        if match and any(match.groupdict().values()):
            h, m, s = (float(match[k] or 0) for k in "hms")
            seconds = h * 3600 + m * 60 + s
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(
            f"tuner.budget={value!r}: a positive wall time as 2h, 90m, 1h30m, 45s or seconds (5400); null: no limit"
        )
    return seconds


def human(seconds: float) -> str:
    """A duration for a person: `32 s`, `5.9 m`, `12 m`, `1 h 52 m` (tenths below 10 of a unit, none when .0)."""
    if seconds < 60:
        return _short(seconds, "s")
    if seconds < 3600:
        return _short(seconds / 60, "m")
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} m" if minutes else f"{hours} h"


def _short(value: float, unit: str) -> str:
    text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
    return f"{text.removesuffix('.0')} {unit}"


@dataclass(frozen=True)
class Projection:
    """The run's wall time: what is spent, the candidate trials left, the confirmations and the export."""

    spent_s: float  # wall seconds of this run so far (setup, the recording, trials finished)
    trials: int  # candidate trials left of tuner.trials
    trial_s: float  # mean seconds per candidate trial: measured in this run, else estimated from the recording
    next_trial_s: float  # what the budget reserves for one more trial: the longest measured, scaled to all its tasks
    confirmations: int  # distinct winners the projection expects to confirm (at least one when confirming)
    reserved_confirmations: int  # what the budget reserves: one more than the winners so far (the next trial's)
    confirm_tasks: int  # held-out tasks of one confirmation
    confirm_repeats: int
    confirm_run_s: float  # seconds per live task run of one side (the recording's: agent time and grading)
    confirm_overhead_s: float  # per confirmation: both sides' engine builds or server starts and warm-ups
    export_s: float = EXPORT_S
    basis: str = "the recording"  # what trial_s was read from
    share: float = (
        1.0  # the expected share of its task runs a trial runs: the pruning prior, 1 once trials are measured
    )

    def confirmation_s(self, count: int | None = None) -> float:
        """Seconds of `count` confirmations (default: the expected ones), OFF and ON on every task run."""
        count = self.confirmations if count is None else count
        runs = self.confirm_tasks * self.confirm_repeats * SIDES
        return count * (runs * self.confirm_run_s + self.confirm_overhead_s)

    @property
    def search_s(self) -> float:
        """Seconds of the candidate trials left."""
        return self.trials * self.trial_s * self.share

    @property
    def finish_s(self) -> float:
        """Seconds of the expected confirmations and the export."""
        return self.confirmation_s() + self.export_s

    @property
    def reserve_s(self) -> float:
        """What the budget keeps for the finish: the reserved confirmations and the export."""
        return self.confirmation_s(self.reserved_confirmations) + self.export_s

    @property
    def total_s(self) -> float:
        """The projected wall time of the whole run."""
        return self.spent_s + self.search_s + self.finish_s

    def parts(self) -> dict[str, float]:
        """The total in its parts (what summary.json keeps)."""
        return {"spent_s": self.spent_s, "search_s": self.search_s, "finish_s": self.finish_s}

    def trials_within(self, budget_s: float) -> int:
        """How many of the trials left the budget lets start, each reserving `next_trial_s`, the finish kept."""
        room = budget_s - self.spent_s - self.reserve_s
        if room < self.next_trial_s:
            return 0
        return min(self.trials, int(room // self.next_trial_s)) if self.next_trial_s > 0 else self.trials

    def line(self, budget_s: float | None = None) -> str:
        """One line with the formula, e.g. `projected 1 h 52 m = so far 6 m + 16 trial(s) x 5.9 m + ...`."""
        confirm = (
            f"{self.confirmations} confirmation(s) x {self.confirm_tasks} task(s) x {self.confirm_repeats} "
            f"repeat(s) x {SIDES} sides x {human(self.confirm_run_s)}"
            + (f" (+ {human(self.confirm_overhead_s)} start each)" if self.confirm_overhead_s >= 0.05 else "")
            if self.confirmations
            else "no confirmation"
        )
        pruned = f" x {self.share:.2f} pruning prior" if self.share < 1 else ""
        text = (
            f"projected {human(self.total_s)} = so far {human(self.spent_s)} + {self.trials} trial(s) x "
            f"{human(self.trial_s)}{pruned} (from {self.basis}) + {confirm} + export {human(self.export_s)}"
        )
        if budget_s is not None:
            fit = self.trials_within(budget_s)
            text += f"; budget {human(budget_s)}: {fit} of the {self.trials} trial(s) left fit"
        return text


def run_seconds(runs: Sequence[SideRun], mode: str) -> float:
    """Seconds per task run of one side: live as OFF ran it (agent and grading), replay its generation only."""
    if not runs:
        return 0.0
    if mode == "live":
        return statistics.fmean(r.time_s + r.evaluation_s for r in runs)
    return statistics.fmean(r.model_s for r in runs)  # replay redoes the replies; the rest is the recording's


def _wilcoxon_earliest(p_threshold: float, startup_steps: int, runs: int) -> int | None:
    """The first task run at which WilcoxonPruner can prune: every paired difference of one sign gives the smallest
    one-sided p (2^-n exactly), so the first n below the threshold, no sooner than its startup steps (and 2)."""
    from scipy.stats import wilcoxon

    for n in range(max(2, startup_steps), runs + 1):
        if wilcoxon(list(range(1, n + 1)), alternative="greater", zero_method="zsplit").pvalue < p_threshold:
            return n
    return None


# study.pruner -> (p_threshold, startup steps, task runs of a trial) -> the first task run it may prune at, or None
EARLIEST_PRUNE: dict[str, Callable[[float, int, int], int | None]] = {
    "wilcoxon": _wilcoxon_earliest,
    "halving": lambda _p, steps, runs: max(steps, 1) if max(steps, 1) < runs else None,  # its first rung
    "none": lambda _p, _steps, _runs: None,
}


def pruning_share(pruner: str, p_threshold: float, startup_steps: int, runs: int) -> float:
    """The expected share of its `runs` task runs a candidate trial runs before any is measured: UNPRUNED_PRIOR of
    the trials run them all, the rest stop at the pruner's earliest step (1 where it cannot prune)."""
    earliest = EARLIEST_PRUNE[pruner](p_threshold, startup_steps, runs) if runs else None
    if earliest is None or earliest >= runs:
        return 1.0
    return UNPRUNED_PRIOR + (1 - UNPRUNED_PRIOR) * earliest / runs


def fits_next_trial(elapsed_s: float, projection: Projection, budget_s: float | None) -> bool:
    """Whether one more trial and the reserved confirmation and export end within the budget (None: no limit)."""
    return budget_s is None or elapsed_s + projection.next_trial_s + projection.reserve_s <= budget_s


def _full_length(seconds: float, trial: FrozenTrial) -> float:
    """A trial's seconds scaled to all its task runs: a pruned trial stopped early, the next may not."""
    run, total = trial.user_attrs.get("tasks_run"), trial.user_attrs.get("tasks_total")
    return seconds * total / run if run and total and run < total else seconds


class BudgetStop:
    """Optuna callback: prints the projection once the recording exists, stops the study when the next trial and
    the finish would overrun `budget_s`, and records why (study user attribute `budget_stop`)."""

    def __init__(
        self,
        *,
        budget_s: float | None,
        trials: int,
        mode: str,
        confirm_tasks: int,
        confirm_repeats: int,
        servers: Sequence[str],
        recording: Callable[[], BaselineRecord | None],
        console: Console | None = None,
        started: float | None = None,
        clock: Callable[[], float] | None = None,
        now: Callable[[], float] | None = None,
        export_s: float = EXPORT_S,
        reproject_after: int = 0,
        pruner: tuple[str, float, int] = ("none", 0.0, 0),
        starts_per_trial: int = 0,
    ) -> None:
        self.budget_s, self.trials, self.mode = budget_s, trials, mode
        self.pruner = pruner  # study.pruner, prune_p, prune_startup_steps: the prior of the first projection
        self.starts_per_trial = starts_per_trial  # sides a replayed trial starts afresh (the backend's hook)
        self.reproject_after = reproject_after  # candidates measured when the projection is made again (0: never)
        self.confirm_tasks, self.confirm_repeats = confirm_tasks, confirm_repeats
        self.servers = tuple(servers)
        self.recording, self.console, self.export_s = recording, console, export_s
        self.clock = clock or monotonic  # read here, not at import: a test replaces tuner.projection.monotonic
        self.now = now or epoch
        self.started = self.clock() if started is None else started
        self._mark = self.started  # the end of the last trial this callback saw
        self._measured: list[tuple[float, FrozenTrial]] = []  # this run's candidate trials: (seconds, trial)
        self.announced: Projection | None = None
        self.stopped: dict[str, Any] | None = None  # why the budget stopped the search, once it has

    @classmethod
    def for_setup(cls, setup: Any, *, recording: Callable[[], BaselineRecord | None], **kwargs: Any) -> BudgetStop:
        """The callback for a TuneSetup (duck-typed: tuner.setup imports this module)."""
        t = setup.tuner
        every_replay = t.measure != "live" and setup.base.temperature == 0 and not setup.space.allow_lossy
        mode = "replay" if every_replay and not setup.choices.any else "live"  # live is the upper bound
        return cls(
            budget_s=t.budget_s,
            trials=t.trials,
            mode=mode,
            confirm_tasks=len(setup.held_out) if t.confirm else 0,
            confirm_repeats=t.confirm_repeats,
            servers=t.serve or server_names(),
            recording=recording,
            reproject_after=setup.study.startup_trials,
            pruner=(setup.study.pruner, setup.study.prune_p, setup.study.prune_startup_steps),
            starts_per_trial=backend_class(setup.base.backend).starts_per_trial,
            **kwargs,
        )

    def elapsed(self) -> float:
        """Seconds of this run so far."""
        return self.clock() - self.started

    def projection(self, study: optuna.Study) -> Projection | None:
        """The projection now, or None before the recording exists."""
        record = self.recording()
        if record is None or not record.runs:
            return None
        trials = study.get_trials(deepcopy=False)
        left = max(self.trials - sum(studies.counts_toward_budget(t) for t in trials), 0)
        base = studies.baseline_trial(study)
        live_run_s = run_seconds(record.runs, "live")
        recording_s = base.duration.total_seconds() if base is not None and base.duration else 0.0
        # what the recording spent besides its task runs: the engine build (or server start) and the warm-up
        overhead = max(recording_s - live_run_s * len(record.runs), 0.0)
        # a replayed trial builds no environment and runs no agent: its two sides redo the recording's replies
        # (measured on the bundled models: complete replayed trials took 4.1-5.1 s against 2 x 2.55 s of replies),
        # and starts only the sides its backend does not keep (llama-server: ON's server)
        starts = SIDES if self.mode == "live" else self.starts_per_trial
        prior = SIDES * len(record.runs) * run_seconds(record.runs, self.mode) + starts * overhead
        measured = self._measured or [
            (t.duration.total_seconds(), t) for t in trials if studies.counts_toward_budget(t) and t.duration
        ]
        winners = {w.trial.number for w in pick_winners(trials, self.servers).values() if w.trial is not None}
        confirming = self.confirm_tasks > 0
        return Projection(
            spent_s=self.elapsed(),
            trials=left,
            trial_s=statistics.fmean(s for s, _ in measured) if measured else prior,
            next_trial_s=max(_full_length(s, t) for s, t in measured) if measured else prior,
            # the winners so far, and at least one while trials are left: a study whose first trials were all pruned
            # still confirms the best of its later ones (measured: leaving it out cost a projection -66%)
            confirmations=max(len(winners), 1 if left or not measured else 0) if confirming else 0,
            # a next trial adds at most one distinct winner; there are no more winners than export targets
            reserved_confirmations=min(len(winners) + 1, len(self.servers) + 1) if confirming else 0,
            confirm_tasks=self.confirm_tasks,
            confirm_repeats=self.confirm_repeats,
            confirm_run_s=live_run_s,
            confirm_overhead_s=SIDES * overhead,
            export_s=self.export_s,
            basis=f"{len(measured)} trial(s) measured" if measured else "the recording",
            share=1.0 if measured else pruning_share(*self.pruner, len(record.runs)),
        )

    def announce(self, study: optuna.Study) -> Projection | None:
        """Print the projection once and keep it on the study (what the finish compares the actual time with)."""
        if self.announced is not None:
            return self.announced
        projection = self.projection(study)
        if projection is None:
            return None
        self.announced = projection
        kept = {**asdict(projection), "total_s": projection.total_s, "line": projection.line(self.budget_s)}
        study.set_user_attr(PROJECTION, {**kept, "budget_s": self.budget_s, "at": self.now(), "owner": owner_token()})
        if self.console is not None:
            self.console.print(projection.line(self.budget_s), markup=False, highlight=False)
        return projection

    def allows_start(self, study: optuna.Study) -> bool:
        """Whether the next trial may start (True before the recording: it runs whatever the budget); once the
        budget stopped the search in this process, never again (and said once)."""
        if self.stopped is not None:
            return False
        projection = self.announce(study) if self.announced is None else self.projection(study)
        if projection is None or projection.trials == 0:
            return True
        if fits_next_trial(self.elapsed(), projection, self.budget_s):
            return True
        self._stop(study, projection)
        return False

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """After each finished trial: note its seconds, then stop the study if the next one cannot fit."""
        end = self.clock()
        seconds, self._mark = end - self._mark, end
        if studies.counts_toward_budget(trial):  # a copy of an earlier trial measured nothing
            self._measured.append((seconds, trial))
            if len(self._measured) == self.reproject_after:
                self._reproject(study)
        if self.stopped is None and not self.allows_start(study):
            study.stop()

    def _reproject(self, study: optuna.Study) -> None:
        """The projection again from this run's measured trials (pruning included), printed and kept on the study:
        the recording cannot know how early trials will be pruned, or whether any will beat OFF."""
        projection = self.projection(study)
        if projection is None or projection.trials == 0:
            return
        line = projection.line(self.budget_s)
        kept = {**asdict(projection), "total_s": projection.total_s, "line": line, "after": len(self._measured)}
        study.set_user_attr(PROJECTION_AGAIN, {**kept, "at": self.now(), "owner": owner_token()})
        if self.console is not None:
            self.console.print(f"after {len(self._measured)} trial(s): {line}", markup=False, highlight=False)

    def _stop(self, study: optuna.Study, projection: Projection) -> None:
        """Record (on the study and here) and print why the budget stopped the search."""
        assert self.budget_s is not None
        done = self.trials - projection.trials
        elapsed = self.elapsed()
        self.stopped = {
            "after": done,
            "of": self.trials,
            "elapsed_s": elapsed,
            "next_trial_s": projection.next_trial_s,
            "reserve_s": projection.reserve_s,
            "budget_s": self.budget_s,
            "reason": (
                f"budget stopped the search after {done} of {self.trials} trial(s): {human(elapsed)} spent + the "
                f"next trial {human(projection.next_trial_s)} + confirmation and export "
                f"{human(projection.reserve_s)} > budget {human(self.budget_s)}"
            ),
        }
        study.set_user_attr(BUDGET_STOP, self.stopped)
        if self.console is not None:
            self.console.print(self.stopped["reason"], markup=False, highlight=False)


def budget_stop(study: optuna.Study) -> dict[str, Any] | None:
    """Why the budget stopped the search, while still true: no counted trial finished after the stop."""
    stop = study.user_attrs.get(BUDGET_STOP)
    done = sum(studies.counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
    return stop if stop and stop.get("after") == done else None


def coverage(study: optuna.Study, size: int | None, trials: int) -> dict[str, Any]:
    """How much of the space the search covered: points measured (of the size when finite), trials run of the
    budget, and whether tuner.budget stopped it."""
    points = len(studies.measured_keys(study))
    stop = budget_stop(study)
    return {
        "points": points,
        "space_size": size,
        "share": points / size if size else None,
        "trials_run": sum(studies.counts_toward_budget(t) for t in study.get_trials(deepcopy=False)),
        "trials": trials,
        "budget_stopped": stop["reason"] if stop else None,
    }


def coverage_line(c: dict[str, Any]) -> str:
    """coverage() as one sentence for best/README.md and the console."""
    points = (
        f"{c['points']} of the space's {c['space_size']} point(s) measured ({100 * c['share']:.0f}%)"
        if c["space_size"]
        else f"{c['points']} distinct point(s) measured (the space has continuous knobs)"
    )
    text = f"Covered: {points}; {c['trials_run']} of {c['trials']} candidate trial(s) run (tuner.trials)"
    return text + (f"; {c['budget_stopped']} (tuner.budget)." if c["budget_stopped"] else ".")


def _fields(kept: dict[str, Any]) -> dict[str, Any]:
    """A kept projection's fields (one kept before a field existed takes its default)."""
    return {k: kept[k] for k in Projection.__dataclass_fields__ if k in kept}


def versus_actual(study: optuna.Study, now: Callable[[], float] | None = None) -> dict[str, Any] | None:
    """The run's first projection against its actual wall time to now, with the relative error; when the budget
    stopped the search, also the projection for the trials that ran. None without a projection made by this process
    (`python -m tuner.finish` later, or another worker: their clocks would count the time in between)."""
    kept = study.user_attrs.get(PROJECTION)
    if not kept or kept.get("owner") != owner_token():
        return None
    fields = _fields(kept)
    projection = Projection(**fields)
    actual = projection.spent_s + (now or epoch)() - kept["at"]
    out: dict[str, Any] = {
        "projected_s": projection.total_s,
        "actual_s": actual,
        "error_pct": 100.0 * (projection.total_s - actual) / actual if actual > 0 else None,
        "line": kept["line"],
    }
    again = study.user_attrs.get(PROJECTION_AGAIN)
    if again and again.get("owner") == owner_token():
        total = Projection(**_fields(again)).total_s
        out["again"] = {
            "after_trials": again["after"],
            "projected_s": total,
            "error_pct": 100.0 * (total - actual) / actual if actual > 0 else None,
        }
    stop = budget_stop(study)
    if stop is not None:  # fewer trials ran than projected: compare like with like as well
        ran = stop["after"] - (stop["of"] - projection.trials)  # done at the stop - done when projected
        fewer = Projection(**{**fields, "trials": min(max(ran, 0), projection.trials)})
        out["projected_for_trials_run_s"] = fewer.total_s
        out["error_for_trials_run_pct"] = 100.0 * (fewer.total_s - actual) / actual if actual > 0 else None
    return out


def versus_line(v: dict[str, Any]) -> str:
    """versus_actual() for the closing summary."""
    text = f"wall time: projected {human(v['projected_s'])}, actual {human(v['actual_s'])}"
    if v["error_pct"] is not None:
        text += f" (projection {v['error_pct']:+.0f}%)"
    again = v.get("again")
    if again and again["error_pct"] is not None:
        text += f"; after {again['after_trials']} trial(s): {human(again['projected_s'])} ({again['error_pct']:+.0f}%)"
    if v.get("projected_for_trials_run_s") is not None:
        text += f"; for the trials that ran: projected {human(v['projected_for_trials_run_s'])}"
        if v["error_for_trials_run_pct"] is not None:
            text += f" ({v['error_for_trials_run_pct']:+.0f}%)"
    return text
