"""`python -m bench tuner`: the tuner's *search* quality, separated from measurement noise.

Step 1 measures, once, an exhaustive grid over a small space with the real objective: every grid point
is a real trial of `tuner.objective.Objective` (the same `Comparison` against one OFF baseline, measured
first as trial 0) on the tuner's search tasks (swe-lite dev, a `spread` subset shuffled with the study
seed, bundled models, local sandbox, pruner none). The default grid is ngram gamma {1,2,4,6,8} x
min_match {1,2,3} and suffix gamma {2,4,8,12} x scope {session, engine}: 23 points, written as a space of
categorical knobs so `tuner.space.suggest` can only yield grid points. The measured table (params ->
seconds per success, plus the baseline) is saved as JSON and can be reused instead of re-measured.

Step 2 replays the measured values: for each seed, the tuner's own sampler (`tuner.study.make_sampler`
with the tuner's startup count) searches the same space, and each trial *looks up* the value measured
for the suggested point, so two seeds differ only by the search, never by timing noise. Per seed: the
best found after N trials, the regret against the grid's best and the trials needed to come within 5%
of it; then the median and spread over seeds, side by side with a random search (optuna's
RandomSampler, same seeds). The target: within 5% of the grid's best in at most a third of the grid's
trials.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from engine.engine import EngineConfig
from tuner import constraints
from tuner import study as studies
from tuner.objective import ROLE
from tuner.space import Space, load_space, suggest

DEFAULT_GRID_FILE = Path("runs/bench-tuner/grid.json")
GRID_KIND = "spectune-bench-tuner-grid"
GRID_VERSION = 1
WITHIN = 0.05  # "within 5% of the grid's best"
TARGET = "within 5% of the grid's best in at most a third of the grid's trials"
REPLAY_NOTE = (
    "replay of measured values: every trial looks up the seconds per success measured for its grid point in "
    "step 1; nothing is re-measured, so seeds differ by the search alone"
)
GRID_SPACE: dict[str, Any] = {
    "name": "bench-grid",
    "allow_lossy": False,
    "drafters": {
        "ngram": {"gamma": [1, 2, 4, 6, 8], "min_match": [1, 2, 3]},
        "suffix": {"gamma": [2, 4, 8, 12], "scope": ["session", "engine"]},
    },
}
SAMPLERS = ("tpe", "random")


class GridFileError(ValueError):
    """The grid file is missing or is not a bench-tuner grid (the message names the file)."""


class ReplayedFailure(Exception):
    """The grid point's measured trial failed; its replay fails the same way."""


# ---------------------------------------------------------------- the grid


def point_key(params: dict[str, Any]) -> str:
    """A grid point's lookup key: its parameters as canonical JSON."""
    return json.dumps(params, sort_keys=True)


def grid_points(space: Space, base: EngineConfig) -> list[dict[str, Any]]:
    """Every parameter set `suggest` can yield in a space of categorical knobs, drafter by drafter."""
    if space.allow_lossy:
        raise ValueError("a grid space must keep exact acceptance (allow_lossy: false)")
    points: dict[str, dict[str, Any]] = {}
    for drafter, knobs in space.drafters.items():
        ranges = sorted(name for name, knob in knobs.items() if knob.choices is None and knob.low is not None)
        if ranges:
            raise ValueError(f"grid space drafters.{drafter}: {ranges} are ranges; a grid needs lists of choices")
        names = [name for name, knob in knobs.items() if knob.choices is not None]
        for combo in itertools.product(*(knobs[name].choices or () for name in names)):
            fixed = {"drafter": drafter, **{f"{drafter}.{n}": v for n, v in zip(names, combo, strict=True)}}
            trial = optuna.trial.FixedTrial(fixed)
            suggest(trial, space, base)
            # Only what suggest drew: a conditional knob (max_gamma without heuristic) is no separate point.
            points.setdefault(point_key(trial.params), dict(trial.params))
    return list(points.values())


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def point_row(trial: FrozenTrial) -> dict[str, Any]:
    """One measured grid point (or the baseline) as stored in the grid file."""
    a = trial.user_attrs
    complete = trial.state == TrialState.COMPLETE
    return {
        "params": dict(trial.params),
        "state": trial.state.name,
        "seconds_per_success": _finite(trial.value) if complete else None,
        "feasible": complete and constraints.feasible(trial),
        "violated": constraints.violated(trial) if complete else [],
        "constraints": dict(trial.constraints),
        "speedup": a.get("speedup"),
        "acceptance_rate": a.get("acceptance_rate"),
        "successes": a.get("successes"),
        "reason": studies.reason(trial),
        "duration_s": trial.duration.total_seconds() if trial.duration else None,
    }


