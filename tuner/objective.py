"""One trial: the baseline (trial 0, speculation OFF) or a candidate from the space, run through `Comparison`.

The objective is the runner's `seconds_per_success` of the candidate on the search tasks (median over
repeats), minimised. After each task the trial reports that task's paired value, candidate seconds ÷
OFF seconds for the same task and repeat, with the task's stable position as the step: a ratio, not
seconds, so a long task and a short one weigh alike in the Wilcoxon signed-rank test the pruner runs
against the best trial. How a trial ends (Optuna state, `reason` user attribute):
- COMPLETE: every task ran; value = seconds per success, `inf` when nothing succeeded (recorded,
  infeasible through the `no_success` constraint, never a crash and never a zero);
- PRUNED: the pruner stopped it; `tasks_run` says after how many task runs;
- FAIL with reason `unsupported: ...`: the loaded models cannot run this configuration (never "slow");
- FAIL with reason `error: ...`: an exception inside the trial (a drafter crash, CUDA OOM); the study goes on;
- FAIL with reason `interrupted`: Ctrl-C/SIGTERM after the task in flight; the next run re-queues it.
"""

from __future__ import annotations

import math
import socket
import traceback
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna
import torch

from agents.loop import AgentConfig
from engine.engine import EngineConfig
from runners.backends import ServerSettings
from runners.compare import Comparison
from runners.interrupt import GracefulStop, until_stopped
from runners.models import Models
from runners.outcomes import TaskOutcome
from runners.summary import cost_ratios, summarize
from runners.workload import Workload
from tasks.environment import TaskEnvironment
from tasks.sandbox.owner import owner_token
from tasks.schema import Instance
from tuner import constraints
from tuner.baseline import BaselineRecord, record_from_outcomes
from tuner.space import Space, suggest

ROLE = "role"  # user attribute: baseline | candidate


class UnsupportedConfiguration(Exception):
    """The loaded models cannot run this configuration (e.g. tokenizers that differ)."""


class CandidateCrashed(Exception):
    """The candidate's engine raised inside an episode (the agent loop records it as status `error`)."""


class TrialInterrupted(Exception):
    """A stop was requested during the trial; it is recorded as FAIL and re-queued on resume."""


def settings_from(cfg: Any) -> dict[str, Any]:
    """The Objective arguments a composed tune config decides (agent limits, repeats, warm-up, quality, names)."""
    from runners.config import agent_config

    return {
        "agent": agent_config(cfg.agent),
        "repeats": cfg.run.repeats,
        "warmup": cfg.run.warmup,
        "max_regressions": cfg.tuner.max_regressions,
        "model_name": cfg.model.name,
    }


