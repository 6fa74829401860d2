"""Telling the study's other workers alive from dead, so that a worker that died elsewhere never blocks the finish.

A worker whose share of the budget is done while others still run trials leaves the finish to them (the last one
to end finishes), but only once each of them is known to be alive: a dead worker would never finish, and its trial
must be failed and retried first. A dead worker on this host is seen at once (its owner token is gone,
tuner/study.py); one on another host only through Optuna's heartbeat (RDB storages): a trial still RUNNING after
this worker has watched it for the grace period was stamped within it, so its worker lives; a dead one's trial
goes stale within that window, `fail_stale_trials` fails it and the retry callback queues a copy, which this
worker then runs. A journal file has no heartbeat, so there a trial of another host is left to that host.
"""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Callable

import optuna

from tuner import study as studies
from tuner.claims import others_running

POLL_S = 1.0  # how often a worker watching the others looks at their trials
CLOCK_RESOLUTION_S = 1.0  # SQLite's now() (CURRENT_TIMESTAMP) has whole seconds; PostgreSQL's microseconds


def has_heartbeat(storage: optuna.storages.BaseStorage) -> bool:
    """Whether a silent trial of another host is failed by this storage's heartbeat (RDB storages with one)."""
    interval = getattr(storage, "heartbeat_interval", None)
    return isinstance(storage, optuna.storages.RDBStorage) and interval is not None and interval > 0


def fail_stale(study: optuna.Study) -> None:
    """Fail the trials whose heartbeat went silent (any host) and queue their retries; nothing without a heartbeat."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat: opted into on purpose
        optuna.storages.fail_stale_trials(study)


def wait_for_others(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    stopped: Callable[[], bool],
    say: Callable[[str], None],
    *,
    max_retry: int,
    poll_s: float = POLL_S,
) -> bool:
    """True when no other worker's trial runs (dead ones failed and retried meanwhile); False when the others are
    alive (they finish the study), cannot be watched (another host, no heartbeat), or a stop was asked."""
    host = socket.gethostname()
    # a trial RUNNING after this long under watch was stamped within the grace period; the database's clock judges
    # staleness, and SQLite's counts whole seconds: one more second of watch
    window = grace_s(storage) + CLOCK_RESOLUTION_S + poll_s
    watched: dict[int, float] = {}
    announced = False
    while not stopped():
        fail_stale(study)  # a silent trial of any host: failed, a retry queued (RDB storages)
        studies.fail_dead_trials(study, storage, max_retry)  # a dead process on this host: at once
        running = others_running(study)  # dead processes of this host left out
        if not running:
            return True
        now = time.monotonic()
        unproven = [
            t
            for t in running
            if t.user_attrs.get("host") != host
            and has_heartbeat(storage)
            and now - watched.setdefault(t.number, now) < window
        ]
        if not unproven:
            return False
        if not announced:
            who = ", ".join(f"{t.number} on {t.user_attrs.get('host', '?')}" for t in unproven)
            say(f"checking that the worker(s) of trial(s) {who} are alive (heartbeat, up to {window:.0f} s)")
            announced = True
        time.sleep(poll_s)
    return False


def grace_s(storage: optuna.storages.BaseStorage) -> float:
    """Seconds after which the storage's heartbeat makes a silent trial stale (optuna: twice the interval unless
    set); 0 without a heartbeat."""
    if not has_heartbeat(storage):
        return 0.0
    return float(getattr(storage, "grace_period", None) or 2 * storage.heartbeat_interval)  # type: ignore[attr-defined]
