"""`python -m tasks.sandbox overhead`: what the local sandbox costs per command and per start, against a git revision.

Side by side in one process, interleaved round by round so load on the machine hits both alike: this checkout's
LocalSandbox and the one of `--before REV` (its tasks/sandbox/local.py, loaded from git beside today's helper
modules). Each round makes a sandbox (constructor + start() on a small workspace: the "start" time) and runs `true`
`--runs` times in it (the per-command time, as `CommandResult.duration_s`). Prints medians; a measurement, never a test.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.table import Table

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def load_before(rev: str, folder: Path) -> ModuleType:
    """tasks/sandbox/local.py as of `rev`, importable beside today's tasks.sandbox helpers."""
    source = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "show", f"{rev}:tasks/sandbox/local.py"], capture_output=True, check=True
    ).stdout
    path = folder / "tasks" / "sandbox" / "local_before.py"  # parents[2] is what its PROJECT_ROOT would be
    path.parent.mkdir(parents=True)
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("tasks.sandbox._local_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    if hasattr(module, "PROJECT_ROOT"):  # it hid the project tree by default: keep that cost in the measurement
        module.PROJECT_ROOT = PROJECT_ROOT
    return module


def _round(cls: Any, source: Path, runs: int, times: dict[str, list[float]]) -> None:
    t0 = time.monotonic()
    with cls() as sb:
        sb.start(source)
        times["start"].append(time.monotonic() - t0)
        for _ in range(runs):
            result = sb.run("true", timeout=60)
            if not result.ok:
                raise RuntimeError(f"`true` failed in {cls.__module__}: {result.output[-500:]}")
            times["command"].append(result.duration_s)


def measure(before: str, runs: int = 30, rounds: int = 5) -> dict[str, dict[str, list[float]]]:
    """Seconds per start and per `true` command, for each implementation ("before REV", "now")."""
    from tasks.sandbox.local import LocalSandbox

    with tempfile.TemporaryDirectory(prefix="spectune-overhead-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        classes = {f"before ({before})": load_before(before, Path(tmp) / "old").LocalSandbox, "now": LocalSandbox}
        times: dict[str, dict[str, list[float]]] = {name: {"start": [], "command": []} for name in classes}
        for _ in range(rounds):
            for name, cls in classes.items():
                _round(cls, source, runs, times[name])
    return times


def main(before: str, runs: int, rounds: int) -> int:
    """Print the table."""
    times = measure(before, runs, rounds)
    table = Table(title=f"local sandbox: {rounds} interleaved rounds of start + {runs} x run('true')")
    for col in ("implementation", "start median ms", "run('true') median ms", "p90 ms"):
        table.add_column(col)
    for name, t in times.items():
        cmd = sorted(t["command"])
        p90 = cmd[int(0.9 * (len(cmd) - 1))]
        table.add_row(
            name,
            f"{1000 * statistics.median(t['start']):.1f}",
            f"{1000 * statistics.median(cmd):.1f}",
            f"{1000 * p90:.1f}",
        )
    Console().print(table)
    return 0