def grid_best(grid: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest feasible measured point (what a perfect search finds), or None."""
    rows = [p for p in grid["points"] if p["feasible"] and p["seconds_per_success"] is not None]
    return min(rows, key=lambda p: p["seconds_per_success"]) if rows else None


def save_grid(grid: dict[str, Any], path: Path) -> Path:
    """Write the grid file atomically."""
    from runners.outputs import dumps_strict, write_atomic

    write_atomic(path, dumps_strict(grid))
    return path


def _check_point(row: Any, where: str) -> None:
    if not isinstance(row, dict) or not isinstance(row.get("params"), dict):
        raise ValueError(f"{where} has no params")
    value = row.get("seconds_per_success")
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"{where}: seconds_per_success {value!r} is not a positive number or null")
    if not isinstance(row.get("feasible"), bool) or not isinstance(row.get("constraints", {}), dict):
        raise ValueError(f"{where} lacks feasible/constraints")


def load_grid(path: Path) -> dict[str, Any]:
    """A grid file written by `save_grid`; a missing or broken one raises GridFileError naming it."""
    if not path.is_file():
        raise GridFileError(f"{path}: no grid file there; run without --reuse-grid to measure it")
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("kind") != GRID_KIND:
            raise ValueError(f"kind is not {GRID_KIND!r}")
        if data.get("version") != GRID_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {GRID_VERSION}")
        if not isinstance(data.get("space"), dict) or not isinstance(data.get("points"), list) or not data["points"]:
            raise ValueError("no space or no points")
        _check_point(data.get("baseline"), "the baseline")
        for i, row in enumerate(data["points"]):
            _check_point(row, f"point {i}")
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        why = " ".join(str(exc).split())
        raise GridFileError(f"{path}: not a bench-tuner grid ({why}); measure it again without --reuse-grid") from exc
    return data


# ---------------------------------------------------------------- step 1: measure the grid


def compose_config(split: str, limit: int, repeats: int, overrides: Sequence[str] = ()):
    """The tuner's composed config (conf/tune.yaml) for the grid; later `overrides` win."""
    from hydra import compose, initialize_config_dir

    from tuner.search import CONF_DIR  # importing it registers the tuner's schema

    fixed = [
        f"task.split={split}",
        f"task.limit={limit}",
        f"run.repeats={repeats}",
        "study.name=bench-tuner",
        "study.pruner=none",  # every grid point runs every task: the table holds complete values only
        "sandbox=local",
        "model=spectune-tiny",
        "tracking.enabled=false",
    ]
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("tune", overrides=[*fixed, *overrides])


def search_tasks(cfg) -> list:
    """The tuner's search tasks in the tuner's order (shuffled with the study seed, as tuner.search does)."""
    from tasks.suites import load_suite

    t = cfg.task
    instances = load_suite(t.name, t.split, t.limit, list(t.instance_ids) or None, t.path, t.subset)
    random.Random(cfg.study.seed).shuffle(instances)
    return instances


def grid_study(cfg, points: list[dict[str, Any]]) -> optuna.Study:
    """An in-memory study with the OFF baseline and then every grid point enqueued, in that order."""
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=cfg.study.seed),  # never consulted: every trial is enqueued
        pruner=studies.make_pruner(cfg.study.pruner, cfg.study.prune_p, cfg.study.prune_startup_steps),
    )
    studies.ensure_baseline_queued(study)
    for params in points:
        study.enqueue_trial(params)
    return study


