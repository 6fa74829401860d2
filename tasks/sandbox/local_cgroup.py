"""A pids cgroup per sandbox command: a process cap that binds whoever runs it, and a kill switch.

The sandbox creates one parent cgroup (`spectune-<id>`) under the cgroup it runs in, and one child
per command with `pids.max` set; the command joins the child before it starts anything, so every
process it spawns, including ones that `setsid` or double-fork, is counted and can be found and
killed from the child's `cgroup.procs`. cgroup v1 (a hierarchy with the `pids` controller) and
cgroup v2 (the unified hierarchy, where the `pids` controller must be enabled in the parent's
`cgroup.subtree_control`) are both supported. `PidsCgroup.create` says why when neither works
(not root, no delegation, controller missing) and the sandbox reports that as a warning.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of every mount this process sees."""
    out = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 4:
                mnt = parts[1].replace("\\040", " ")
                out.append((mnt, parts[2], set(parts[3].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """controller name (or '' for v2) -> this process's cgroup path in that hierarchy."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                out[""] = path
            for c in controllers.split(","):
                if c:
                    out[c] = path
    return out


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


class PidsCgroup:
    """One sandbox's pids cgroup; `child()` makes a per-command cgroup under it."""

    def __init__(self, version: int, parent: Path) -> None:
        self.version = version  # 1 or 2
        self.parent = parent

    def __repr__(self) -> str:
        return f"PidsCgroup(v{self.version}, {self.parent})"

    @classmethod
    def create(cls, prefix: str = "spectune") -> tuple[PidsCgroup | None, str]:
        """A fresh parent cgroup, or (None, why not)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        try:
            mounts = _mounts()
            own = _own_cgroups()
        except OSError as exc:
            return None, f"cannot read cgroup information: {exc}"
        reasons = []
        for mnt, fstype, opts in mounts:  # cgroup v1 with the pids controller
            if fstype == "cgroup" and "pids" in opts:
                base = Path(mnt) / own.get("pids", "/").lstrip("/")
                parent = base / name
                try:
                    parent.mkdir()
                except OSError as exc:
                    reasons.append(f"cgroup v1 pids at {base}: {exc.strerror or exc}")
                    break
                return cls(1, parent), f"cgroup v1 pids controller at {mnt}"
        for mnt, fstype, _ in mounts:  # cgroup v2
            if fstype != "cgroup2":
                continue
            base = Path(mnt) / own.get("", "/").lstrip("/")
            try:
                controllers = (base / "cgroup.controllers").read_text().split()
            except OSError as exc:
                reasons.append(f"cgroup v2 at {mnt}: {exc.strerror or exc}")
                continue
            if "pids" not in controllers:
                reasons.append(f"cgroup v2 at {mnt}: pids controller not available in {base}")
                continue
            parent = base / name
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    _write(base / "cgroup.subtree_control", "+pids")
                parent.mkdir()
                _write(parent / "cgroup.subtree_control", "+pids")
            except OSError as exc:
                with contextlib.suppress(OSError):
                    parent.rmdir()
                reasons.append(f"cgroup v2 at {base}: cannot delegate pids ({exc.strerror or exc})")
                continue
            return cls(2, parent), f"cgroup v2 pids controller at {mnt}"
        return None, "; ".join(reasons) or "no cgroup hierarchy with the pids controller is mounted"

    def child(self, name: str, pids_max: int | None) -> Path:
        """A new per-command cgroup with `pids.max` set; join it by writing 0 to its cgroup.procs."""
        path = self.parent / name
        path.mkdir()
        if pids_max is not None:
            _write(path / "pids.max", str(pids_max))
        return path

    @staticmethod
    def pids(path: Path) -> list[int]:
        try:
            return [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, path: Path, wait_s: float = 5.0) -> bool:
        """SIGKILL everything in `path` (repeatedly: a process may fork while we kill). True if empty."""
        if not path.exists():
            return True
        kill_file = path / "cgroup.kill"  # v2, Linux >= 5.14: atomic
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids(path)
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)

    def remove(self, path: Path, wait_s: float = 5.0) -> bool:
        """Kill what is left in `path` and remove it. True if it is gone."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                self.kill(path, wait_s=max(0.0, deadline - time.monotonic()))
                time.sleep(0.005)

    def close(self) -> bool:
        """Remove every child and the parent. True if all are gone. Safe to call twice."""
        ok = True
        if self.parent.exists():
            for child in self.parent.iterdir():
                if child.is_dir():
                    ok = self.remove(child) and ok
            ok = self.remove(self.parent) and ok
        return ok
