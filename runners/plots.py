"""Plots of a run's summary: acceptance by draft position, and per-task agent time ON vs OFF.

Built on matplotlib's object API and rendered by Agg: no pyplot, so no display, no global figure registry and
nothing to close. Not a report generator: two figures, saved as PNG and logged by the tracker.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

ACCEPTANCE_PNG = "acceptance_by_position.png"
TASK_TIMES_PNG = "task_times.png"

# Outcome of a task across repeats, compared by success rate: label and colour for the scatter.
OUTCOMES = {
    "both": ("solved by both", "tab:blue"),
    "improvement": ("better with ON", "tab:green"),
    "regression": ("worse with ON", "tab:red"),
    "neither": ("solved by neither", "tab:gray"),
}


def _figure(width: float = 6.4, height: float = 4.2) -> Figure:
    """A figure with an Agg canvas attached (savefig renders through it)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _empty(fig: Figure, message: str) -> Figure:
    """Say on the figure why there is nothing to plot, rather than logging a blank image."""
    ax = fig.subplots()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    return fig


def acceptance_by_position(summary_side: dict[str, Any]) -> Figure:
    """Bars of accepted / drafted tokens at each draft position, labelled with the counts."""
    fig = _figure()
    per_position = summary_side.get("per_position") or {}
    drafted = list(per_position.get("drafted") or [])
    accepted = list(per_position.get("accepted") or [])
    if len(drafted) != len(accepted):
        raise ValueError(f"per_position: {len(drafted)} drafted counts but {len(accepted)} accepted counts")
    positions = [i for i, d in enumerate(drafted) if d > 0]
    if not positions:
        return _empty(fig, "no drafted tokens (speculation off or unsupported)")
    rates = [accepted[i] / drafted[i] for i in positions]
    ax = fig.subplots()
    bars = ax.bar([str(i) for i in positions], rates, color="tab:blue")
    # The counts matter as much as the rate: late positions are drafted rarely, so their rate is noisy.
    ax.bar_label(bars, labels=[f"{accepted[i]}/{drafted[i]}" for i in positions], fontsize=8, padding=2)
    ax.set_ylim(0, 1.12)
    ax.set_xlabel("draft position (0 = first drafted token)")
    ax.set_ylabel("acceptance (accepted / drafted)")
    overall = summary_side.get("acceptance_rate")
    title = "Acceptance by draft position"
    if isinstance(overall, int | float):
        title += f" (overall {overall:.2f})"
    ax.set_title(title)
    return fig


def _median_time(side: dict[str, Any] | None) -> float | None:
    """Median of a side's per-repeat times, None when the side has none (not run, unsupported)."""
    times = [t for t in (side or {}).get("times") or [] if t is not None]
    return median(times) if times else None


def _success_rate(side: dict[str, Any]) -> float:
    """Fraction of repeats that succeeded (0 when there are none)."""
    successes = side.get("successes") or []
    return sum(bool(s) for s in successes) / len(successes) if successes else 0.0


def _outcome(baseline: dict[str, Any], candidate: dict[str, Any]) -> str:
    """Which OUTCOMES key a task falls under, comparing success rates over repeats."""
    off, on = _success_rate(baseline), _success_rate(candidate)
    if on > off:
        return "improvement"
    if on < off:
        return "regression"
    return "both" if on > 0 else "neither"


def task_times(summary: dict[str, Any]) -> Figure:
    """Scatter of per-task median agent time, OFF on x and ON on y, with the y = x line; colour = outcome."""
    fig = _figure(5.6, 5.2)
    points: dict[str, list[tuple[float, float]]] = {key: [] for key in OUTCOMES}
    for task in summary.get("per_task") or []:
        off, on = _median_time(task.get("baseline")), _median_time(task.get("candidate"))
        if off is None or on is None:
            continue
        points[_outcome(task["baseline"], task["candidate"])].append((off, on))
    pairs = [p for group in points.values() for p in group]
    if not pairs:
        return _empty(fig, "no task has times for both ON and OFF")
    ax = fig.subplots()
    top = max(max(p) for p in pairs) * 1.05 or 1.0
    ax.plot([0, top], [0, top], linestyle="--", color="black", linewidth=1, label="y = x (same time)")
    for key, group in points.items():
        if group:
            label, colour = OUTCOMES[key]
            ax.scatter([p[0] for p in group], [p[1] for p in group], color=colour, label=f"{label} ({len(group)})")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal")
    ax.set_xlabel("speculation OFF: median agent seconds")
    ax.set_ylabel("speculation ON: median agent seconds")
    faster = sum(on < off for off, on in pairs)
    ax.set_title(f"Per-task agent time: ON faster on {faster} of {len(pairs)} tasks")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def render(summary: dict[str, Any]) -> dict[str, Figure]:
    """Both figures of a summary, keyed by their PNG file name."""
    return {
        ACCEPTANCE_PNG: acceptance_by_position(summary.get("candidate") or {}),
        TASK_TIMES_PNG: task_times(summary),
    }


def save_plots(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write both figures as PNG files in out_dir (created if missing); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in render(summary).items():
        path = out_dir / name
        fig.savefig(path, dpi=100)
        paths.append(path)
    return paths
