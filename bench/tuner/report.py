"""The report of `python -m bench tuner`: one JSON-ready object, and its rich tables."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.tuner.grid import grid_best
from bench.tuner.search import SAMPLER_LABELS, within


def overlapping_best(grid: dict[str, Any], best: dict[str, Any] | None) -> int | None:
    """How many other feasible points the measurement cannot tell from the best: their speedup interval overlaps
    the best's (None when the best has no interval: too few tasks)."""
    if best is None or best.get("speedup_low") is None:
        return None
    overlapping = [
        p
        for p in grid["points"]
        if p is not best
        and p["feasible"]
        and p.get("speedup_high") is not None
        and p["speedup_high"] >= best["speedup_low"]
    ]
    return len(overlapping)


def report(grid: dict[str, Any], replays: dict[str, Any], grid_file: Path, reused: bool) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready object."""
    best = grid_best(grid)
    close = [p for p in grid["points"] if best and p["feasible"] and within(p["value"], best["value"])]
    return {
        "grid_file": str(grid_file),
        "grid_reused": reused,
        "grid": grid,
        "grid_best": best,
        "grid_best_speedup": best["speedup"] if best else None,
        "points_within": len(close),
        "points_overlapping_best": overlapping_best(grid, best),
        "replay": replays,
    }


# ---------------------------------------------------------------- the tables


def _knobs(params: dict[str, Any] | None) -> str:
    """`gamma=4 min_match=2` (the drafter prefix dropped)."""
    if not params:
        return ""
    return " ".join(f"{k.split('.', 1)[-1]}={v}" for k, v in params.items() if k != "drafter")


def _num(value: float | None, spec: str, never: str = "-") -> str:
    return never if value is None else format(value, spec)


def _sorted_points(points: list[dict]) -> list[dict]:
    """Feasible points best first, then infeasible ones, then failed ones."""

    def rank(p: dict) -> tuple:
        value = p["value"]
        return (not p["feasible"], p["state"] != "COMPLETE", math.inf if value is None else value)

    return sorted(points, key=rank)


def _interval(row: dict[str, Any]) -> str:
    low, high = row.get("speedup_low"), row.get("speedup_high")
    return "-" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"


def grid_view(rep: dict[str, Any]):
    """The measured grid, sorted, with the recording and each point's paired speedup and distance to the best."""
    from rich.table import Table

    grid, best = rep["grid"], rep["grid_best"]
    table = Table(
        title="Measured grid (value: the recording's s/success ÷ the trial's paired speedup, sorted)",
        title_justify="left",
    )
    columns = ("#", "drafter", "knobs", "value", "speedup", "95% interval", "per repeat", "vs best", "accept", "state")
    for col in columns:
        left = col in ("drafter", "knobs", "per repeat", "state")
        table.add_column(col, justify="left" if left else "right", no_wrap=True)
    table.add_row(
        "", "OFF", "recording", _num(grid["baseline"]["value"], ".3f"), "1.00x", "", "", "", "", "complete", style="dim"
    )
    for rank, p in enumerate(_sorted_points(grid["points"]), start=1):
        value = p["value"]
        gap = value / best["value"] - 1 if best and value is not None else None
        state = "complete" if p["feasible"] else f"infeasible: {', '.join(p['violated'])}"
        if p["state"] != "COMPLETE":
            state = f"{p['state'].lower()}: {p.get('reason') or '?'}"[:60]
        elif p.get("divergences"):
            state += f" ({p['divergences']} divergence(s), {p.get('live_tasks', 0)} task(s) live)"
        style = None  # green: feasible and within 5% of the best (bold: the best itself)
        if best and p["feasible"] and within(value, best["value"]):
            style = "bold green" if p["params"] == best["params"] else "green"
        table.add_row(
            str(rank),
            p["params"].get("drafter", "?"),
            _knobs(p["params"]),
            _num(value, ".3f"),
            _num(p.get("speedup"), ".2f") + ("x" if p.get("speedup") is not None else ""),
            _interval(p),
            " ".join(f"{v:.2f}" for v in p.get("speedup_repeats") or []) or "-",
            _num(gap * 100 if gap is not None else None, "+.1f") + ("%" if gap is not None else ""),
            _num(p.get("acceptance_rate"), ".2f"),
            state,
            style=style,
        )
    return table


def seeds_view(replays: dict[str, Any]):
    """Per seed and sampler: regret after a third of the grid, measured trials to within 5%, duplicates."""
    from rich.table import Table

    after = replays["regret_after"]
    table = Table(
        title=f"Per seed (replay of measured values): regret % after {after} measured trials, measured trials to "
        "within 5%, duplicate proposals (free)",
        title_justify="left",
    )
    table.add_column("seed", justify="right", no_wrap=True, min_width=4)
    for kind in replays["samplers"]:
        for col in ("regret %", "to 5%", "dup"):
            table.add_column(f"{SAMPLER_LABELS[kind]} {col}", justify="right", no_wrap=True)
    for i in range(replays["seeds"]):
        cells = [str(i)]
        for kind in replays["samplers"]:
            row = replays["per_seed"][kind][i]
            cells += [
                _num(row["regret_pct"], ".1f", "none"),
                _num(row["trials_to_within"], "d", "never"),
                str(row["duplicates"]),
            ]
        table.add_row(*cells)
    return table


def _spread(stat: dict[str, Any], spec: str, never: str) -> str:
    return f"{_num(stat['median'], spec, never)} ({_num(stat['min'], spec, never)}–{_num(stat['max'], spec, never)})"


def _share(count: int, seeds: int) -> str:
    return f"{count}/{seeds} ({100 * count / seeds:.0f}%)" if seeds else "-"


