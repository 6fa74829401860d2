"""`python -m bench tuner --pruners`: the study's pruners replayed over a measured grid's per-task ratios.

Every grid point was measured with no pruner, so its paired ratio on every task run (candidate ÷ OFF time at the
task's stable position, `task_values`) is known. Per seed the points are visited in one shuffled order (the same
order for every pruner), each a trial of an in-memory Optuna study with the pruner the tuner would build
(`tuner.study.make_pruner`), trial 0 being the recording's OFF (ratio 1 on every task run). A trial reports its
ratios one by one as the tuner's objective does (no pruner is asked after the last one); a pruned trial spent the
task runs it reported and found nothing, a complete one spent all of them and found its measured value. Per pruner
and over seeds: the task runs spent (of the grid's whole), whether the search still ends within 5% of the grid's
best (a pruner that drops the best point loses the answer), and the task runs spent until it first came within 5%.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from bench.tuner.grid import finite, grid_best
from bench.tuner.search import within
from common.errors import ConfigError
from tuner import study as studies

PRUNER_NOTE = (
    "replay of measured per-task ratios: every seed visits the grid's points in one shuffled order, the same for "
    "every pruner; a pruned point spends the task runs it reported and finds nothing"
)


def parse_pruners(text: str | Sequence[str]) -> tuple[str, ...]:
    """`none,wilcoxon,halving` (any subset, in the order given); unknown names list the allowed ones."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip().lower() for item in items if item.strip()]
    unknown = [n for n in names if n not in studies.PRUNERS]
    if unknown or not names:
        raise ConfigError(f"--pruners {','.join(unknown) or '(empty)'}: choose from {', '.join(studies.PRUNERS)}")
    return tuple(dict.fromkeys(names))


def _ratios(row: dict[str, Any], where: str) -> list[float]:
    values = row.get("task_values")
    if not values:
        raise ConfigError(f"{where} has no per-task ratios (task_values): measure the grid again without --reuse-grid")
    return [float(v) for _, v in sorted(values)]


def replay_pruner(grid: dict[str, Any], pruner: str, order: Sequence[int], settings: dict[str, Any]) -> dict:
    """One search over the points in `order` with `pruner`: task runs spent, the best found after each point."""
    study = optuna.create_study(
        direction="minimize",
        pruner=studies.make_pruner(pruner, settings["prune_p"], settings["startup_steps"], settings["reduction"]),
    )
    runs = len(_ratios(grid["points"][order[0]], f"point {order[0]}"))
    base = study.ask()
    for step in range(runs):
        base.report(1.0, step)  # the recording's OFF: paired with itself on every task run
    study.tell(base, grid["baseline"]["value"])
    spent, best, history = 0, None, []
    for i in order:
        row = grid["points"][i]
        ratios = _ratios(row, f"point {i}")
        trial = study.ask()
        pruned = False
        for step, ratio in enumerate(ratios):
            trial.report(ratio, step)
            spent += 1
            if step + 1 < len(ratios) and trial.should_prune():
                pruned = True
                break
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, row["value"] if row["value"] is not None else math.inf)
            if row["feasible"] and row["value"] is not None and (best is None or row["value"] < best):
                best = row["value"]
        history.append((spent, best))
    return {"spent": spent, "history": history, "pruned": sum(t.state == TrialState.PRUNED for t in study.trials)}


def _replay_seeds(
    grid: dict[str, Any],
    pruners: Sequence[str],
    seeds: int,
    settings: dict[str, Any],
    usable: list[int],
    best: float,
    per: dict[str, list[dict[str, Any]]],
) -> None:
    """Every pruner on the same shuffled order per seed, each search's scores appended to `per`."""
    for seed in range(seeds):
        order = random.Random(seed).sample(usable, len(usable))
        for pruner in pruners:
            run = replay_pruner(grid, pruner, order, settings)
            reached = next((spent for spent, found in run["history"] if within(found, best)), None)
            final = run["history"][-1][1]
            per[pruner].append(
                {
                    "seed": seed,
                    "spent": run["spent"],
                    "pruned": run["pruned"],
                    "final_regret_pct": (final / best - 1) * 100 if final is not None else None,
                    "ends_within": within(final, best),
                    "spent_to_within": reached,
                }
            )


def run_pruner_replays(grid: dict[str, Any], pruners: Sequence[str], seeds: int, settings: dict[str, Any]) -> dict:
    """Every pruner on the same shuffled orders, seed by seed, scored against the grid's best."""
    best = grid_best(grid)
    if best is None:
        raise ConfigError("no grid point is feasible with a finite value: there is no best to search for")
    usable = [i for i, p in enumerate(grid["points"]) if p["state"] == "COMPLETE"]
    whole = sum(len(_ratios(grid["points"][i], f"point {i}")) for i in usable)
    per: dict[str, list[dict[str, Any]]] = {p: [] for p in pruners}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.CRITICAL)  # one study per seed and pruner: no "study created" lines
    try:
        _replay_seeds(grid, pruners, seeds, settings, usable, best["value"], per)
    finally:
        optuna.logging.set_verbosity(verbosity)
    summary = {}
    for pruner, rows in per.items():
        reach = [math.inf if r["spent_to_within"] is None else r["spent_to_within"] for r in rows]
        median_reach = statistics.median(reach)
        regrets = [math.inf if r["final_regret_pct"] is None else r["final_regret_pct"] for r in rows]
        summary[pruner] = {
            "final_regret_pct": {"median": finite(statistics.median(regrets)), "max": finite(max(regrets))},
            "ends_within_1pct": sum(r["final_regret_pct"] is not None and r["final_regret_pct"] <= 1.0 for r in rows),
            "spent_share": statistics.median(r["spent"] for r in rows) / whole,
            "pruned_median": statistics.median(r["pruned"] for r in rows),
            "ends_within": sum(r["ends_within"] for r in rows),
            "spent_to_within": {
                "median": median_reach if math.isfinite(median_reach) else None,
                "max": max(reach) if all(math.isfinite(n) for n in reach) else None,
            },
        }
    return {
        "note": PRUNER_NOTE,
        "pruners": list(pruners),
        "settings": settings,
        "seeds": seeds,
        "points": len(usable),
        "task_runs_whole": whole,
        "per_seed": per,
        "summary": summary,
        "verdict": pruner_verdict(summary),
    }


def pruner_verdict(summary: dict[str, dict[str, Any]]) -> str:
    """Pruners best first, ties grouped: the seeds still ending within 5% of the grid's best, then those ending at
    1% of it, then the fewest task runs spent (the answer first, the saving after it)."""

    def key(name: str) -> tuple[int, int, float]:
        s = summary[name]
        return (-s["ends_within"], -s["ends_within_1pct"], round(s["spent_share"], 2))

    groups: list[list[str]] = []
    for name in sorted(summary, key=key):
        if groups and key(groups[-1][0]) == key(name):
            groups[-1].append(name)
        else:
            groups.append([name])
    return " ahead of ".join(" = ".join(group) for group in groups)