def run_grid(study: optuna.Study, make_objective: Callable, trials: int, progress_bar: bool, console) -> float:
    """Run every enqueued trial with the tuner's per-trial lines; returns the wall time (Ctrl-C: Interrupted)."""
    from runners.interrupt import GracefulStop, Interrupted
    from tuner.report import StudyProgress

    with GracefulStop(console) as stop:
        progress = StudyProgress(console, trials, progress_bar)
        objective = make_objective(stop=stop, on_task=progress.task_done)

        def finished(study: optuna.Study, trial: FrozenTrial) -> None:
            progress.trial_done(trial)
            if stop.requested:
                study.stop()

        started = time.monotonic()
        with progress:
            study.optimize(objective, n_trials=trials, catch=(Exception,), callbacks=[finished])
        if stop.requested:
            raise Interrupted(stop, "while measuring the grid; no grid file was written")
        return time.monotonic() - started


def measure_grid(cfg, space_node: dict[str, Any], study_dir: Path, console) -> dict[str, Any]:
    """Step 1: the OFF baseline, then every grid point as a real trial; returns the grid table."""
    import torch
    from omegaconf import OmegaConf

    from runners.config import check_config
    from runners.models import load_models
    from tasks.environment import make_environment
    from tuner.objective import Objective, settings_from
    from tuner.search import check_tuner

    base = check_config(cfg)
    check_tuner(cfg)
    space = load_space(space_node, has_draft=bool(cfg.model.draft))
    points = grid_points(space, base)
    instances = search_tasks(cfg)
    environment = make_environment(cfg.task.name, cfg.sandbox.name, OmegaConf.to_container(cfg.sandbox.options))
    threads, verbosity = torch.get_num_threads(), optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # each trial gets the tuner's own line instead
    started = time.monotonic()
    try:
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        draft = cfg.model.draft if "draft_model" in space.drafters else None
        device = cfg.model.device or cfg.hardware.device
        models = load_models(cfg.model.target, draft, device=device, dtype=cfg.model.dtype, forward=cfg.model.forward)
        load_s = time.monotonic() - started
        study = grid_study(cfg, points)
        console.print(
            f"measuring the grid: OFF + {len(points)} point(s) x {len(instances)} task(s) x {cfg.run.repeats} "
            f"repeat(s) on {cfg.task.name}/{cfg.task.split}, trajectories in {study_dir}"
        )
        make_objective = partial(
            Objective,
            models=models,
            instances=instances,
            environment=environment,
            space=space,
            base=base,
            study_dir=study_dir,
            memory=constraints.memory_facts(cfg, models, draft),
            **settings_from(cfg),
        )
        wall_s = run_grid(study, make_objective, 1 + len(points), cfg.run.progress, console)
    finally:
        optuna.logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)
    return grid_table(cfg, space_node, space, study, points, instances, wall_s, load_s)


def grid_table(cfg, space_node, space: Space, study: optuna.Study, points, instances, wall_s, load_s) -> dict:
    """The grid file's content from the finished study (enqueued order: trial 1 + i is point i)."""
    trials = study.get_trials(deepcopy=False)
    baseline = studies.baseline_trial(study)
    if baseline is None:
        why = studies.reason(trials[0]) if trials else "not run"
        raise RuntimeError(f"the OFF baseline (trial 0) did not complete: {why}")
    candidates = [t for t in trials if studies.role(t) == "candidate"]
    rows = []
    for params, trial in zip(points, candidates, strict=True):
        row = point_row(trial)
        row["params"] = params  # a trial that failed before `suggest` has no params of its own
        rows.append(row)
    return {
        "kind": GRID_KIND,
        "version": GRID_VERSION,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "space": space_node,
        "has_draft": "draft_model" in space.drafters,
        "suite": cfg.task.name,
        "split": cfg.task.split,
        "tasks": [i.instance_id for i in instances],
        "repeats": cfg.run.repeats,
        "warmup": cfg.run.warmup,
        "model": cfg.model.target,
        "hardware": cfg.hardware.name,
        "wall_s": wall_s,
        "load_s": load_s,
        "baseline": point_row(baseline),
        "points": rows,
    }


# ---------------------------------------------------------------- step 2: replay the sampler


