"""LocalSandbox: isolation, limits, output capping, determinism, diff and cleanup.

Every test is bounded (short timeouts, a capped fork loop, never an unbounded fork bomb), touches
the host only under pytest's tmp_path and a few randomly named paths it checks and removes, and
contacts no address but 127.0.0.1. Tests of a protection that needs namespaces are skipped where
the sandbox reports it cannot make them (not root and no user namespaces).
"""

from __future__ import annotations

import os
import random
import shlex
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from tasks.sandbox import SandboxError, make_sandbox
from tasks.sandbox.base import DEFAULT_OUTPUT_LIMIT, WORKSPACE
from tasks.sandbox.limits import OutputCapture, elision_marker
from tasks.sandbox.local import LocalSandbox
from tasks.sandbox.workspace import command_env, normalize_output
from tests.conftest import WORKSPACE_ATTRIBUTE_IDS, WORKSPACE_ATTRIBUTES, diff_sections


def _marker() -> str:
    """A number no other process on the machine has in its command line."""
    return f"{random.randrange(10**8, 10**9)}"


def _host_pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _wait_gone(pattern: str, seconds: float = 2.0) -> list[int]:
    end = time.monotonic() + seconds
    while (pids := _host_pids(pattern)) and time.monotonic() < end:
        time.sleep(0.05)
    return pids


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    (src / "test_tiny.py").write_text(
        "def test_ok():\n    print(hash('spectune'))\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert [1, 2] == [1, 3]\n"
    )
    return src


@pytest.fixture
def sandbox(source: Path):
    with LocalSandbox() as sb:
        sb.start(source)
        yield sb


def _need_isolation(sb: LocalSandbox) -> None:
    if not sb.network_isolated:
        pytest.skip(f"namespaces unavailable here: {sb.warnings}")


# -- basics ---------------------------------------------------------------------------------------


def test_echo_exit_code_and_cwd(sandbox: LocalSandbox) -> None:
    r = sandbox.run("echo hello; echo oops >&2; pwd; exit 3", timeout=10)
    assert r.returncode == 3 and not r.ok and not r.timed_out and not r.truncated
    expected_cwd = WORKSPACE if sandbox.isolation != "none" else str(sandbox.host_path)
    assert r.output == f"hello\noops\n{expected_cwd}\n"
    assert sandbox.run("true").ok


def test_diff_shows_changed_and_new_files(sandbox: LocalSandbox) -> None:
    assert sandbox.diff() == ""
    r = sandbox.run("echo more >> a.txt && echo new > b.txt && mkdir d && echo deep > d/c.txt", timeout=10)
    assert r.ok, r.output
    diff = sandbox.diff()
    assert "diff --git a/a.txt b/a.txt" in diff and "+more" in diff
    assert "diff --git a/b.txt b/b.txt\nnew file mode 100644" in diff and "+new" in diff
    assert "b/d/c.txt" in diff and "+deep" in diff
    assert ".git" not in diff.replace("diff --git", "")
    assert sandbox.diff() == diff  # deterministic, and add -A twice changes nothing


def test_diff_survives_the_command_rewriting_its_git(sandbox: LocalSandbox) -> None:
    # the workspace has its own clean repository at the same deterministic baseline commit ...
    r = sandbox.run("git rev-parse HEAD && git status --porcelain", timeout=20)
    assert r.ok and r.output == sandbox._baseline + "\n", r.output
    # ... but the baseline lives outside it: commits, resets or a deleted .git inside do not move it
    r = sandbox.run("echo x >> a.txt && git add -A && git commit -qm mine && rm -rf .git", timeout=20)
    assert r.ok, r.output
    assert "+x" in sandbox.diff()


