"""`python -m bench tuner`: the replay of measured grids to the tuner's samplers (duplicates free, spaces exhausted,
regret and trials to within 5%) on hand-made grids, the grid file, and one real paired grid measurement on the
bundled models (behaviour only, never wall-clock)."""

from __future__ import annotations

import json
import math
import os
import signal

import optuna
import pytest

from bench.__main__ import main
from bench.tuner.grid import (
    GRID_KIND,
    GRID_SPACE,
    GRID_VERSION,
    grid_best,
    grid_points,
    load_grid,
    point_key,
    replay_space,
    save_grid,
)
from bench.tuner.search import (
    ReplayObjective,
    parse_samplers,
    rank_samplers,
    replay,
    run_replays,
    score_history,
    summarize_seeds,
    verdict,
)
from engine.engine import EngineConfig
from tuner import study as studies
from tuner.space import load_space

FEASIBLE = {"vram_gib": -15.0, "context_tokens": -1000.0, "regressions": 0.0, "no_success": 0.0}
BEST = {"drafter": "suffix", "suffix.gamma": 8, "suffix.scope": "engine"}
SMALL_SPACE = {"name": "small", "drafters": {"ngram": {"gamma": [1, 2, 4]}, "suffix": {"gamma": [2, 4, 8]}}}


def _row(params: dict, value: float | None, *, feasible: bool = True, state: str = "COMPLETE") -> dict:
    limits = FEASIBLE if feasible else {**FEASIBLE, "regressions": 1.0}
    complete = state == "COMPLETE"
    return {
        "params": params,
        "state": state,
        "value": value if complete else None,
        "feasible": feasible and complete,
        "violated": [] if feasible else ["regressions"],
        "constraints": limits if complete else {},
        "speedup": 20.0 / value if complete and value else None,
        "speedup_low": None,
        "speedup_high": None,
        "speedup_repeats": [20.0 / value] if complete and value else [],
        "acceptance_rate": None,
        "reason": None if complete else "error: injected",
    }


def _grid(space: dict, rows: list[dict]) -> dict:
    return {
        "kind": GRID_KIND,
        "version": GRID_VERSION,
        "measured_at": "2026-01-01T00:00:00+00:00",
        "space": space,
        "suite": "swe-lite",
        "split": "dev",
        "tasks": ["a", "b"],
        "repeats": 3,
        "warmup": True,
        "model": "models/spectune-tiny/target",
        "hardware": "cpu",
        "measure": "auto",
        "clock": "wall",
        "reference_seconds_per_success": 20.0,
        "wall_s": 12.5,
        "load_s": 0.5,
        "baseline": {**_row({}, 20.0), "speedup": 1.0, "speedup_repeats": []},
        "points": rows,
    }


def _points(space: dict) -> list[dict]:
    return grid_points(load_space(space, has_draft=False), EngineConfig())


def _landscape() -> dict:
    """The default 23-point grid with one clear best (suffix gamma=8 engine), a faster but infeasible
    point and a failed one: the replay must never report either as found."""
    points = _points(GRID_SPACE)
    rows = []
    for p in points:
        gamma = p.get("ngram.gamma", p.get("suffix.gamma"))
        rows.append(_row(p, 10.0 + abs(gamma - 8) + (0.5 if p["drafter"] == "ngram" else 0.0)))
    rows[points.index(BEST)] = _row(BEST, 5.0)
    rows[0] = _row(points[0], 1.0, feasible=False)  # fastest of all, but it solves fewer tasks than OFF
    rows[1] = _row(points[1], None, state="FAIL")
    return _grid(GRID_SPACE, rows)


def _small() -> dict:
    """6 points, the best is suffix gamma=8 (value 5), the rest 6..10."""
    rows = []
    for p in _points(SMALL_SPACE):
        gamma = p.get("ngram.gamma", p.get("suffix.gamma"))
        rows.append(_row(p, 5.0 if p == {"drafter": "suffix", "suffix.gamma": 8} else 10.0 - gamma / 2))
    return _grid(SMALL_SPACE, rows)


def test_the_default_grid_is_the_23_points_and_a_grid_must_be_finite():
    points = _points(GRID_SPACE)
    ngram = {(p["ngram.gamma"], p["ngram.min_match"]) for p in points if p["drafter"] == "ngram"}
    suffix = {(p["suffix.gamma"], p["suffix.scope"]) for p in points if p["drafter"] == "suffix"}
    assert len(points) == 23 == len({point_key(p) for p in points})
    assert ngram == {(g, m) for g in (1, 2, 4, 6, 8) for m in (1, 2, 3)}
    assert suffix == {(g, s) for g in (2, 4, 8, 12) for s in ("session", "engine")}
    ranged = _points({"drafters": {"ngram": {"gamma": {"low": 1, "high": 4}}}})  # integer ranges are finite
    assert [p["ngram.gamma"] for p in ranged] == [1, 2, 3, 4]
    continuous = load_space({"drafters": {"suffix": {"match_factor": {"low": 0.5, "high": 2.0}}}}, has_draft=False)
    with pytest.raises(ValueError, match="continuous"):
        grid_points(continuous, EngineConfig())


