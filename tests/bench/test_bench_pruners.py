"""`python -m bench tuner --pruners`: the study's pruners replayed over a grid's per-task ratios (synthetic grids:
what each pruner spends and whether the best survives it; nothing is timed)."""

from __future__ import annotations

import pytest

from bench.tuner.pruners import parse_pruners, replay_pruner, run_pruner_replays
from common.errors import ConfigError
from tests.bench.test_bench_tuner import SMALL_SPACE, _grid, _points, _row

SETTINGS = {"prune_p": 0.1, "startup_steps": 2, "reduction": 3}
RUNS = 8


def _with_ratios(late_best: bool) -> dict:
    """The small grid with per-task ratios: five points clearly worse than OFF (1.2 on every task run) and the best
    at 0.8 throughout, or (late_best) at 1.3 on its first two task runs and 0.5 after them."""
    rows = []
    for p in _points(SMALL_SPACE):
        best = p.get("suffix.gamma") == 8
        if best:
            ratios = [1.3, 1.3] + [0.5] * (RUNS - 2) if late_best else [0.8] * RUNS
        else:
            ratios = [1.2] * RUNS
        row = _row(p, 20.0 * sum(ratios) / RUNS)
        row["task_values"] = [[step, r] for step, r in enumerate(ratios)]
        rows.append(row)
    return _grid(SMALL_SPACE, rows)


def test_without_a_pruner_every_task_run_is_spent_and_with_one_fewer():
    grid = _with_ratios(late_best=False)
    order = list(range(len(grid["points"])))
    assert replay_pruner(grid, "none", order, SETTINGS)["spent"] == 6 * RUNS
    for pruner in ("wilcoxon", "halving"):
        run = replay_pruner(grid, pruner, order, SETTINGS)
        assert run["spent"] < 6 * RUNS and run["pruned"] >= 1
        assert run["history"][-1][1] == pytest.approx(16.0)  # the best (0.8 x OFF's 20) was kept and found


def test_halving_drops_a_best_point_that_starts_badly_and_the_report_says_so():
    grid = _with_ratios(late_best=True)
    result = run_pruner_replays(grid, ("none", "wilcoxon", "halving"), seeds=4, settings=SETTINGS)
    summary = result["summary"]
    assert summary["none"]["spent_share"] == 1.0 and summary["none"]["ends_within"] == 4
    # halving ranks the best last after its first two task runs (1.3 against OFF's 1.0) and never sees it recover
    assert summary["halving"]["ends_within"] == 0 and summary["halving"]["spent_to_within"]["median"] is None
    # Wilcoxon needs four task runs of one sign before it prunes: the best's are not, so it survives
    assert summary["wilcoxon"]["ends_within"] == 4
    assert summary["wilcoxon"]["spent_share"] < 1.0
    assert result["verdict"].startswith("wilcoxon ahead of none") and result["verdict"].endswith("halving")


def test_pruner_names_and_grids_without_ratios_fail_in_one_line():
    assert parse_pruners("Halving, none") == ("halving", "none")
    with pytest.raises(ConfigError, match="choose from wilcoxon, halving, none"):
        parse_pruners("median")
    grid = _with_ratios(late_best=False)
    del grid["points"][0]["task_values"]
    with pytest.raises(ConfigError, match="measure the grid again without --reuse-grid"):
        run_pruner_replays(grid, ("none",), seeds=1, settings=SETTINGS)
