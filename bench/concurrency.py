"""`python -m bench concurrency`: the seeds' load test as a command, on the built-in engine and on llama-server.

For every method (drafter) and backend: correct tasks per minute with one agent and with N agents at once,
OFF and ON side by side, acceptance, and where speculation stops paying (the crossover). Same tasks, same
weights, greedy, exact acceptance. Each level runs every side as a wave over the tasks (runners/concurrency.py:
N agent threads, one engine scheduler or one server with N slots); per repeat and level, OFF runs once and
every method after it, in an order rotated by repeat, so each method's ON/OFF is paired with an OFF measured
in the same stretch of the same session. A method a backend cannot run is shown with the reason.

A speedup here is the ratio of correct tasks per minute (ON / OFF) at the same level in the same repeat; the
median over repeats is shown with every repeat, and the crossover is the first level whose median is below 1.
"""

from __future__ import annotations

import functools
import operator
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common.errors import ConfigError

DEFAULT_METHODS = ("ngram", "suffix", "draft_model", "mtp")
BACKENDS = ("builtin", "llama-server")


@dataclass(frozen=True)
class ConcurrencySetup:
    """What `bench concurrency` measures."""

    levels: tuple[int, ...] = (1, 4)  # agents at once
    methods: tuple[str, ...] = DEFAULT_METHODS  # conf/engine options (none is OFF, always measured)
    backends: tuple[str, ...] = BACKENDS  # engine.backend values
    split: str = "test"  # swe-lite split of the tasks (a spread subset)
    limit: int = 20  # tasks
    repeats: int = 3  # passes over every (level, backend, method)
    threads: int = 1  # torch CPU threads and llama-server's -t
    out: str = "runs/bench-concurrency"  # where the waves' run folders go