def test_regret_after_a_third_and_trials_to_within_5pct_on_a_hand_made_history():
    # Trial 1 infeasible, then 12 -> 10.6 (6% off) -> 10.5 (exactly 5% off: within) -> 10.0 (the best).
    score = score_history([None, 12.0, 10.6, 10.5, 11.0, 10.0], best=10.0, after=3)
    assert score["best_after"] == [None, 12.0, 10.6, 10.5, 10.5, 10.0]
    assert score["trials_to_within"] == 4
    assert score["regret_pct"] == pytest.approx(6.0)  # after 3 measured trials: 10.6
    assert score["best"] == 10.0 and score["final_regret_pct"] == pytest.approx(0.0)
    short = score_history([11.0, 12.0], best=10.0, after=8)  # a search that ended before 8: its end counts
    assert short["regret_pct"] == pytest.approx(10.0) and short["trials_to_within"] is None
    nothing = score_history([None, None], best=10.0, after=1)
    assert nothing["best"] is None and nothing["regret_pct"] is None and nothing["trials_to_within"] is None


def test_summary_over_seeds_counts_never_as_never_and_ranks_the_samplers():
    def seed(regret, reach, dup=0, ended="exhausted"):
        return {"regret_pct": regret, "trials_to_within": reach, "duplicates": dup, "asks": 10, "ended": ended}

    rows = [seed(0.0, 2), seed(12.0, None, 4, "asks"), seed(3.0, 5, 2)]
    s = summarize_seeds(rows, target_trials=3)
    assert s["regret_pct"] == {"median": 3.0, "min": 0.0, "max": 12.0}
    assert s["trials_to_within"] == {"median": 5, "min": 2, "max": None}  # one seed never got there: worst is never
    assert (s["within_by_target"], s["share_within_by_target"], s["within_ever"]) == (1, pytest.approx(1 / 3), 2)
    assert s["duplicates_median"] == 2 and s["ended"] == {"exhausted": 2, "budget": 0, "asks": 1}
    good = summarize_seeds([seed(0.0, 1), seed(1.0, 2)], target_trials=3)
    groups = rank_samplers({"random": s, "tpe": good, "gp": dict(s)})
    assert groups == [["tpe"], ["random", "gp"]]
    assert verdict(groups) == "TPE ahead of random = GP"
    assert verdict([["tpe", "random"]]) == "no difference between TPE and random"


def test_a_duplicate_is_free_reuses_its_value_and_queues_an_unmeasured_point_of_its_drafter():
    grid = _small()
    space, base = replay_space(grid)
    study = optuna.create_study(direction="minimize", sampler=studies.make_sampler("random", 0, 4))
    studies.ensure_baseline_queued(study)
    a = {"drafter": "ngram", "ngram.gamma": 2}
    study.enqueue_trial(a)
    study.enqueue_trial(a)  # proposed again: the tuner measures nothing
    study.optimize(ReplayObjective(grid, space, base, seed=0), n_trials=4)
    base_trial, first, again, queued = study.get_trials()
    assert studies.role(base_trial) == "baseline" and base_trial.value == 20.0
    assert first.value == again.value == 9.0 and not first.user_attrs.get("reused")
    assert again.user_attrs["reused"] and again.user_attrs[studies.DUPLICATE_OF] == first.number
    assert not studies.counts_toward_budget(again) and studies.budget_left(study, 2) == 0  # first + queued
    assert queued.params["drafter"] == "ngram" and queued.params != a  # an unmeasured ngram point, measured next
    assert len(studies.measured_keys(study)) == 2


@pytest.mark.parametrize("kind", ["tpe", "gp", "random"])
def test_every_sampler_replays_measured_values_without_measuring_a_point_twice(kind):
    grid = _small()
    values = {point_key(p["params"]): p["value"] for p in grid["points"]}
    for seed in (0, 1):
        run = replay(grid, kind, seed, trials=6, startup_trials=3)
        keys = [point_key(params) for params, _ in run["measured"]]
        assert len(keys) == len(set(keys))  # duplicates are free: never measured twice
        assert all(values[point_key(params)] == value for params, value in run["measured"])  # looked up
        assert run["asks"] == len(run["measured"]) + run["duplicates"]
        if run["ended"] == "exhausted":
            assert set(keys) == set(values)  # every point measured, and the study stopped there
        else:  # the tuner's bound on asks: only duplicates were left to propose
            assert run["ended"] == "asks" and run["asks"] == (6 + 1) * 4 + 8 - 1
        assert replay(grid, kind, seed, trials=6, startup_trials=3) == run  # a seed replays the same search
    budget = replay(grid, kind, 0, trials=2, startup_trials=3)
    assert len(budget["measured"]) == 2 and budget["ended"] == "budget"  # a budget of measured trials


