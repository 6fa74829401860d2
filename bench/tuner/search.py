"""Step 2 of `python -m bench tuner`: the measured values replayed to samplers over seeds, scored against the grid's
best (regret after a third of the grid, measured trials to within 5%)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from bench.tuner.grid import finite, grid_best, point_key, replay_space
from common.errors import ConfigError
from engine.engine import EngineConfig
from tuner import constraints
from tuner import study as studies
from tuner.objective import Objective, UnsupportedConfiguration
from tuner.optimize import max_asks
from tuner.points import drafter_points
from tuner.space import Space, suggest

# ---------------------------------------------------------------- input


WITHIN = 0.05  # "within 5% of the grid's best"
TARGET = "within 5% of the grid's best in at most a third of the grid's trials"
REPLAY_NOTE = (
    "replay of measured values: every trial looks up the value measured for its grid point in step 1; nothing "
    "is re-measured, so seeds differ by the search alone; a duplicate proposal reuses its value, measures nothing "
    "and queues an unmeasured point of its drafter, as in the tuner"
)
SAMPLERS = studies.SAMPLERS  # tpe, gp, random
SAMPLER_LABELS = {"tpe": "TPE", "gp": "GP", "random": "random"}


class ReplayedFailure(Exception):
    """The grid point's measured trial failed; its replay fails the same way."""


def parse_samplers(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`tpe,gp,random` (any subset, in the order given); unknown names list the allowed ones."""
    if text is None:
        return SAMPLERS
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip().lower() for item in items if item.strip()]
    unknown = [n for n in names if n not in SAMPLERS]
    if unknown or not names:
        raise ConfigError(f"--samplers {','.join(unknown) or '(empty)'}: choose from {', '.join(SAMPLERS)}")
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------- step 2: replay to the samplers


class ReplayObjective(Objective):
    """The tuner's objective with the measurement replaced by a look-up in the grid.

    Everything around the measurement is the tuner's own (`Objective.__call__`, `_earlier`, `_reuse`,
    `_queue_unmeasured` with revisit=skip): a duplicate reuses the earlier trial's value and queues an unmeasured
    point of its drafter, chosen with the study seed and the trial number as the tuner chooses it.
    """

    def __init__(self, grid: dict[str, Any], space: Space, base: EngineConfig, seed: int, points=None) -> None:
        from runners.interrupt import GracefulStop

        # What `Objective` reads of a setup around the measurement; the measurement itself is the grid's.
        setup = SimpleNamespace(
            workload=None,
            space=space,
            base=base,
            study=SimpleNamespace(seed=seed),
            tuner=SimpleNamespace(revisit="skip"),
        )
        super().__init__(setup, stop=GracefulStop())  # type: ignore[arg-type]  # duck-typed setup
        self.grid = grid
        self.table = {point_key(p["params"]): p for p in grid["points"]}
        if points is not None:
            self._points = points

    def _baseline(self, trial: optuna.Trial) -> float:
        """Trial 0, as in the tuner (it counts toward the sampler's startup trials)."""
        return self._replayed(trial, self.grid["baseline"])

    def _candidate(self, trial: optuna.Trial) -> float:
        suggest(trial, self.setup.space, self.setup.base)
        earlier = self._earlier(trial)
        if earlier is not None:
            return self._reuse(trial, earlier)
        row = self.table.get(point_key(trial.params))
        if row is None:
            raise KeyError(f"the sampler proposed {trial.params}, which is not a measured grid point")
        return self._replayed(trial, row)

    def _replayed(self, trial: optuna.Trial, row: dict[str, Any]) -> float:
        for key in ("speedup", "speedup_low", "speedup_high", "speedup_repeats", "measure"):
            trial.set_user_attr(key, row.get(key))
        if row.get("constraints"):
            constraints.store(trial, {name: float(v) for name, v in row["constraints"].items()})
        why = row.get("reason") or "failed when measured"
        if row["state"] == "PRUNED":
            trial.set_user_attr("reason", why)
            raise optuna.TrialPruned(why)
        if row["state"] != "COMPLETE":
            if str(why).startswith("unsupported"):
                trial.set_user_attr("reason", why)
                raise UnsupportedConfiguration(why)
            raise ReplayedFailure(why)
        return math.inf if row["value"] is None else float(row["value"])


def replay(
    grid: dict[str, Any],
    kind: str,
    seed: int,
    trials: int,
    startup_trials: int,
    *,
    prepared: tuple[Space, EngineConfig, dict] | None = None,
) -> dict[str, Any]:
    """One replayed search: the measured trials in order, and how the search ended.

    `measured`: (params, value or None unless feasible) of every trial that counts toward the budget, in order;
    `asks`: candidate trials including duplicates; `duplicates`: proposals that reused an earlier value;
    `ended`: budget (`trials` measured), exhausted (every point measured) or asks (the tuner's bound on asks).
    """
    if prepared is None:
        space, base = replay_space(grid)
        prepared = (space, base, drafter_points(space, base))
    space, base, points = prepared
    size = len(grid["points"])
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.CRITICAL)  # one study per seed: no "new study created" lines
    ended = "asks"

    def finished(study: optuna.Study, trial: FrozenTrial) -> None:
        nonlocal ended
        if len(studies.measured_keys(study)) >= size:
            ended = "exhausted"
        elif studies.budget_left(study, trials) == 0:
            ended = "budget"
        else:
            return
        study.stop()

    try:
        study = optuna.create_study(direction="minimize", sampler=studies.make_sampler(kind, seed, startup_trials))
        studies.ensure_baseline_queued(study)
        objective = ReplayObjective(grid, space, base, seed, points)
        asks = max_asks(trials + 1)  # as tuner/optimize.py bounds a study's asks
        study.optimize(
            objective,
            n_trials=asks,
            catch=(ReplayedFailure, UnsupportedConfiguration),
            callbacks=[finished],
        )
    finally:
        optuna.logging.set_verbosity(verbosity)
    candidates = [t for t in study.get_trials(deepcopy=False) if studies.role(t) == "candidate"]
    measured = []
    for t in candidates:
        if studies.counts_toward_budget(t):
            ok = t.state == TrialState.COMPLETE and constraints.feasible(t) and finite(t.value) is not None
            measured.append((dict(t.params), float(t.value) if ok and t.value is not None else None))
    return {
        "measured": measured,
        "asks": len(candidates),
        "duplicates": sum(bool(t.user_attrs.get("reused")) for t in candidates),
        "ended": ended,
    }