def make_replay_sampler(kind: str, seed: int, startup_trials: int) -> optuna.samplers.BaseSampler:
    """The tuner's own TPE (tuner.study.make_sampler) or a seeded random search."""
    if kind == "tpe":
        return studies.make_sampler(seed, startup_trials)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {kind!r}; choose one of: {', '.join(SAMPLERS)}")


def replay_objective(grid: dict[str, Any]) -> Callable[[optuna.Trial], float]:
    """An objective that looks up each suggested point's measured value (and constraints) in the grid."""
    space = load_space(grid["space"], has_draft=bool(grid.get("has_draft")))
    base = EngineConfig()  # only the parameter names matter here, not sampling or seed
    table = {point_key(p["params"]): p for p in grid["points"]}

    def objective(trial: optuna.Trial) -> float:
        if trial.user_attrs.get(ROLE) == "baseline":
            row = grid["baseline"]  # trial 0, as in the tuner: it counts toward the sampler's startup trials
        else:
            trial.set_user_attr(ROLE, "candidate")
            suggest(trial, space, base)
            row = table.get(point_key(trial.params))
            if row is None:
                raise KeyError(f"the sampler suggested {trial.params}, which is not a measured grid point")
        for name, value in row.get("constraints", {}).items():
            trial.set_constraint(name, value)  # TPE reads a trial's constraints, as in the real study
        if row.get("state", "COMPLETE") != "COMPLETE":
            raise ReplayedFailure(row.get("reason") or "failed when measured")
        value = row["seconds_per_success"]
        return math.inf if value is None else float(value)

    return objective


def replay(grid: dict[str, Any], kind: str, seed: int, trials: int, startup_trials: int) -> list[tuple[dict, Any]]:
    """(params, value) of each candidate trial of one replayed search; the value is None unless feasible."""
    table = {point_key(p["params"]): p for p in grid["points"]}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # one study per seed: no "new study created" lines
    try:
        study = optuna.create_study(direction="minimize", sampler=make_replay_sampler(kind, seed, startup_trials))
        studies.ensure_baseline_queued(study)
        study.optimize(replay_objective(grid), n_trials=1 + trials, catch=(ReplayedFailure,))
    finally:
        optuna.logging.set_verbosity(verbosity)
    tried = []
    for t in study.get_trials(deepcopy=False):
        if studies.role(t) == "candidate":
            row = table[point_key(t.params)]
            tried.append((dict(t.params), row["seconds_per_success"] if row["feasible"] else None))
    return tried


def within(value: float | None, best: float) -> bool:
    """`value` is within 5% of the grid's best (a hair of slack: a JSON round trip must not move the best out)."""
    return value is not None and value <= best * (1 + WITHIN) * (1 + 1e-12)


def score_history(values: Sequence[float | None], best: float) -> dict[str, Any]:
    """Best found so far after each trial, the final regret % and the trials needed to come within 5%."""
    running: list[float | None] = []
    current: float | None = None
    reached: int | None = None
    for n, value in enumerate(values, start=1):
        if value is not None and (current is None or value < current):
            current = value
        running.append(current)
        if reached is None and within(current, best):
            reached = n
    return {
        "best": current,
        "regret_pct": (current / best - 1) * 100 if current is not None else None,
        "trials_to_within": reached,
        "best_after": running,
    }


def search_seeds(grid: dict[str, Any], kind: str, seeds: int, trials: int, startup_trials: int) -> list[dict]:
    """One replayed search per seed, scored against the grid's best."""
    best = grid_best(grid)
    if best is None:
        raise ValueError("no grid point is feasible and finite: there is no best to search for")
    rows = []
    for seed in range(seeds):
        tried = replay(grid, kind, seed, trials, startup_trials)
        values = [value for _, value in tried]
        score = score_history(values, best["seconds_per_success"])
        found = tried[values.index(score["best"])][0] if score["best"] is not None else None
        distinct = len({point_key(params) for params, _ in tried})
        rows.append({"seed": seed, **score, "best_params": found, "distinct_points": distinct})
    return rows


def _median(values: list[float]) -> float | None:
    m = statistics.median(values) if values else math.inf
    return m if math.isfinite(m) else None


def _span(values: list[float]) -> dict[str, float | None]:
    return {"min": _finite(min(values)) if values else None, "max": _finite(max(values)) if values else None}


