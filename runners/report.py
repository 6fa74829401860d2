"""What the runner prints: a progress bar while tasks run, then one table comparing OFF and ON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from runners.backends import BACKENDS
from runners.outcomes import TaskOutcome

FILE_WIDTH = 150  # columns of tables written into a file or pipe (rich would squeeze them to 80)


def table_console(stderr: bool = False) -> Console:
    """A console for result tables: the terminal's width, or FILE_WIDTH when output goes to a file or pipe."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=max(console.width, FILE_WIDTH))
    return console


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{spec}}{suffix}"
    return f"{value}{suffix}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


ROWS: tuple[tuple[str, str, Any], ...] = (
    ("seconds per successful task", "seconds_per_success", lambda v: _fmt(v, ".1f", " s")),
    ("successes per minute", "successes_per_minute", lambda v: _fmt(v, ".3f")),
    ("success rate", "success_rate", lambda v: _fmt(v, ".0%")),
    ("successes / task runs", None, None),
    ("acceptance rate", "acceptance_rate", lambda v: _fmt(v, ".3f")),
    ("mean accepted length", "mean_accepted_length", lambda v: _fmt(v, ".2f")),
    ("decode tokens/s", "decode_tokens_per_s", lambda v: _fmt(v, ".1f")),
    ("prefill tokens reused / computed", None, None),
    ("peak memory (estimate on CPU)", "peak_memory_bytes", _mib),
    ("max context tokens", "max_context_tokens", _fmt),
    ("context exceeded", "context_exceeded", _fmt),
    ("agent time (evaluation apart)", "agent_time_s", lambda v: _fmt(v, ".1f", " s")),
    ("evaluation time", "evaluation_s", lambda v: _fmt(v, ".1f", " s")),
)


def _cell(side: dict[str, Any], label: str, key: str | None, fmt) -> str:
    if side.get("unsupported"):
        return "unsupported"
    if label.startswith("successes /"):
        return f"{side['successes']} / {side['tasks']}"
    if label.startswith("prefill tokens"):
        return f"{_fmt(side['reused_tokens'])} / {_fmt(side['prefilled_tokens'])}"
    return fmt(side.get(key))


def _peak_memory_label(summary: dict[str, Any]) -> str | None:
    """The peak-memory row's label when a side's backend measures something other than the engine does (else None)."""
    for described in (summary.get("backend") or {}).values():
        kind = BACKENDS.get(described.get("backend"))  # .get: a summary from another version may name others
        if kind is not None and kind.peak_memory_label:
            return kind.peak_memory_label
    return None


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """Metrics as rows, OFF and ON as columns, quality comparison at the bottom."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("OFF (drafter none)", justify="right")
    table.add_column("ON (candidate)", justify="right")
    base, cand = summary["baseline"], summary["candidate"]
    memory_label = _peak_memory_label(summary)
    for label, key, fmt in ROWS:
        shown = memory_label if memory_label and key == "peak_memory_bytes" else label
        table.add_row(shown, _cell(base, label, key, fmt), _cell(cand, label, key, fmt))
    if cand.get("unsupported"):
        table.add_row("unsupported because", "", cand["unsupported"])
        return table
    table.add_row("regressions (OFF solved, ON not)", "", _ids(summary["regressions"]))
    table.add_row("improvements (ON solved, OFF not)", "", _ids(summary["improvements"]))
    if summary["greedy"]:
        rows = summary["per_task"]
        diverged = [f"{r['instance_id']}@{r['first_divergence']}" for r in rows if r["first_divergence"] is not None]
        table.add_row(
            "greedy token streams diverged", "", f"{len(diverged)} of {len(rows)} tasks" + _ids(diverged, lead=": ")
        )
    table.add_row("lossy acceptance", "", "YES (outputs may differ)" if summary["lossy"] else "no (exact)")
    speedup = summary.get("speedup")
    table.add_row("speedup (OFF s/success / ON s/success)", "", _fmt(speedup, ".2f", "x"))
    _concurrency_rows(table, summary.get("concurrency") or {})
    return table


def _concurrency_rows(table: Table, block: dict[str, Any]) -> None:
    """Several agents at once: aggregate throughput per side and the ON/OFF ratio of the waves' wall times."""
    if not block:
        return
    sides = block["sides"]

    def side(name: str, key: str, fmt: str, unit: str = "") -> str:
        value = (sides.get(name) or {}).get(key)
        return _fmt(value, fmt, unit)

    def latency(name: str) -> str:
        lat = (sides.get(name) or {}).get("latency_s") or {}
        return "/".join(_fmt(lat.get(p), ".2f") for p in ("p50", "p90", "p99")) + " s"

    n = block["agents"]
    table.add_row(
        f"correct tasks/min ({n} agents at once)",
        side("baseline", "correct_tasks_per_minute", ".2f"),
        side("candidate", "correct_tasks_per_minute", ".2f"),
    )
    table.add_row(
        "s/success per agent",
        side("baseline", "seconds_per_success_per_agent", ".1f", " s"),
        side("candidate", "seconds_per_success_per_agent", ".1f", " s"),
    )
    table.add_row("request latency p50/p90/p99", latency("baseline"), latency("candidate"))
    ratios = " ".join(f"{x:.2f}" for x in block["throughput_ratio_repeats"])
    table.add_row(f"throughput ON/OFF at {n} agents", "", _fmt(block["throughput_ratio"], ".2f", "x") + f" [{ratios}]")


