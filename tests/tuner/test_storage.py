"""Study storages: files and reopening, heartbeat retry of killed workers, a shared journal, PostgreSQL, bad URLs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.tuner.conftest import postgres_url
from tuner.storage import JOURNAL_FILE, SQLITE_FILE, RetryCallback, describe_storage, open_storage

REPO = Path(__file__).resolve().parents[2]
# Bounds for waits on other processes, far above what they take: reached only when something is broken.
WAIT_S = 60

# Runs the study named argv[3] until it holds argv[6] complete trials. "hang": trial 2 touches the marker argv[4]
# and sleeps until the test kills the process; on an RDB storage it first waits for its first heartbeat row, since
# optuna never fails a RUNNING trial that has none (a worker killed in that instant is not retried). "resume" on an
# RDB storage first waits (bounded) until the heartbeat has made the killed trial stale and failed it, so that
# this run is the one that retries it.
RESUME_WORKER = """
import sys, time, warnings
from pathlib import Path
import optuna
import sqlalchemy
from optuna.trial import TrialState
from tuner.storage import open_storage

url, study_dir, name, marker, mode, n_complete = sys.argv[1:7]
optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
storage = open_storage(url, Path(study_dir), heartbeat_interval=1, grace_period=1)
study = optuna.load_study(study_name=name, storage=storage)

def objective(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    if mode == "hang" and trial.number == 2:
        if isinstance(storage, optuna.storages.RDBStorage):
            beat = sqlalchemy.text("SELECT 1 FROM trial_heartbeats WHERE trial_id = :id")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with storage.engine.connect() as connection:
                    if connection.execute(beat, {"id": trial._trial_id}).first():
                        break
                time.sleep(0.05)
        Path(marker).touch()
        time.sleep(600)
    return x

if mode == "resume" and isinstance(storage, optuna.storages.RDBStorage):
    deadline = time.monotonic() + 30
    while study.get_trials(states=(TrialState.RUNNING,)) and time.monotonic() < deadline:
        optuna.storages.fail_stale_trials(study)
        time.sleep(0.2)
done = len(study.get_trials(states=(TrialState.COMPLETE,)))
study.optimize(objective, n_trials=max(0, int(n_complete) - done))
"""

# Announces itself in argv[3], waits (bounded) for argv[4] workers to have done so, then runs argv[5] trials: the
# workers optimize at the same time rather than one after the other.
CONCURRENT_WORKER = """
import os, sys, time
from pathlib import Path
import optuna
from tuner.storage import open_storage

study_dir, name, ready_dir, n_workers, n_trials = sys.argv[1:6]
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name=name, storage=open_storage("journal", Path(study_dir)))
(Path(ready_dir) / str(os.getpid())).touch()
deadline = time.monotonic() + 30
while len(list(Path(ready_dir).iterdir())) < int(n_workers) and time.monotonic() < deadline:
    time.sleep(0.05)
study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0), n_trials=int(n_trials))
"""


def _storage_url(kind: str) -> str:
    """The open_storage argument for a test parameter."""
    return postgres_url() if kind == "postgres" else kind


def _study_name() -> str:
    """A study name no earlier run used: a PostgreSQL database outlives the test."""
    return f"spectune-test-{uuid.uuid4().hex[:12]}"


def _delete_postgres_study(url: str, name: str) -> None:
    """Delete the study `name` if the test got as far as making it; nothing else in the database is touched."""
    storage = open_storage(url, Path("unused"))
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:
        pass  # the test failed before creating it
    finally:
        storage.engine.dispose()


def _python(script: Path, *args: object) -> list[str]:
    """The command running `script` with `args`."""
    return [sys.executable, str(script), *map(str, args)]


def _env() -> dict[str, str]:
    """The test's environment with the repository importable, installed or not."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _objective(trial: optuna.Trial) -> float:
    """A toy objective: the value is the parameter."""
    return trial.suggest_float("x", 0.0, 1.0)


def _values(study: optuna.Study) -> dict[int, float | None]:
    """Trial number -> value."""
    return {t.number: t.value for t in study.get_trials()}


@pytest.mark.parametrize("kind, file_name", [("sqlite", SQLITE_FILE), (None, SQLITE_FILE), ("journal", JOURNAL_FILE)])
def test_file_storage_is_made_under_study_dir_and_keeps_trials(tmp_path, kind, file_name):
    study_dir = tmp_path / "not" / "yet"
    storage = open_storage(kind, study_dir)
    assert (study_dir / file_name).is_file()
    study = optuna.create_study(study_name="toy", storage=storage)
    study.optimize(_objective, n_trials=3)
    assert describe_storage(kind, study_dir) == str((study_dir / file_name).absolute())

    reopened = optuna.load_study(study_name="toy", storage=open_storage(kind, study_dir))
    assert _values(reopened) == _values(study)
    assert [t.state for t in reopened.get_trials()] == [TrialState.COMPLETE] * 3


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_killed_worker_trial_is_failed_and_retried_by_heartbeat(tmp_path, kind):
    url = _storage_url(kind)
    name = _study_name()
    try:
        _kill_and_resume(tmp_path, url, name, journal=kind == "journal")
    finally:
        if kind == "postgres":
            _delete_postgres_study(url, name)


