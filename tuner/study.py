"""The Optuna study: sampler, pruner, the recording trial, budgets, duplicates, resume, and trials.jsonl.

Sampler (`study.sampler`): TPE (`multivariate=True, group=True`: the space is conditional on the drafter;
constant liar, so a worker's draws account for trials still running elsewhere), Optuna's GPSampler, or random
search, all with the constraints of `tuner.constraints`. Every trial draws from its own stream, seeded with the
study seed and the trial number, so two workers of one study never draw the same random startup points and a
seeded study stays reproducible. Pruner: Wilcoxon over the per-task paired ratios (`tuner.objective`). Trial 0
(`role=baseline`) runs OFF live on the search tasks and records its agent conversations (tuner/baseline.py).
"""

from __future__ import annotations

import json
import math
import socket
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from common.errors import ConfigError
from common.files import write_atomic
from tasks.sandbox.owner import is_alive
from tuner import constraints
from tuner.halving import TaskHalvingPruner
from tuner.storage import RetryCallback

SAMPLERS = ("tpe", "gp", "random")
TRIALS_FILE = "trials.jsonl"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
ROLE = "role"  # user attribute: baseline (trial 0: OFF live, recorded) | candidate | finish (a claim on finishing)
DUPLICATE_OF = "duplicate_of"  # user attribute: the trial whose parameters this one repeats
SEED_STRIDE = 1_000_003  # per-trial seeds: study seed x stride + trial number


class TrialSeeded(BaseSampler):
    """A sampler whose every trial draws from its own stream, seeded with (study seed, trial number).

    The samplers keep no state of their own beyond their random generator (they read the study's trials on
    every call), so a fresh one per trial loses nothing and makes a trial's draws independent of which process
    runs it: parallel workers cannot repeat each other's random points, and a study replays the same way.
    """

    def __init__(self, make: Callable[[int], BaseSampler], seed: int) -> None:
        self._make, self._seed = make, seed
        self._current: tuple[int, BaseSampler] | None = None

    def _for(self, trial: FrozenTrial) -> BaseSampler:
        if self._current is None or self._current[0] != trial.number:
            self._current = (trial.number, self._make(self._seed * SEED_STRIDE + trial.number))
        return self._current[1]

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The inner sampler's."""
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """The inner sampler's."""
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """The inner sampler's."""
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """The inner sampler's."""
        self._for(trial).before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        """The inner sampler's."""
        self._for(trial).after_trial(study, trial, state, values)


def make_sampler(kind: str, seed: int, startup_trials: int) -> BaseSampler:
    """The study's sampler (`tpe`, `gp` or `random`), each trial on its own seeded stream (TrialSeeded)."""
    if kind not in SAMPLERS:
        raise ConfigError(f"study.sampler={kind!r} is not allowed; choose one of: {', '.join(SAMPLERS)}")

    def make(trial_seed: int) -> BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `group`: opted into on purpose
            if kind == "tpe":
                return optuna.samplers.TPESampler(
                    seed=trial_seed, multivariate=True, group=True, n_startup_trials=startup_trials, constant_liar=True
                )
            if kind == "gp":
                return optuna.samplers.GPSampler(
                    seed=trial_seed, n_startup_trials=startup_trials, warn_independent_sampling=False
                )
            return optuna.samplers.RandomSampler(seed=trial_seed)

    return TrialSeeded(make, seed)


# study.pruner -> (p_threshold, startup steps, reduction) -> the pruner; the only list of pruner names
PRUNER_MAKERS: dict[str, Callable[[float, int, int], optuna.pruners.BasePruner]] = {
    # paired per-task values against the best trial: stops a trial once it is surely worse
    "wilcoxon": lambda p, steps, _r: optuna.pruners.WilcoxonPruner(p_threshold=p, n_startup_steps=steps),
    # successive halving over task runs: stops a trial once it ranks low at a rung (tuner/halving.py)
    "halving": lambda _p, steps, r: TaskHalvingPruner(min_tasks=max(steps, 1), reduction=r),
    "none": lambda _p, _steps, _r: optuna.pruners.NopPruner(),
}
PRUNERS = tuple(PRUNER_MAKERS)


