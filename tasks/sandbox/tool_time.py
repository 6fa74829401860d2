"""`python -m tasks.sandbox tool-time`: what a project's test run costs in the local sandbox, per Python environment.

Side by side, interleaved, on a clean swe-lite project: the task environment (what commands get)
against the runner's own venv with and without pytest's plugin autoload (what they got before).
Prints each repeat's wall time and the median; a measurement, never part of the tests.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

CASES = {
    "runner venv, plugin autoload on (before)": ("runner", "env -u PYTEST_DISABLE_PLUGIN_AUTOLOAD python -m pytest -q"),
    "runner venv, plugin autoload off": ("runner", "python -m pytest -q"),
    "task environment (now)": ("task", "python -m pytest -q"),
}


def measure(project: str = "durationparse", repeats: int = 7) -> dict[str, list[float]]:
    """Wall seconds of `python -m pytest -q` per case and repeat (interleaved, after one untimed warm-up)."""
    from tasks.sandbox.local import LocalSandbox
    from tasks.swelite.projects import copy_project

    times: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="spectune-tool-time-") as tmp:
        ws = copy_project(project, Path(tmp) / "ws")
        sandboxes = {name: LocalSandbox(python_env=env) for name, (env, _) in CASES.items()}
        try:
            for sb in sandboxes.values():
                sb.start(ws)
            for round_ in range(repeats + 1):
                for name, (_, command) in CASES.items():
                    result = sandboxes[name].run(command, timeout=120)
                    if not result.ok:
                        raise RuntimeError(f"{name}: {result.output[-500:]}")
                    if round_:
                        times[name].append(result.duration_s)
        finally:
            for sb in sandboxes.values():
                sb.close()
    return times


def main(project: str, repeats: int) -> int:
    """Print the table."""
    times = measure(project, repeats)
    table = Table(title=f"python -m pytest -q on {project} in the local sandbox, {repeats} interleaved repeats")
    for col in ("environment", "median s", "per repeat s"):
        table.add_column(col)
    for name, values in times.items():
        table.add_row(name, f"{statistics.median(values):.2f}", " ".join(f"{v:.2f}" for v in values))
    Console().print(table)
    return 0