def _kill_and_resume(tmp_path: Path, url: str, name: str, *, journal: bool) -> None:
    """Two trials done, the worker SIGKILLed inside the third, then a second worker resumes the study."""
    study_dir = tmp_path / "study"
    storage = open_storage(url, study_dir)
    optuna.create_study(study_name=name, storage=storage)
    script = tmp_path / "worker.py"
    script.write_text(RESUME_WORKER)
    marker = tmp_path / "trial-2-started"
    log = tmp_path / "hang.log"

    with log.open("wb") as out:
        proc = subprocess.Popen(
            _python(script, url, study_dir, name, marker, "hang", 3), env=_env(), stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"worker never reached trial 2 (exit {proc.poll()}): {log.read_text()[-3000:]}"
        before_kill = optuna.load_study(study_name=name, storage=storage).get_trials()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    assert [t.state for t in before_kill] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING]

    resumed = subprocess.run(
        _python(script, url, study_dir, name, marker, "resume", 3),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    fresh = open_storage(url, study_dir)
    trials = optuna.load_study(study_name=name, storage=fresh).get_trials()
    if isinstance(fresh, optuna.storages.RDBStorage):
        fresh.engine.dispose()
    assert [(t.number, t.value) for t in trials[:2]] == [(t.number, t.value) for t in before_kill[:2]]
    assert len(trials) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retried_from = RetryCallback.retried_trial_number(trials[3])
    if journal:
        # optuna 5.0's JournalStorage has no heartbeat (tuner/storage.py): the killed trial stays RUNNING for good
        # and the resumed run asks a fresh trial instead of retrying it.
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.RUNNING, TrialState.COMPLETE]
        assert retried_from is None
    else:
        assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.FAIL, TrialState.COMPLETE]
        assert retried_from == 2
        assert trials[3].params == trials[2].params


def test_two_processes_share_one_journal(tmp_path):
    study_dir = tmp_path / "study"
    optuna.create_study(study_name="shared", storage=open_storage("journal", study_dir))
    script = tmp_path / "worker.py"
    script.write_text(CONCURRENT_WORKER)
    ready = tmp_path / "ready"
    ready.mkdir()
    n_workers, n_trials = 2, 6

    procs = [
        subprocess.Popen(
            _python(script, study_dir, "shared", ready, n_workers, n_trials),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n_workers)
    ]
    try:
        errors = [proc.communicate(timeout=WAIT_S)[1] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=WAIT_S)
    assert [proc.returncode for proc in procs] == [0] * n_workers, errors

    trials = optuna.load_study(study_name="shared", storage=open_storage("journal", study_dir)).get_trials()
    assert sorted(t.number for t in trials) == list(range(n_workers * n_trials))
    assert len({t._trial_id for t in trials}) == n_workers * n_trials
    assert all(t.state == TrialState.COMPLETE for t in trials)


def test_postgres_storage_keeps_trials(tmp_path):
    url = postgres_url()
    name = _study_name()
    try:
        storage = open_storage(url, tmp_path)
        study = optuna.create_study(study_name=name, storage=storage)
        study.optimize(_objective, n_trials=3)
        storage.engine.dispose()

        fresh = open_storage(url, tmp_path)
        reopened = optuna.load_study(study_name=name, storage=fresh)
        fresh.engine.dispose()
        assert _values(reopened) == _values(study)
        assert [t.state for t in reopened.get_trials()] == [TrialState.COMPLETE] * 3
        assert not any(tmp_path.iterdir()), "an RDB URL must not write under study_dir"
    finally:
        _delete_postgres_study(url, name)


def _unused_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_postgres_is_one_line_naming_the_masked_url(tmp_path):
    port = _unused_port()
    url = f"postgresql://spectune:hunter2secret@127.0.0.1:{port}/nodb"
    with pytest.raises(ValueError) as caught:
        open_storage(url, tmp_path)
    message = str(caught.value)
    assert f"postgresql://spectune:***@127.0.0.1:{port}/nodb" in message
    assert "refused" in message.lower()  # the driver's reason
    assert "hunter2secret" not in message
    assert "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__context__ is None, "no SQLAlchemy traceback chained"
    assert describe_storage(url, tmp_path) == f"postgresql://spectune:***@127.0.0.1:{port}/nodb"


@pytest.mark.parametrize("url", ["nonsense", "postgres", "", "sqlite.db"])
def test_unknown_storage_names_the_allowed_forms(tmp_path, url):
    for call in (open_storage, describe_storage):
        with pytest.raises(ValueError, match=r'"sqlite".*"journal".*URL') as caught:
            call(url, tmp_path)
        assert "\n" not in str(caught.value)
    assert not any(tmp_path.iterdir())


def test_bad_database_urls_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match=r"^cannot open study storage nosuchdb://u:\*\*\*@h/d: ") as caught:
        open_storage("nosuchdb://u:pw@h/d", tmp_path)
    assert "\n" not in str(caught.value)

    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(
        ValueError, match=rf"^cannot open study storage {re.escape(f'sqlite:///{missing}')}: .+"
    ) as caught:
        open_storage(f"sqlite:///{missing}", tmp_path)
    assert "\n" not in str(caught.value)