def summary_view(replays: dict[str, Any]):
    """Median (min–max) over seeds, one column per sampler."""
    from rich.table import Table

    after, target = replays["regret_after"], replays["target"]["trials"]
    table = Table(title=f"Over {replays['seeds']} seeds: median (min–max)", title_justify="left")
    table.add_column("", justify="left", no_wrap=True)
    for kind in replays["samplers"]:
        table.add_column(f"{SAMPLER_LABELS[kind]} (make_sampler({kind!r}))", justify="right", no_wrap=True)

    def ended(s: dict[str, Any]) -> str:
        return ", ".join(f"{n} {how}" for how, n in s["ended"].items() if n) or "-"

    rows = [
        (f"regret % after {after} measured trials", lambda s: _spread(s["regret_pct"], ".1f", "none")),
        ("measured trials to within 5%", lambda s: _spread(s["trials_to_within"], "g", "never")),
        ("  worst seed", lambda s: _num(s["trials_to_within"]["max"], "g", "never")),
        (f"seeds within 5% by {target} (a third of the grid)", lambda s: _share(s["within_by_target"], s["seeds"])),
        ("seeds within 5% at all", lambda s: _share(s["within_ever"], s["seeds"])),
        ("duplicate proposals (median, free)", lambda s: f"{s['duplicates_median']:g}"),
        ("how the searches ended", ended),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(replays["summary"][kind]) for kind in replays["samplers"]))
    return table


def render(rep: dict[str, Any]) -> None:
    """Rich tables: the grid, the per-seed replays, the summary and the target's verdict."""
    from runners.report import table_console

    console = table_console()
    grid, replays, best = rep["grid"], rep["replay"], rep["grid_best"]
    drafters = sorted({p["params"].get("drafter", "?") for p in grid["points"]})
    how = f"reused from {rep['grid_file']}" if rep["grid_reused"] else f"saved to {rep['grid_file']}"
    console.print(
        f"[bold]bench tuner[/] grid {len(grid['points'])} points ({', '.join(drafters)}) on "
        f"{grid['suite']}/{grid['split']}: {len(grid['tasks'])} task(s) x {grid['repeats']} repeat(s), model "
        f"{grid['model']}, paired with OFF in every trial ({grid['measure']}, clock {grid['clock']}), pruner none "
        f"· measured {grid['measured_at']} in {grid['wall_s']:.1f} s (+{grid['load_s']:.1f} s loading) · {how}",
        highlight=False,
    )
    console.print(grid_view(rep))
    if best is not None:
        apart = rep["points_overlapping_best"]
        console.print(
            f"grid best: {best['params']['drafter']} {_knobs(best['params'])}, value {best['value']:.3f} "
            f"({_num(rep['grid_best_speedup'], '.2f')}x over OFF, paired); {rep['points_within']} of "
            f"{len(grid['points'])} points are within 5% of it"
            + ("" if apart is None else f"; {apart} other point(s) have a speedup interval overlapping the best's"),
            highlight=False,
        )
    console.print(
        f"[dim]{replays['note']}. Up to {replays['trials']} measured trials per search after the OFF trial 0, "
        f"{replays['startup_trials']} startup trials (conf/study/default.yaml; trial 0 counts, as in the tuner), "
        f"seeds 0–{replays['seeds'] - 1}.[/]"
    )
    console.print(seeds_view(replays))
    console.print(summary_view(replays))
    target = replays["target"]
    verdicts = []
    for kind in replays["samplers"]:
        s = replays["summary"][kind]
        met = "[green]met[/]" if target["met"][kind] else "[red]not met[/]"
        verdicts.append(f"{SAMPLER_LABELS[kind]} {_share(s['within_by_target'], s['seeds'])} of seeds → {met}")
    console.print(
        f"target: {target['text']} (≤ {target['trials']} of {target['grid_points']} measured trials, met by the "
        f"median seed): {' · '.join(verdicts)}"
    )
    console.print(
        f"here: [bold]{replays['verdict']}[/] (share of seeds within 5% by {target['trials']} measured trials, then "
        f"median regret after {replays['regret_after']}, then median trials to within 5%)"
    )
    if rep.get("pruners"):
        console.print(pruners_view(rep["pruners"]))
        console.print(
            f"pruners here: [bold]{rep['pruners']['verdict']}[/] (seeds still ending within 5% of the grid's best, "
            "then within 1%, then the fewest task runs spent)"
        )


def pruners_view(p: dict[str, Any]):
    """The pruners replayed over the grid's per-task ratios: one row per pruner."""
    from rich.table import Table

    table = Table(
        title=f"pruners over {p['points']} points x their task runs ({p['task_runs_whole']} in all), "
        f"{p['seeds']} shuffled orders",
        caption=p["note"],
    )
    columns = ("pruner", "task runs spent", "trials pruned", "seeds ending within 5%", "within 1%")
    for column in (*columns, "final regret %", "task runs to within 5%"):
        table.add_column(column)
    for name in p["pruners"]:
        s = p["summary"][name]
        reach, regret = s["spent_to_within"], s["final_regret_pct"]
        table.add_row(
            name,
            f"{100 * s['spent_share']:.0f}%",
            f"{s['pruned_median']:g}",
            f"{s['ends_within']} of {p['seeds']}",
            f"{s['ends_within_1pct']} of {p['seeds']}",
            f"{_num(regret['median'], '.2f', 'never')} (worst {_num(regret['max'], '.2f', 'never')})",
            f"{_num(reach['median'], 'g', 'never')} (worst {_num(reach['max'], 'g', 'never')})",
        )
    return table
