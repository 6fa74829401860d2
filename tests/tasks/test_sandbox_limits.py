"""Total limits per task and what a dead runner leaves behind, in both sandboxes.

Memory and disk tests run only inside the sandbox, as its unprivileged user, with small limits the
test sets; the fork-free memory hog allocates 200 MiB against a 64 MiB cap. Sockets are unix
sockets this test creates and removes. Every command has a timeout.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tasks.evaluation import evaluate
from tasks.sandbox import make_sandbox
from tasks.sandbox.base import PatchTooLargeError
from tasks.sandbox.owner import OWNER_FILE
from tasks.suites import load_suite
from tasks.swelite.projects import materialize
from tests.conftest import SANDBOX_KINDS, sandbox_factory_or_skip

ALLOCATE = "python -c 'x = bytearray(200 * 2**20); print(len(x))'"


def _limits(kind: str, memory: str, workspace: str) -> dict:
    return {"memory": memory, "workspace_size": workspace}  # the same option names and units in both


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_memory_of_the_whole_command_is_capped(kind, source):
    factory = sandbox_factory_or_skip(kind, **_limits(kind, "64m", "64m"))
    sb = factory()
    try:
        sb.start(source)
        r = sb.run(ALLOCATE, timeout=60)
        assert not r.ok and "209715200" not in r.output, r.output  # OOM-killed (or MemoryError), never allocated
        assert sb.run("echo alive", timeout=20).output == "alive\n"  # the sandbox survives its command
    finally:
        sb.close()
    # the control: the same allocation under the default limits
    sb = sandbox_factory_or_skip(kind)()
    try:
        sb.start(source)
        r = sb.run(ALLOCATE, timeout=60)
        assert r.ok and r.output.strip() == "209715200", r.output
    finally:
        sb.close()


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_workspace_cannot_grow_past_its_size(kind, source):
    sb = sandbox_factory_or_skip(kind, **_limits(kind, "256m", "16m"))()
    try:
        sb.start(source)
        r = sb.run("for i in 1 2 3 4; do head -c 8000000 /dev/zero > big$i || exit 7; done", timeout=60)
        assert r.returncode == 7 and "No space left on device" in r.output, r.output
        used = sb.run("du -sk . | cut -f1", timeout=20).output.strip()
        assert int(used) <= 17 * 1024, used
    finally:
        sb.close()


def test_host_service_sockets_under_run_are_hidden(tmp_path):
    path = Path(f"/run/spectune-test-{random.randrange(10**8, 10**9)}.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(1)
        os.chmod(path, 0o777)
        sb = make_sandbox("local")
        try:
            sb.start(tmp_path)
            if sb.isolation != "namespaces":
                pytest.skip("needs the mount namespace")
            probe = f"python -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{path}\")'"
            r = sb.run(f"ls /run; {probe}", timeout=20)
            assert not r.ok and path.name not in r.output.split("\n")[0] and "FileNotFoundError" in r.output, r.output
        finally:
            sb.close()
    finally:
        server.close()
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_a_fix_next_to_a_stray_binary_file_still_resolves(kind, tmp_path):
    factory = sandbox_factory_or_skip(kind)
    inst = load_suite("swe-lite", "dev", None, None, None, "first")[0]
    ws = materialize(inst, tmp_path / "ws")
    sb = factory()
    try:
        sb.start(ws)
        r = sb.run("printf '\\x00\\x01\\xff\\xfe' > blob.bin && head -c 3000 /dev/urandom > noise.dat", timeout=20)
        assert r.ok, r.output
        write = sb.run(f"git apply <<'EOF'\n{inst.patch}EOF", timeout=20)
        assert write.ok, write.output
        patch = sb.diff()
    finally:
        sb.close()
    assert "GIT binary patch" in patch and "blob.bin" in patch
    result = evaluate(inst, patch, materialize, factory, timeout=120)
    assert result.resolved, (result.status, result.message)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_a_diff_over_the_limit_is_refused_not_held(kind, source, monkeypatch):
    factory = sandbox_factory_or_skip(kind)
    module = sys.modules[f"tasks.sandbox.{kind}"]
    monkeypatch.setattr(module, "DIFF_LIMIT", 100_000)
    sb = factory()
    try:
        sb.start(source)
        assert sb.run("head -c 300000 /dev/urandom | base64 > big.txt", timeout=20).ok
        with pytest.raises(PatchTooLargeError, match="100000 bytes"):
            sb.diff()
        assert sb.run("rm big.txt && echo small > b.txt", timeout=20).ok
        assert "+small" in sb.diff()
    finally:
        sb.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tasks.sandbox import make_sandbox
    sb = make_sandbox(sys.argv[1])
    src = Path(sys.argv[2])
    sb.start(src)
    print("started", getattr(sb, "host_path", None), flush=True)
    sb.run("sleep " + sys.argv[3], timeout=120)
    """
)


def _pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_a_runner_killed_with_sigkill_leaves_nothing_after_the_next_start(kind, source):
    sandbox_factory_or_skip(kind)
    marker = f"1000.{random.randrange(10**8, 10**9)}"
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, str(source), marker], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("started")
        deadline = time.monotonic() + 30
        while not _pids(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pids(f"sleep {marker}"), "the sandboxed command never started"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
    token = f"{child.pid}."
    reap = f"from tasks.sandbox import make_sandbox; make_sandbox({kind!r}).close()"

    def gone() -> bool:
        deadline = time.monotonic() + 10
        while _pids(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.05)
        return _pids(f"sleep {marker}") == []

    if kind == "local":  # the namespace's first process dies with its runner (parent-death signal)
        assert gone(), "the sandboxed command outlived its runner"
    # the next process that makes a sandbox reaps what the dead one left (docker: the container,
    # and with it the command)
    subprocess.run([sys.executable, "-c", reap], cwd=root, check=True, timeout=120)
    assert gone(), "the sandboxed command outlived the reaping"
    import tempfile

    left = [
        p
        for p in Path(tempfile.gettempdir()).glob("spectune-*")
        if (p / OWNER_FILE).is_file() and (p / OWNER_FILE).read_text().startswith(token)
    ]
    assert left == []
    cgroups = (
        [
            p
            for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified")
            for p in Path(base).rglob(f"spectune-{token}*")
        ]
        if Path("/sys/fs/cgroup").is_dir()
        else []
    )
    assert cgroups == []
    if kind == "docker":
        import docker

        client = docker.from_env()
        try:
            owners = [
                c.labels["org.spectune.owner"]
                for c in client.containers.list(all=True, filters={"label": "org.spectune.owner"})
            ]
        finally:
            client.close()
        assert [o for o in owners if o.split(":", 1)[1].startswith(token)] == []


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_an_unknown_option_names_the_allowed_ones_before_anything_starts(kind):
    with pytest.raises(ValueError, match=r"unknown .* option\(s\) \['bogus'\]; allowed: .*workspace_size"):
        make_sandbox(kind, bogus=1)
