"""One trial: the recording (trial 0, OFF live) or a candidate measured paired with OFF inside the trial itself.

No trial is compared with an OFF measured at another time. Trial 0 runs OFF live on the search tasks and
records its agent conversations (tuner/baseline.py); its seconds per success is the study's *reference*. A
candidate trial measures OFF again, interleaved with the candidate, and the trial's speedup is the paired
ratio OFF ÷ ON of that trial (the median over repeats of each repeat's ratio of seconds per success):
- replay (tuner.measure=auto with exact acceptance and greedy decoding, or replay): both sides replay every
  recorded turn, taking turns at each one (runners/replay.py); a reply that differs from the recording is
  kept as a divergence and that task runs live instead;
- live (sampling, a lossy rule, or tuner.measure=live): both sides run the real agent task by task, taking
  turns on which goes first (runners/compare.py).
The objective value, minimised, is the reference ÷ the trial's paired speedup: seconds per success at the
recording's OFF speed, so drift between trials cancels. After each task the trial reports that task's paired
ratio (candidate ÷ OFF time, same trial) at the task's stable position for the Wilcoxon pruner. The interval
of a trial's speedup is a bootstrap over tasks (tuner/confirm.py's, pooled seconds per success).

A parameter set measured before is not measured again: with `tuner.revisit=skip` the trial reuses the earlier
trial's value and state (`duplicate_of`, `reused`) and queues an unmeasured point of the same drafter when its
sub-space is finite; with `repeat` it is measured and its estimate pooled with the earlier ones.

How a trial ends (Optuna state, `reason` user attribute): COMPLETE (value `inf` when nothing succeeded:
infeasible through `no_success`, never zero); PRUNED; FAIL with `unsupported: ...` (the models cannot run it),
`error: ...` (an exception; the study goes on), `interrupted` (re-queued on resume) or `duplicate of running
trial N` (another worker is measuring the same point).
"""

from __future__ import annotations

import math
import socket
import statistics
import traceback
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from engine.engine import Engine, EngineConfig
from export.fit import fits
from runners.backends import backend_class
from runners.compare import Comparison
from runners.interrupt import GracefulStop, until_stopped
from runners.outcomes import SideRun, TaskOutcome
from runners.replay import ReplayComparison
from runners.summary import cost_ratios, side_summary, summarize
from tasks.sandbox.owner import owner_token
from tuner import constraints, recording, server_choice
from tuner import study as studies
from tuner.baseline import BaselineRecord, record_from_outcomes
from tuner.confirm import per_repeat_speedups, speedup_interval
from tuner.points import drafter_points, pick
from tuner.setup import CLOCKS, TuneSetup
from tuner.space import suggest

ROLE = studies.ROLE
# Figures a duplicate copies from the trial it repeats (what the table, MLflow and the winners read).
COPIED = (
    "engine",
    "seconds_per_success",
    "off_seconds_per_success",
    "speedup",
    "speedup_low",
    "speedup_high",
    "speedup_repeats",
    "measure",
    "success_rate",
    "successes",
    "tasks_run",
    "tasks_total",
    "acceptance_rate",
    "mean_accepted_length",
    "acceptance_by_position",
    "decode_tokens_per_s",
    "memory_bytes",
    "memory_estimate_bytes",
    "memory_source",
    "largest_context",
    "max_context_tokens",
    "regressions",
    "diverged_tasks",
    "server_fit",
    "cost_ratios",
)


class UnsupportedConfiguration(Exception):
    """The loaded models cannot run this configuration (e.g. tokenizers that differ)."""


class CandidateCrashed(Exception):
    """The candidate's engine raised inside an episode (the agent loop records it as status `error`)."""


class TrialInterrupted(Exception):
    """A stop was requested during the trial; it is recorded as FAIL and re-queued on resume."""


class DuplicateRunning(Exception):
    """Another worker is measuring the same parameter set right now."""


