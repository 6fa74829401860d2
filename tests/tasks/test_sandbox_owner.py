"""What a sandbox runs dies with the process that owns the sandbox, at once, even when that process is SIGKILLed.

Not at the next sandbox's reaping (tasks/sandbox/owner.py, the second line): a child Python process makes a
sandbox and waits, the test SIGKILLs it and, making no sandbox itself, sees what the child ran end within seconds.
Docker: the container goes (the watchdog of tasks/sandbox/docker.py: the dead runner's attached stdin closes, the
container's main process reads end of file, the container stops and `auto_remove` removes it with its volume).
Local: a command's processes go (`setpriv --pdeathsig KILL` on the command's namespace). Docker without a daemon
or image skips, or fails under CI=true. Bounded by short deadlines; only the child's own container and processes
are touched; no network.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.sandbox.owner import reap_stale_dirs
from tests.conftest import sandbox_factory_or_skip

ROOT = Path(__file__).resolve().parents[2]
START_S = 60.0  # the child's imports and its sandbox's start, on a busy 2-core machine
GONE_S = 5.0  # what the owner's death may take to reach what it ran

DOCKER_CHILD = """
import sys, time
from tasks.sandbox.docker import DockerSandbox
box = DockerSandbox()
box.start(sys.argv[1])
assert box.run("echo ok", timeout=30).output == "ok\\n"
print(box.container.id, flush=True)
time.sleep(600)
"""

LOCAL_CHILD = """
import sys
from tasks.sandbox.local import LocalSandbox
box = LocalSandbox(base_dir=sys.argv[2], use_cgroup=False)
box.start(sys.argv[1])
print(box.isolation, flush=True)
box.run(f"sleep {sys.argv[3]}", timeout=600)
"""


def _spawn(program: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", program, *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen[str], seconds: float) -> str:
    """The child's first line of output, or fail with its stderr."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if sel.select(seconds):
            line = proc.stdout.readline().strip()
            if line:
                return line
    proc.kill()
    _, err = proc.communicate(timeout=30)
    pytest.fail(f"the child made no sandbox within {seconds:.0f} s: {err[-3000:]}")


def _sigkill(proc: subprocess.Popen[str]) -> float:
    """SIGKILL the child, reap it; when it was dead (monotonic seconds)."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return time.monotonic()


def test_a_docker_container_dies_with_its_sigkilled_owner(tmp_path: Path) -> None:
    sandbox_factory_or_skip("docker")
    import docker
    import docker.errors

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    client = docker.from_env(timeout=30)
    proc = _spawn(DOCKER_CHILD, str(workspace))
    container_id = None
    try:
        container_id = _first_line(proc, START_S)
        container = client.containers.get(container_id)
        assert container.status == "running"
        volume = next(m["Name"] for m in container.attrs["Mounts"] if m["Destination"] == "/workspace")
        killed = _sigkill(proc)
        gone_after = None
        while time.monotonic() - killed < GONE_S:
            try:
                client.containers.get(container_id)
            except docker.errors.NotFound:
                gone_after = time.monotonic() - killed
                break
            time.sleep(0.02)
        assert gone_after is not None, f"the container still exists {GONE_S} s after its owner was SIGKILLed"
        deadline = time.monotonic() + GONE_S  # its workspace volume goes with it
        while time.monotonic() < deadline and volume in {v.name for v in client.volumes.list()}:
            time.sleep(0.05)
        assert volume not in {v.name for v in client.volumes.list()}, "the workspace volume outlived the container"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        if container_id:
            try:
                client.containers.get(container_id).remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
        client.close()


def _pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_a_local_command_dies_with_its_sigkilled_owner(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    marker = f"1000.{random.randrange(10**8, 10**9)}"  # a `sleep` argument no other process has
    proc = _spawn(LOCAL_CHILD, str(workspace), str(tmp_path), marker)
    try:
        isolation = _first_line(proc, START_S)
        if isolation == "none":
            pytest.skip("no namespaces here: a command's processes outlive their runner (see LocalSandbox.warnings)")
        deadline = time.monotonic() + 30
        while not _pids(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pids(f"sleep {marker}"), "the command did not start"
        killed = _sigkill(proc)
        while _pids(f"sleep {marker}") and time.monotonic() - killed < GONE_S:
            time.sleep(0.02)
        assert _pids(f"sleep {marker}") == [], f"the command still runs {GONE_S} s after its owner was SIGKILLed"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
        reap_stale_dirs(tmp_path)  # the dead child's folder (and workspace tmpfs), as the next sandbox would
