"""One finisher at a time: the study's finish claim, kept in the study's own storage.

A process that would finish a study enqueues a `role=finish` claim and tries to take the lowest waiting claim the
way Optuna takes a queued trial: an atomic WAITING -> RUNNING change in the storage, so on any storage (SQLite,
PostgreSQL, a journal file) exactly one process succeeds. It finishes, then releases the claim; the others retire
their own claims and leave. A claim whose process died (same host, owner token gone) is failed and taken over by
the next one. Claims end as FAIL trials with a reason: samplers ignore them, and they are never counted as trials.
"""

from __future__ import annotations

import socket

import optuna
from optuna.trial import FrozenTrial, TrialState

from tasks.sandbox.owner import is_alive, owner_token
from tuner import study as studies


def claim(study: optuna.Study, storage: optuna.storages.BaseStorage) -> FrozenTrial | None:
    """Take the study's finish claim (module docstring); None when another live process holds or won it."""
    host, me = socket.gethostname(), owner_token()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if studies.role(t) != "finish":
            continue
        owner = t.user_attrs.get("owner")
        if t.user_attrs.get("host") == host and owner and not is_alive(owner):
            storage.set_trial_user_attr(t._trial_id, "reason", "its finisher died")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            continue
        return None  # someone is finishing right now
    study.enqueue_trial({}, user_attrs={studies.ROLE: "finish", "owner": me, "host": host}, skip_if_exists=False)
    waiting = [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) if studies.role(t) == "finish"]
    waiting.sort(key=lambda t: t.number)
    first = waiting[0]
    # FrozenTrial's storage id is private; Optuna's own ask() takes a queued trial with the same call.
    if not storage.set_trial_state_values(first._trial_id, TrialState.RUNNING):
        _retire([t for t in waiting if t.user_attrs.get("owner") == me], storage, "another process finishes")
        return None
    storage.set_trial_user_attr(first._trial_id, "owner", me)
    storage.set_trial_user_attr(first._trial_id, "host", host)
    _retire(waiting[1:], storage, "another process finishes")
    return storage.get_trial(first._trial_id)


def release(storage: optuna.storages.BaseStorage, token: FrozenTrial, reason: str) -> None:
    """End the claim (FAIL: samplers ignore it; it is never a trial)."""
    storage.set_trial_user_attr(token._trial_id, "reason", reason)
    storage.set_trial_state_values(token._trial_id, TrialState.FAIL)


def _retire(tokens: list[FrozenTrial], storage: optuna.storages.BaseStorage, reason: str) -> None:
    for t in tokens:
        try:
            storage.set_trial_user_attr(t._trial_id, "reason", reason)
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except RuntimeError:  # taken or finished meanwhile (UpdateFinishedTrialError is a RuntimeError)
            pass


def others_running(study: optuna.Study) -> list[FrozenTrial]:
    """Trials of other processes still running (those of dead processes on this host excepted): what a finisher
    leaves out, and what keeps a worker from finishing."""
    host, me = socket.gethostname(), owner_token()
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner")
        if studies.role(t) == "finish" or owner == me:
            continue
        if t.user_attrs.get("host") == host and owner and not is_alive(owner):
            continue
        out.append(t)
    return out