def _compose(setup: ConcurrencySetup, *overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from runners.cli import CONF_DIR
    from runners.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(
            "config",
            overrides=[
                f"task.split={setup.split}",
                f"task.limit={setup.limit}",
                f"run.threads={setup.threads}",
                "run.progress=false",
                "tracking.enabled=false",
                *overrides,
            ],
        )


def run_concurrency_bench(setup: ConcurrencySetup, progress: bool = True) -> dict[str, Any]:
    """Measure every (repeat, level, backend, method) wave pair; return the report."""
    import torch

    from engine.drafters import Needs, resolve_drafter
    from runners.backends import backend_class
    from runners.compare import Baseline, Comparison
    from runners.config import baseline_config, check_config, engine_config
    from runners.models import load_models
    from runners.summary import side_summary
    from runners.workload import Workload
    from tasks.environment import make_environment
    from tasks.suites import load_suite

    def say(text: str) -> None:
        if progress:
            print(f"bench concurrency: {text}", file=sys.stderr, flush=True)

    from runners.cli import CONF_DIR

    allowed = sorted(p.stem for p in (Path(CONF_DIR) / "engine").glob("*.yaml") if p.stem != "none")
    unknown = [m for m in setup.methods if m not in allowed]
    if unknown:
        raise ConfigError(f"unknown method(s) {', '.join(unknown)}; allowed (conf/engine): {', '.join(allowed)}")
    base = _compose(setup)
    check_config(base)
    torch.set_num_threads(setup.threads)
    instances = load_suite("swe-lite", setup.split, setup.limit, None, None, "spread")
    environment = make_environment("swe-lite", base.sandbox.name, {})
    m = base.model
    models = load_models(m.target, m.draft, device=m.device or "auto", dtype=m.dtype, forward=m.forward, mtp=m.mtp)
    out = Path(setup.out)
    configs = {name: engine_config(_compose(setup, f"engine={name}").engine, 0) for name in setup.methods}
    needs = functools.reduce(operator.or_, (resolve_drafter(c.drafter).needs for c in configs.values()), Needs())
    servers = {}
    for backend in setup.backends:
        servers[backend] = backend_class(backend).settings_from(base, models, out / "server-logs", needs)
    # results[(backend, level, method)] -> per repeat: {"on": side summary, "off": side summary, "wave": ...}
    results: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    t_start = time.perf_counter()
    for r in range(setup.repeats):
        for level in setup.levels:
            for backend in setup.backends:
                workload = Workload.from_config(base, models, instances, environment, server=servers[backend])
                workload = workload.with_(concurrency=level, repeats=1)
                plain = replace(baseline_config(configs[setup.methods[0]]), backend=backend)
                say(f"repeat {r + 1}/{setup.repeats}, {level} agent(s), {backend}: OFF")
                off = Comparison(workload.with_(plain=plain), None, out / f"r{r}-n{level}-{backend}-off")
                off_outcomes = list(off)
                off_side = side_summary([o.baseline for o in off_outcomes if o.baseline], 1)
                off_wall = _wall(off.waves, off_outcomes, "baseline")
                order = list(setup.methods[r % len(setup.methods) :]) + list(setup.methods[: r % len(setup.methods)])
                for method in order:
                    config = replace(configs[method], backend=backend)
                    say(f"repeat {r + 1}/{setup.repeats}, {level} agent(s), {backend}: {method}")
                    comparison = Comparison(
                        workload,
                        config,
                        out / f"r{r}-n{level}-{backend}-{method}",
                        baseline=Baseline.from_outcomes(off_outcomes),
                    )
                    outcomes = list(comparison)
                    on_runs = [o.candidate for o in outcomes if o.candidate is not None]
                    entry: dict[str, Any] = {"unsupported": comparison.unsupported}
                    if comparison.unsupported is None:
                        on_wall = _wall(comparison.waves, outcomes, "candidate")
                        on_side = side_summary(on_runs, 1)
                        entry.update(
                            off_correct_per_min=_per_min(off_side["successes"], off_wall),
                            on_correct_per_min=_per_min(on_side["successes"], on_wall),
                            off_wall_s=off_wall,
                            on_wall_s=on_wall,
                            acceptance_rate=on_side["acceptance_rate"],
                            mean_accepted_length=on_side["mean_accepted_length"],
                            diverged=sum(o.first_divergence is not None for o in outcomes),
                            regressions=sum(o.baseline.success and not o.candidate.success for o in outcomes),
                        )
                    results.setdefault((backend, level, method), []).append(entry)
    rows = []
    for (backend, level, method), entries in results.items():
        done = [e for e in entries if e["unsupported"] is None]
        ratios = [
            e["on_correct_per_min"] / e["off_correct_per_min"]
            for e in done
            if e["off_correct_per_min"] and e["on_correct_per_min"] is not None
        ]
        rows.append(
            {
                "backend": backend,
                "agents": level,
                "method": method,
                "unsupported": entries[0]["unsupported"] if not done else None,
                "off_correct_per_min": [e["off_correct_per_min"] for e in done],
                "on_correct_per_min": [e["on_correct_per_min"] for e in done],
                "on_vs_off": statistics.median(ratios) if ratios else None,
                "on_vs_off_repeats": ratios,
                "acceptance_rate": statistics.median(e["acceptance_rate"] for e in done) if done else None,
                "mean_accepted_length": statistics.median(e["mean_accepted_length"] for e in done) if done else None,
                "diverged": sum(e["diverged"] for e in done),
                "regressions": sum(e["regressions"] for e in done),
            }
        )
    return {
        "setup": {**vars(setup), "wall_s": time.perf_counter() - t_start, "tasks": len(instances)},
        "rows": rows,
        "crossover": crossover(rows, setup.levels),
    }


def _wall(waves: list[Any], outcomes: list[Any], side: str) -> float:
    """A side's wall seconds over the tasks: its waves' (N > 1) or, serially, its runs' agent + evaluation time."""
    mine = [w.wall_s for w in waves if w.side == side]
    if mine:
        return sum(mine)
    runs = [getattr(o, side) for o in outcomes if getattr(o, side) is not None]
    return sum(r.time_s + r.evaluation_s for r in runs)


def _per_min(successes: int, wall_s: float) -> float | None:
    return successes / (wall_s / 60.0) if wall_s > 0 else None


def crossover(rows: list[dict[str, Any]], levels: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Per backend and method: the first level whose median ON/OFF is below 1 (None: ON paid at every level)."""
    out: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda x: x["agents"]):
        key = f"{row['backend']}/{row['method']}"
        entry = out.setdefault(key, {"first_level_below_1": None, "ratios": {}})
        entry["ratios"][row["agents"]] = row["on_vs_off"]
        if row["on_vs_off"] is not None and row["on_vs_off"] < 1 and entry["first_level_below_1"] is None:
            entry["first_level_below_1"] = row["agents"]
    return out


def render(report: dict[str, Any]) -> None:
    """One rich table per backend: correct tasks/min OFF and ON per level, ratio with repeats, acceptance."""
    from rich.table import Table

    from runners.report import table_console

    console = table_console()
    s = report["setup"]
    console.print(
        f"[bold]bench concurrency[/] {s['tasks']} swe-lite/{s['split']} tasks · levels {s['levels']} · repeats "
        f"{s['repeats']} · threads {s['threads']} · {s['wall_s']:.0f} s"
    )
    for backend in s["backends"]:
        table = Table(title=f"{backend}: correct tasks per minute (every repeat), ON/OFF at the same level")
        for col in ("method", "agents", "OFF /min", "ON /min", "ON/OFF", "acceptance", "acc len", "diverged", "regr"):
            table.add_column(col, justify="left" if col == "method" else "right")
        for row in sorted(
            (x for x in report["rows"] if x["backend"] == backend), key=lambda x: (x["method"], x["agents"])
        ):
            if row["unsupported"]:
                table.add_row(
                    row["method"], str(row["agents"]), "", "", f"unsupported: {row['unsupported']}", "", "", "", ""
                )
                continue
            fmt = lambda xs: " ".join("-" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
            ratio = "-" if row["on_vs_off"] is None else f"{row['on_vs_off']:.2f}"
            table.add_row(
                row["method"],
                str(row["agents"]),
                fmt(row["off_correct_per_min"]),
                fmt(row["on_correct_per_min"]),
                f"{ratio} [{' '.join(f'{x:.2f}' for x in row['on_vs_off_repeats'])}]",
                "-" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.2f}",
                "-" if row["mean_accepted_length"] is None else f"{row['mean_accepted_length']:.2f}",
                str(row["diverged"]),
                str(row["regressions"]),
            )
        console.print(table)
    console.print(
        "crossover: " + "; ".join(f"{key}: {describe_crossover(e)}" for key, e in report["crossover"].items())
    )


def describe_crossover(entry: dict[str, Any]) -> str:
    """One phrase: where ON stops beating OFF over the levels measured."""
    levels = sorted(int(n) for n in entry["ratios"])  # JSON keys are strings
    below = entry["first_level_below_1"]
    if below is None:
        return f"ON at least as fast as OFF at every level measured ({', '.join(map(str, levels))} agents)"
    if below == levels[0]:
        return f"ON slower than OFF from {below} agent(s) on"
    paid = [n for n in levels if n < below]
    return f"ON pays up to {paid[-1]} agent(s), slower than OFF from {below}"