def make_pruner(name: str, p_threshold: float, startup_steps: int, reduction: int = 3) -> optuna.pruners.BasePruner:
    """The pruner `study.pruner` names (PRUNER_MAKERS); a one-line error naming the allowed ones otherwise."""
    if name not in PRUNER_MAKERS:
        raise ConfigError(f"study.pruner={name!r} is not allowed; choose one of: {', '.join(PRUNERS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return PRUNER_MAKERS[name](p_threshold, startup_steps, reduction)


def role(trial: FrozenTrial) -> str:
    """baseline (trial 0) | candidate | finish."""
    return trial.user_attrs.get(ROLE, "candidate")


def reason(trial: FrozenTrial) -> str | None:
    """Why a trial ended as it did (None for a plain complete one)."""
    return trial.user_attrs.get("reason")


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """A candidate that measured something: complete, pruned, or failed with a recorded reason (not a kill).

    A duplicate that reused an earlier trial's value measured nothing and does not count.
    """
    if role(trial) != "candidate" or trial.state not in FINISHED or trial.user_attrs.get("reused"):
        return False
    if trial.state == TrialState.FAIL:
        why = reason(trial)
        return why is not None and why not in ("interrupted", "killed")
    return True


def fail_dead_trials(study: optuna.Study, storage: optuna.storages.BaseStorage, max_retry: int) -> list[int]:
    """Fail the RUNNING trials whose process on this host is gone, and queue a retry of each.

    The heartbeat does this for RDB storages after its grace period; a journal file has no heartbeat
    in Optuna, and a killed process should not wait for one on sqlite either. A trial records its owner
    (`<pid>.<start time>`, tasks/sandbox/owner.py) and host when it starts, so only trials of dead
    processes on this machine are touched; those of other machines are left to their heartbeat.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = RetryCallback(max_retry=max_retry)
    host, failed = socket.gethostname(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial.user_attrs.get("owner")
        if trial.user_attrs.get("host") != host or not owner or is_alive(owner):
            continue
        # FrozenTrial's storage id is private; Optuna's own stale-trial handling uses the same calls.
        storage.set_trial_user_attr(trial._trial_id, "reason", "killed")
        if storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
            retry(study, storage.get_trial(trial._trial_id))
            failed.append(trial.number)
    return failed


def budget_left(study: optuna.Study, trials: int) -> int:
    """Candidate trials still to run for a budget of `trials`."""
    done = sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False))
    return max(trials - done, 0)


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The completed baseline trial (OFF live, recorded), if any."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if role(t) == "baseline"]
    return done[-1] if done else None


def ensure_baseline_queued(study: optuna.Study) -> bool:
    """Enqueue the baseline unless one is complete, waiting or running; True when one was enqueued."""
    alive = (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING)
    if any(role(t) == "baseline" for t in study.get_trials(deepcopy=False, states=alive)):
        return False
    study.enqueue_trial({}, user_attrs={ROLE: "baseline"})
    return True


def queued(study: optuna.Study) -> bool:
    """Whether a trial waits in the queue (a retry, a re-queued or enqueued one); finish claims are not trials."""
    return any(role(t) != "finish" for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def requeue_interrupted(study: optuna.Study) -> list[int]:
    """Queue again the candidates a stop interrupted (same parameters), once each; returns their numbers."""
    trials = study.get_trials(deepcopy=False)
    requeued = {t.user_attrs.get("retry_of") for t in trials}
    again = []
    for t in trials:
        if t.state == TrialState.FAIL and reason(t) == "interrupted" and t.number not in requeued:
            attrs = {ROLE: role(t), "retry_of": t.number}
            study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)
            again.append(t.number)
    return again


def param_key(params: dict[str, Any]) -> str:
    """A parameter set as canonical JSON: two trials with equal keys measured the same configuration."""
    return json.dumps(params, sort_keys=True, default=str)


def measured_keys(study: optuna.Study) -> set[str]:
    """Parameter sets tried so far: complete, pruned, unsupported or failed with an error (a point that errs is
    measured again when proposed again, but counts as tried when deciding that a finite space is exhausted);
    copies of earlier trials, interrupted and killed ones excluded."""
    keys = set()
    for t in study.get_trials(deepcopy=False):
        if role(t) != "candidate" or t.user_attrs.get("reused"):
            continue
        why = str(reason(t) or "")
        failed = t.state == TrialState.FAIL and why.startswith(("unsupported", "error"))
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or failed:
            keys.add(param_key(t.params))
    return keys


def points(trials: list[FrozenTrial]) -> dict[str, FrozenTrial]:
    """The latest complete candidate that measured each distinct parameter set (copies that reused a value are
    not; with `tuner.revisit=repeat` the latest carries the estimate pooled over every measurement of the set)."""
    out: dict[str, FrozenTrial] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TrialState.COMPLETE and role(t) == "candidate" and not t.user_attrs.get("reused"):
            out[param_key(t.params)] = t
    return out


def feasible_candidates(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """One trial per distinct feasible point with a finite value, fastest first."""
    done = [
        t for t in points(trials).values() if constraints.feasible(t) and t.value is not None and math.isfinite(t.value)
    ]
    return sorted(done, key=lambda t: (t.value, t.number))


def trial_row(trial: FrozenTrial) -> dict[str, Any]:
    """One line of trials.jsonl: parameters, value, state, reason and the recorded figures."""
    attrs = dict(trial.user_attrs)
    attrs.pop("traceback", None)
    value = trial.value if trial.value is not None and math.isfinite(trial.value) else None
    return {
        "number": trial.number,
        "role": role(trial),
        "state": trial.state.name,
        "value": value,
        "params": trial.params,
        "reason": reason(trial),
        "violated": constraints.violated(trial) if trial.state == TrialState.COMPLETE else [],
        "constraints": dict(trial.constraints),
        "duration_s": trial.duration.total_seconds() if trial.duration else None,
        "user_attrs": attrs,
    }


def write_trials(study: optuna.Study, study_dir: Path) -> Path:
    """Rewrite trials.jsonl from the storage (the storage is the truth; this is its readable copy)."""
    path = study_dir / TRIALS_FILE
    rows = [trial_row(t) for t in study.get_trials(deepcopy=False) if t.state in FINISHED and role(t) != "finish"]
    write_atomic(path, "".join(json.dumps(r, default=str, allow_nan=False) + "\n" for r in rows))
    return path