class Objective:
    """Callable for `study.optimize`: models, tasks and the baseline are loaded once and shared by every trial."""

    def __init__(
        self,
        *,
        models: Models,
        instances: list[Instance],
        environment: TaskEnvironment,
        agent: AgentConfig,
        space: Space,
        base: EngineConfig,
        study_dir: Path,
        repeats: int,
        warmup: bool,
        memory: constraints.MemoryFacts,
        max_regressions: int,
        stop: GracefulStop,
        model_name: str = "model",
        baseline: BaselineRecord | None = None,
        on_task: Callable[[int, int, int], None] | None = None,
        on_baseline: Callable[[BaselineRecord], None] | None = None,
        server: ServerSettings | None = None,
    ) -> None:
        self.models = models
        self.instances = instances
        self.environment = environment
        self.agent = agent
        self.space = space
        self.base = base
        self.study_dir = study_dir
        self.repeats = repeats
        self.warmup = warmup
        self.memory = memory
        self.max_regressions = max_regressions
        self.stop = stop
        self.model_name = model_name
        self.baseline = baseline
        self.on_task = on_task or (lambda number, done, total: None)
        self.on_baseline = on_baseline or (lambda record: None)
        self.server = server  # engine.backend=llama-server: where its servers come from

    @property
    def total(self) -> int:
        """Task runs of one complete trial."""
        return len(self.instances) * self.repeats

    def step(self, outcome: TaskOutcome) -> int:
        """The task's stable position in the study (its index in the shuffled order, repeat by repeat)."""
        return outcome.repeat * len(self.instances) + outcome.index

    def __call__(self, trial: optuna.Trial) -> float:
        """Run one trial; see the module docstring for how each ending is recorded."""
        role = trial.user_attrs.get(ROLE) or "candidate"
        trial.set_user_attr(ROLE, role)
        # Who runs it (a retried copy inherits its original's attributes: these and `reason` start afresh).
        trial.set_user_attr("owner", owner_token())
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("reason", None)
        try:
            return self._baseline(trial) if role == "baseline" else self._candidate(trial)
        except (optuna.TrialPruned, TrialInterrupted, UnsupportedConfiguration):
            raise
        except Exception as exc:
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            what = str(exc) if isinstance(exc, CandidateCrashed) else f"{type(exc).__name__}: {exc}"
            trial.set_user_attr("reason", f"error: {' '.join(what.split())}"[:1000])
            trial.set_user_attr("traceback", traceback.format_exc()[-4000:])
            raise

    def _comparison(self, trial: optuna.Trial, candidate: EngineConfig | None) -> Comparison:
        workload = Workload(
            self.models,
            self.instances,
            self.environment,
            self.agent,
            repeats=self.repeats,
            warmup=self.warmup,
            model_name=self.model_name,
            plain=self.base,
            server=self.server,
        )
        return Comparison(
            workload,
            candidate,
            self.study_dir / "trials" / f"{trial.number:04d}",
            baseline=None if candidate is None else self.baseline.baseline,  # type: ignore[union-attr]
        )

    def _run(self, trial: optuna.Trial, comparison: Comparison, prune: bool) -> tuple[list[TaskOutcome], bool]:
        """Outcomes task by task, reported to the pruner; (outcomes, pruned)."""
        outcomes: list[TaskOutcome] = []
        values: list[list[float]] = []
        with closing(until_stopped(comparison, self.stop)) as stream:
            for outcome in stream:
                outcomes.append(outcome)
                _raise_if_crashed(outcome)
                ratio = 1.0 if outcome.candidate is None else outcome.time_ratio()
                if ratio is not None:
                    trial.report(ratio, self.step(outcome))
                    values.append([self.step(outcome), ratio])
                self.on_task(trial.number, len(outcomes), self.total)
                if prune and trial.should_prune():
                    trial.set_user_attr("task_values", values)
                    return outcomes, True
        trial.set_user_attr("task_values", values)
        if len(outcomes) < self.total:
            trial.set_user_attr("reason", "interrupted")
            trial.set_user_attr("tasks_run", len(outcomes))
            raise TrialInterrupted(f"trial {trial.number} stopped after {len(outcomes)} of {self.total} task runs")
        return outcomes, False

    def _baseline(self, trial: optuna.Trial) -> float:
        comparison = self._comparison(trial, None)
        trial.set_user_attr("engine", asdict(comparison.baseline_engine.config))  # type: ignore[union-attr]
        outcomes, _ = self._run(trial, comparison, prune=False)
        record = record_from_outcomes(outcomes, self.repeats, [i.instance_id for i in self.instances], trial.number)
        record.save(self.study_dir)
        self.baseline = record
        self.on_baseline(record)
        side = record.summary
        config = comparison.baseline_engine.config  # type: ignore[union-attr]
        figures = constraints.memory_figures(config, self.memory, record.needed_context)
        peak = self._measured_peak(config, side)
        self._record_side(trial, side, figures, tasks_run=len(outcomes), memory_bytes=peak)
        trial.set_user_attr("speedup", 1.0)
        trial.set_user_attr("needed_context", record.needed_context)
        values = constraints.constraint_values(
            memory_bytes=figures["estimate_bytes"] if peak is None else peak,
            ceiling_bytes=self.memory.ceiling_bytes,
            needed_context=record.needed_context,
            fitting_context=figures["largest_context"],
            regressions=0,
            max_regressions=self.max_regressions,
            successes=side["successes"],
        )
        constraints.store(trial, values)
        return _value(side["seconds_per_success"])

    def _candidate(self, trial: optuna.Trial) -> float:
        if self.baseline is None:
            raise RuntimeError("the baseline (trial 0) has not been measured; it must run before any candidate")
        config = suggest(trial, self.space, self.base)
        trial.set_user_attr("engine", asdict(config))
        comparison = self._comparison(trial, config)
        if comparison.unsupported:
            trial.set_user_attr("reason", f"unsupported: {comparison.unsupported}")
            raise UnsupportedConfiguration(comparison.unsupported)
        outcomes, pruned = self._run(trial, comparison, prune=True)
        summary = summarize(
            outcomes, repeats=self.repeats, lossy=comparison.lossy, greedy=comparison.greedy, unsupported=None
        )
        side = summary["candidate"]
        figures = constraints.memory_figures(config, self.memory, self.baseline.needed_context)
        peak = self._measured_peak(config, side)
        self._record_side(trial, side, figures, tasks_run=len(outcomes), memory_bytes=peak)
        memory_bytes = figures["estimate_bytes"] if peak is None else peak
        off = self.baseline.summary["seconds_per_success"]
        on = side["seconds_per_success"]
        trial.set_user_attr("speedup", off / on if off and on else None)
        trial.set_user_attr("regressions", summary["regressions"])
        trial.set_user_attr("diverged_tasks", summary["diverged_tasks"])
        trial.set_user_attr("lossy", comparison.lossy)
        trial.set_user_attr(
            "cost_ratios",
            cost_ratios([o.candidate for o in outcomes if o.candidate], [o.baseline for o in outcomes if o.baseline]),
        )
        values = constraints.constraint_values(
            memory_bytes=memory_bytes,
            ceiling_bytes=self.memory.ceiling_bytes,
            needed_context=self.baseline.needed_context,
            fitting_context=figures["largest_context"],
            regressions=None if pruned else len(summary["regressions"]),
            max_regressions=self.max_regressions,
            successes=None if pruned else side["successes"],
        )
        constraints.store(trial, values)
        if pruned:
            trial.set_user_attr("reason", f"pruned after {len(outcomes)} of {self.total} task runs")
            raise optuna.TrialPruned(f"pruned after {len(outcomes)} of {self.total} task runs")
        return _value(on)

    def _measured_peak(self, config: EngineConfig, side: dict[str, Any]) -> int | None:
        """On CUDA the engine's measured peak, on llama-server its process's peak resident memory; else None
        (the memory model's estimate stands)."""
        measured = self.memory.measured_on_cuda or config.backend == "llama-server"
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


def _raise_if_crashed(outcome: TaskOutcome) -> None:
    """A crash of the candidate's engine fails the trial; one OFF shared (the sandbox broke) does not."""
    cand, base = outcome.candidate, outcome.baseline
    if cand is not None and cand.status == "error" and (base is None or base.status != "error"):
        raise CandidateCrashed(f"task {outcome.instance_id}: {cand.message}")


def _value(seconds_per_success: float | None) -> float:
    """The objective: seconds per success, +inf when nothing succeeded (infeasible, never zero)."""
    return math.inf if seconds_per_success is None else float(seconds_per_success)