def summarize_seeds(rows: list[dict], trials: int, target_trials: int) -> dict[str, Any]:
    """Median and min-max over seeds; null where a median or bound is "never" (no feasible / not within 5%)."""
    regrets = [math.inf if r["regret_pct"] is None else r["regret_pct"] for r in rows]
    reach = [math.inf if r["trials_to_within"] is None else r["trials_to_within"] for r in rows]
    by_target = sum(n <= target_trials for n in reach) if trials >= target_trials else None
    return {
        "seeds": len(rows),
        "regret_pct": {"median": _median(regrets), **_span(regrets)},
        "trials_to_within": {"median": _median(reach), **_span(reach)},
        "within_by_trials": sum(n <= trials for n in reach),
        "share_within_by_trials": sum(n <= trials for n in reach) / len(rows),
        "within_by_target": by_target,
        "share_within_by_target": by_target / len(rows) if by_target is not None else None,
        "distinct_points_median": statistics.median(r["distinct_points"] for r in rows),
    }


def compare_samplers(tpe: dict[str, Any], rnd: dict[str, Any]) -> str:
    """Whether TPE beats random here: share of seeds within 5% by N first, then median regret."""
    a, b = tpe["share_within_by_trials"], rnd["share_within_by_trials"]
    if a != b:
        return "TPE beats random" if a > b else "random beats TPE"
    ra, rb = tpe["regret_pct"]["median"], rnd["regret_pct"]["median"]
    ra, rb = (math.inf if ra is None else ra), (math.inf if rb is None else rb)
    if math.isclose(ra, rb, abs_tol=1e-9):
        return "no difference between TPE and random"
    return "TPE beats random" if ra < rb else "random beats TPE"


def run_replays(grid: dict[str, Any], seeds: int, trials: int | None, startup_trials: int) -> dict[str, Any]:
    """Step 2 for both samplers, with the target's verdict."""
    size = len(grid["points"])
    target_trials = math.ceil(size / 3)
    trials = trials if trials is not None else target_trials
    per_seed = {kind: search_seeds(grid, kind, seeds, trials, startup_trials) for kind in SAMPLERS}
    summary = {kind: summarize_seeds(rows, trials, target_trials) for kind, rows in per_seed.items()}
    share = summary["tpe"]["share_within_by_target"]
    return {
        "note": REPLAY_NOTE,
        "trials": trials,
        "startup_trials": startup_trials,
        "seeds": seeds,
        "within_pct": WITHIN * 100,
        "target": {
            "text": TARGET,
            "grid_points": size,
            "trials": target_trials,
            # Met when at least half the seeds (the median seed) get there within a third of the grid.
            "met": None if share is None else share >= 0.5,
        },
        "per_seed": per_seed,
        "summary": summary,
        "verdict": compare_samplers(summary["tpe"], summary["random"]),
    }


def report(grid: dict[str, Any], replays: dict[str, Any], grid_file: Path, reused: bool) -> dict[str, Any]:
    """The whole benchmark as one JSON-ready object."""
    best = grid_best(grid)
    base = grid["baseline"]["seconds_per_success"]
    close = [
        p
        for p in grid["points"]
        if best and p["feasible"] and within(p["seconds_per_success"], best["seconds_per_success"])
    ]
    return {
        "grid_file": str(grid_file),
        "grid_reused": reused,
        "grid": grid,
        "grid_best": best,
        "grid_best_speedup": base / best["seconds_per_success"] if base and best else None,
        "points_within": len(close),
        "replay": replays,
    }


# ---------------------------------------------------------------- the command