def _ids(ids: list[str], lead: str = "") -> str:
    if not ids:
        return "" if lead else "none"
    shown = ", ".join(ids[:4]) + (f" (+{len(ids) - 4} more)" if len(ids) > 4 else "")
    return lead + shown


class RunProgress:
    """A progress bar over task runs with the running OFF/ON figures (silent when disabled).

    Into a file or pipe, where a live bar never shows, it prints one plain line per finished task run instead.
    """

    def __init__(self, total: int, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[figures]}"),
            console=console,
            disable=not enabled,
        )
        self.task = self.progress.add_task("tasks", total=total, figures="")
        self.total, self.done = total, 0
        self.plain_lines = enabled and not self.progress.console.is_terminal
        self.counts = {"baseline": [0, 0, 0.0], "candidate": [0, 0, 0.0]}  # successes, runs, seconds

    def __enter__(self) -> RunProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, outcome: TaskOutcome) -> None:
        """Count one finished task run and refresh the running figures."""
        parts = []
        for side, label in (("baseline", "OFF"), ("candidate", "ON")):
            run = getattr(outcome, side)
            c = self.counts[side]
            if run is not None:
                c[0] += run.success
                c[1] += 1
                c[2] += run.time_s
            if c[1]:
                per = f"{c[2] / c[0]:.1f}s/success" if c[0] else "no success yet"
                parts.append(f"{label} {c[0]}/{c[1]} {per}")
        self.progress.update(self.task, advance=1, figures="  ".join(parts))
        self.done += 1
        self._plain(
            f"[{self.done}/{self.total}] {outcome.instance_id} r{outcome.repeat}: {_side_line(outcome)}"
            f" | running: {'  '.join(parts)}"
        )

    def episode(self, wave: Any, run: Any, finished: int, total: int) -> None:
        """One episode of a wave (several agents at once) ended: the wave's own count, before its outcomes arrive."""
        label = "OFF" if wave.side == "baseline" else "ON"
        self.progress.update(self.task, description=f"tasks ({label} wave r{wave.repeat}: {finished}/{total})")
        self._plain(
            f"[{label} wave r{wave.repeat} {finished}/{total}, {wave.agents} agents] {run.instance_id}: "
            f"{'resolved' if run.success else run.status} {run.time_s:.1f}s"
        )

    def _plain(self, text: str) -> None:
        """One plain line, as is (no markup), where no live bar shows (a file or pipe)."""
        if self.plain_lines:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _side_line(outcome: TaskOutcome) -> str:
    """`OFF resolved 1.9s · ON resolved 2.1s` for one finished task run."""
    out = []
    for side, label in (("baseline", "OFF"), ("candidate", "ON")):
        run = getattr(outcome, side)
        if run is not None:
            out.append(f"{label} {'resolved' if run.success else 'unresolved'} {run.time_s:.1f}s")
    return " · ".join(out)
