"""The projection's arithmetic, tuner.budget's forms, the budget callback on a real in-memory Optuna study, and a
study that a small budget stops and that still confirms and exports. Every clock here is injected: nothing
depends on how fast this machine runs."""

from __future__ import annotations

import json
from dataclasses import asdict

import optuna
import pytest

from common.errors import ConfigError
from engine.engine import EngineConfig
from runners.outcomes import SideRun
from tuner import constraints
from tuner import projection as projections
from tuner import study as studies
from tuner.baseline import BaselineRecord
from tuner.projection import (
    BudgetStop,
    Projection,
    budget_stop,
    coverage,
    coverage_line,
    fits_next_trial,
    human,
    parse_budget,
    pruning_share,
    run_seconds,
    versus_actual,
)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _run(i: int, time_s: float = 50.0, evaluation_s: float = 10.0, model_s: float = 20.0) -> SideRun:
    return SideRun(f"task-{i}", "baseline", 0, "submitted", True, "resolved", time_s, evaluation_s, model_s=model_s)


# ---------------------------------------------------------------- budget strings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("5400", 5400), (5400, 5400), ("1.5h", 5400)],
)
def test_a_budget_is_a_wall_time_in_hours_minutes_or_seconds(text, seconds):
    assert parse_budget(text) == seconds
    assert parse_budget(None) is None  # no limit


@pytest.mark.parametrize("text", ["", "2 hours", "h", "1d", "0", "-5m", "2h2h", "m30", "nan"])
def test_a_bad_budget_is_one_line_naming_the_allowed_forms(text):
    with pytest.raises(ConfigError) as bad:
        parse_budget(text)
    message = str(bad.value)
    assert "\n" not in message and all(form in message for form in ("2h", "90m", "1h30m", "45s", "5400"))


def test_a_bad_budget_fails_before_anything_loads(tune):
    from tuner.search import execute

    with pytest.raises(ValueError, match="1h30m"):
        execute(tune("tuner.budget=soon"))


# ---------------------------------------------------------------- the arithmetic


def test_the_projection_adds_up_its_parts_and_says_its_formula():
    p = Projection(
        spent_s=360,
        trials=16,
        trial_s=354,
        next_trial_s=400,
        confirmations=1,
        reserved_confirmations=2,
        confirm_tasks=10,
        confirm_repeats=3,
        confirm_run_s=32,
        confirm_overhead_s=8,
        export_s=60,
        basis="2 trial(s) measured",
    )
    assert p.search_s == 16 * 354 == 5664
    assert p.confirmation_s() == 10 * 3 * 2 * 32 + 8 == 1928
    assert p.finish_s == 1928 + 60
    assert p.total_s == 360 + 5664 + 1988 == 8012
    assert p.parts() == {"spent_s": 360, "search_s": 5664, "finish_s": 1988}
    assert p.reserve_s == 2 * 1928 + 60 == 3916  # the budget keeps room for one more distinct winner
    assert p.line() == (
        "projected 2 h 14 m = so far 6 m + 16 trial(s) x 5.9 m (from 2 trial(s) measured) + 1 confirmation(s) "
        "x 10 task(s) x 3 repeat(s) x 2 sides x 32 s (+ 8 s start each) + export 1 m"
    )
    assert p.trials_within(7200) == (7200 - 360 - 3916) // 400 == 7
    assert p.line(7200).endswith("; budget 2 h: 7 of the 16 trial(s) left fit")
    assert fits_next_trial(2800, p, 7200)  # 2800 + 400 + 3916 = 7116
    assert not fits_next_trial(2900, p, 7200)  # 7216
    assert fits_next_trial(1e9, p, None)  # no budget, no limit