@pytest.mark.parametrize("attributes", WORKSPACE_ATTRIBUTES, ids=WORKSPACE_ATTRIBUTE_IDS)
def test_diff_ignores_the_workspaces_gitattributes(source: Path, attributes: str) -> None:
    (source / "mod.py").write_text("def f():\n    return 1\n")
    (source / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    with LocalSandbox() as sb:
        sb.start(source)
        edit = "printf '    return 2  # $Id$\\n' >> mod.py && printf 'c\\r\\n' >> crlf.txt && printf 'x\\0y' > blob.bin"
        assert sb.run(edit, timeout=10).ok
        plain = diff_sections(sb.diff())
        assert sb.run(f"printf %s {shlex.quote(attributes)} > .gitattributes", timeout=10).ok
        diff = sb.diff()
    sections = diff_sections(diff)
    assert "+" + attributes.splitlines()[0] + "\n" in sections[".gitattributes"]
    assert "GIT binary patch" not in sections["mod.py"] and "+    return 2  # $Id$\n" in sections["mod.py"]
    assert " a\r\n b\r\n+c\r\n" in sections["crlf.txt"]  # no line-end conversion
    assert "GIT binary patch" in sections["blob.bin"]  # a real binary file still is one
    assert {name: sections[name] for name in plain} == plain  # byte for byte as without the attributes


def test_close_removes_everything_and_is_idempotent(source: Path) -> None:
    sb = LocalSandbox()
    sb.start(source)
    assert sb.run("echo hi > new.txt").ok
    host = sb.host_path
    assert host is not None and host.is_dir()
    cgroup = sb._res.cgroup.parent if sb._res.cgroup else None
    sb.close()
    sb.close()
    assert not host.exists() and not host.parent.exists()
    assert cgroup is None or not cgroup.exists()
    with pytest.raises(SandboxError):
        sb.run("true")


def test_registry() -> None:
    sb = make_sandbox("local", max_processes=32)
    try:
        assert isinstance(sb, LocalSandbox) and sb.limits.max_processes == 32
    finally:
        sb.close()
    with pytest.raises(ValueError, match="docker, local"):
        make_sandbox("nope")


# -- process control ------------------------------------------------------------------------------


def test_timeout_kills_setsid_grandchild(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    marker = f"1000.{_marker()}"
    cmd = f"setsid bash -c 'echo $$ > {WORKSPACE}/grandchild.pid; exec sleep {marker}' & sleep {marker}"
    t0 = time.monotonic()
    r = sandbox.run(cmd, timeout=2)
    assert r.timed_out and r.returncode is None and not r.ok
    assert time.monotonic() - t0 < 8
    assert sandbox.host_path is not None and (sandbox.host_path / "grandchild.pid").read_text().strip()
    assert _wait_gone(f"sleep {marker}") == []


def test_command_end_kills_background_processes(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    marker = f"1000.{_marker()}"
    t0 = time.monotonic()
    r = sandbox.run(f"(setsid sleep {marker} &) ; echo started", timeout=20)
    assert r.ok and r.output == "started\n" and time.monotonic() - t0 < 5
    assert _wait_gone(f"sleep {marker}") == []


def test_fork_loop_is_capped(source: Path) -> None:
    limit = 64
    with LocalSandbox(max_processes=limit) as sb:
        _need_isolation(sb)
        sb.start(source)
        marker = f"30.{_marker()}"
        # 2000 is the bound of this loop: it is not a fork bomb, each child just sleeps
        cmd = (
            f"for i in $(seq 2000); do (echo x >> {WORKSPACE}/started; exec sleep {marker}) & done; wait; echo finished"
        )
        t0 = time.monotonic()
        r = sb.run(cmd, timeout=5)
        elapsed = time.monotonic() - t0
        assert r.timed_out or r.returncode != 0 or "finished" not in r.output
        assert elapsed < 15
        assert sb.host_path is not None
        started = (sb.host_path / "started").read_text().count("x")
        assert 0 < started <= limit
        assert "Resource temporarily unavailable" in r.output
        assert _wait_gone(f"sleep {marker}") == []


def test_output_flood_is_capped_in_memory(sandbox: LocalSandbox) -> None:
    tracemalloc.start()
    try:
        r = sandbox.run("head -c 100000000 /dev/zero | tr '\\0' 'a'", timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.ok and r.truncated
    elided = 100_000_000 - DEFAULT_OUTPUT_LIMIT
    marker = elision_marker(elided).decode()
    assert len(r.output) <= DEFAULT_OUTPUT_LIMIT + len(marker)
    assert r.output == "a" * (DEFAULT_OUTPUT_LIMIT // 2) + marker + "a" * (DEFAULT_OUTPUT_LIMIT // 2)
    assert peak < 8 * 1024 * 1024, f"peak Python memory {peak} bytes while capturing"


def test_output_capture_keeps_head_and_tail() -> None:
    cap = OutputCapture(10)
    for chunk in (b"0123", b"456789ab", b"cdefghij", b"KLMNO"):
        cap.feed(chunk)
    out, truncated = cap.result()
    assert truncated and out == b"01234" + elision_marker(15) + b"KLMNO"
    small = OutputCapture(10)
    small.feed(b"abc")
    assert small.result() == (b"abc", False)


# -- isolation ------------------------------------------------------------------------------------


def test_writes_outside_workspace_do_not_reach_host(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    name = f"spectune-escape-{_marker()}"
    targets = [
        f"/tmp/{name}",
        f"/root/{name}",
        f"/var/tmp/{name}",
        f"/dev/shm/{name}",
        f"/etc/{name}",
        f"/{name}",
        f"{Path.cwd()}/{name}",
    ]
    if os.path.isdir("/run/lock"):
        targets.append(f"/run/lock/{name}")
    cmd = "; ".join(f"echo leak > {t}" for t in targets) + f"; cat /tmp/{name}"
    try:
        r = sandbox.run(cmd, timeout=10)
        assert "leak" in r.output  # /tmp is writable inside: a private tmpfs
        leaked = [t for t in targets if os.path.lexists(t)]
        assert leaked == []
        r2 = sandbox.run(f"cat /tmp/{name}", timeout=10)  # fresh /tmp for every command
        assert r2.returncode != 0
    finally:
        for t in targets:
            if os.path.lexists(t):
                os.remove(t)


def test_runs_unprivileged_and_project_hidden(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    if sandbox.isolation != "namespaces":
        pytest.skip("needs root to switch users")
    r = sandbox.run(
        "id -u; cat /proc/self/status | grep CapEff; ls -A /work/main 2>&1 | head -3; touch /usr/x", timeout=10
    )
    lines = r.output.splitlines()
    assert lines[0] == str(sandbox.uid) and lines[1].split()[1] == "0000000000000000"
    assert "pyproject.toml" not in r.output
    assert "Read-only file system" in r.output or "Permission denied" in r.output


def test_parent_secret_is_not_visible(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"secret-value-{_marker()}"
    monkeypatch.setenv("SPECTUNE_TEST_SECRET", secret)
    r = sandbox.run("env; echo ${SPECTUNE_TEST_SECRET:-unset}", timeout=10)
    assert r.ok and secret not in r.output and "SPECTUNE_TEST_SECRET" not in r.output
    names = {line.split("=", 1)[0] for line in r.output.splitlines() if "=" in line}
    assert names <= set(command_env()) | {"PWD", "SHLVL", "_", "OLDPWD"}


def test_host_loopback_is_unreachable(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')"
        r = sandbox.run(f'python -c "{code}"', timeout=20)
        assert r.returncode != 0 and "CONNECTED" not in r.output
        assert "Error" in r.output
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_private_loopback_works_inside(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)  # bwrap brings the namespace's loopback up
    code = (
        "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
        "c = socket.create_connection(s.getsockname(), timeout=2); print('LOOPBACK OK')"
    )
    r = sandbox.run(f'python -c "{code}"', timeout=20)
    assert r.ok and "LOOPBACK OK" in r.output, r.output


# -- determinism and the interpreter --------------------------------------------------------------


def test_pytest_output_is_deterministic(sandbox: LocalSandbox) -> None:
    _need_isolation(sandbox)
    cmd = "python -m pytest -s test_tiny.py"
    first = sandbox.run(cmd, timeout=60)
    second = sandbox.run(cmd, timeout=60)
    assert first.returncode == 1, first.output
    assert first.output == second.output
    assert f"rootdir: {WORKSPACE}" in first.output
    assert str(sandbox.host_path) not in first.output and "spectune-local-" not in first.output
    assert first.output.rstrip().endswith("=== 1 failed, 1 passed ===")
    quiet = sandbox.run("python -m pytest -q test_tiny.py", timeout=60)
    assert quiet.output.rstrip().endswith("\n1 failed, 1 passed")


def test_normalize_output_strips_pytest_timing() -> None:
    cases = {
        "===== 3 passed in 0.12s =====": "=== 3 passed ===",
        "==== 1 failed, 2 passed, 1 warning in 12.50s ====": "=== 1 failed, 2 passed, 1 warning ===",
        "=== 2 errors in 75.02s (0:01:15) ===": "=== 2 errors ===",
        "3 passed in 0.12s": "3 passed",
        "no tests ran in 0.01s": "no tests ran",
        "=== 1 passed, 2 deselected in 0.5s ===": "=== 1 passed, 2 deselected ===",
        "my log: 3 passed in 0.12s": "my log: 3 passed in 0.12s",  # not a summary line
    }
    for raw, want in cases.items():
        assert normalize_output(f"x\n{raw}\ny") == f"x\n{want}\ny"


def test_python_is_the_task_environment_without_spectunes_packages(sandbox: LocalSandbox, source: Path) -> None:
    from tasks.sandbox.task_python import task_python

    probe = (
        "import importlib.util as u, os, sys; print(os.environ['PYTHONHASHSEED']); print(sys.prefix); "
        "print([m for m in ('hydra', 'anyio', 'torch', 'spectune') if u.find_spec(m)])"
    )
    r = sandbox.run(f'python -c "{probe}"; python -m pytest --version', timeout=60)
    assert r.ok, r.output
    lines = r.output.splitlines()
    assert lines[0] == "0" and lines[1] == str(task_python().root) and lines[2] == "[]", r.output
    assert "pytest" in r.output


def test_python_env_runner_is_the_runners_own_environment(source: Path) -> None:
    # a runner's venv below /tmp works too: it is bound read-only into each command's private /tmp
    with LocalSandbox(python_env="runner") as runner:  # the opt-in: the runner's own environment
        runner.start(source)
        r = runner.run("python -c 'import sys; print(sys.prefix)'", timeout=60)
        assert r.ok and r.output.strip() == sys.prefix, r.output


# -- fallback --------------------------------------------------------------------------------------


def test_fallback_reports_missing_protections(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with LocalSandbox(isolation="none") as sb:
        assert sb.isolation == "none" and not sb.network_isolated
        assert sb.warnings and any("network is NOT isolated" in w for w in sb.warnings)
        sb.start(source)
        r = sb.run("echo hi; pwd", timeout=10)
        assert r.ok and r.output == f"hi\n{sb.host_path}\n"
        marker = f"1000.{_marker()}"
        t0 = time.monotonic()
        r = sb.run(f"sleep {marker} & echo bg", timeout=20)  # leftovers die when the command ends
        assert r.ok and time.monotonic() - t0 < 5
        assert _wait_gone(f"sleep {marker}") == []
        r = sb.run(f"sleep {marker}", timeout=1)
        assert r.timed_out and r.returncode is None
        assert _wait_gone(f"sleep {marker}") == []


def test_ci_requires_network_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(SandboxError, match="network isolation"):
        LocalSandbox(isolation="none")
