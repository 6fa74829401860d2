"""Which process made a temp folder, cgroup or container, so leftovers of a dead runner can be reaped.

A runner killed with SIGKILL cannot clean up. Everything it makes on the host therefore carries
the maker's *owner token*, `<pid>.<start time in clock ticks>` (the start time tells a reused pid
apart): a `.spectune-owner` file in each temp folder, the cgroup's name, a container label. The
next sandbox a process makes calls `reap_stale_dirs()` (and the sandboxes their own reapers), which
remove only things that carry such a token of a process that no longer exists.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

OWNER_FILE = ".spectune-owner"
TEMP_PREFIX = "spectune-"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 (starttime), counted after the command name


def owner_token(pid: int | None = None) -> str:
    """`<pid>.<start time>` of this (or the given) process."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_start_time(pid) or 0}"


def is_alive(token: str) -> bool:
    """Whether the process a token names still runs (a malformed token counts as alive: never reaped)."""
    pid_text, _, start = token.partition(".")
    if not (pid_text.isdigit() and start.isdigit()):
        return True
    return _start_time(int(pid_text)) == start


def mark(folder: Path) -> Path:
    """Write this process's owner token into `folder`."""
    (folder / OWNER_FILE).write_text(owner_token())
    return folder


@contextlib.contextmanager
def owned_tempdir(prefix: str) -> Iterator[str]:
    """A TemporaryDirectory marked with this process's owner token (so a dead runner's is reaped)."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX + prefix.removeprefix(TEMP_PREFIX)) as tmp:
        mark(Path(tmp))
        yield tmp


def _unmount_below(folder: Path) -> None:
    """Lazily unmount whatever is mounted at or below `folder` (a sandbox's workspace tmpfs)."""
    real = os.path.realpath(folder)
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1].replace("\\040", " ") for line in fh]
    for point in sorted((p for p in points if p == real or p.startswith(real + "/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def reap_stale_dirs(parent: str | Path | None = None) -> list[Path]:
    """Remove `spectune-*` temp folders whose owner token names a dead process; returns what was removed."""
    base = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(TEMP_PREFIX) and p.is_dir()]
    except OSError:
        return removed
    for folder in candidates:
        try:
            token = (folder / OWNER_FILE).read_text().strip()
        except OSError:
            continue  # not ours, or not marked: never touched
        if is_alive(token):
            continue
        _unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
