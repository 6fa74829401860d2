"""A worker whose share is done tells the other workers' trials alive from dead: a live one on another host (its
heartbeat goes on) is left to its worker; a dead one (its heartbeat stopped) is failed, and its retry queued."""

from __future__ import annotations

import threading

import optuna
import pytest
from optuna.trial import TrialState

from tuner import peers
from tuner import study as studies
from tuner.storage import open_storage

# ask() on a heartbeat storage outside optimize(): the test plays the other machine's worker by hand
pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")


def _running_elsewhere(tmp_path, grace_s: int = 2):
    """A study on SQLite with a 1 s heartbeat (stale after `grace_s`) and one candidate RUNNING on another host."""
    storage = open_storage("sqlite", tmp_path, heartbeat_interval=1, grace_period=grace_s)
    study = optuna.create_study(study_name="p", storage=storage)
    study.enqueue_trial({"x": 0.5}, user_attrs={studies.ROLE: "candidate", "host": "another-machine", "owner": "1.1"})
    trial = study.ask()  # RUNNING, as on the other machine
    storage.record_heartbeat(trial._trial_id)
    return storage, study, trial


def test_a_live_worker_on_another_host_is_left_to_finish(tmp_path):
    storage, study, trial = _running_elsewhere(tmp_path, grace_s=4)  # a wide margin over the 0.1 s stamps
    beating = threading.Event()

    def beat() -> None:  # the other machine's heartbeat thread
        while not beating.wait(0.1):
            storage.record_heartbeat(trial._trial_id)

    thread = threading.Thread(target=beat)
    thread.start()
    said: list[str] = []
    try:
        alone = peers.wait_for_others(study, storage, lambda: False, said.append, max_retry=2, poll_s=0.2)
    finally:
        beating.set()
        thread.join(timeout=10)
    assert alone is False  # it lives: its worker finishes the study
    assert study.get_trials(deepcopy=False)[0].state == TrialState.RUNNING
    assert said and "0 on another-machine" in said[0] and "heartbeat" in said[0]


def test_a_dead_worker_on_another_host_is_failed_and_its_trial_retried(tmp_path):
    storage, study, _ = _running_elsewhere(tmp_path)  # one stamp, then silence: the machine is gone
    alone = peers.wait_for_others(study, storage, lambda: False, lambda line: None, max_retry=2, poll_s=0.2)
    assert alone is True
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.FAIL, TrialState.WAITING]  # failed by the heartbeat, a retry queued
    assert studies.queued(study)


def test_without_a_heartbeat_a_trial_of_another_host_cannot_be_watched(tmp_path):
    storage = open_storage("journal", tmp_path)
    study = optuna.create_study(study_name="j", storage=storage)
    study.enqueue_trial({"x": 0.5}, user_attrs={studies.ROLE: "candidate", "host": "another-machine", "owner": "1.1"})
    study.ask()
    assert peers.wait_for_others(study, storage, lambda: False, lambda line: None, max_retry=2, poll_s=0.01) is False
    assert peers.grace_s(storage) == 0.0
