"""Resource limits for one sandboxed command, and bounded capture of its output.

`Limits` holds the numbers (processes, memory, file size, open files, output bytes) and turns them
into a `prlimit` command line; `OutputCapture` keeps the first and last halves of a byte stream
without ever holding more than about twice the limit, so a command that prints gigabytes costs
the caller no more memory than one that prints the limit. Both are independent of how a
sandbox isolates commands, so any sandbox implementation may use them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from common.errors import ConfigError
from common.units import GIB
from tasks.sandbox.base import DEFAULT_OUTPUT_LIMIT

MIB = 1024**2


def parse_size(value: int | str) -> int:
    """Bytes from an int or a docker-style size string ("512m", "2g", "64k", "1000")."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower().removesuffix("b")
    scale = {"k": 2**10, "m": MIB, "g": GIB}.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale != 1 else text) * scale)
    except ValueError:
        raise ConfigError(f"not a size: {value!r} (use bytes or e.g. 512m, 2g)") from None


def elision_marker(elided: int) -> bytes:
    """The line that replaces the dropped middle of a too-long output."""
    return f"\n[... {elided} bytes elided ...]\n".encode()


@dataclass(frozen=True)
class Limits:
    """Per-command limits. `None` leaves that limit as inherited.

    max_processes: tasks (processes + threads) one command may have at once: the pids cgroup's
        `pids.max`, and RLIMIT_NPROC unless `nproc` is given. RLIMIT_NPROC counts every process
        of the unprivileged user on the whole machine, so sandboxes that share a user share it.
    address_space: RLIMIT_AS in bytes for every process (virtual memory, not resident memory).
    file_size: RLIMIT_FSIZE in bytes: the largest file a process may write (SIGXFSZ beyond).
    open_files: RLIMIT_NOFILE.
    output_limit: bytes of merged stdout+stderr kept; the middle of anything longer is elided.
    tmpfs_size: size of each private tmpfs (/tmp, /var/tmp, /dev/shm, /run), a `mount -o size=` value.
    memory: bytes of memory the whole command tree may use together (the cgroup memory controller;
        no swap beyond it); the kernel's OOM killer ends the command past it.
    workspace_size: the most the workspace may hold, a `mount -o size=` value (a size-capped tmpfs
        in the local sandbox, a size-capped volume in docker); writes past it fail with ENOSPC.
    cpu_per_wall_second: RLIMIT_CPU is derived from the timeout as
        ceil(timeout * cpu_per_wall_second) + 1 seconds per process. The default (the number of
        CPUs) never fires before the wall-clock timeout does; it is a backstop, not the timeout.
    """

    max_processes: int | None = 256
    nproc: int | None = None
    address_space: int | None = 4 * GIB
    file_size: int | None = 64 * MIB
    open_files: int | None = 1024
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    tmpfs_size: str = "512m"
    memory: int | str | None = 4 * GIB
    workspace_size: str | None = "1g"
    cpu_per_wall_second: float | None = None

    def cpu_seconds(self, timeout: float) -> int:
        """RLIMIT_CPU for a command with this wall-clock timeout."""
        per_wall = self.cpu_per_wall_second or float(os.cpu_count() or 1)
        return math.ceil(max(timeout, 0.0) * per_wall) + 1

    def nproc_limit(self) -> int | None:
        """RLIMIT_NPROC: `nproc` if given, else `max_processes`."""
        return self.nproc if self.nproc is not None else self.max_processes

    def prlimit_args(self, prlimit: str, timeout: float) -> list[str]:
        """A `prlimit ... --` prefix that sets soft = hard for every limit that is not None."""
        args = [prlimit, f"--cpu={self.cpu_seconds(timeout)}", "--core=0"]
        if self.address_space is not None:
            args.append(f"--as={self.address_space}")
        if self.file_size is not None:
            args.append(f"--fsize={self.file_size}")
        if self.open_files is not None:
            args.append(f"--nofile={self.open_files}")
        nproc = self.nproc_limit()
        if nproc is not None:
            args.append(f"--nproc={nproc}")
        args.append("--")
        return args


def setpriv_args(setpriv: str, uid: int | None = None, gid: int | None = None) -> list[str]:
    """A `setpriv ... --` prefix: no new privileges, no capabilities, and with uid/gid that user, groups cleared."""
    user = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"] if uid is not None else []
    return [setpriv, *user, "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]


class OutputCapture:
    """Keeps the first `limit // 2` and the last `limit - limit // 2` bytes of a stream.

    `feed` as chunks arrive; `result()` returns the kept bytes (with an elision marker in the
    middle if anything was dropped) and whether anything was dropped. Memory stays below
    `limit` plus one chunk plus a slack of `limit` bytes (the tail is trimmed in batches).
    """

    def __init__(self, limit: int = DEFAULT_OUTPUT_LIMIT) -> None:
        if limit < 0:
            raise ConfigError(f"output limit must be >= 0, got {limit}")
        self.limit = limit
        self._head_cap = limit // 2
        self._tail_cap = limit - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._tail_cap + 65536:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def result(self) -> tuple[bytes, bool]:
        """(kept bytes with the marker where the middle was dropped, whether anything was)."""
        if not self.truncated:
            return bytes(self._head + self._tail), False
        tail = self._tail[len(self._tail) - self._tail_cap :] if self._tail_cap else b""
        elided = self.total - len(self._head) - len(tail)
        return bytes(self._head) + elision_marker(elided) + bytes(tail), True
