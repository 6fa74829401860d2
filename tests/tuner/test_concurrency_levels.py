"""tuner.concurrency: one study per level, each measured and exported at its own load, and the levels' answer.

A two-level study on real tasks (1 agent, then 2 at once): the level-2 study is `<name>-n2`, its trials ran both
sides as waves of 2 agents (live, wall clock), its llama-server export has 2 slots, and runs/<name>/levels/ holds
the table per target. Bad levels are one clear line.
"""

from __future__ import annotations

import json

import pytest

from tests.tuner.conftest import tune_config
from tuner.search import execute
from tuner.setup import check, concurrency_levels


def test_two_levels_two_studies_and_the_levels_table(tmp_path):
    cfg = tune_config(
        tmp_path,
        "tuner.trials=1",
        "tuner.concurrency=[1,2]",
        drafters={"ngram": {"gamma": [3], "min_match": [2]}},
    )
    summary = execute(cfg)
    runs = tmp_path / "runs"
    assert set(summary["levels"]) == {"1", "2"} and summary["levels"]["2"]["study"] == "t-n2"
    for name, level in (("t", 1), ("t-n2", 2)):
        rows = [json.loads(line) for line in (runs / name / "trials.jsonl").read_text().splitlines()]
        assert [r["state"] for r in rows] == ["COMPLETE", "COMPLETE"]
        assert {r["user_attrs"]["concurrency"] for r in rows} == {level}
        if level > 1:  # several agents at once: live waves on the wall clock (a replay is one agent's turns)
            assert rows[1]["user_attrs"]["measure"] == "live" and rows[1]["user_attrs"]["clock"] == "wall"
    args = (runs / "t-n2" / "best" / "llama-server" / "llama-server.args").read_text().split()
    assert args[args.index("-np") + 1] == "2" and "--kv-unified" in args
    one = (runs / "t" / "best" / "llama-server" / "llama-server.args").read_text().split()
    assert one[one.index("-np") + 1] == "1" and "--kv-unified" not in one
    readme = (runs / "t" / "levels" / "README.md").read_text()
    assert "| agents at once |" in readme and "## llama-server" in readme and "`t-n2`" in readme


@pytest.mark.parametrize("bad", [[], [0], [1, "x"]])
def test_bad_levels_are_one_clear_error(bad):
    with pytest.raises(ValueError, match=r"tuner\.concurrency"):
        concurrency_levels(bad)


def test_replay_with_a_level_above_one_and_run_concurrency_are_refused(tmp_path):
    with pytest.raises(ValueError, match="replay"):
        check(tune_config(tmp_path, "tuner.measure=replay", "tuner.concurrency=[1,4]"))
    with pytest.raises(ValueError, match=r"tuner\.concurrency"):
        check(tune_config(tmp_path, "run.concurrency=4"))


def test_finish_names_one_level(tmp_path):
    from tuner.finish import execute as finish_execute

    with pytest.raises(ValueError, match="name the one level"):
        finish_execute(tune_config(tmp_path, "tuner.concurrency=[1,4]"))
