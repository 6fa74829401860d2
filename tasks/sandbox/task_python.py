"""The Python environment task code runs in: the host's interpreter with pytest and nothing of spectune's.

Commands in a sandbox run a task's own code and tests. Giving them spectune's virtual environment
would let its packages leak in (pytest auto-loads every installed plugin: hydra's, anyio's ... cost
~0.6 s of a 0.9 s test run) and would tie the sandbox to wherever the user made that venv. Instead
`task_python()` builds, once per interpreter and pytest version, a small venv of the same base
interpreter holding only the distributions pytest needs (copied file by file from the installed
ones, so no network is needed), under ~/.cache/spectune/task-python (or $SPECTUNE_TASK_PYTHON_DIR).
Both sandboxes put its `bin` first on PATH and make it and the base interpreter visible read-only,
at their own paths: also under /tmp (a cache there), which commands see as a fresh private tmpfs
holding only those read-only paths (`note_private_tmpfs` says so once per process).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from common.cache import cache_root
from tasks.sandbox.base import SandboxError

log = logging.getLogger("spectune.sandbox")

TASK_PACKAGES = ("pytest",)  # what every task needs; their requirements come along
ENV_VAR = "SPECTUNE_TASK_PYTHON_DIR"
_LAYOUT_VERSION = "5"  # bump when the way the venv is built changes
_NOTED: list[Path] = []  # the task environment note_private_tmpfs spoke of (once per process)


@dataclass(frozen=True)
class TaskPython:
    """A built task environment: its folder, its bin (first on PATH) and the host paths it needs."""

    root: Path
    bindir: Path
    base_prefix: Path  # the base interpreter's installation, which the venv's python links into

    def needed_paths(self) -> list[str]:
        """Host paths a sandbox must make readable for `python` to run."""
        return [str(self.root), *dict.fromkeys(os.path.realpath(p) for p in (self.base_prefix, _base_executable()))]


def _base_executable() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions `names` need (markers evaluated for this interpreter, no extras)."""
    todo, seen, out = list(names), set(), []
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SandboxError(
                f"{name} is not installed in {sys.prefix}; the task environment copies it from there"
            ) from None
        out.append(dist)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(out, key=lambda d: d.metadata["Name"].lower())


def _key(dists: list[metadata.Distribution]) -> str:
    text = "|".join(
        [_LAYOUT_VERSION, _base_executable(), sys.version, *(f"{d.metadata['Name']}=={d.version}" for d in dists)]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_python_root() -> Path:
    """Where task environments are built: $SPECTUNE_TASK_PYTHON_DIR, else the cache root's task-python/."""
    explicit = os.environ.get(ENV_VAR, "").strip()
    return Path(explicit).expanduser() if explicit else cache_root("task-python")


def task_python() -> TaskPython:
    """The task environment for this interpreter, built on first use (atomically; safe to race)."""
    dists = _closure(TASK_PACKAGES)
    root = task_python_root() / f"py{sys.version_info.major}{sys.version_info.minor}-{_key(dists)}"
    env = TaskPython(root, root / "bin", Path(sys.base_prefix))
    if (root / "spectune-task-python.ok").is_file():
        return env
    root.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(root.parent, 0o755)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root.parent))
    try:
        done = subprocess.run(
            [_base_executable(), "-m", "venv", "--without-pip", str(tmp)], capture_output=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise SandboxError(f"cannot build the task environment in {tmp}: {done.stderr.decode(errors='replace')}")
        site = Path(sysconfig.get_path("purelib", vars={"base": str(tmp), "platbase": str(tmp)}))
        for dist in dists:
            for file in dist.files or []:
                src = Path(str(dist.locate_file(file)))
                if file.parts[0] == ".." or not src.is_file() or src.suffix == ".pyc":
                    continue  # console scripts live outside site-packages; bytecode is rebuilt
                dst = site / file
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
        for dist in dists:  # console scripts (`pytest`, `py.test`) pointing at this environment's python
            for ep in dist.entry_points.select(group="console_scripts"):
                module, _, attr = ep.value.partition(":")
                script = tmp / "bin" / ep.name
                script.write_text(
                    f"#!{root}/bin/python\nimport sys\nfrom {module} import {attr.split('.')[0]}\nsys.exit({attr}())\n"
                )
                script.chmod(0o755)
        # bytecode now: commands run with PYTHONDONTWRITEBYTECODE on a read-only view, and compiling
        # pytest afresh on every test run would cost more than the run
        subprocess.run(
            [str(tmp / "bin" / "python"), "-m", "compileall", "-q", str(site)], capture_output=True, timeout=300
        )
        for path in [tmp, *tmp.rglob("*")]:  # readable by the unprivileged sandbox user
            if not path.is_symlink():
                os.chmod(path, 0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        (tmp / "spectune-task-python.ok").write_text("\n".join(f"{d.metadata['Name']}=={d.version}" for d in dists))
        try:
            tmp.rename(root)
        except OSError:  # another process built it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return env


def note_private_tmpfs(env: TaskPython, private_dirs: tuple[str, ...]) -> None:
    """Say once per process where the task environment is when it lies under a dir commands see as a private tmpfs."""
    real = os.path.realpath(env.root)
    under = [d for d in private_dirs if real == d or real.startswith(d.rstrip("/") + "/")]
    if not under or _NOTED:
        return
    _NOTED.append(env.root)
    # a warning, not info: the entry points leave logging unconfigured, and Python's last-resort handler
    # prints warnings as one bare line (the way engine/forward_plan.py says its notes)
    log.warning(
        "note: the task Python is %s, under %s: sandboxed commands see it read-only at that path, in an otherwise "
        "empty private %s",
        real,
        under[0],
        under[0],
    )
