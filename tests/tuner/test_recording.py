"""The recording travels in the study's storage: a worker with its own run root reads it, checks it, and refuses a
study whose model or tasks differ from its own."""

from __future__ import annotations

import random
import threading

import optuna
import pytest

from common.errors import ConfigError
from runners.outcomes import SideRun
from tuner import recording
from tuner import study as studies
from tuner.baseline import BASELINE_FILE, BaselineRecord, load_baseline
from tuner.optimize import check_same_study


def _record(runs: int = 3, tokens: int = 400) -> BaselineRecord:
    rng = random.Random(7)
    side = [
        SideRun(
            instance_id=f"task-{i}",
            side="baseline",
            repeat=0,
            status="submitted",
            success=i % 2 == 0,
            evaluation_status="resolved" if i % 2 == 0 else "unresolved",
            time_s=1.5 + i,
            evaluation_s=0.2,
            steps=5,
            generated_ids=[rng.randrange(32_000) for _ in range(tokens)],
            model_s=1.0 + i,
        )
        for i in range(runs)
    ]
    return BaselineRecord(side, 1, [f"task-{i}" for i in range(runs)], trial_number=0, host="machine-a")


def _study(tmp_path, name: str = "s") -> optuna.Study:
    (tmp_path / "shared").mkdir(exist_ok=True)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'shared' / 'study.db'}")  # no heartbeat: no ask/tell
    return optuna.create_study(study_name=name, storage=storage, load_if_exists=True)


def _complete_baseline(study: optuna.Study) -> None:
    study.enqueue_trial({}, user_attrs={studies.ROLE: "baseline"})
    trial = study.ask()
    study.tell(trial, 1.0)


def test_a_worker_with_another_run_root_gets_the_recording_from_the_storage(tmp_path, monkeypatch):
    monkeypatch.setattr(recording, "CHUNK_CHARS", 1000)  # several chunks, as a long recording on MySQL would be
    study, record = _study(tmp_path), _record()
    digest = recording.publish(study, record)
    assert study.user_attrs[recording.KEY]["chunks"] > 1
    other_root = tmp_path / "machine-b" / "runs" / "s"
    other_root.mkdir(parents=True)
    fetched = recording.fetch(_study(tmp_path), other_root)
    assert fetched is not None and fetched.to_json() == record.to_json()
    assert fetched.recording.keys() == record.recording.keys()
    local = load_baseline(other_root)  # this worker's own copy, for finish's artifacts
    assert local is not None and local.to_json() == record.to_json()
    assert recording.stored(study)[1] == digest


def test_a_damaged_stored_recording_is_one_line_naming_the_study(tmp_path, monkeypatch):
    monkeypatch.setattr(recording, "CHUNK_CHARS", 1000)
    study = _study(tmp_path, "damaged")
    recording.publish(study, _record())
    study.set_user_attr(recording.chunk_key(1), "AAAA")
    with pytest.raises(
        ConfigError, match=r"^study 'damaged': its stored recording is (damaged|not a baseline|.*sha256)"
    ):
        recording.fetch(study, tmp_path / "root")


def test_an_older_study_publishes_its_run_folders_recording_on_resume(tmp_path):
    study, record = _study(tmp_path), _record()
    _complete_baseline(study)
    root = tmp_path / "machine-a"
    root.mkdir()
    record.save(root)
    assert recording.stored(study) is None
    fetched = recording.fetch(study, root)
    assert fetched is not None and fetched.to_json() == record.to_json()
    assert recording.stored(study) is not None  # now every other worker has it too


def test_no_recording_anywhere_is_none(tmp_path):
    study = _study(tmp_path)
    assert recording.fetch(study, tmp_path / "empty") is None
    assert not (tmp_path / "empty" / BASELINE_FILE).exists()


def test_waiting_ends_with_the_recording_another_worker_publishes(tmp_path):
    study = _study(tmp_path)
    study.enqueue_trial({}, user_attrs={studies.ROLE: "baseline"})
    running = study.ask()  # trial 0, RUNNING as on the recording worker
    published = threading.Event()

    def recorder() -> None:
        recording.publish(_study(tmp_path), _record())
        published.set()

    thread = threading.Timer(0.2, recorder)
    thread.start()
    try:
        got = recording.wait(study, tmp_path / "b", lambda: False, poll_s=0.05)
    finally:
        thread.join(timeout=30)
    assert published.is_set() and got is not None and got.instance_ids == ["task-0", "task-1", "task-2"]
    study.tell(running, 1.0)


def test_waiting_ends_without_a_recording_when_no_recording_trial_runs(tmp_path):
    study = _study(tmp_path)
    study.enqueue_trial({}, user_attrs={studies.ROLE: "baseline"})  # queued, not running: this worker will take it
    assert recording.wait(study, tmp_path / "b", lambda: False, poll_s=0.01) is None
    assert recording.wait(study, tmp_path / "b", lambda: True, poll_s=0.01) is None


FINGERPRINT = {"tasks": ["a", "b"], "repeats": 1, "space": {"x": 1}, "model_sha256": "1" * 64, "suite_sha256": "2" * 64}


def test_a_worker_whose_model_or_suite_differs_refuses_in_one_line(tmp_path):
    study = _study(tmp_path)
    check_same_study(study, FINGERPRINT, "s")
    check_same_study(study, dict(FINGERPRINT), "s")  # the same worker again: fine
    with pytest.raises(ConfigError) as model:
        check_same_study(study, {**FINGERPRINT, "model_sha256": "f" * 64}, "s")
    assert "model files (sha256 ffffffffffff, the study's 111111111111)" in str(model.value)
    assert "\n" not in str(model.value)
    with pytest.raises(ConfigError, match="task suite"):
        check_same_study(study, {**FINGERPRINT, "suite_sha256": "e" * 64}, "s")
    with pytest.raises(ConfigError, match="was created with other repeats"):
        check_same_study(study, {**FINGERPRINT, "repeats": 3}, "s")


def test_an_older_studys_fingerprint_gains_the_content_digests_and_drops_the_path(tmp_path):
    study = _study(tmp_path)
    older = {k: v for k, v in FINGERPRINT.items() if not k.endswith("sha256")}
    study.set_user_attr("fingerprint", {**older, "model": "/somewhere/else/model"})
    check_same_study(study, FINGERPRINT, "s")  # the path no longer counts; the digests are written in
    assert study.user_attrs["fingerprint"]["model_sha256"] == "1" * 64
    with pytest.raises(ConfigError, match="model files"):
        check_same_study(study, {**FINGERPRINT, "model_sha256": "f" * 64}, "s")
