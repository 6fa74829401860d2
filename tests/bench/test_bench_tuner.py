"""`python -m bench tuner`: the replay's scores on hand-made grids, the grid file, and one real grid
measurement on the bundled models (behaviour only, never wall-clock)."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from bench.__main__ import main
from bench.tuner import (
    GRID_KIND,
    GRID_SPACE,
    GRID_VERSION,
    compare_samplers,
    grid_best,
    grid_points,
    load_grid,
    point_key,
    replay,
    run_replays,
    save_grid,
    score_history,
    summarize_seeds,
)
from engine.engine import EngineConfig
from tuner.space import load_space

FEASIBLE = {"vram_gib": -15.0, "context_tokens": -1000.0, "regressions": 0.0, "no_success": 0.0}
BEST = {"drafter": "suffix", "suffix.gamma": 8, "suffix.scope": "engine"}


def _row(params: dict, value: float | None, *, feasible: bool = True, state: str = "COMPLETE") -> dict:
    limits = FEASIBLE if feasible else {**FEASIBLE, "regressions": 1.0}
    return {
        "params": params,
        "state": state,
        "seconds_per_success": value,
        "feasible": feasible and state == "COMPLETE",
        "violated": [] if feasible else ["regressions"],
        "constraints": limits if state == "COMPLETE" else {},
        "speedup": None,
        "acceptance_rate": None,
        "reason": None if state == "COMPLETE" else "error: injected",
    }


def _landscape() -> dict:
    """The default 23-point grid with one clear best (suffix gamma=8 engine), a faster but infeasible
    point and a failed one: the replay must never report either as found."""
    points = grid_points(load_space(GRID_SPACE, has_draft=False), EngineConfig())
    rows = []
    for p in points:
        gamma = p.get("ngram.gamma", p.get("suffix.gamma"))
        rows.append(_row(p, 10.0 + abs(gamma - 8) + (0.5 if p["drafter"] == "ngram" else 0.0)))
    rows[points.index(BEST)] = _row(BEST, 5.0)
    rows[0] = _row(points[0], 1.0, feasible=False)  # fastest of all, but it solves fewer tasks than OFF
    rows[1] = _row(points[1], None, state="FAIL")
    return {
        "kind": GRID_KIND,
        "version": GRID_VERSION,
        "measured_at": "2026-01-01T00:00:00+00:00",
        "space": GRID_SPACE,
        "has_draft": False,
        "suite": "swe-lite",
        "split": "dev",
        "tasks": ["a", "b"],
        "repeats": 1,
        "warmup": True,
        "model": "models/spectune-tiny/target",
        "hardware": "cpu",
        "wall_s": 12.5,
        "load_s": 0.5,
        "baseline": _row({}, 20.0),
        "points": rows,
    }


def test_the_default_grid_is_the_23_points_of_the_issue():
    points = grid_points(load_space(GRID_SPACE, has_draft=False), EngineConfig())
    ngram = {(p["ngram.gamma"], p["ngram.min_match"]) for p in points if p["drafter"] == "ngram"}
    suffix = {(p["suffix.gamma"], p["suffix.scope"]) for p in points if p["drafter"] == "suffix"}
    assert len(points) == 23 == len({point_key(p) for p in points})
    assert ngram == {(g, m) for g in (1, 2, 4, 6, 8) for m in (1, 2, 3)}
    assert suffix == {(g, s) for g in (2, 4, 8, 12) for s in ("session", "engine")}
    ranged = load_space({"drafters": {"ngram": {"gamma": {"low": 1, "high": 8}}}}, has_draft=False)
    with pytest.raises(ValueError, match="ranges"):
        grid_points(ranged, EngineConfig())


def test_regret_and_trials_to_within_5pct_on_a_hand_made_history():
    # Trial 1 infeasible, then 12 -> 10.6 (6% off) -> 10.5 (exactly 5% off: within) -> 10.0 (the best).
    score = score_history([None, 12.0, 10.6, 10.5, 11.0, 10.0], best=10.0)
    assert score["best_after"] == [None, 12.0, 10.6, 10.5, 10.5, 10.0]
    assert score["trials_to_within"] == 4
    assert score["best"] == 10.0 and score["regret_pct"] == pytest.approx(0.0)
    never = score_history([11.0, 12.0, 10.8], best=10.0)
    assert never["trials_to_within"] is None and never["regret_pct"] == pytest.approx(8.0)
    nothing = score_history([None, None], best=10.0)
    assert nothing["best"] is None and nothing["regret_pct"] is None and nothing["trials_to_within"] is None


def test_summary_over_seeds_counts_never_as_never():
    rows = [
        {"regret_pct": 0.0, "trials_to_within": 2, "distinct_points": 5},
        {"regret_pct": 12.0, "trials_to_within": None, "distinct_points": 4},
        {"regret_pct": 3.0, "trials_to_within": 5, "distinct_points": 6},
    ]
    s = summarize_seeds(rows, trials=6, target_trials=3)
    assert s["regret_pct"] == {"median": 3.0, "min": 0.0, "max": 12.0}
    assert s["trials_to_within"] == {"median": 5, "min": 2, "max": None}  # one seed never got there
    assert (s["within_by_trials"], s["share_within_by_trials"]) == (2, pytest.approx(2 / 3))
    assert (s["within_by_target"], s["share_within_by_target"]) == (1, pytest.approx(1 / 3))
    assert summarize_seeds(rows, trials=2, target_trials=3)["within_by_target"] is None  # not run that far
    better = {"share_within_by_trials": 0.8, "regret_pct": {"median": 1.0}}
    worse = {"share_within_by_trials": 0.4, "regret_pct": {"median": 0.0}}
    assert compare_samplers(better, worse) == "TPE beats random"
    assert compare_samplers(worse, better) == "random beats TPE"
    assert compare_samplers(worse, dict(worse)) == "no difference between TPE and random"


def test_replay_looks_up_measured_values_and_scores_each_seed():
    grid = _landscape()
    assert grid_best(grid)["params"] == BEST  # the infeasible 1.0 and the failed point are no best
    result = run_replays(grid, seeds=4, trials=12, startup_trials=4)
    assert result["trials"] == 12 and result["target"]["trials"] == 8 == math.ceil(23 / 3)
    assert "replay of measured values" in result["note"]
    values = {point_key(p["params"]): p for p in grid["points"]}
    for kind in ("tpe", "random"):
        rows = result["per_seed"][kind]
        assert [r["seed"] for r in rows] == [0, 1, 2, 3]
        for r in rows:
            tried = replay(grid, kind, r["seed"], 12, 4)  # the same seed replays the same search
            assert len(tried) == 12
            for params, value in tried:
                row = values[point_key(params)]  # only grid points are ever suggested
                assert value == (row["seconds_per_success"] if row["feasible"] else None)
            expected = score_history([v for _, v in tried], 5.0)
            assert r["best_after"] == expected["best_after"]
            assert r["trials_to_within"] == expected["trials_to_within"]
            hits = [n for n, (params, _) in enumerate(tried, start=1) if params == BEST]
            # Every other feasible point is >= 10.0, so "within 5%" means "found the best point".
            assert r["trials_to_within"] == (hits[0] if hits else None)
            assert r["regret_pct"] == pytest.approx((r["best"] / 5.0 - 1) * 100)
            assert r["best"] >= 5.0  # never the infeasible 1.0
        summary = result["summary"][kind]
        reached = [r["trials_to_within"] for r in rows]
        assert summary["within_by_trials"] == sum(n is not None for n in reached)
        assert summary["regret_pct"]["median"] == pytest.approx(statistics.median(r["regret_pct"] for r in rows))


def test_grid_file_round_trip_and_reuse_through_the_command(tmp_path, capsys):
    grid = _landscape()
    path = save_grid(grid, tmp_path / "deep" / "grid.json")
    assert load_grid(path) == grid
    assert main(["tuner", "--reuse-grid", "--grid-file", str(path), "--seeds", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # stdout holds nothing but the JSON object
    assert report["grid_reused"] and report["grid"] == grid
    assert report["grid_best"]["params"] == BEST and report["grid_best_speedup"] == pytest.approx(4.0)
    assert report["points_within"] == 1
    replay_part = report["replay"]
    assert replay_part["trials"] == 8 and replay_part["startup_trials"] == 4  # conf/study/default.yaml
    assert len(replay_part["per_seed"]["tpe"]) == len(replay_part["per_seed"]["random"]) == 2
    assert replay_part["target"]["text"] == "within 5% of the grid's best in at most a third of the grid's trials"

    assert main(["tuner", "--reuse-grid", "--grid-file", str(path), "--seeds", "2"]) == 0
    shown = capsys.readouterr().out
    for text in ("Measured grid", "replay of measured values", "at most a third of the grid's trials", "OFF"):
        assert text in shown


@pytest.mark.parametrize(
    "content", [None, "{not json", json.dumps({"kind": "other"}), json.dumps({**_landscape(), "points": []})]
)
def test_reuse_grid_with_a_missing_or_broken_file_fails_with_one_line_naming_it(tmp_path, capsys, content):
    path = tmp_path / "grid.json"
    if content is not None:
        path.write_text(content)
    assert main(["tuner", "--reuse-grid", "--grid-file", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], captured.err


def test_a_real_two_point_grid_holds_a_measured_value_for_every_point(tmp_path, capsys):
    space = tmp_path / "two.yaml"
    space.write_text("drafters:\n  ngram:\n    gamma: [2, 4]\n")
    grid_file = tmp_path / "grid.json"
    argv = ["tuner", "--limit", "1", "--space", str(space), "--grid-file", str(grid_file), "--seeds", "1"]
    assert main([*argv, "--threads", "1", "--set", "run.warmup=false", "--no-progress", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    grid = load_grid(grid_file)
    assert report["grid"] == grid and not report["grid_reused"]
    assert [p["params"] for p in grid["points"]] == [
        {"drafter": "ngram", "ngram.gamma": 2},
        {"drafter": "ngram", "ngram.gamma": 4},
    ]
    assert len(grid["tasks"]) == 1 and grid["repeats"] == 1 and grid["wall_s"] > 0
    for row in [grid["baseline"], *grid["points"]]:
        assert row["state"] == "COMPLETE" and row["feasible"], row
        assert math.isfinite(row["seconds_per_success"]) and row["seconds_per_success"] > 0
    assert grid["baseline"]["params"] == {}
    assert all(p["speedup"] > 0 and p["acceptance_rate"] is not None for p in grid["points"])
    assert (tmp_path / "grid-study" / "baseline.json").is_file()  # the real objective's OFF record