class _Stubborn(optuna.samplers.BaseSampler):
    """Always proposes the first choice of every parameter: every proposal after the first is a duplicate."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return param_distribution.to_external_repr(0) if hasattr(param_distribution, "choices") else 0


def test_duplicates_exhaust_their_drafter_then_the_others(monkeypatch):
    monkeypatch.setattr(studies, "make_sampler", lambda kind, seed, startup: _Stubborn())
    run = replay(_small(), "tpe", 0, trials=6, startup_trials=3)
    # ngram gamma=1 is measured; each duplicate of it queues another ngram point until ngram is exhausted, then
    # a point of the other finite drafter, until every point is measured: a sampler stuck on one point still
    # exhausts a finite space.
    assert run["measured"][0][0] == {"drafter": "ngram", "ngram.gamma": 1}
    drafters = [params["drafter"] for params, _ in run["measured"]]
    assert drafters == ["ngram"] * 3 + ["suffix"] * 3
    assert run["ended"] == "exhausted" and run["duplicates"] == run["asks"] - 6


def test_random_search_exhausts_the_default_grid_and_scores_each_seed():
    grid = _landscape()
    assert grid_best(grid)["params"] == BEST  # the infeasible 1.0 and the failed point are no best
    result = run_replays(grid, seeds=3, trials=None, startup_trials=4, samplers=["random"])
    assert result["trials"] == 23 and result["target"]["trials"] == 8 == result["regret_after"] == math.ceil(23 / 3)
    assert "replay of measured values" in result["note"]
    failed = point_key(grid["points"][1]["params"])
    for r in result["per_seed"]["random"]:
        # A point whose trial failed is measured again when proposed again (an error is no value to reuse, as in
        # the tuner) but counts as tried: once all 23 points are tried, the space is exhausted.
        assert r["ended"] == "exhausted" and r["measured"] >= 23
        keys = [point_key(p) for p in r["order"]]
        assert all(keys.count(k) == 1 for k in keys if k != failed)
        hits = [n for n, params in enumerate(r["order"], start=1) if params == BEST]
        # Every other feasible point is >= 10.0, so "within 5%" means "found the best point".
        assert r["trials_to_within"] == hits[0]
        assert r["best"] == 5.0 and r["final_regret_pct"] == 0.0  # never the infeasible 1.0
        found = r["best_after"][7]
        assert r["regret_pct"] == pytest.approx((found / 5.0 - 1) * 100)
    summary = result["summary"]["random"]
    reached = [r["trials_to_within"] for r in result["per_seed"]["random"]]
    assert summary["trials_to_within"]["max"] == max(reached) and summary["within_ever"] == 3
    assert summary["within_by_target"] == sum(n <= 8 for n in reached)
    assert result["target"]["met"]["random"] == (summary["within_by_target"] >= 1.5)


def test_the_tables_and_json_of_several_seeds_from_a_reused_grid(tmp_path, capsys):
    grid = _small()
    path = save_grid(grid, tmp_path / "deep" / "grid.json")
    assert load_grid(path) == grid
    argv = ["tuner", "--reuse-grid", "--grid-file", str(path), "--seeds", "3", "--samplers", "tpe,random"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # stdout holds nothing but the JSON object
    assert report["grid_reused"] and report["grid"] == grid
    assert report["grid_best"]["params"] == {"drafter": "suffix", "suffix.gamma": 8}
    assert report["grid_best_speedup"] == pytest.approx(4.0) and report["points_within"] == 1
    part = report["replay"]
    assert part["samplers"] == ["tpe", "random"] and set(part["per_seed"]) == {"tpe", "random"}
    assert part["trials"] == 6 and part["regret_after"] == 2 and part["startup_trials"] == 4  # conf/study
    assert [r["seed"] for r in part["per_seed"]["tpe"]] == [0, 1, 2]
    assert part["target"]["text"] == "within 5% of the grid's best in at most a third of the grid's trials"

    assert main(argv) == 0
    shown = capsys.readouterr().out
    for text in ("Measured grid", "Per seed", "Over 3 seeds", "TPE to 5%", "random dup", "worst seed", "OFF"):
        assert text in shown
    assert "at most a third of the grid's trials" in shown and "GP" not in shown


def _broken() -> dict[str, str | None]:
    other_version = {**_small(), "version": 1}
    mismatched = _small()
    mismatched["points"] = mismatched["points"][:-1]  # the space has a point the grid lacks
    return {
        "missing": None,
        "not json": "{not json",
        "other kind": json.dumps({"kind": "other"}),
        "version 1": json.dumps(other_version),
        "no points": json.dumps({**_small(), "points": []}),
        "points do not match": json.dumps(mismatched),
    }


@pytest.mark.parametrize("case", list(_broken()))
def test_reuse_grid_with_a_missing_broken_or_other_version_file_fails_with_one_line_naming_it(tmp_path, capsys, case):
    content = _broken()[case]
    path = tmp_path / "grid.json"
    if content is not None:
        path.write_text(content)
    assert main(["tuner", "--reuse-grid", "--grid-file", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], captured.err
    if case == "version 1":
        assert f"version 1, expected {GRID_VERSION}" in lines[0]


def test_unknown_samplers_fail_with_the_allowed_ones_before_anything_is_measured(tmp_path, capsys):
    assert parse_samplers("random, TPE") == ("random", "tpe")
    grid_file = tmp_path / "grid.json"
    assert main(["tuner", "--samplers", "tpe,cmaes", "--grid-file", str(grid_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cmaes" in err[0] and "tpe, gp, random" in err[0]
    assert not grid_file.exists() and not (tmp_path / "grid-study").exists()


def _measure(tmp_path, *extra: str) -> list[str]:
    space = tmp_path / "two.yaml"
    space.write_text("drafters:\n  ngram:\n    gamma: [2, 4]\n")
    grid_file = tmp_path / "grid.json"
    argv = ["tuner", "--limit", "1", "--space", str(space), "--grid-file", str(grid_file), "--threads", "1"]
    return [*argv, "--set", "run.warmup=false", "--no-progress", *extra]


def test_a_real_two_point_grid_is_measured_paired_with_repeats_and_replayed(tmp_path, capsys):
    assert main([*_measure(tmp_path, "--repeats", "2", "--seeds", "2", "--json")]) == 0
    report = json.loads(capsys.readouterr().out)
    grid = load_grid(tmp_path / "grid.json")
    assert report["grid"] == grid and not report["grid_reused"]
    assert [p["params"] for p in grid["points"]] == [
        {"drafter": "ngram", "ngram.gamma": 2},
        {"drafter": "ngram", "ngram.gamma": 4},
    ]
    assert len(grid["tasks"]) == 1 and grid["repeats"] == 2 and grid["version"] == GRID_VERSION
    baseline = grid["baseline"]
    assert baseline["params"] == {} and baseline["measure"] == "recording" and baseline["speedup"] == 1.0
    assert baseline["value"] == grid["reference_seconds_per_success"] > 0
    for row in grid["points"]:
        assert row["state"] == "COMPLETE" and row["feasible"] and row["measure"] == "replay", row
        assert len(row["speedup_repeats"]) == 2 and all(v > 0 for v in row["speedup_repeats"])
        assert row["speedup"] > 0 and row["acceptance_rate"] is not None and row["divergences"] == 0
        # The value is the study's reference over the trial's paired speedup.
        assert row["value"] == pytest.approx(grid["reference_seconds_per_success"] / row["speedup"])
    assert (tmp_path / "grid-study" / "baseline.json").is_file()  # the real objective's recording
    part = report["replay"]
    assert part["samplers"] == ["tpe", "gp", "random"] and part["trials"] == 2 and part["target"]["trials"] == 1
    for kind in part["samplers"]:
        assert [r["ended"] for r in part["per_seed"][kind]] == ["exhausted", "exhausted"]
        assert all(r["trials_to_within"] in (1, 2) for r in part["per_seed"][kind])


def test_ctrl_c_while_measuring_the_grid_writes_no_grid_file(tmp_path, capsys, monkeypatch):
    from tuner.report import StudyProgress

    def interrupt(self, number, done, total):
        os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: stop after the task in flight

    monkeypatch.setattr(StudyProgress, "task_done", interrupt)
    assert main([*_measure(tmp_path, "--repeats", "1")]) == 130
    assert "no grid file was written" in capsys.readouterr().err
    assert not (tmp_path / "grid.json").exists()


def test_a_grid_of_eagle3_points_replays():
    """The bundled EAGLE-3 head is found by loading, not named in the model config: its measured points replay."""
    space = {"name": "heads", "drafters": {"eagle3": {"gamma": [2, 4]}}}
    grid = _grid(space, [_row({"drafter": "eagle3", "eagle3.gamma": g}, 20.0 / g) for g in (2, 4)])
    replayed, _ = replay_space(grid)
    assert "eagle3" in replayed.drafters