def load_space_file(path: Path) -> dict[str, Any]:
    """A grid space from a YAML/JSON file (conf/space layout, categorical knobs); a bad file names itself."""
    from omegaconf import OmegaConf

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as exc:  # OmegaConf raises several kinds for unreadable or malformed files
        raise ValueError(f"{path}: cannot read a space file ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("drafters"), dict):
        raise ValueError(f"{path}: a space file needs a `drafters` mapping (conf/space/*.yaml layout)")
    return {"name": path.stem, **data}


def study_dir_for(grid_file: Path) -> Path:
    """Where the grid's trials write baseline.json and their trajectories: next to the grid file."""
    return grid_file.with_name(f"{grid_file.stem}-study")


def run_tuner_bench(
    *,
    split: str = "dev",
    limit: int = 6,
    repeats: int = 1,
    seeds: int = 10,
    trials: int | None = None,
    startup_trials: int | None = None,
    grid_file: Path = DEFAULT_GRID_FILE,
    reuse_grid: bool = False,
    space_file: Path | None = None,
    threads: int | None = None,
    overrides: Sequence[str] = (),
    progress: bool = True,
    console=None,
) -> dict[str, Any]:
    """Step 1 (or the saved grid), then step 2; returns the report."""
    from rich.console import Console

    console = console or Console(stderr=True)
    extra = [*([f"run.threads={threads}"] if threads else []), *([] if progress else ["run.progress=false"])]
    cfg = compose_config(split, limit, repeats, [*extra, *overrides])
    startup = cfg.study.startup_trials if startup_trials is None else startup_trials
    if reuse_grid:
        grid = load_grid(grid_file)
        console.print(f"grid reused from {grid_file} (measured {grid.get('measured_at')})")
    else:
        space_node = load_space_file(space_file) if space_file is not None else GRID_SPACE
        grid = measure_grid(cfg, space_node, study_dir_for(grid_file), console)
        save_grid(grid, grid_file)
        console.print(f"grid measured in {grid['wall_s']:.1f} s, saved to {grid_file}")
    return report(grid, run_replays(grid, seeds, trials, startup), grid_file, reuse_grid)


# ---------------------------------------------------------------- the tables


def _knobs(params: dict[str, Any] | None) -> str:
    """`gamma=4 min_match=2` (the drafter prefix dropped)."""
    if not params:
        return ""
    return " ".join(f"{k.split('.', 1)[-1]}={v}" for k, v in params.items() if k != "drafter")


def _num(value: float | None, spec: str, never: str = "-") -> str:
    return never if value is None else format(value, spec)


def _sorted_points(points: list[dict]) -> list[dict]:
    """Feasible points fastest first, then infeasible ones, then failed ones."""

    def rank(p: dict) -> tuple:
        value = p["seconds_per_success"]
        return (not p["feasible"], p["state"] != "COMPLETE", math.inf if value is None else value)

    return sorted(points, key=rank)


def grid_view(rep: dict[str, Any]):
    """The measured grid, sorted, with the baseline and each point's speedup and distance to the best."""
    from rich.table import Table

    grid, best = rep["grid"], rep["grid_best"]
    base = grid["baseline"]["seconds_per_success"]
    table = Table(title="Measured grid (seconds per success on the search tasks, sorted)", title_justify="left")
    for col in ("#", "drafter", "knobs", "s/success", "speedup", "vs best", "accept", "state"):
        table.add_column(col, justify="left" if col in ("drafter", "knobs", "state") else "right", no_wrap=True)
    table.add_row("", "OFF", "baseline", _num(base, ".3f"), "1.00x", "", "", "complete", style="dim")
    for rank, p in enumerate(_sorted_points(grid["points"]), start=1):
        value = p["seconds_per_success"]
        gap = value / best["seconds_per_success"] - 1 if best and value is not None else None
        state = "complete" if p["feasible"] else f"infeasible: {', '.join(p['violated'])}"
        if p["state"] != "COMPLETE":
            state = f"{p['state'].lower()}: {p.get('reason') or '?'}"[:60]
        style = None  # green: feasible and within 5% of the best (bold: the best itself)
        if best and p["feasible"] and within(value, best["seconds_per_success"]):
            style = "bold green" if p["params"] == best["params"] else "green"
        table.add_row(
            str(rank),
            p["params"].get("drafter", "?"),
            _knobs(p["params"]),
            _num(value, ".3f"),
            _num(base / value if base and value else None, ".2f") + ("x" if base and value else ""),
            _num(gap * 100 if gap is not None else None, "+.1f") + ("%" if gap is not None else ""),
            _num(p.get("acceptance_rate"), ".2f"),
            state,
            style=style,
        )
    return table


def _cell(row: dict[str, Any]) -> list[str]:
    return [
        _num(row["best"], ".3f", "none"),
        _num(row["regret_pct"], ".1f"),
        _num(row["trials_to_within"], "d", "never"),
        str(row["distinct_points"]),
    ]


def seeds_view(replays: dict[str, Any]):
    """Per seed: best found, regret and trials to within 5%, TPE and random side by side."""
    from rich.table import Table

    n = replays["trials"]
    table = Table(title=f"Per seed, after {n} trials (replay of measured values)", title_justify="left")
    table.add_column("seed", justify="right", no_wrap=True, min_width=4)
    for kind in ("TPE", "random"):
        for col in ("best s/succ", "regret %", "to 5%", "distinct"):
            table.add_column(f"{kind} {col}", justify="right", no_wrap=True)
    for tpe, rnd in zip(replays["per_seed"]["tpe"], replays["per_seed"]["random"], strict=True):
        table.add_row(str(tpe["seed"]), *_cell(tpe), *_cell(rnd))
    return table


def _spread(stat: dict[str, Any], spec: str, never: str) -> str:
    return f"{_num(stat['median'], spec, never)} ({_num(stat['min'], spec, never)}–{_num(stat['max'], spec, never)})"


def _share(count: int | None, seeds: int) -> str:
    return "not run (--trials below it)" if count is None else f"{count}/{seeds} ({100 * count / seeds:.0f}%)"


def summary_view(replays: dict[str, Any]):
    """Median (min–max) over seeds, TPE next to random."""
    from rich.table import Table

    n, target = replays["trials"], replays["target"]["trials"]
    tpe, rnd = replays["summary"]["tpe"], replays["summary"]["random"]
    table = Table(title=f"Over {replays['seeds']} seeds: median (min–max)", title_justify="left")
    for col in ("", "TPE (tuner.study.make_sampler)", "random (RandomSampler)"):
        table.add_column(col, justify="left" if not col else "right", no_wrap=True)
    rows = [
        (f"regret % after {n} trials", lambda s: _spread(s["regret_pct"], ".1f", "none")),
        ("trials to within 5%", lambda s: _spread(s["trials_to_within"], "g", "never")),
        (f"seeds within 5% by {n} trials", lambda s: _share(s["within_by_trials"], s["seeds"])),
        (f"seeds within 5% by {target} (a third of the grid)", lambda s: _share(s["within_by_target"], s["seeds"])),
        ("distinct points tried (median)", lambda s: f"{s['distinct_points_median']:g}"),
    ]
    for label, cell in rows:
        table.add_row(label, cell(tpe), cell(rnd))
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
        f"{grid['model']}, pruner none · measured {grid['measured_at']} in {grid['wall_s']:.1f} s "
        f"(+{grid['load_s']:.1f} s loading) · {how}",
        highlight=False,
    )
    console.print(grid_view(rep))
    if best is not None:
        console.print(
            f"grid best: {best['params']['drafter']} {_knobs(best['params'])}, {best['seconds_per_success']:.3f} "
            f"s/success ({_num(rep['grid_best_speedup'], '.2f')}x over OFF); {rep['points_within']} of "
            f"{len(grid['points'])} points are within 5% of it",
            highlight=False,
        )
    console.print(
        f"[dim]{replays['note']}. {replays['trials']} trials per search after the OFF trial 0, "
        f"{replays['startup_trials']} startup trials (conf/study/default.yaml; trial 0 counts, as in the tuner), "
        f"seeds 0–{replays['seeds'] - 1}.[/]"
    )
    console.print(seeds_view(replays))
    console.print(summary_view(replays))
    target, tpe = replays["target"], replays["summary"]["tpe"]
    met = {True: "[green]met[/]", False: "[red]not met[/]", None: "not checked"}[target["met"]]
    console.print(
        f"target: {target['text']} (≤ {target['trials']} of {target['grid_points']} trials): "
        f"TPE {_share(tpe['within_by_target'], tpe['seeds'])} of seeds → {met} (by the median seed)"
    )
    console.print(
        f"here: [bold]{replays['verdict']}[/] (share of seeds within 5% by {replays['trials']} trials, "
        "then median regret)"
    )
