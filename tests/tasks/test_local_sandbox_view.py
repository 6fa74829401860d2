"""What a local sandbox command sees of the host: only what it is given (tasks/sandbox/local_mounts.py).

The tests plant a world-readable checkout-like folder (a fake `tasks/data/swe-lite/dev.jsonl`) at randomly named
paths under /, /srv, /opt, /home, /mnt and /var/lib (those that exist; root only) and remove exactly those folders
afterwards; every command runs unprivileged with a short timeout. Tests that need the namespaces skip where the
sandbox reports it cannot make them.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

import tasks.sandbox.local as local_module
from tasks.sandbox import SandboxError
from tasks.sandbox.base import WORKSPACE
from tasks.sandbox.local import LocalSandbox
from tasks.sandbox.local_mounts import ETC_GENERATED, ETC_HOST, SYSTEM_DIRS, TMPFS_DIRS, plan_exposed
from tasks.sandbox.task_python import task_python

PLANT_BASES = ("/", "/srv", "/opt", "/home", "/mnt", "/var/lib")
# Host folders that hold nothing a command needs: absent inside, or holding only the way to an exposed path.
PRIVATE_DIRS = ("/home", "/root", "/opt", "/srv", "/mnt", "/media", "/boot", "/sys", "/var/lib", "/var/log", "/work")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (src / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    return src


@pytest.fixture
def sandbox(source: Path):
    with LocalSandbox() as sb:
        if sb.isolation == "none":
            pytest.skip(f"namespaces unavailable here: {sb.warnings}")
        sb.start(source)
        yield sb


@pytest.fixture
def other_clones():
    """World-readable fake checkouts at fresh paths under each existing PLANT_BASES dir; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("planting folders under / needs root")
    number = random.randrange(10**8, 10**9)
    marker, secret = f"spectune-other-clone-{number}", f"GOLD-PATCH-{number}"  # its name, what its data holds
    made: list[Path] = []
    try:
        for base in PLANT_BASES:
            if not os.path.isdir(base) or os.path.islink(base):
                continue
            clone = Path(base) / marker
            data = clone / "tasks" / "data" / "swe-lite"
            data.mkdir(parents=True)
            made.append(clone)
            (data / "dev.jsonl").write_text(f'{{"gold_patch": "{secret}"}}\n')
            for p in (clone, *clone.rglob("*")):
                p.chmod(0o755 if p.is_dir() else 0o644)
        yield marker, secret, made
    finally:
        for clone in made:  # only what this fixture made
            shutil.rmtree(clone, ignore_errors=True)


def _exposed_names(under: str) -> set[str]:
    """First path components, below `under`, of the host paths commands are given (the task Python's)."""
    names = set()
    for p in task_python().needed_paths():
        real = os.path.realpath(p)
        if real != under and real.startswith(under.rstrip("/") + "/"):
            names.add(Path(real).relative_to(under).parts[0])
    return names


def test_another_checkout_on_the_host_is_neither_readable_nor_listable(sandbox: LocalSandbox, other_clones) -> None:
    marker, secret, made = other_clones
    assert made and all((c / "tasks/data/swe-lite/dev.jsonl").is_file() for c in made)
    for clone in made:
        data = clone / "tasks" / "data" / "swe-lite"
        r = sandbox.run(f"cat {data}/dev.jsonl; ls -A {data}; echo ---; ls -A {clone.parent}", timeout=30)
        errors, listing = r.output.split("---\n")
        assert secret not in r.output and errors.count("No such file or directory") == 2, r.output
        assert marker not in listing, r.output  # its parent (if that exists inside) does not list it
    # nowhere else either: a search of the whole root (but /proc and the host's /usr) finds no trace of it
    r = sandbox.run(
        f"find / \\( -path /proc -o -path /usr \\) -prune -o -name '*{marker}*' -print 2>/dev/null | head; "
        f"grep -rls {secret} / --exclude-dir=proc --exclude-dir=usr --exclude-dir=dev 2>/dev/null | head; echo done",
        timeout=60,
    )
    assert r.output == "done\n", r.output


def test_the_root_holds_only_the_allow_list(sandbox: LocalSandbox) -> None:
    r = sandbox.run("ls -A /; echo ---; ls -A /etc; echo ---; ls -A /var", timeout=30)
    assert r.ok, r.output
    root, etc, var = (set(part.split()) for part in r.output.split("---"))
    expected = {Path(d).name for d in SYSTEM_DIRS if os.path.lexists(d)}
    expected |= {"dev", "etc", "proc", "run", "tmp", "var", WORKSPACE.strip("/")} | _exposed_names("/")
    assert root == expected
    assert etc == set(ETC_GENERATED) | {f for f in ETC_HOST if os.path.exists(f"/etc/{f}")}
    assert var == {"tmp"}


@pytest.mark.parametrize("folder", PRIVATE_DIRS)
def test_private_host_folders_are_absent_or_hold_only_the_way_to_the_task_python(
    sandbox: LocalSandbox, folder: str
) -> None:
    r = sandbox.run(f"ls -A {folder}", timeout=30)
    if r.returncode != 0:
        assert "No such file or directory" in r.output, r.output
        return
    assert set(r.output.split()) <= _exposed_names(folder), r.output
    assert set(r.output.split()), f"{folder} exists but is empty: the sandbox makes no empty host folders"


