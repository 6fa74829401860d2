"""`python -m bench tuner`: the tuner's *search* quality, separated from measurement noise.

Step 1 measures, once, an exhaustive grid over a small space with the tuner's real objective: the config is
the tuner's own (conf/tune.yaml; pruner none, tracking off, bundled models, local sandbox), `tuner.setup.prepare`
loads it, and every grid point is a real trial of `tuner.objective.Objective` on an in-memory study: trial 0
records OFF live on the search tasks (swe-lite dev, a `spread` subset shuffled with the study seed), then every
grid point is enqueued and measured *paired* with OFF inside its own trial (recorded turns replayed through
both sides, interleaved). A grid point's value is the study's reference (trial 0's seconds per success) ÷ its
paired speedup, with the speedup's bootstrap interval over tasks and the speedup of every repeat (`run.repeats`,
3 by default, so that neighbouring points are told apart). The default grid is ngram gamma {1,2,4,6,8} x
min_match {1,2,3} and suffix gamma {2,4,8,12} x scope {session, engine}: 23 points; any space whose every
drafter has finitely many points (lists of choices, integer ranges; `tuner.points.drafter_points`) can be
given instead. The measured grid is saved as versioned JSON and can be reused instead of re-measured.

Step 2 replays the measured values: for each seed and each sampler (the tuner's TPE, Optuna's GPSampler and
random search, all from `tuner.study.make_sampler`), a study searches the same space and each trial *looks up*
the value measured for its point, so two seeds differ only by the search, never by timing noise. Duplicates
are replayed as the tuner handles them (`Objective._earlier` / `_reuse` / `_queue_unmeasured`, revisit=skip):
a proposed point measured before costs no measurement and does not count toward the budget, an unmeasured
point of the same drafter is queued in its place, and the search stops when its budget of *measured* trials
is spent or every point is measured (the tuner's bound on asks applies too). Per seed: the regret against the
grid's best after a third of the grid's measured trials and the measured trials needed to come within 5% of
it; then the median and worst over seeds, per sampler. The target: within 5% of the grid's best in at most a
third of the grid's trials.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from engine.engine import EngineConfig
from tuner import constraints
from tuner import study as studies
from tuner.objective import Objective, UnsupportedConfiguration
from tuner.points import drafter_points
from tuner.space import Space, load_space, suggest

DEFAULT_GRID_FILE = Path("runs/bench-tuner/grid.json")
GRID_KIND = "spectune-bench-tuner-grid"
GRID_VERSION = 2  # 2: paired measurement inside every trial (value = reference ÷ paired speedup, interval, repeats)
WITHIN = 0.05  # "within 5% of the grid's best"
TARGET = "within 5% of the grid's best in at most a third of the grid's trials"
REPLAY_NOTE = (
    "replay of measured values: every trial looks up the value measured for its grid point in step 1; nothing "
    "is re-measured, so seeds differ by the search alone; a duplicate proposal reuses its value, measures nothing "
    "and queues an unmeasured point of its drafter, as in the tuner"
)
GRID_SPACE: dict[str, Any] = {
    "name": "bench-grid",
    "allow_lossy": False,
    "drafters": {
        "ngram": {"gamma": [1, 2, 4, 6, 8], "min_match": [1, 2, 3]},
        "suffix": {"gamma": [2, 4, 8, 12], "scope": ["session", "engine"]},
    },
}
SAMPLERS = studies.SAMPLERS  # tpe, gp, random
SAMPLER_LABELS = {"tpe": "TPE", "gp": "GP", "random": "random"}
SPACE_KEYS = ("name", "allow_lossy", "drafters", "acceptance")
ASKS_PER_TRIAL = 4  # the tuner's bound on asks (tuner/optimize.py): budget x 4 + 8, duplicates included
ASKS_EXTRA = 8


class GridFileError(ValueError):
    """The grid file is missing or is not a bench-tuner grid of this version (the message names the file)."""


class ReplayedFailure(Exception):
    """The grid point's measured trial failed; its replay fails the same way."""


