"""Cgroups per sandbox command: a process cap and a memory cap for the whole tree, and a kill switch.

The sandbox creates one parent cgroup (`spectune-<owner token>-<id>`) under the cgroup it runs in,
in each controller it uses (`pids`, and `memory` when a memory limit is set), and one child per
command with `pids.max` and the memory limit set; the command joins the children before it starts
anything, so every process it spawns, including ones that `setsid` or double-fork, is counted,
charged and can be found and killed from the child's `cgroup.procs`. cgroup v1 (one hierarchy per
controller) and cgroup v2 (the unified hierarchy, where controllers must be enabled in the
parent's `cgroup.subtree_control`) are both supported. `CommandCgroups.create` says why when
neither works (not root, no delegation, controller missing) and the sandbox reports it as a warning.
The owner token in the name lets `reap_stale_cgroups` remove the cgroups of a runner that died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from tasks.sandbox.owner import is_alive, owner_token

PREFIX = "spectune"


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


def _bases(controllers: tuple[str, ...]) -> tuple[int, dict[str, Path], list[str]]:
    """(version, controller -> the cgroup this process is in, reasons) for the wanted controllers."""
    mounts, own = _mounts(), _own_cgroups()
    v1 = {c: Path(mnt) / own.get(c, "/").lstrip("/") for mnt, fs, opts in mounts if fs == "cgroup" for c in opts}
    if all(c in v1 for c in controllers):
        return 1, {c: v1[c] for c in controllers}, []
    reasons = [f"cgroup v1: no {c} hierarchy" for c in controllers if c not in v1]
    for mnt, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        base = Path(mnt) / own.get("", "/").lstrip("/")
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError as exc:
            reasons.append(f"cgroup v2 at {mnt}: {exc.strerror or exc}")
            continue
        missing = [c for c in controllers if c not in available]
        if missing:
            reasons.append(f"cgroup v2 at {mnt}: {', '.join(missing)} not available in {base}")
            continue
        return 2, dict.fromkeys(controllers, base), reasons
    return 0, {}, reasons or ["no cgroup hierarchy is mounted"]


class CommandCgroups:
    """One sandbox's cgroups; `child()` makes a per-command cgroup (one folder per hierarchy) under them."""

    def __init__(self, version: int, parents: dict[str, Path]) -> None:
        self.version = version  # 1 or 2
        self.parents = parents  # controller -> parent folder (v2: the same folder for all)

    def __repr__(self) -> str:
        return f"CommandCgroups(v{self.version}, {sorted(set(map(str, self.parents.values())))})"

    @property
    def parent(self) -> Path:
        """The pids parent (where processes are listed and killed)."""
        return self.parents["pids"]

    @property
    def folders(self) -> list[Path]:
        """Each distinct parent folder."""
        return list(dict.fromkeys(self.parents.values()))

    @classmethod
    def create(cls, memory: bool = True) -> tuple[CommandCgroups | None, str]:
        """Fresh parent cgroups (pids, and memory if asked), or (None, why not)."""
        controllers = ("pids", "memory") if memory else ("pids",)
        name = f"{PREFIX}-{owner_token()}-{uuid.uuid4().hex[:8]}"
        try:
            version, bases, reasons = _bases(controllers)
        except OSError as exc:
            return None, f"cannot read cgroup information: {exc}"
        if not version:
            return None, "; ".join(reasons)
        made: list[Path] = []
        try:
            parents: dict[str, Path] = {}
            for controller, base in bases.items():
                parent = base / name
                if parent not in made:
                    if version == 2:
                        enabled = (base / "cgroup.subtree_control").read_text().split()
                        wanted = [f"+{c}" for c in controllers if c not in enabled]
                        if wanted:
                            _write(base / "cgroup.subtree_control", " ".join(wanted))
                    parent.mkdir()
                    made.append(parent)
                    if version == 2:
                        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in controllers))
                parents[controller] = parent
        except OSError as exc:
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            return None, f"cgroup v{version} ({', '.join(controllers)}): cannot create {name}: {exc.strerror or exc}"
        return cls(version, parents), f"cgroup v{version} {' + '.join(controllers)}"

    def child(self, name: str, pids_max: int | None, memory_max: int | None) -> list[Path]:
        """Per-command cgroups with the limits set; join by writing 0 to each folder's cgroup.procs."""
        out = []
        for controller, parent in self.parents.items():
            path = parent / name
            if path not in out:
                path.mkdir()
                out.append(path)
            if controller == "pids" and pids_max is not None:
                _write(path / "pids.max", str(pids_max))
            if controller == "memory" and memory_max is not None:
                if self.version == 2:
                    _write(path / "memory.max", str(memory_max))
                    with contextlib.suppress(OSError):
                        _write(path / "memory.swap.max", "0")
                else:
                    _write(path / "memory.limit_in_bytes", str(memory_max))
                    with contextlib.suppress(OSError):  # absent without swap accounting
                        _write(path / "memory.memsw.limit_in_bytes", str(memory_max))
        return out

    @staticmethod
    def pids(path: Path) -> list[int]:
        """The processes in one cgroup folder."""
        try:
            return [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, path: Path, wait_s: float = 5.0) -> bool:
        """SIGKILL everything in `path` (repeatedly: a process may fork while we kill). True if empty."""
        return _kill(path, self.version, wait_s)

    def remove(self, paths: list[Path] | Path, wait_s: float = 5.0) -> bool:
        """Kill what is left in the command's cgroups and remove them. True if all are gone."""
        ok = True
        for path in [paths] if isinstance(paths, Path) else paths:
            ok = _remove(path, self.version, wait_s) and ok
        return ok

    def close(self) -> bool:
        """Remove every child and the parents. True if all are gone. Safe to call twice."""
        ok = True
        for parent in self.folders:
            ok = _remove_tree(parent, self.version) and ok
        return ok


def _kill(path: Path, version: int, wait_s: float) -> bool:
    if not path.exists():
        return True
    kill_file = path / "cgroup.kill"  # v2, Linux >= 5.14: atomic
    if version == 2 and kill_file.exists():
        with contextlib.suppress(OSError):
            _write(kill_file, "1")
    deadline = time.monotonic() + wait_s
    while True:
        pids = CommandCgroups.pids(path)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _remove(path: Path, version: int, wait_s: float) -> bool:
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
            _kill(path, version, max(0.0, deadline - time.monotonic()))
            time.sleep(0.005)


def _remove_tree(parent: Path, version: int) -> bool:
    ok = True
    if parent.exists():
        for child in parent.iterdir():
            if child.is_dir():
                ok = _remove(child, version, 5.0) and ok
        ok = _remove(parent, version, 5.0) and ok
    return ok


def reap_stale_cgroups() -> list[Path]:
    """Remove `spectune-<token>-*` cgroups (beside this process's own) whose owner process is dead."""
    removed: list[Path] = []
    try:
        version, bases, _ = _bases(("pids",))
        if version == 1:
            _, more, _ = _bases(("memory",))
            bases.update(more)
    except OSError:
        return removed
    for base in dict.fromkeys(bases.values()):
        try:
            folders = [p for p in base.iterdir() if p.is_dir() and p.name.startswith(PREFIX + "-")]
        except OSError:
            continue
        for folder in folders:
            token = folder.name[len(PREFIX) + 1 :].rsplit("-", 1)[0]
            if "." in token and not is_alive(token) and _remove_tree(folder, version):
                removed.append(folder)
    return removed
