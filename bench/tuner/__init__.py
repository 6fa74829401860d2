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

With --pruners, the study's pruners are replayed too, over the grid's per-task ratios (bench/tuner/pruners.py):
the task runs each spends and whether the search still ends within 5% of the grid's best.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.tuner.grid import (
    DEFAULT_GRID_FILE,
    GRID_SPACE,
    compose_config,
    load_grid,
    load_space_file,
    measure_grid,
    save_grid,
)
from bench.tuner.pruners import run_pruner_replays
from bench.tuner.report import render, report
from bench.tuner.search import SAMPLERS, parse_samplers, run_replays
from common.errors import ConfigError

__all__ = ["render", "run_tuner_bench"]

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
    pruners: Sequence[str] = (),
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
        raise ConfigError(f"--startup-trials must be >= 0, got {startup_trials}")
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
    rep = report(grid, run_replays(grid, seeds, trials, startup_trials, samplers), grid_file, reuse_grid)
    if pruners:
        s = compose_config(split, limit, repeats, overrides).study  # the tuner's pruner settings
        settings = {"prune_p": s.prune_p, "startup_steps": s.prune_startup_steps, "reduction": s.prune_reduction}
        rep["pruners"] = run_pruner_replays(grid, pruners, seeds, settings)
    return rep
