"""The real runner killed while a sandboxed command runs: nothing of it outlives it.

`runners.run` with the bundled model (its agent runs the project's tests in the sandbox within a few
turns) is signalled the moment one of its sandboxed commands is alive. SIGKILL: every process the
runner had started dies with it, and the next process that makes a sandbox removes its temp folders,
cgroups and containers. SIGTERM: the task in flight finishes, a valid partial summary is written,
and nothing is left even before any reaping. Bounded by timeouts; only this test's processes and
the leftovers carrying its runner's owner token are touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tasks.sandbox.owner import OWNER_FILE
from tests.conftest import sandbox_factory_or_skip

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 300  # imports, model loading and the first turns, on a busy 2-core machine


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    """The pids that still run (zombies count as gone)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _start(tmp: Path, sandbox: str) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "runners.run", "task.split=dev", "task.limit=2", f"sandbox={sandbox}",
        f"run.root={tmp}", "run.name=killed", "run.progress=false", "run.warmup=false", "tracking.enabled=false",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_a_command(proc: subprocess.Popen, sandbox: str) -> set[int]:
    """Block until a sandboxed command of `proc` runs; returns the runner's descendants at that moment."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the runner ended before a command ran: {proc.communicate()[1][-3000:]}")
        tree = _descendants(proc.pid)
        if sandbox == "local":
            names = set()
            for pid in tree:
                try:
                    names.add(Path(f"/proc/{pid}/comm").read_text().strip())
                except OSError:
                    pass
            if "unshare" in names:
                return tree
        elif _busy_containers(f"{proc.pid}."):
            return tree
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"no sandboxed command within {START_TIMEOUT} s")


def _busy_containers(token: str) -> list[str]:
    """Containers of the runner with `token` in which a command (more than init and sleep) runs."""
    import docker

    client = docker.from_env()
    try:
        busy = []
        for c in client.containers.list(filters={"label": "org.spectune.owner"}):
            if c.labels["org.spectune.owner"].split(":", 1)[1].startswith(token) and len(c.top()["Processes"]) > 2:
                busy.append(c.name)
        return busy
    except docker.errors.DockerException:
        return []
    finally:
        client.close()


def _leftovers(token: str) -> list[str]:
    temp = [
        str(p)
        for p in Path(tempfile.gettempdir()).glob("spectune-*")
        if (p / OWNER_FILE).is_file() and (p / OWNER_FILE).read_text().startswith(token)
    ]
    cgroups = [str(p) for base in Path("/sys/fs/cgroup").glob("*") for p in base.rglob(f"spectune-{token}*")]
    return temp + cgroups


def _containers(token: str) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        listed = client.containers.list(all=True, filters={"label": "org.spectune.owner"})
        return [c.name for c in listed if c.labels["org.spectune.owner"].split(":", 1)[1].startswith(token)]
    finally:
        client.close()


@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_sigkill_while_a_command_runs_leaves_nothing(sandbox, tmp_path):
    sandbox_factory_or_skip(sandbox)
    proc = _start(tmp_path, sandbox)
    try:
        tree = _wait_for_a_command(proc, sandbox)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    deadline = time.monotonic() + 10
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(tree) == set(), "processes the runner started outlived it"
    token = f"{proc.pid}."
    reap = f"from tasks.sandbox import make_sandbox; make_sandbox({sandbox!r}).close()"
    subprocess.run([sys.executable, "-c", reap], cwd=ROOT, check=True, timeout=120)
    assert _leftovers(token) == []
    if sandbox == "docker":
        assert _containers(token) == []


def test_sigterm_while_a_command_runs_writes_a_partial_summary_and_leaves_nothing(tmp_path):
    proc = _start(tmp_path, "local")
    try:
        _wait_for_a_command(proc, "local")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert proc.returncode == 128 + signal.SIGTERM and summary["partial"] is True, err[-3000:]
    assert summary["interrupted"] == "SIGTERM" and summary["baseline"]["tasks"] >= 1
    assert _leftovers(f"{proc.pid}.") == []  # a graceful stop cleans up by itself