def test_the_first_projection_expects_the_pruner_to_stop_most_trials_at_its_earliest_step():
    # Wilcoxon: the smallest one-sided p after n task runs is 2^-n, so at p < 0.1 the earliest prune is run 4
    assert projections.EARLIEST_PRUNE["wilcoxon"](0.1, 2, 8) == 4
    assert projections.EARLIEST_PRUNE["wilcoxon"](0.1, 6, 8) == 6  # never before its startup steps
    assert projections.EARLIEST_PRUNE["wilcoxon"](0.01, 2, 6) is None  # 2^-6 > 0.01: it cannot prune in 6 runs
    prior = projections.UNPRUNED_PRIOR
    assert pruning_share("wilcoxon", 0.1, 2, 8) == pytest.approx(prior + (1 - prior) * 4 / 8)
    assert pruning_share("none", 0.1, 2, 8) == 1.0  # no pruner: every trial runs all its task runs
    assert pruning_share("wilcoxon", 0.1, 2, 4) == 1.0  # the earliest prune is the last run: nothing is saved
    p = Projection(
        spent_s=10,
        trials=16,
        trial_s=6,
        next_trial_s=6,
        confirmations=0,
        reserved_confirmations=0,
        confirm_tasks=0,
        confirm_repeats=1,
        confirm_run_s=0,
        confirm_overhead_s=0,
        export_s=0,
        share=0.625,
    )
    assert p.search_s == 16 * 6 * 0.625  # the budget's next trial stays the full length
    assert "16 trial(s) x 6 s x 0.62 pruning prior (from the recording)" in p.line()


def test_a_task_run_costs_what_the_recording_measured_for_its_mode():
    runs = [_run(0, 50, 10, 20), _run(1, 30, 6, 12)]
    assert run_seconds(runs, "live") == (60 + 36) / 2  # the agent and the grading, as OFF ran
    assert run_seconds(runs, "replay") == (20 + 12) / 2  # a replayed side redoes its replies only
    assert run_seconds([], "live") == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.42, "0.4 s"), (8, "8 s"), (60, "1 m"), (354, "5.9 m"), (720, "12 m"), (3600, "1 h"), (6720, "1 h 52 m")],
)
def test_durations_read_as_a_person_says_them(seconds, text):
    assert human(seconds) == text


# ---------------------------------------------------------------- the callback on a real study


def _study_with_budget(budget_s: float | None, trials: int = 5, step_s: float = 600.0, reproject_after: int = 0):
    """An in-memory study whose every trial takes `step_s` on a fake clock, with BudgetStop as its callback."""
    clock, wall = FakeClock(), FakeClock(1_000_000.0)
    record = BaselineRecord([_run(0), _run(1)], repeats=1, instance_ids=["task-0", "task-1"])
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=0))
    studies.ensure_baseline_queued(study)
    budget = BudgetStop(
        budget_s=budget_s,
        trials=trials,
        mode="replay",
        confirm_tasks=3,
        confirm_repeats=1,
        servers=("llama-server",),
        recording=lambda: record,
        clock=clock,
        now=wall,
        export_s=60,
        reproject_after=reproject_after,
    )

    def objective(trial: optuna.Trial) -> float:
        role = trial.user_attrs.get(studies.ROLE) or "candidate"
        trial.set_user_attr(studies.ROLE, role)
        clock.t += step_s
        wall.t += step_s
        if role == "baseline":
            return 1.0
        point = trial.suggest_int("ngram.point", 1, 1000)  # a distinct point per trial
        trial.set_user_attr("engine", asdict(EngineConfig(drafter="ngram")))
        trial.set_user_attr("tasks_run", 2)
        trial.set_user_attr("tasks_total", 2)
        constraints.store(trial, dict.fromkeys(constraints.CONSTRAINTS, 0.0))  # feasible: a winner to confirm
        return 1.0 / point

    def finished(study: optuna.Study, trial) -> None:  # optimize.py's own stop: the trial budget spent
        if studies.budget_left(study, trials) == 0:
            study.stop()

    study.optimize(objective, n_trials=20, callbacks=[finished, budget])
    return study, budget, wall


