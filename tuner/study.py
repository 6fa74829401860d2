"""The Optuna study: sampler, pruner, the baseline trial, budgets, resume, and trials.jsonl.

Sampler: TPE, `multivariate=True, group=True` (the space is conditional on the drafter), seeded, with
the constraints of `tuner.constraints`. Pruner: Wilcoxon over the per-task ratios (`tuner.objective`).
The baseline is trial 0: enqueued with the user attribute `role=baseline` when the study has none.
"""

from __future__ import annotations

import json
import math
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from runners.outputs import write_atomic
from tasks.sandbox.owner import is_alive
from tuner import constraints
from tuner.objective import ROLE
from tuner.storage import RetryCallback

PRUNERS = ("wilcoxon", "none")
TRIALS_FILE = "trials.jsonl"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def make_sampler(seed: int, startup_trials: int) -> optuna.samplers.TPESampler:
    """Seeded TPE that models each drafter's knobs as one group; it reads the trials' constraints itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `group`: opted into on purpose
        return _tpe(seed, startup_trials)


def _tpe(seed: int, startup_trials: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        group=True,
        n_startup_trials=startup_trials,
    )


def make_pruner(name: str, p_threshold: float, startup_steps: int) -> optuna.pruners.BasePruner:
    """WilcoxonPruner (paired per-task values against the best trial) or none."""
    if name not in PRUNERS:
        raise ValueError(f"study.pruner={name!r} is not allowed; choose one of: {', '.join(PRUNERS)}")
    if name == "none":
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.WilcoxonPruner(p_threshold=p_threshold, n_startup_steps=startup_steps)


def role(trial: FrozenTrial) -> str:
    """baseline | candidate."""
    return trial.user_attrs.get(ROLE, "candidate")


def reason(trial: FrozenTrial) -> str | None:
    """Why a trial ended as it did (None for a plain complete one)."""
    return trial.user_attrs.get("reason")


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """A candidate that finished as data: complete, pruned, or failed with a recorded reason (not a kill)."""
    if role(trial) != "candidate" or trial.state not in FINISHED:
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
    """The completed baseline trial, if any."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if role(t) == "baseline"]
    return done[-1] if done else None


def ensure_baseline_queued(study: optuna.Study) -> bool:
    """Enqueue the baseline unless one is complete, waiting or running; True when one was enqueued."""
    alive = (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING)
    if any(role(t) == "baseline" for t in study.get_trials(deepcopy=False, states=alive)):
        return False
    study.enqueue_trial({}, user_attrs={ROLE: "baseline"})
    return True


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


def best_candidate(study: optuna.Study) -> FrozenTrial | None:
    """The fastest feasible complete candidate (finite value), or None."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if role(t) == "candidate" and constraints.feasible(t) and t.value is not None and math.isfinite(t.value)
    ]
    return min(done, key=lambda t: t.value) if done else None


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
    rows = [trial_row(t) for t in study.get_trials(deepcopy=False) if t.state in FINISHED]
    write_atomic(path, "".join(json.dumps(r, default=str, allow_nan=False) + "\n" for r in rows))
    return path