def test_only_the_commands_own_processes_and_no_host_sys(sandbox: LocalSandbox) -> None:
    r = sandbox.run("ls /proc | grep -c '^[0-9]'; ls /sys 2>&1; cat /proc/self/cgroup", timeout=30)
    lines = r.output.splitlines()
    assert int(lines[0]) <= 6, r.output  # bwrap's PID 1, the command's shell, ls, grep
    assert "No such file or directory" in lines[1], r.output
    assert all(line.endswith(":/") for line in lines[2:]), r.output  # its own cgroup namespace


def test_the_root_and_etc_are_read_only_and_tmp_writable(sandbox: LocalSandbox) -> None:
    r = sandbox.run(
        "touch /x /etc/x /usr/x 2>&1; echo ok > /etc/passwd 2>&1; echo hi > /tmp/t && cat /tmp/t; "
        "for d in /var/tmp /dev/shm /run; do touch $d/t && echo $d; done; stat -c %a /tmp /var/tmp /dev/shm /run",
        timeout=30,
    )
    assert r.output.count("Read-only file system") + r.output.count("Permission denied") == 4, r.output
    lines = r.output.splitlines()
    assert lines[-8:] == ["hi", "/var/tmp", "/dev/shm", "/run", "1777", "1777", "1777", "1777"], r.output


def test_the_task_python_git_and_pytest_work_in_the_workspace(sandbox: LocalSandbox) -> None:
    probe = (
        "import getpass, importlib, socket, sys; "
        "[importlib.import_module(m) for m in ('pytest', 'pluggy', 'iniconfig', 'packaging', 'ssl', 'sqlite3')]; "
        "print(sys.prefix, getpass.getuser(), socket.gethostbyname('localhost'), socket.gethostname())"
    )
    r = sandbox.run(f'python -c "{probe}"', timeout=60)
    assert r.ok, r.output
    assert r.output.split() == [str(task_python().root), "nobody", "127.0.0.1", "sandbox"], r.output
    r = sandbox.run("python -m pytest -q test_calc.py", timeout=60)
    assert r.ok and r.output.rstrip().endswith("1 passed"), r.output
    r = sandbox.run(
        "echo '# note' >> calc.py && git status --short && git diff --stat && git add -A && "
        "git commit -q -m edit && git log --format=%s",
        timeout=60,
    )
    assert r.ok, r.output
    assert r.output.splitlines()[0] == " M calc.py" and r.output.splitlines()[-2:] == ["edit", "baseline"], r.output
    assert "+# note" in sandbox.diff()


def test_an_exposed_path_is_read_only_at_its_own_path_and_its_siblings_stay_hidden(source: Path, other_clones) -> None:
    _, secret, made = other_clones
    shared = made[0] / "tasks" / "data"  # expose one folder of a planted clone; the rest of it stays hidden
    with LocalSandbox(expose_paths=[str(shared)]) as sb:
        if sb.isolation == "none":
            pytest.skip(f"namespaces unavailable here: {sb.warnings}")
        sb.start(source)
        r = sb.run(f"cat {shared}/swe-lite/dev.jsonl; ls -A {made[0]} {made[0]}/tasks; touch {shared}/x", timeout=30)
    lines = r.output.splitlines()
    assert secret in lines[0] and "Read-only file system" in r.output, r.output
    assert [line for line in lines if line and not line.startswith(("/", "{", "touch"))] == ["tasks", "data"], r.output
    assert not (shared / "x").exists()


def test_plan_refuses_what_the_sandbox_makes_itself_and_warns_about_missing_paths(tmp_path: Path) -> None:
    for path in ("/", "/etc", "/proc/self", "/dev/null", WORKSPACE, *TMPFS_DIRS):
        with pytest.raises(SandboxError, match=f"cannot expose {path} itself"):
            plan_exposed({path}, 65534, 65534, [])
    warnings: list[str] = []
    inside = tmp_path / "a" / "b"
    inside.mkdir(parents=True)
    inside.chmod(0o755)
    (inside / "c").write_text("c\n")
    missing = str(tmp_path / "missing")
    assert plan_exposed({str(inside), str(inside / "c"), "/usr/lib", missing}, 0, 0, warnings) == [str(inside)]
    assert warnings == [f"{missing} does not exist: commands cannot see it"]
    assert plan_exposed({"/dev/shm/x"}, 0, 0, warnings) == []  # below a private tmpfs: allowed (missing here)


def test_without_bwrap_namespaces_refuse_and_auto_falls_back_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_which = local_module._which
    monkeypatch.setattr(local_module, "_which", lambda name, *a: None if name == "bwrap" else real_which(name, *a))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(SandboxError, match=r"apt-get install bubblewrap"):
        LocalSandbox(isolation="namespaces", use_cgroup=False)
    with LocalSandbox(use_cgroup=False) as sb:
        assert sb.isolation == "none" and any("apt-get install bubblewrap" in w for w in sb.warnings), sb.warnings
    monkeypatch.setenv("CI", "true")
    with pytest.raises(SandboxError, match=r"CI=true requires network isolation.*apt-get install bubblewrap"):
        LocalSandbox(use_cgroup=False)