def test_the_budget_stops_starting_trials_that_cannot_finish_with_the_finish_kept():
    study, budget, _ = _study_with_budget(3600)
    candidates = [t for t in study.trials if studies.role(t) == "candidate"]
    # Each trial takes 600 s. After the recording (600 s): 600 + 80 s (the prior: 2 sides x 2 runs x 20 s of
    # generation) + 1 confirmation (3 x 1 x 2 x 60 s) + 60 s export fits. After trial n at 600 (n + 1) s the
    # measured 600 s and two confirmations (a next trial may be a second distinct winner: 780 s) are kept:
    # trial 3 ends at 2400 s and 2400 + 600 + 780 > 3600, so the fourth candidate never starts.
    assert len(candidates) == 3
    stop = study.user_attrs[projections.BUDGET_STOP]
    assert stop == budget.stopped and budget_stop(study) == stop
    assert (stop["after"], stop["of"], stop["elapsed_s"], stop["next_trial_s"], stop["reserve_s"]) == (
        3,
        5,
        2400,
        600,
        780,
    )
    assert stop["reason"] == (
        "budget stopped the search after 3 of 5 trial(s): 40 m spent + the next trial 10 m + confirmation and "
        "export 13 m > budget 1 h"
    )
    kept = study.user_attrs[projections.PROJECTION]  # the first projection, made right after the recording
    assert kept["total_s"] == 600 + 5 * 80 + 360 + 60
    assert kept["line"] == (
        "projected 24 m = so far 10 m + 5 trial(s) x 1.3 m (from the recording) + 1 confirmation(s) x 3 task(s) x "
        "1 repeat(s) x 2 sides x 1 m + export 1 m; budget 1 h: 5 of the 5 trial(s) left fit"
    )


def test_without_a_budget_every_trial_runs_and_the_projection_is_still_kept():
    study, budget, _ = _study_with_budget(None)
    assert sum(studies.counts_toward_budget(t) for t in study.trials) == 5
    assert budget.stopped is None and budget_stop(study) is None
    assert study.user_attrs[projections.PROJECTION]["budget_s"] is None


def test_the_closing_summary_compares_the_projection_with_the_actual_time():
    study, _, wall = _study_with_budget(3600)
    wall.t += 900  # the confirmation and the export, on the injected wall clock
    versus = versus_actual(study, now=wall)
    assert versus is not None
    # projected 1420 s for five trials; actual: 600 s spent when projected + 3 trials x 600 s + 900 s
    assert versus["projected_s"] == 1420 and versus["actual_s"] == 600 + 1800 + 900
    assert versus["error_pct"] == pytest.approx(100 * (1420 - 3300) / 3300)
    # the budget stopped after 3 trials: the projection for those 3, like with like
    assert versus["projected_for_trials_run_s"] == 600 + 3 * 80 + 360 + 60
    line = projections.versus_line(versus)
    assert line.startswith("wall time: projected 24 m, actual 55 m (projection -57%)")


def test_the_projection_is_made_again_from_the_trials_measured_after_the_startup_ones():
    study, _, wall = _study_with_budget(None, reproject_after=2)
    again = study.user_attrs[projections.PROJECTION_AGAIN]
    # after the recording (600 s) and 2 trials of 600 s: 3 trials left x the measured 600 s, one confirmation (the
    # best of the two is a feasible winner) of 3 x 1 x 2 x 60 s, and the export
    assert again["after"] == 2 and again["total_s"] == 1800 + 3 * 600 + 360 + 60
    assert "(from 2 trial(s) measured)" in again["line"]
    wall.t += 420  # the confirmation and the export
    versus = versus_actual(study, now=wall)
    assert versus is not None and versus["again"]["after_trials"] == 2
    assert versus["again"]["error_pct"] == pytest.approx(0.0)  # every trial took what the measured ones did
    assert projections.versus_line(versus).endswith("; after 2 trial(s): 1 h 7 m (+0%)")


