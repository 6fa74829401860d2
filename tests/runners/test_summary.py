"""Aggregation rules of the run summary, on hand-built outcomes (the runner's end-to-end test is separate)."""

import json
import math

from engine.stats import GenerationStats
from runners.outcomes import SideRun, TaskOutcome, first_divergence
from runners.outputs import dumps_strict
from runners.summary import SIDE_KEYS, side_summary, summarize


def _run(iid, side, repeat, success, time_s, ids=(1, 2, 3), drafted=0, accepted=0):
    stats = GenerationStats(
        new_tokens=len(ids),
        drafts=1 if drafted else 0,
        drafted=drafted,
        accepted=accepted,
        drafted_per_position=[1] * drafted,
        accepted_per_position=[1] * accepted + [0] * (drafted - accepted),
        prompt_tokens=10,
        reused_tokens=6,
        prefilled_tokens=4,
    )
    stats.time_s = {"prefill": 0.1, "draft": 0.1, "verify": 0.2, "other": 0.0}
    return SideRun(
        iid,
        side,
        repeat,
        "submitted" if success else "step_limit",
        success,
        "resolved" if success else "not_submitted",
        time_s,
        0.5,
        stats=stats,
        generated_ids=list(ids),
    )


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], []) is None


def test_seconds_per_success_is_the_median_over_repeats():
    runs = [
        _run("a", "baseline", 0, True, 10.0),
        _run("b", "baseline", 0, False, 20.0),  # 30 s / 1
        _run("a", "baseline", 1, True, 8.0),
        _run("b", "baseline", 1, True, 12.0),  # 20 s / 2
        _run("a", "baseline", 2, False, 9.0),
        _run("b", "baseline", 2, False, 9.0),
    ]  # no success: inf
    s = side_summary(runs, repeats=3)
    assert s["seconds_per_success_repeats"] == [30.0, 10.0, None]
    assert s["seconds_per_success"] == 30.0  # median of (10, 30, inf)
    assert (s["successes"], s["tasks"]) == (3, 6)
    assert math.isclose(s["success_rate"], 0.5)
    assert math.isclose(s["successes_per_minute"], 3 / (68.0 / 60))
    assert s["reused_tokens"] + s["prefilled_tokens"] == s["prompt_tokens"] == 60


def test_no_success_gives_null_not_infinity():
    s = side_summary([_run("a", "candidate", 0, False, 5.0)], repeats=1)
    assert s["seconds_per_success"] is None and s["seconds_per_success_repeats"] == [None]
    json.loads(dumps_strict(s))


def test_unsupported_side_has_every_key_and_no_numbers():
    s = side_summary([], repeats=2, unsupported="drafter 'draft_model' needs a draft model")
    assert set(SIDE_KEYS) <= s.keys()
    assert s["unsupported"].startswith("drafter") and s["seconds_per_success"] is None and s["tasks"] == 0


def test_regressions_improvements_and_divergence():
    outcomes = [
        TaskOutcome("a", 0, 0, _run("a", "baseline", 0, True, 1.0), _run("a", "candidate", 0, False, 1.0)),
        TaskOutcome("b", 1, 0, _run("b", "baseline", 0, False, 1.0), _run("b", "candidate", 0, True, 1.0, ids=(1, 5))),
        TaskOutcome(
            "c",
            2,
            0,
            _run("c", "baseline", 0, True, 2.0, drafted=0),
            _run("c", "candidate", 0, True, 1.0, drafted=4, accepted=3),
        ),
    ]
    summary = summarize(outcomes, repeats=1, lossy=False, greedy=True, unsupported=None)
    assert summary["regressions"] == ["a"] and summary["improvements"] == ["b"]
    assert summary["diverged_tasks"] == ["b"]
    row_b = next(r for r in summary["per_task"] if r["instance_id"] == "b")
    assert row_b["first_divergence"] == 1
    assert summary["candidate"]["per_position"]["acceptance"] == [1.0, 1.0, 1.0, 0.0]
    assert math.isclose(summary["candidate"]["acceptance_rate"], 0.75)
    json.loads(dumps_strict(summary))


def test_sampled_runs_do_not_report_divergence():
    outcomes = [
        TaskOutcome("a", 0, 0, _run("a", "baseline", 0, True, 1.0), _run("a", "candidate", 0, True, 1.0, ids=(7,)))
    ]
    summary = summarize(outcomes, repeats=1, lossy=False, greedy=False, unsupported=None)
    assert summary["per_task"][0]["first_divergence"] is None and summary["diverged_tasks"] == []


def test_progress_into_a_file_prints_one_plain_line_per_task_run():
    import io

    from rich.console import Console

    from runners.report import RunProgress

    out = io.StringIO()
    with RunProgress(2, enabled=True, console=Console(file=out, width=200)) as progress:
        progress.update(
            TaskOutcome("a", 0, 0, _run("a", "baseline", 0, True, 2.0), _run("a", "candidate", 0, True, 1.0))
        )
        progress.update(TaskOutcome("b", 1, 0, _run("b", "baseline", 0, False, 4.0), None))
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("[")]
    assert lines[0].startswith("[1/2] a r0: OFF resolved 2.0s · ON resolved 1.0s")
    assert "OFF 1/1 2.0s/success" in lines[0] and "ON 1/1 1.0s/success" in lines[0]
    assert lines[1].startswith("[2/2] b r0: OFF unresolved 4.0s |")
    silent = io.StringIO()
    with RunProgress(1, enabled=False, console=Console(file=silent)) as progress:
        progress.update(TaskOutcome("a", 0, 0, _run("a", "baseline", 0, True, 2.0), None))
    assert silent.getvalue() == ""


def test_tables_into_a_file_are_not_squeezed_to_80_columns():
    from runners.report import FILE_WIDTH, table_console

    assert table_console().width >= FILE_WIDTH  # pytest captures stdout: not a terminal