def within(value: float | None, best: float) -> bool:
    """`value` is within 5% of the grid's best (a hair of slack: a JSON round trip must not move the best out)."""
    return value is not None and value <= best * (1 + WITHIN) * (1 + 1e-12)


def score_history(values: Sequence[float | None], best: float, after: int) -> dict[str, Any]:
    """Best found so far after each measured trial, the regret % after `after` measured trials (or at the end of
    a shorter history), the final regret and the measured trials needed to come within 5% of `best`."""
    running: list[float | None] = []
    current: float | None = None
    reached: int | None = None
    for n, value in enumerate(values, start=1):
        if value is not None and (current is None or value < current):
            current = value
        running.append(current)
        if reached is None and within(current, best):
            reached = n
    at = running[min(after, len(running)) - 1] if running and after > 0 else None
    return {
        "best": current,
        "regret_pct": (at / best - 1) * 100 if at is not None else None,
        "final_regret_pct": (current / best - 1) * 100 if current is not None else None,
        "trials_to_within": reached,
        "best_after": running,
    }


def search_seeds(
    grid: dict[str, Any], kind: str, seeds: int, trials: int, startup_trials: int, after: int
) -> list[dict[str, Any]]:
    """One replayed search per seed, scored against the grid's best."""
    best = grid_best(grid)
    if best is None:
        raise ConfigError("no grid point is feasible with a finite value: there is no best to search for")
    space, base = replay_space(grid)
    prepared = (space, base, drafter_points(space, base))
    rows = []
    for seed in range(seeds):
        run = replay(grid, kind, seed, trials, startup_trials, prepared=prepared)
        values = [value for _, value in run["measured"]]
        score = score_history(values, best["value"], after)
        found = run["measured"][values.index(score["best"])][0] if score["best"] is not None else None
        rows.append(
            {
                "seed": seed,
                **score,
                "best_params": found,
                "measured": len(run["measured"]),
                "asks": run["asks"],
                "duplicates": run["duplicates"],
                "ended": run["ended"],
                "order": [params for params, _ in run["measured"]],
            }
        )
    return rows


