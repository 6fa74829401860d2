"""Several machines, really: two `python -m tuner.search` workers with separate run roots on one PostgreSQL study.

The second worker runs in its own UTS namespace under another host name, so to the first it is another machine:
its process cannot be seen, only its heartbeat. The first records OFF and holds in its first candidate; the
second gets the recording from the study's storage (its run root never saw trial 0), draws a candidate and is
SIGKILLed in the middle of it; the first worker's heartbeat check
fails that trial and the study still spends its whole budget and is finished once, with one best/.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import IN_CI
from tests.tuner.conftest import PROJECT, SMALL, postgres_url
from tuner import study as studies
from tuner.storage import open_storage

WAIT_S = 600  # bounds far above what the workers take: reached only when something is broken
TRIALS = 3
OTHER_HOST = "spectune-worker-b"

# The real entry point; while FLAG exists, a candidate this process draws touches MARKER and waits (its heartbeat
# going on): the test kills the process there, or removes FLAG to let it go on.
WRAPPER = """
import os, time
import tuner.objective as objective
flag, marker = os.environ.get("FLAG"), os.environ.get("MARKER")
original = objective.suggest

def suggest(trial, space, base):
    config = original(trial, space, base)
    if flag and os.path.exists(flag):
        open(marker, "w").close()
        while os.path.exists(flag):
            time.sleep(0.1)
    return config

objective.suggest = suggest
from tuner.search import main
main()
"""


def _other_host_prefix() -> list[str]:
    """`unshare --uts` and a host name of its own: another machine as far as the study's trials can tell."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        reason = "a UTS namespace (another host name) needs root and unshare"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return [unshare, "--uts", "sh", "-c", f'hostname {OTHER_HOST} && exec "$@"', "sh"]


def _start(tmp_path: Path, root: Path, url: str, name: str, *, prefix=(), flag: Path | None = None):
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    if flag is not None:
        env |= {"FLAG": str(flag), "MARKER": str(flag.with_suffix(".hanging"))}
    args = [
        *SMALL,
        f"run.root={root}",
        f"study.name={name}",
        f"study.storage={url}",
        "study.heartbeat_interval=1",  # a killed worker's trial goes stale after 2 s
        f"tuner.trials={TRIALS}",
        "study.pruner=none",
    ]
    return subprocess.Popen(
        [*prefix, sys.executable, str(script), *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill reaches every child
    )


def _until(condition, procs, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        for proc in procs:
            assert proc.poll() is None, f"{what}: a worker exited early:\n{proc.communicate()[0]}"
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.1)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_two_workers_with_their_own_run_roots_and_one_killed_finish_the_budget_once(tmp_path):
    url = postgres_url()
    prefix = _other_host_prefix()
    name = f"spectune-workers-{uuid.uuid4().hex[:12]}"
    root_a, root_b = tmp_path / "machine-a" / "runs", tmp_path / "machine-b" / "runs"
    flag = tmp_path / "b.flag"
    storage = open_storage(url, tmp_path / "unused")

    def trials():
        try:
            return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        except KeyError:
            return []

    hold_a = tmp_path / "a.flag"
    hold_a.touch()
    a = _start(tmp_path, root_a, url, name, flag=hold_a)
    b = None
    final: list = []
    try:
        # A records OFF and holds in its first candidate, so that B surely draws one while A still has work
        _until(hold_a.with_suffix(".hanging").exists, [a], "A's first candidate")
        flag.touch()
        b = _start(tmp_path, root_b, url, name, prefix=prefix, flag=flag)
        _until(flag.with_suffix(".hanging").exists, [a, b], "B's first candidate")
        _kill(b)
        flag.unlink()
        hold_a.unlink()
        out, _ = a.communicate(timeout=WAIT_S)
        assert a.returncode == 0, out
        final = trials()
    finally:
        for proc in (a, b):
            if proc is not None:
                _kill(proc)
        try:
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass
        storage.engine.dispose()

    hosts = {t.number: t.user_attrs.get("host") for t in final}
    killed = [t for t in final if hosts[t.number] == OTHER_HOST and studies.role(t) == "candidate"]
    assert len(killed) == 1 and killed[0].state == TrialState.FAIL, out  # failed by the heartbeat, not left RUNNING
    assert not [t for t in final if t.state == TrialState.RUNNING]
    assert sum(studies.counts_toward_budget(t) for t in final) == TRIALS, out  # the whole budget, B's trial aside
    assert (root_b / name / "baseline.json").is_file()  # B got the recording through the storage
    assert not (root_b / name / "trials" / "0000").exists()  # ... without having recorded it
    assert (root_a / name / "best" / "README.md").is_file(), out
    assert not (root_b / name / "best").exists()  # finished once: one best/
