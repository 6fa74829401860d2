"""The tuner with engine.backend=llama-server: a small study on real tasks measured on the real server.

Only drafters llama-server runs are offered (the others left out with the reason), trials complete with
the server's own acceptance and resident memory, and the export names the GGUF files the study measured
and says it was measured there. Needs the binary (tests/serving/conftest.py).
"""

from __future__ import annotations

import json

import pytest

from tests.serving.conftest import server_pids
from tests.tuner.conftest import tune_config
from tuner.search import execute
from tuner.space import load_space


def test_a_study_on_llama_server_measures_there_and_exports_what_it_measured(binary, ggufs, tmp_path):
    cfg = tune_config(
        tmp_path,
        "engine.backend=llama-server",
        "space=llama-server",
        "tuner.trials=2",
        f"server.target_gguf={ggufs['target']}",
        f"server.draft_gguf={ggufs['draft']}",
        drafters={"ngram": {"gamma": [3, 5], "min_match": [1, 2]}},
    )
    summary = execute(cfg)
    root = tmp_path / "runs" / "t"
    rows = [json.loads(line) for line in (root / "trials.jsonl").read_text().splitlines()]
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3
    # timed on the wall clock, which sees the server decode: on this process's cpu clock (what auto read before,
    # with one torch thread) every candidate came out at ~1.000x and the winner was arbitrary
    assert {r["user_attrs"]["clock"] for r in rows} == {"wall"}
    assert any(round(r["user_attrs"]["speedup"], 3) != 1.0 for r in rows[1:])
    for row in rows[1:]:
        attrs = row["user_attrs"]
        assert attrs["engine"]["backend"] == "llama-server"
        assert attrs["acceptance_rate"] > 0 and attrs["memory_source"] == "measured"
        assert attrs["diverged_tasks"] == [] and attrs["regressions"] == []
        assert attrs["cost_ratios"]["draft_over_verify"] is None  # the server times drafting inside R
    args = (root / "best" / "llama-server" / "llama-server.args").read_text()
    assert str(binary.path) in (root / "best" / "llama-server" / "run.sh").read_text()  # the binary it measured
    on = summary["winners"]["llama-server"]["on"]
    assert f"-m {ggufs['target']}" in args and ("--spec-type ngram-simple" if on else "--spec-type none") in args
    assert "in a real llama-server" in (root / "best" / "llama-server" / "README.md").read_text()
    assert summary["best"] is not None and summary["winners"]["llama-server"]["trial"] is not None
    assert server_pids(str(ggufs["target"])) == [], "a llama-server outlived the study"
    # OFF's server started once for the whole study (recording, both trials, the confirmation), not per trial:
    # one log file per server start (runners/backends/kept.py)
    off_starts = sorted(p.name for p in (root / "server-logs").glob("llama-server-none-*.log"))
    assert len(off_starts) == 1, off_starts
    assert len(list((root / "server-logs").glob("llama-server-ngram-*.log"))) >= 2  # each trial's ON its own


def test_the_space_leaves_out_what_llama_server_cannot_run():
    space = load_space(
        {"name": "x", "drafters": {"ngram": {"gamma": 4}, "mtp": {"gamma": 2}, "layer_skip": {"gamma": 2}}},
        has_draft=True,
        has_mtp=True,
        backend="llama-server",
    )
    assert sorted(space.drafters) == ["mtp", "ngram"]  # mtp runs there as draft-mtp (serving/mtp_gguf.py)
    assert list(space.left_out) == ["layer_skip"] and "early-exit" in space.left_out["layer_skip"]
    with pytest.raises(ValueError, match="allow_lossy"):
        load_space({"drafters": {"ngram": {}}, "allow_lossy": True}, has_draft=False, backend="llama-server")


def test_a_two_level_study_on_llama_server_measures_each_load_there(binary, ggufs, tmp_path):
    """tuner.concurrency=[1,2] on the server: the level-2 study's trials ran live with 2 slots, its export has them."""
    cfg = tune_config(
        tmp_path,
        "engine.backend=llama-server",
        "space=llama-server",
        "tuner.trials=1",
        "tuner.concurrency=[1,2]",
        f"server.target_gguf={ggufs['target']}",
        drafters={"ngram": {"gamma": [3], "min_match": [2]}},
    )
    summary = execute(cfg)
    runs = tmp_path / "runs"
    assert sorted(summary["levels"]) == ["1", "2"]
    rows = [json.loads(line) for line in (runs / "t-n2" / "trials.jsonl").read_text().splitlines()]
    assert [(r["state"], r["user_attrs"]["concurrency"]) for r in rows] == [("COMPLETE", 2), ("COMPLETE", 2)]
    assert rows[1]["user_attrs"]["measure"] == "live" and rows[1]["user_attrs"]["engine"]["backend"] == "llama-server"
    args = (runs / "t-n2" / "best" / "llama-server" / "llama-server.args").read_text().split()
    assert args[args.index("-np") + 1] == "2" and "--kv-unified" in args
    assert (runs / "t" / "levels" / "README.md").is_file()
    assert server_pids(str(ggufs["target"])) == [], "a llama-server outlived the study"


def test_a_value_llama_server_cannot_run_is_left_out_before_any_trial():
    """policy=extend (the head continues a lookup draft) has no llama.cpp equivalent: dropped from the choices."""
    space = load_space(
        {"drafters": {"mtp+ngram": {"gamma": 3, "policy": ["first", "extend"]}, "ngram": {"gamma": 4}}},
        has_draft=False,
        has_mtp=True,
        backend="llama-server",
    )
    assert space.drafters["mtp+ngram"]["policy"].choices == ("first",)
    assert "first-wins" in space.left_out["mtp+ngram.policy=extend"]
    only_extend = load_space(
        {"drafters": {"mtp+ngram": {"gamma": 3, "policy": ["extend"]}, "ngram": {"gamma": 4}}},
        has_draft=False,
        has_mtp=True,
        backend="llama-server",
    )
    assert list(only_extend.drafters) == ["ngram"] and "first-wins" in only_extend.left_out["mtp+ngram"]
    builtin = load_space({"drafters": {"mtp+ngram": {"policy": ["first", "extend"]}}}, has_draft=False, has_mtp=True)
    assert builtin.drafters["mtp+ngram"]["policy"].choices == ("first", "extend")