class FinishClaim(Exception):
    """A worker's claim on finishing the study was popped as a trial (it is not one)."""


def measure_mode(setting: str, config: EngineConfig, lossy: bool) -> str:
    """replay or live for a candidate: replay needs exact acceptance and greedy decoding."""
    if setting == "live" or lossy or config.temperature > 0:
        return "live"
    return "replay"


class Objective:
    """Callable for `study.optimize`: models, tasks and the recording are loaded once and shared by every trial."""

    def __init__(
        self,
        setup: TuneSetup,
        *,
        stop: GracefulStop,
        baseline: BaselineRecord | None = None,
        on_task: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self.setup = setup
        self.workload = setup.workload
        self.stop = stop
        self.baseline = baseline
        self.on_task = on_task or (lambda number, done, total: None)
        self._points: dict[str, list[dict[str, Any]] | None] | None = None

    @property
    def total(self) -> int:
        """Task runs of one complete trial."""
        return len(self.workload.instances) * self.workload.repeats

    def step(self, outcome: TaskOutcome) -> int:
        """The task's stable position in the study (its index in the shuffled order, repeat by repeat)."""
        return outcome.repeat * len(self.workload.instances) + outcome.index

    def __call__(self, trial: optuna.Trial) -> float:
        """Run one trial; see the module docstring for how each ending is recorded."""
        role = trial.user_attrs.get(ROLE) or "candidate"
        trial.set_user_attr(ROLE, role)
        # Who runs it (a retried copy inherits its original's attributes: these and `reason` start afresh).
        trial.set_user_attr("owner", owner_token())
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("reason", None)
        try:
            if role == "finish":
                trial.set_user_attr("reason", "a claim on finishing the study, not a trial")
                raise FinishClaim("popped a finish claim")
            return self._baseline(trial) if role == "baseline" else self._candidate(trial)
        except (optuna.TrialPruned, TrialInterrupted, UnsupportedConfiguration, DuplicateRunning, FinishClaim):
            raise
        except Exception as exc:
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            what = str(exc) if isinstance(exc, CandidateCrashed) else f"{type(exc).__name__}: {exc}"
            trial.set_user_attr("reason", f"error: {' '.join(what.split())}"[:1000])
            trial.set_user_attr("traceback", traceback.format_exc()[-4000:])
            raise

    def _dir(self, trial: optuna.Trial) -> Path:
        return self.setup.study_dir / "trials" / f"{trial.number:04d}"

    def _run(self, trial: optuna.Trial, comparison: Comparison, prune: bool) -> tuple[list[TaskOutcome], bool]:
        """Outcomes task by task (as measured: agent time in wall seconds, generation on every clock), each
        reported to the pruner as its paired ratio on the study's clock; (outcomes, pruned)."""
        outcomes: list[TaskOutcome] = []
        values: list[list[float]] = []
        clock = self.setup.tuner.clock
        with closing(until_stopped(comparison, self.stop)) as stream:
            for outcome in stream:
                outcomes.append(outcome)
                _raise_if_crashed(outcome)
                timed = retimed(outcome, clock)
                ratio = 1.0 if timed.candidate is None else timed.time_ratio()
                if ratio is not None:
                    trial.report(ratio, self.step(outcome))
                    values.append([self.step(outcome), ratio])
                self.on_task(trial.number, len(outcomes), self.total)
                # after the last task run a prune would save nothing and throw the measurement away
                if prune and len(outcomes) < self.total and trial.should_prune():
                    trial.set_user_attr("task_values", values)
                    return outcomes, True
        trial.set_user_attr("task_values", values)
        if len(outcomes) < self.total:
            trial.set_user_attr("reason", "interrupted")
            trial.set_user_attr("tasks_run", len(outcomes))
            raise TrialInterrupted(f"trial {trial.number} stopped after {len(outcomes)} of {self.total} task runs")
        return outcomes, False

    @property
    def reference(self) -> float | None:
        """The recording's OFF seconds per success on the study's clock: what a trial's value is scaled to."""
        assert self.baseline is not None
        runs = [retimed_run(r, self.setup.tuner.clock) for r in self.baseline.runs]
        return side_summary(runs, self.baseline.repeats)["seconds_per_success"]

    def _baseline(self, trial: optuna.Trial) -> float:
        """Trial 0: OFF live on the search tasks, every conversation recorded."""
        comparison = Comparison(self.workload, None, self._dir(trial), record=True)
        trial.set_user_attr("engine", asdict(comparison.baseline_engine.config))  # type: ignore[union-attr]
        trial.set_user_attr("measure", "recording")
        trial.set_user_attr("concurrency", self.workload.concurrency)  # agents at once in both sides' waves
        outcomes, _ = self._run(trial, comparison, prune=False)
        ids = [i.instance_id for i in self.workload.instances]
        record = record_from_outcomes(outcomes, self.workload.repeats, ids, trial.number, socket.gethostname())
        record.save(self.setup.study_dir)
        recording.publish(trial.study, record)  # before the trial completes: a worker that sees it done finds it
        self.baseline = record
        side = record.summary
        config = comparison.baseline_engine.config  # type: ignore[union-attr]
        figures = constraints.memory_figures(config, self.setup.memory, record.needed_context)
        peak = self._measured_peak(config, side)
        self._record_side(trial, side, figures, tasks_run=len(outcomes), memory_bytes=peak)
        trial.set_user_attr("speedup", 1.0)
        trial.set_user_attr("off_seconds_per_success", self.reference)
        trial.set_user_attr("needed_context", record.needed_context)
        trial.set_user_attr("clock", self.setup.tuner.clock)
        trial.set_user_attr("generation_s", {"baseline": _clocks([o.baseline for o in outcomes])})
        values = constraints.constraint_values(
            memory_bytes=figures["estimate_bytes"] if peak is None else peak,
            ceiling_bytes=self.setup.memory.ceiling_bytes,
            needed_context=record.needed_context,
            fitting_context=figures["largest_context"],
            regressions=0,
            max_regressions=self.setup.tuner.max_regressions,
            successes=side["successes"],
        )
        constraints.store(trial, values)
        return _value(self.reference)

    def _candidate(self, trial: optuna.Trial) -> float:
        if self.baseline is None:  # another worker took the recording trial after this one looked
            self.baseline = recording.wait(trial.study, self.setup.study_dir, lambda: self.stop.requested)
        if self.baseline is None:
            raise RuntimeError(
                "the baseline (trial 0) has not been recorded, and neither the study's storage nor this run folder "
                "holds a recording; it must run before any candidate"
            )
        config = suggest(trial, self.setup.space, self.setup.base)
        choice = server_choice.suggest(trial, self.setup.choices)  # a llama-server study's file and KV type
        trial.set_user_attr("engine", asdict(config))
        trial.set_user_attr("server_fit", {name: f.fit for name, f in fits(config).items()})
        earlier = self._earlier(trial)
        if earlier is not None:
            return self._reuse(trial, earlier)
        lossy = Engine.validate(config)[1].lossy
        changed = server_choice.changes_numbers(choice, self.setup.choices)
        trial.set_user_attr("changes_numbers", changed)  # only llama-server can run its file / KV type (winners)
        # other weights or KV types than the recording's: ON live on its own, against OFF on the reference
        mode = "live" if changed else measure_mode(self.setup.tuner.measure, config, lossy)
        trial.set_user_attr("measure", mode)
        trial.set_user_attr("concurrency", self.workload.concurrency)
        trial.set_user_attr("clock", self.setup.tuner.clock)
        workload = self.workload
        if changed:
            assert choice is not None and self.workload.server is not None
            on = server_choice.settings_for(self.workload.server, choice, config)
            workload = workload.with_(server=on, baseline_server=self.workload.server)
        if mode == "replay":
            comparison: Comparison = ReplayComparison(workload, config, self._dir(trial), self.baseline.recording)
        else:
            comparison = Comparison(workload, config, self._dir(trial))
        if comparison.unsupported:
            trial.set_user_attr("reason", f"unsupported: {comparison.unsupported}")
            raise UnsupportedConfiguration(comparison.unsupported)
        outcomes, pruned = self._run(trial, comparison, prune=True)
        if isinstance(comparison, ReplayComparison):
            trial.set_user_attr("divergences", comparison.divergences)
            trial.set_user_attr("live_tasks", [list(t) for t in comparison.live_tasks])
        return self._score(trial, config, comparison, outcomes, pruned)

    def _score(
        self, trial: optuna.Trial, config: EngineConfig, comparison: Comparison, outcomes: list[TaskOutcome], pruned
    ) -> float:
        """The trial's figures, constraints and value from its paired outcomes."""
        assert self.baseline is not None
        repeats = self.workload.repeats
        measured = outcomes
        outcomes = [retimed(o, self.setup.tuner.clock) for o in measured]
        ordered = sorted(outcomes, key=lambda o: (o.repeat, o.index))
        summary = summarize(
            ordered, repeats=repeats, lossy=comparison.lossy, greedy=comparison.greedy, unsupported=None
        )
        side = summary["candidate"]
        memory = server_choice.memory_for(self.setup.memory, server_choice.of_trial(trial.user_attrs))
        figures = constraints.memory_figures(config, memory, self.baseline.needed_context)
        peak = self._measured_peak(config, side)
        self._record_side(trial, side, figures, tasks_run=len(outcomes), memory_bytes=peak)
        repeat_speedups = [v for v in per_repeat_speedups(summary) if v is not None]
        pooled = self._pooled(trial, repeat_speedups)
        interval = speedup_interval(outcomes, resamples=self.setup.tuner.bootstrap_resamples, seed=trial.number)
        speedup = statistics.median(pooled) if pooled else None
        trial.set_user_attr("speedup", speedup)
        trial.set_user_attr("speedup_repeats", repeat_speedups)
        trial.set_user_attr("speedup_by_clock", {c: paired_speedup(measured, c, repeats) for c in CLOCKS})
        trial.set_user_attr("speedup_low", interval["low"])
        trial.set_user_attr("speedup_high", interval["high"])
        trial.set_user_attr("off_seconds_per_success", summary["baseline"]["seconds_per_success"])
        trial.set_user_attr("regressions", summary["regressions"])
        trial.set_user_attr("diverged_tasks", summary["diverged_tasks"])
        trial.set_user_attr("lossy", comparison.lossy)
        cand = [o.candidate for o in measured if o.candidate]
        base = [o.baseline for o in measured if o.baseline]
        trial.set_user_attr("cost_ratios", cost_ratios(cand, base))
        trial.set_user_attr("generation_s", {"baseline": _clocks(base), "candidate": _clocks(cand)})
        values = constraints.constraint_values(
            memory_bytes=figures["estimate_bytes"] if peak is None else peak,
            ceiling_bytes=self.setup.memory.ceiling_bytes,
            needed_context=self.baseline.needed_context,
            fitting_context=figures["largest_context"],
            regressions=None if pruned else len(summary["regressions"]),
            max_regressions=self.setup.tuner.max_regressions,
            successes=None if pruned else side["successes"],
        )
        constraints.store(trial, values)
        if pruned:
            trial.set_user_attr("reason", f"pruned after {len(outcomes)} of {self.total} task runs")
            raise optuna.TrialPruned(f"pruned after {len(outcomes)} of {self.total} task runs")
        if not side["successes"]:
            return math.inf
        reference = self.reference
        if speedup and reference:
            return reference / speedup
        return _value(side["seconds_per_success"])  # OFF solved nothing in this trial (sampling): no ratio

    def _pooled(self, trial: optuna.Trial, speedups: list[float]) -> list[float]:
        """This trial's per-repeat speedups, plus, with revisit=repeat, those every earlier measurement of the same
        parameter set made (each trial keeps its own in `speedup_repeats`; copies that reused a value add none)."""
        if self.setup.tuner.revisit != "repeat":
            return speedups
        key = studies.param_key(trial.params)
        pooled = list(speedups)
        for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            same = studies.role(t) == "candidate" and studies.param_key(t.params) == key
            if same and t.number < trial.number and not t.user_attrs.get("reused"):
                pooled += [float(v) for v in t.user_attrs.get("speedup_repeats") or []]
        if len(pooled) > len(speedups):
            trial.set_user_attr("speedup_repeats_pooled", pooled)
        return pooled

    def _earlier(self, trial: optuna.Trial) -> FrozenTrial | None:
        """The earlier trial of the same parameter set this one reuses (None: measure it).

        Unsupported stays unsupported; with revisit=skip a complete or pruned measurement is reused, and a point
        another worker is measuring right now is left to it (DuplicateRunning).
        """
        key = studies.param_key(trial.params)
        same = [
            t
            for t in trial.study.get_trials(deepcopy=False)
            if t.number < trial.number and studies.role(t) == "candidate" and studies.param_key(t.params) == key
        ]
        unsupported = [
            t for t in same if t.state == TrialState.FAIL and str(studies.reason(t) or "").startswith("unsupported")
        ]
        if unsupported:
            return unsupported[-1]
        if self.setup.tuner.revisit != "skip":
            return None
        measured = [
            t for t in same if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and not t.user_attrs.get("reused")
        ]
        if measured:
            return measured[-1]
        running = [t for t in same if t.state == TrialState.RUNNING]
        if running:
            self._queue_unmeasured(trial)
            trial.set_user_attr(studies.DUPLICATE_OF, running[0].number)
            trial.set_user_attr("reused", True)
            trial.set_user_attr("reason", f"duplicate of running trial {running[0].number}")
            raise DuplicateRunning(f"trial {running[0].number} is measuring the same parameters")
        return None

    def _reuse(self, trial: optuna.Trial, earlier: FrozenTrial) -> float:
        """Record the earlier trial's result as this trial's, measuring nothing; queue an unmeasured point."""
        trial.set_user_attr(studies.DUPLICATE_OF, earlier.number)
        trial.set_user_attr("reused", True)
        for key in COPIED:
            if key in earlier.user_attrs:
                trial.set_user_attr(key, earlier.user_attrs[key])
        constraints.store(trial, {name: float(v) for name, v in earlier.constraints.items()})
        self._queue_unmeasured(trial)
        if earlier.state == TrialState.PRUNED:
            trial.set_user_attr("reason", f"duplicate of trial {earlier.number} (pruned)")
            raise optuna.TrialPruned(f"duplicate of pruned trial {earlier.number}")
        if earlier.state == TrialState.FAIL:
            trial.set_user_attr("reason", studies.reason(earlier))
            raise UnsupportedConfiguration(str(studies.reason(earlier)))
        assert earlier.value is not None
        return earlier.value

    def _queue_unmeasured(self, trial: optuna.Trial) -> None:
        """Queue a point not measured yet: of the same drafter when its sub-space is finite and not exhausted, else
        of another drafter with a finite sub-space (exhaust small spaces instead of resampling them)."""
        if self._points is None:
            self._points = drafter_points(self.setup.space, self.setup.base)
        taken = {
            studies.param_key(t.params)
            for t in trial.study.get_trials(deepcopy=False)
            if studies.role(t) == "candidate" and t.number != trial.number
        }
        drafter = trial.params.get("drafter")
        same = [p for p in self._points.get(drafter) or [] if studies.param_key(p) not in taken]
        other = [
            p
            for name, points in self._points.items()
            if name != drafter
            for p in points or []
            if studies.param_key(p) not in taken
        ]
        chosen = pick(same or other, self.setup.study.seed * studies.SEED_STRIDE + trial.number)
        if chosen is not None:
            trial.study.enqueue_trial(chosen, user_attrs={ROLE: "candidate"})

    def _measured_peak(self, config: EngineConfig, side: dict[str, Any]) -> int | None:
        """On CUDA the engine's measured peak, on llama-server its process's peak resident memory; else None
        (the memory model's estimate stands)."""
        measured = self.setup.memory.measured_on_cuda or backend_class(config.backend).measures_memory
        return int(side["peak_memory_bytes"]) if measured and side["peak_memory_bytes"] else None

    def _record_side(
        self,
        trial: optuna.Trial,
        side: dict[str, Any],
        figures: dict[str, Any],
        *,
        tasks_run: int,
        memory_bytes: int | None = None,
    ) -> None:
        per_position = side.get("per_position") or {}
        attrs = {
            "seconds_per_success": side["seconds_per_success"],
            "seconds_per_success_repeats": side["seconds_per_success_repeats"],
            "success_rate": side["success_rate"],
            "successes": side["successes"],
            "tasks_run": tasks_run,
            "tasks_total": self.total,
            "acceptance_rate": side["acceptance_rate"],
            "mean_accepted_length": side["mean_accepted_length"],
            "acceptance_by_position": per_position.get("acceptance", []),
            "decode_tokens_per_s": side["decode_tokens_per_s"],
            "agent_time_s": side["agent_time_s"],
            "memory_bytes": memory_bytes if memory_bytes is not None else figures["estimate_bytes"],
            "memory_estimate_bytes": figures["estimate_bytes"],
            "memory_source": "estimate" if memory_bytes is None else "measured",
            "largest_context": figures["largest_context"],
            "max_context_tokens": side["max_context_tokens"],
        }
        for key, value in attrs.items():
            trial.set_user_attr(key, value)


def retimed_run(run: SideRun, clock: str) -> SideRun:
    """A copy of `run` whose time is its agent work plus its generation on `clock` (wall: itself)."""
    return run if clock == "wall" else replace(run, time_s=run.time_on(clock))


def retimed(outcome: TaskOutcome, clock: str) -> TaskOutcome:
    """Both sides of `outcome` timed on `clock`."""
    if clock == "wall":
        return outcome
    side = {
        s: None if r is None else retimed_run(r, clock) for s, r in (("b", outcome.baseline), ("c", outcome.candidate))
    }
    return replace(outcome, baseline=side["b"], candidate=side["c"])


def paired_speedup(outcomes: list[TaskOutcome], clock: str, repeats: int) -> float | None:
    """The median over repeats of OFF ÷ ON seconds per success, with both sides timed on `clock`."""
    timed = sorted((retimed(o, clock) for o in outcomes), key=lambda o: (o.repeat, o.index))
    summary = summarize(timed, repeats=repeats, lossy=False, greedy=False, unsupported=None)
    values = [v for v in per_repeat_speedups(summary) if v is not None]
    return statistics.median(values) if values else None


def _clocks(runs: list[Any]) -> dict[str, float]:
    """Generation seconds of `runs` summed per clock."""
    out: dict[str, float] = {}
    for run in runs:
        if run is None:
            continue
        for name, value in (run.clocks or {"wall": run.model_s}).items():
            out[name] = out.get(name, 0.0) + value
    return out


def _raise_if_crashed(outcome: TaskOutcome) -> None:
    """A crash of the candidate's engine fails the trial; one OFF shared (the sandbox broke) does not."""
    cand, base = outcome.candidate, outcome.baseline
    if cand is not None and cand.status == "error" and (base is None or base.status != "error"):
        raise CandidateCrashed(f"task {outcome.instance_id}: {cand.message}")


def _value(seconds_per_success: float | None) -> float:
    """Seconds per success, +inf when nothing succeeded (infeasible, never zero)."""
    return math.inf if seconds_per_success is None else float(seconds_per_success)