# ---------------------------------------------------------------- input


def parse_samplers(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """`tpe,gp,random` (any subset, in the order given); unknown names list the allowed ones."""
    if text is None:
        return SAMPLERS
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip().lower() for item in items if item.strip()]
    unknown = [n for n in names if n not in SAMPLERS]
    if unknown or not names:
        raise ValueError(f"--samplers {','.join(unknown) or '(empty)'}: choose from {', '.join(SAMPLERS)}")
    return tuple(dict.fromkeys(names))


def load_space_file(path: Path) -> dict[str, Any]:
    """A grid space from a YAML/JSON file (conf/space layout); a bad file names itself."""
    from omegaconf import OmegaConf

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as exc:  # OmegaConf raises several kinds for unreadable or malformed files
        raise ValueError(f"{path}: cannot read a space file ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("drafters"), dict):
        raise ValueError(f"{path}: a space file needs a `drafters` mapping (conf/space/*.yaml layout)")
    unknown = sorted(set(map(str, data)) - set(SPACE_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; a space file has {', '.join(SPACE_KEYS)}")
    return {"name": path.stem, **data}


# ---------------------------------------------------------------- the grid


def point_key(params: dict[str, Any]) -> str:
    """A grid point's lookup key: its parameters as canonical JSON (the tuner's `param_key`)."""
    return studies.param_key(params)


def grid_points(space: Space, base: EngineConfig) -> list[dict[str, Any]]:
    """Every parameter set `suggest` can yield in `space` (tuner.points), drafter by drafter; a grid space must
    keep exact acceptance and have finitely many points per drafter."""
    if space.allow_lossy:
        raise ValueError("a grid space must keep exact acceptance (allow_lossy: false)")
    by_drafter = drafter_points(space, base)
    unbounded = sorted(str(d) for d, points in by_drafter.items() if points is None)
    if unbounded:
        raise ValueError(
            f"grid space drafters {unbounded}: a continuous knob (or too many points); a grid needs lists of "
            "choices or integer ranges"
        )
    return [p for points in by_drafter.values() for p in points or ()]


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def point_row(trial: FrozenTrial) -> dict[str, Any]:
    """One measured grid point (or the baseline) as stored in the grid file."""
    a = trial.user_attrs
    complete = trial.state == TrialState.COMPLETE
    return {
        "params": dict(trial.params),
        "state": trial.state.name,
        "value": _finite(trial.value) if complete else None,  # the reference ÷ the paired speedup (minimised)
        "feasible": complete and constraints.feasible(trial),
        "violated": constraints.violated(trial) if complete else [],
        "constraints": {name: float(v) for name, v in trial.constraints.items()},
        "speedup": _finite(a.get("speedup")),
        "speedup_low": _finite(a.get("speedup_low")),
        "speedup_high": _finite(a.get("speedup_high")),
        "speedup_repeats": [float(v) for v in a.get("speedup_repeats") or []],
        "speedup_by_clock": a.get("speedup_by_clock"),  # the paired speedup read on every clock, where recorded
        "seconds_per_success": _finite(a.get("seconds_per_success")),  # this side's own, in its trial
        "off_seconds_per_success": _finite(a.get("off_seconds_per_success")),  # OFF inside the same trial
        "measure": a.get("measure"),
        "acceptance_rate": _finite(a.get("acceptance_rate")),
        "successes": a.get("successes"),
        "tasks_run": a.get("tasks_run"),
        "divergences": len(a.get("divergences") or []),
        "live_tasks": len(a.get("live_tasks") or []),
        "reason": studies.reason(trial),
        "duration_s": trial.duration.total_seconds() if trial.duration else None,
    }


def grid_best(grid: dict[str, Any]) -> dict[str, Any] | None:
    """The feasible measured point with the lowest value (what a perfect search finds), or None."""
    rows = [p for p in grid["points"] if p["feasible"] and p["value"] is not None]
    return min(rows, key=lambda p: p["value"]) if rows else None


def save_grid(grid: dict[str, Any], path: Path) -> Path:
    """Write the grid file atomically."""
    from export.files import dumps_strict, write_atomic

    write_atomic(path, dumps_strict(grid))
    return path


def _number(value: Any, positive: bool = False) -> bool:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return ok and (not positive or value > 0)


def _check_point(row: Any, where: str) -> None:
    if not isinstance(row, dict) or not isinstance(row.get("params"), dict):
        raise ValueError(f"{where} has no params")
    for key in ("value", "speedup", "speedup_low", "speedup_high"):
        if row.get(key) is not None and not _number(row[key], positive=True):
            raise ValueError(f"{where}: {key} {row[key]!r} is not a positive number or null")
    repeats = row.get("speedup_repeats")
    if not isinstance(repeats, list) or not all(_number(v, positive=True) for v in repeats):
        raise ValueError(f"{where}: speedup_repeats is not a list of positive numbers")
    if not isinstance(row.get("feasible"), bool) or not isinstance(row.get("constraints"), dict):
        raise ValueError(f"{where} lacks feasible/constraints")
    if row.get("state") not in ("COMPLETE", "PRUNED", "FAIL"):
        raise ValueError(f"{where}: state {row.get('state')!r} is not COMPLETE, PRUNED or FAIL")


def load_grid(path: Path) -> dict[str, Any]:
    """A grid file written by `save_grid`; a missing, broken or other-version one raises GridFileError naming it."""
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
        if not _number(data["baseline"].get("value"), positive=True):
            raise ValueError("the baseline has no value (the study's reference)")
        for i, row in enumerate(data["points"]):
            _check_point(row, f"point {i}")
        replay_space(data)  # the space must enumerate exactly the measured points
    except (OSError, ValueError, TypeError, KeyError) as exc:  # JSONDecodeError is a ValueError
        why = " ".join(str(exc).split())
        raise GridFileError(f"{path}: not a bench-tuner grid ({why}); measure it again without --reuse-grid") from exc
    return data


def replay_space(grid: dict[str, Any]) -> tuple[Space, EngineConfig]:
    """The grid's space and a base config, checked to enumerate exactly the grid's points."""
    space = load_space(grid["space"], has_draft=True, has_mtp=True)  # the stored space holds measured drafters only
    base = EngineConfig()  # only the parameter names matter here, not sampling or seed
    enumerated = {point_key(p) for p in grid_points(space, base)}
    measured = [point_key(p["params"]) for p in grid["points"]]
    if len(set(measured)) != len(measured):
        raise ValueError("a point is listed twice")
    if set(measured) != enumerated:
        missing, extra = len(enumerated - set(measured)), len(set(measured) - enumerated)
        raise ValueError(f"the points do not match the space ({missing} of its points missing, {extra} not in it)")
    return space, base


# ---------------------------------------------------------------- step 1: measure the grid


def compose_config(split: str, limit: int, repeats: int, overrides: Sequence[str] = ()):
    """The tuner's composed config (conf/tune.yaml) for the grid; later `overrides` win."""
    from hydra import compose, initialize_config_dir

    from runners.cli import CONF_DIR
    from tuner.config import register_tune_configs

    register_tune_configs()
    fixed = [
        f"task.split={split}",
        f"task.limit={limit}",
        f"run.repeats={repeats}",
        "study.pruner=none",  # every grid point runs every task: the table holds complete values only
        "sandbox=local",
        "model=spectune-tiny",
        "tracking.enabled=false",
        "tuner.confirm=false",  # no held-out split: the grid is the search tasks only
    ]
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("tune", overrides=[*fixed, *overrides])


def study_dir_for(grid_file: Path) -> Path:
    """Where the grid's trials write baseline.json and their trajectories: next to the grid file."""
    return grid_file.with_name(f"{grid_file.stem}-study")


def grid_config(cfg, space_node: dict[str, Any], grid_file: Path):
    """`cfg` with the grid's space and its study folder next to the grid file; the space checked before loading.

    Returns (cfg, the measured space node: only the drafters this model config can run, the left-out ones)."""
    from omegaconf import OmegaConf

    from tuner.setup import check, serve_list

    if space_node.get("allow_lossy"):
        raise ValueError("a grid space must keep exact acceptance (allow_lossy: false)")
    study_dir = study_dir_for(grid_file)
    OmegaConf.update(cfg, "run.root", str(study_dir.parent), merge=False)
    OmegaConf.update(cfg, "study.name", study_dir.name, merge=False)
    OmegaConf.update(cfg, "space.name", str(space_node.get("name", "bench-grid")), merge=False)
    OmegaConf.update(cfg, "space.allow_lossy", False, merge=False)
    OmegaConf.update(cfg, "space.drafters", space_node["drafters"], merge=False)  # a merge would keep others
    OmegaConf.update(cfg, "space.acceptance", {}, merge=False)
    base = check(cfg)
    space = load_space(
        cfg.space,
        has_draft=bool(cfg.model.draft),
        has_mtp=bool(cfg.model.get("mtp")),
        backend=base.backend,
        serve=serve_list(cfg.tuner.serve),
    )
    grid_points(space, base)  # finite, exact: fails here, before a model is loaded
    measured = OmegaConf.to_container(cfg.space, resolve=True)
    measured["drafters"] = {k: v for k, v in measured["drafters"].items() if k in space.drafters}
    return cfg, measured, dict(space.left_out)


def grid_study(setup, points: list[dict[str, Any]]) -> optuna.Study:
    """An in-memory study with the OFF recording (trial 0) and then every grid point enqueued, in that order."""
    s = setup.study
    study = optuna.create_study(
        direction="minimize",
        sampler=studies.make_sampler(s.sampler, s.seed, s.startup_trials),  # never consulted: all enqueued
        pruner=studies.make_pruner(s.pruner, s.prune_p, s.prune_startup_steps),
    )
    studies.ensure_baseline_queued(study)
    for params in points:
        study.enqueue_trial(params, user_attrs={studies.ROLE: "candidate"})
    return study


def run_grid(study: optuna.Study, setup, trials: int, console) -> float:
    """Run every enqueued trial with the tuner's per-trial lines; returns the wall time (Ctrl-C: Interrupted)."""
    from runners.interrupt import GracefulStop, Interrupted
    from tuner.report import StudyProgress

    with GracefulStop(console) as stop:
        progress = StudyProgress(console, trials, setup.progress)
        objective = Objective(setup, stop=stop, baseline=None, on_task=progress.task_done)

        def finished(study: optuna.Study, trial: FrozenTrial) -> None:
            progress.trial_done(trial)
            failed_recording = studies.role(trial) == "baseline" and trial.state != TrialState.COMPLETE
            if stop.requested or failed_recording:
                study.stop()

        started = time.monotonic()
        with progress:
            study.optimize(objective, n_trials=trials, catch=(Exception,), callbacks=[finished])
        if stop.requested:
            raise Interrupted(stop, "while measuring the grid; no grid file was written")
        return time.monotonic() - started


def measure_grid(cfg, space_node: dict[str, Any], grid_file: Path, console) -> dict[str, Any]:
    """Step 1: the OFF recording, then every grid point as a real paired trial; returns the grid table."""
    import torch

    from tuner.setup import prepare

    cfg, measured_space, left_out = grid_config(cfg, space_node, grid_file)
    threads, verbosity = torch.get_num_threads(), optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # each trial gets the tuner's own line instead
    started = time.monotonic()
    try:
        setup = prepare(cfg)
        load_s = time.monotonic() - started
        points = grid_points(setup.space, setup.base)
        study = grid_study(setup, points)
        for drafter, why in left_out.items():
            console.print(f"[yellow]note:[/] drafter {drafter} left out: {why}")
        w = setup.workload
        console.print(
            f"measuring the grid: OFF recorded, then {len(points)} point(s) each paired with OFF in its trial, "
            f"{len(w.instances)} task(s) x {w.repeats} repeat(s) on {setup.names['task']}/{setup.names['split']}, "
            f"measured {setup.tuner.measure}, clock {setup.tuner.clock}; trajectories in {setup.study_dir}"
        )
        wall_s = run_grid(study, setup, 1 + len(points), console)
    finally:
        optuna.logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)
    return grid_table(setup, measured_space, left_out, study, points, wall_s, load_s)


def grid_table(setup, space_node, left_out, study: optuna.Study, points, wall_s: float, load_s: float) -> dict:
    """The grid file's content from the finished study (enqueued order: trial 1 + i is point i)."""
    import socket

    trials = study.get_trials(deepcopy=False)
    baseline = studies.baseline_trial(study)
    if baseline is None:
        why = studies.reason(trials[0]) if trials else "not run"
        raise RuntimeError(f"the OFF recording (trial 0) did not complete: {why}")
    candidates = [t for t in trials if studies.role(t) == "candidate"]
    rows = []
    for params, trial in zip(points, candidates, strict=True):
        row = point_row(trial)
        row["params"] = params  # a trial that failed before `suggest` has no params of its own
        rows.append(row)
    w = setup.workload
    return {
        "kind": GRID_KIND,
        "version": GRID_VERSION,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "space": space_node,
        "left_out": left_out,
        "suite": setup.names["task"],
        "split": setup.names["split"],
        "tasks": [i.instance_id for i in w.instances],
        "repeats": w.repeats,
        "warmup": w.warmup,
        "model": setup.model_paths["target"],
        "hardware": setup.names["hardware"],
        "measure": setup.tuner.measure,
        "clock": setup.tuner.clock,
        "seed": setup.study.seed,
        "reference_seconds_per_success": _finite(baseline.value),
        "wall_s": wall_s,
        "load_s": load_s,
        "baseline": point_row(baseline),
        "points": rows,
    }


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
        asks = (trials + 1) * ASKS_PER_TRIAL + ASKS_EXTRA  # as tuner/optimize.py bounds a study's asks
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
            ok = t.state == TrialState.COMPLETE and constraints.feasible(t) and _finite(t.value) is not None
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
        raise ValueError("no grid point is feasible with a finite value: there is no best to search for")
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
    return {"min": _finite(min(values)) if values else None, "max": _finite(max(values)) if values else None}


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


# ---------------------------------------------------------------- the command


def run_tuner_bench(
    *,
    split: str = "dev",
    limit: int = 4,
    repeats: int = 3,
    seeds: int = 10,
    trials: int | None = None,
    startup_trials: int | None = None,
    samplers: Sequence[str] = SAMPLERS,
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

    if console is None:  # the tuner's trial lines at the terminal's width, or a log-friendly one
        console = Console(stderr=True)
        console = console if console.is_terminal else Console(stderr=True, width=max(console.width, 160))
    samplers = parse_samplers(samplers)
    if startup_trials is not None and startup_trials < 0:
        raise ValueError(f"--startup-trials must be >= 0, got {startup_trials}")
    if reuse_grid:
        grid = load_grid(grid_file)
        if startup_trials is None:
            startup_trials = compose_config(split, limit, repeats, overrides).study.startup_trials
        console.print(f"grid reused from {grid_file} (measured {grid.get('measured_at')})")
    else:
        extra = [*([f"run.threads={threads}"] if threads else []), *([] if progress else ["run.progress=false"])]
        cfg = compose_config(split, limit, repeats, [*extra, *overrides])
        if startup_trials is None:
            startup_trials = cfg.study.startup_trials
        space_node = load_space_file(space_file) if space_file is not None else GRID_SPACE
        grid = measure_grid(cfg, space_node, grid_file, console)
        save_grid(grid, grid_file)
        console.print(f"grid measured in {grid['wall_s']:.1f} s, saved to {grid_file}")
    return report(grid, run_replays(grid, seeds, trials, startup_trials, samplers), grid_file, reuse_grid)


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
