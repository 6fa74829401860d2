"""The grid of `python -m bench tuner`: its file (versioned JSON), and step 1, measuring it with the tuner's own
Objective, every point paired with OFF inside its trial."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from common.errors import ConfigError
from engine.engine import EngineConfig
from tuner import constraints
from tuner import study as studies
from tuner.objective import Objective
from tuner.points import drafter_points
from tuner.space import Space, load_space

DEFAULT_GRID_FILE = Path("runs/bench-tuner/grid.json")
GRID_KIND = "spectune-bench-tuner-grid"
# 2: paired measurement inside every trial (value = reference ÷ paired speedup, interval, repeats); 3: and every
# point's per-task paired ratios (task_values), what --pruners replays
GRID_VERSION = 3
GRID_SPACE: dict[str, Any] = {
    "name": "bench-grid",
    "allow_lossy": False,
    "drafters": {
        "ngram": {"gamma": [1, 2, 4, 6, 8], "min_match": [1, 2, 3]},
        "suffix": {"gamma": [2, 4, 8, 12], "scope": ["session", "engine"]},
    },
}
SPACE_KEYS = ("name", "allow_lossy", "drafters", "acceptance")


class GridFileError(ConfigError):
    """The grid file is missing or is not a bench-tuner grid of this version (the message names the file)."""


def load_space_file(path: Path) -> dict[str, Any]:
    """A grid space from a YAML/JSON file (conf/space layout); a bad file names itself."""
    from omegaconf import OmegaConf

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as exc:  # OmegaConf raises several kinds for unreadable or malformed files
        raise ConfigError(f"{path}: cannot read a space file ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("drafters"), dict):
        raise ConfigError(f"{path}: a space file needs a `drafters` mapping (conf/space/*.yaml layout)")
    unknown = sorted(set(map(str, data)) - set(SPACE_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; a space file has {', '.join(SPACE_KEYS)}")
    return {"name": path.stem, **data}


# ---------------------------------------------------------------- the grid


def point_key(params: dict[str, Any]) -> str:
    """A grid point's lookup key: its parameters as canonical JSON (the tuner's `param_key`)."""
    return studies.param_key(params)


def grid_points(space: Space, base: EngineConfig) -> list[dict[str, Any]]:
    """Every parameter set `suggest` can yield in `space` (tuner.points), drafter by drafter; a grid space must
    keep exact acceptance and have finitely many points per drafter."""
    if space.allow_lossy:
        raise ConfigError("a grid space must keep exact acceptance (allow_lossy: false)")
    by_drafter = drafter_points(space, base)
    unbounded = sorted(str(d) for d, points in by_drafter.items() if points is None)
    if unbounded:
        raise ConfigError(
            f"grid space drafters {unbounded}: a continuous knob (or too many points); a grid needs lists of "
            "choices or integer ranges"
        )
    return [p for points in by_drafter.values() for p in points or ()]


def finite(value: Any) -> float | None:
    """A finite float, or None."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def point_row(trial: FrozenTrial) -> dict[str, Any]:
    """One measured grid point (or the baseline) as stored in the grid file."""
    a = trial.user_attrs
    complete = trial.state == TrialState.COMPLETE
    return {
        "params": dict(trial.params),
        "state": trial.state.name,
        "value": finite(trial.value) if complete else None,  # the reference ÷ the paired speedup (minimised)
        "feasible": complete and constraints.feasible(trial),
        "violated": constraints.violated(trial) if complete else [],
        "constraints": {name: float(v) for name, v in trial.constraints.items()},
        "speedup": finite(a.get("speedup")),
        "speedup_low": finite(a.get("speedup_low")),
        "speedup_high": finite(a.get("speedup_high")),
        "speedup_repeats": [float(v) for v in a.get("speedup_repeats") or []],
        "task_values": [[int(step), float(v)] for step, v in a.get("task_values") or []],  # [stable position, ratio]
        "speedup_by_clock": a.get("speedup_by_clock"),  # the paired speedup read on every clock, where recorded
        "seconds_per_success": finite(a.get("seconds_per_success")),  # this side's own, in its trial
        "off_seconds_per_success": finite(a.get("off_seconds_per_success")),  # OFF inside the same trial
        "measure": a.get("measure"),
        "acceptance_rate": finite(a.get("acceptance_rate")),
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
    from common.files import write_atomic
    from export.files import dumps_strict

    write_atomic(path, dumps_strict(grid))
    return path


def _number(value: Any, positive: bool = False) -> bool:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return ok and (not positive or value > 0)


def _check_point(row: Any, where: str) -> None:
    if not isinstance(row, dict) or not isinstance(row.get("params"), dict):
        raise ConfigError(f"{where} has no params")
    for key in ("value", "speedup", "speedup_low", "speedup_high"):
        if row.get(key) is not None and not _number(row[key], positive=True):
            raise ConfigError(f"{where}: {key} {row[key]!r} is not a positive number or null")
    repeats = row.get("speedup_repeats")
    if not isinstance(repeats, list) or not all(_number(v, positive=True) for v in repeats):
        raise ConfigError(f"{where}: speedup_repeats is not a list of positive numbers")
    if not isinstance(row.get("feasible"), bool) or not isinstance(row.get("constraints"), dict):
        raise ConfigError(f"{where} lacks feasible/constraints")
    if row.get("state") not in ("COMPLETE", "PRUNED", "FAIL"):
        raise ConfigError(f"{where}: state {row.get('state')!r} is not COMPLETE, PRUNED or FAIL")


def load_grid(path: Path) -> dict[str, Any]:
    """A grid file written by `save_grid`; a missing, broken or other-version one raises GridFileError naming it."""
    if not path.is_file():
        raise GridFileError(f"{path}: no grid file there; run without --reuse-grid to measure it")
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("kind") != GRID_KIND:
            raise ConfigError(f"kind is not {GRID_KIND!r}")
        if data.get("version") != GRID_VERSION:
            raise ConfigError(f"version {data.get('version')!r}, expected {GRID_VERSION}")
        if not isinstance(data.get("space"), dict) or not isinstance(data.get("points"), list) or not data["points"]:
            raise ConfigError("no space or no points")
        _check_point(data.get("baseline"), "the baseline")
        if not _number(data["baseline"].get("value"), positive=True):
            raise ConfigError("the baseline has no value (the study's reference)")
        for i, row in enumerate(data["points"]):
            _check_point(row, f"point {i}")
        replay_space(data)  # the space must enumerate exactly the measured points
    except (OSError, ValueError, TypeError, KeyError) as exc:  # JSONDecodeError is a ValueError
        why = " ".join(str(exc).split())
        raise GridFileError(f"{path}: not a bench-tuner grid ({why}); measure it again without --reuse-grid") from exc
    return data


def replay_space(grid: dict[str, Any]) -> tuple[Space, EngineConfig]:
    """The grid's space and a base config, checked to enumerate exactly the grid's points."""
    # the stored space holds measured drafters only
    space = load_space(grid["space"], has_draft=True, has_mtp=True, has_eagle3=True)
    base = EngineConfig()  # only the parameter names matter here, not sampling or seed
    enumerated = {point_key(p) for p in grid_points(space, base)}
    measured = [point_key(p["params"]) for p in grid["points"]]
    if len(set(measured)) != len(measured):
        raise ConfigError("a point is listed twice")
    if set(measured) != enumerated:
        missing, extra = len(enumerated - set(measured)), len(set(measured) - enumerated)
        raise ConfigError(f"the points do not match the space ({missing} of its points missing, {extra} not in it)")
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
    """`cfg` with the grid's space and its study folder next to the grid file; the space checked before loading."""
    from omegaconf import OmegaConf

    from tuner.setup import check, serve_list

    if space_node.get("allow_lossy"):
        raise ConfigError("a grid space must keep exact acceptance (allow_lossy: false)")
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
    return cfg


def grid_study(setup, points: list[dict[str, Any]]) -> optuna.Study:
    """An in-memory study with the OFF recording (trial 0) and then every grid point enqueued, in that order."""
    s = setup.study
    study = optuna.create_study(
        direction="minimize",
        sampler=studies.make_sampler(s.sampler, s.seed, s.startup_trials),  # never consulted: all enqueued
        pruner=studies.make_pruner(s.pruner, s.prune_p, s.prune_startup_steps, s.prune_reduction),
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
    from omegaconf import OmegaConf

    from tuner.setup import prepare

    cfg = grid_config(cfg, space_node, grid_file)
    threads, verbosity = torch.get_num_threads(), optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # each trial gets the tuner's own line instead
    started = time.monotonic()
    try:
        setup = prepare(cfg)
        load_s = time.monotonic() - started
        points = grid_points(setup.space, setup.base)
        # what the loaded models can feed decides, not the model config alone: `prepare` finds a bundled head
        # that the config names nowhere (eagle3), so the stored space and notes follow the measured points
        measured_space = OmegaConf.to_container(cfg.space, resolve=True)
        measured_space["drafters"] = {k: v for k, v in measured_space["drafters"].items() if k in setup.space.drafters}
        left_out = dict(setup.space.left_out)
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
        "reference_seconds_per_success": finite(baseline.value),
        "wall_s": wall_s,
        "load_s": load_s,
        "baseline": point_row(baseline),
        "points": rows,
    }