def _median(values: list[float]) -> float | None:
    m = statistics.median(values) if values else math.inf
    return m if math.isfinite(m) else None


def _span(values: list[float]) -> dict[str, float | None]:
    return {"min": finite(min(values)) if values else None, "max": finite(max(values)) if values else None}


def summarize_seeds(rows: list[dict], target_trials: int) -> dict[str, Any]:
    """Median and min–max (max: the worst seed) over seeds; null where a figure is "never"."""
    regrets = [math.inf if r["regret_pct"] is None else r["regret_pct"] for r in rows]
    reach = [math.inf if r["trials_to_within"] is None else r["trials_to_within"] for r in rows]
    by_target = sum(n <= target_trials for n in reach)
    return {
        "seeds": len(rows),
        "regret_pct": {"median": _median(regrets), **_span(regrets)},
        "trials_to_within": {"median": _median(reach), **_span(reach)},
        "within_ever": sum(math.isfinite(n) for n in reach),
        "within_by_target": by_target,
        "share_within_by_target": by_target / len(rows) if rows else None,
        "duplicates_median": statistics.median(r["duplicates"] for r in rows) if rows else None,
        "asks_median": statistics.median(r["asks"] for r in rows) if rows else None,
        "ended": {how: sum(r["ended"] == how for r in rows) for how in ("exhausted", "budget", "asks")},
    }


def rank_samplers(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Samplers best first, ties grouped: share of seeds within 5% by a third of the grid, then median regret
    after it, then the median trials to within 5%."""

    def key(kind: str) -> tuple[float, float, float]:
        s = summary[kind]
        regret, reach = s["regret_pct"]["median"], s["trials_to_within"]["median"]
        return (
            -(s["share_within_by_target"] or 0.0),
            round(math.inf if regret is None else regret, 9),
            math.inf if reach is None else reach,
        )

    groups: list[list[str]] = []
    for kind in sorted(summary, key=key):
        if groups and key(groups[-1][0]) == key(kind):
            groups[-1].append(kind)
        else:
            groups.append([kind])
    return groups


def verdict(groups: list[list[str]]) -> str:
    """`TPE ahead of random = GP` from `rank_samplers`'s groups."""
    if len(groups) == 1 and len(groups[0]) > 1:
        return "no difference between " + " and ".join(SAMPLER_LABELS[k] for k in groups[0])
    return " ahead of ".join(" = ".join(SAMPLER_LABELS[k] for k in group) for group in groups)


def run_replays(
    grid: dict[str, Any],
    seeds: int,
    trials: int | None,
    startup_trials: int,
    samplers: Sequence[str] = SAMPLERS,
) -> dict[str, Any]:
    """Step 2 for every sampler, with the target's verdict per sampler."""
    size = len(grid["points"])
    target_trials = math.ceil(size / 3)
    trials = size if trials is None else trials
    after = min(target_trials, trials)
    per_seed = {kind: search_seeds(grid, kind, seeds, trials, startup_trials, after) for kind in samplers}
    summary = {kind: summarize_seeds(rows, target_trials) for kind, rows in per_seed.items()}
    groups = rank_samplers(summary)
    return {
        "note": REPLAY_NOTE,
        "samplers": list(samplers),
        "trials": trials,
        "regret_after": after,
        "startup_trials": startup_trials,
        "seeds": seeds,
        "within_pct": WITHIN * 100,
        "target": {
            "text": TARGET,
            "grid_points": size,
            "trials": target_trials,
            # Met when at least half the seeds (the median seed) get there within a third of the grid.
            "met": {kind: s["share_within_by_target"] >= 0.5 for kind, s in summary.items()},
        },
        "per_seed": per_seed,
        "summary": summary,
        "ranking": groups,
        "verdict": verdict(groups),
    }