def test_a_budget_stop_no_longer_holds_once_more_trials_count():
    study, _, _ = _study_with_budget(3600)
    assert budget_stop(study) is not None
    study.enqueue_trial({"ngram.point": 7}, user_attrs={studies.ROLE: "candidate"})
    study.optimize(lambda t: float(t.suggest_int("ngram.point", 1, 1000)), n_trials=1)  # a resumed run's trial
    assert budget_stop(study) is None  # so the README says the search was not cut short by it


def test_coverage_counts_measured_points_of_the_space_and_trials_of_the_budget():
    study, _, _ = _study_with_budget(3600)
    covered = coverage(study, size=12, trials=5)
    assert {k: covered[k] for k in ("points", "space_size", "share", "trials_run", "trials")} == {
        "points": 3,
        "space_size": 12,
        "share": 0.25,
        "trials_run": 3,
        "trials": 5,
    }
    assert coverage_line(covered) == (
        "Covered: 3 of the space's 12 point(s) measured (25%); 3 of 5 candidate trial(s) run (tuner.trials); "
        f"{covered['budget_stopped']} (tuner.budget)."
    )
    unbounded = coverage(study, size=None, trials=5)
    assert coverage_line(unbounded).startswith("Covered: 3 distinct point(s) measured (the space has continuous")


# ---------------------------------------------------------------- end to end


def test_a_small_budget_stops_launching_trials_and_still_confirms_and_exports(tune, tmp_path, monkeypatch):
    from tuner import objective as objectives
    from tuner.search import execute

    clock = FakeClock()
    monkeypatch.setattr(projections, "monotonic", clock)  # BudgetStop's clock: every trial takes 10000 s on it
    original = objectives.Objective.__call__

    def timed(self, trial):
        try:
            return original(self, trial)
        finally:
            if not trial.user_attrs.get("reused"):  # a copy of an earlier trial measures nothing and costs ~0
                clock.t += 10_000

    monkeypatch.setattr(objectives.Objective, "__call__", timed)
    drafters = {"ngram": {"gamma": [1, 2, 3, 4, 5, 6]}}
    cfg = tune(
        "tuner.trials=5",
        "tuner.budget=35000",  # the recording (10000 s) and 2 trials fit with the finish; a third would not
        "tuner.confirm=true",
        "tuner.confirm_limit=2",
        "tuner.confirm_repeats=1",
        "study.pruner=none",
        drafters=drafters,
    )
    summary = execute(cfg)
    root = tmp_path / "runs" / "t"
    rows = [json.loads(line) for line in (root / "trials.jsonl").read_text().splitlines()]
    measured = [r for r in rows if r["role"] == "candidate" and not r["user_attrs"].get("reused")]
    assert len(measured) == 2, "the budget must stop launching trials after two"
    covered = summary["coverage"]
    assert covered["budget_stopped"].startswith("budget stopped the search after 2 of 5 trial(s)")
    assert (covered["points"], covered["space_size"], covered["trials_run"], covered["trials"]) == (2, 6, 2, 5)
    # still confirmed (each distinct winner) and exported
    winners = {w["trial"] for w in summary["winners"].values() if w["trial"] is not None}
    assert winners and {int(n) for n in summary["confirmations"]} == winners
    assert all(c["complete"] for c in summary["confirmations"].values())
    readme = " ".join((root / "best" / "README.md").read_text().split())
    assert "Covered: 2 of the space's 6 point(s) measured (33%); 2 of 5 candidate trial(s) run" in readme
    assert "budget stopped the search after 2 of 5 trial(s)" in readme
    assert summary["projection"]["projected_s"] == summary["timings"]["projected_s"]
    saved = json.loads((root / "summary.json").read_text())
    assert saved["coverage"] == covered and "projection_error_pct" in saved["timings"]
