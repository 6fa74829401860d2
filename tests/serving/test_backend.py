"""engine.backend=llama-server: the runner drives a real llama-server through the same agent loop and summaries.

Two real swe-lite tasks on the bundled models (converted to GGUF once per session), OFF against ngram:
the summary has the built-in engine's statistics names and identities, prefix reuse is counted from the
server's own prompt figures (a task's first turn recomputes, later turns reuse), greedy streams agree ON vs
OFF, the exported flags are what the server ran, and no server outlives the run. Without a binary these
tests skip (fail under SPECTUNE_REQUIRE_LLAMA=1); the config checks at the end need none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.stats import GenerationStats
from runners.run import execute
from runners.summary import SIDE_KEYS
from tests.conftest import runner_config
from tests.serving.conftest import server_pids
from tests.serving.test_stats import assert_identities


def _cfg(tmp: Path, *overrides: str):
    return runner_config(
        tmp,
        "task.split=test",
        "task.limit=2",
        "engine.backend=llama-server",
        "server.threads=1",
        "tracking=none",
        *overrides,
    )


@pytest.fixture(scope="module")
def server_run(ggufs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server-run")
    cfg = _cfg(
        tmp,
        "engine=ngram",
        "engine.gamma=6",
        "+engine.options.min_match=2",
        f"server.target_gguf={ggufs['target']}",
        "run.name=ngram",
    )
    return tmp / "ngram", execute(cfg), ggufs


def test_summary_has_the_engines_names_and_real_successes(server_run):
    _, summary, _ = server_run
    for side in ("baseline", "candidate"):
        s = summary[side]
        assert set(SIDE_KEYS) <= s.keys() and s["unsupported"] is None
        assert s["tasks"] == 2 and s["successes"] == 2, s["statuses"]  # the bundled model solves these
        assert s["reused_tokens"] + s["prefilled_tokens"] == s["prompt_tokens"] > 0
        assert s["reused_tokens"] > 0 and s["peak_memory_bytes"] > 0 and s["decode_tokens_per_s"] > 0
    candidate = summary["candidate"]
    assert candidate["acceptance_rate"] > 0 and candidate["mean_accepted_length"] > 1
    drafted, accepted = candidate["per_position"]["drafted"], candidate["per_position"]["accepted"]
    assert drafted[0] >= drafted[-1] > 0 and all(a <= d for a, d in zip(accepted, drafted, strict=True))
    assert summary["baseline"]["acceptance_rate"] == 0.0


def test_every_turn_keeps_the_identities_and_reuses_the_prefix_from_its_second_turn(server_run):
    out, _, _ = server_run
    turns = 0
    for path in sorted((out / "trajectories").rglob("*.json")):
        steps = [s for s in json.loads(path.read_text())["steps"] if s.get("stats")]
        assert len(steps) >= 2, path
        for i, step in enumerate(steps):
            stats = GenerationStats.from_dict(step["stats"])
            assert_identities(stats)
            assert stats.prompt_tokens == step["prompt_tokens"]
            if i == 0:
                assert stats.reused_tokens == 0, "a task's first turn must start from an empty cache"
            else:  # the whole previous turn is reused; its last token only when the server had decoded it
                before = steps[i - 1]["prompt_tokens"] + steps[i - 1]["reply_tokens"]
                assert before - 1 <= stats.reused_tokens <= before, (i, stats.reused_tokens, before)
            turns += 1
    assert turns >= 8


def test_greedy_streams_agree_and_the_server_ran_the_exported_flags(server_run):
    _, summary, ggufs = server_run
    assert summary["greedy"] and summary["diverged_tasks"] == [] and summary["regressions"] == []
    from engine.engine import EngineConfig
    from export.llama_server import argv, speculation

    backend = summary["backend"]
    candidate = EngineConfig(drafter="ngram", gamma=6, options={"min_match": 2})
    assert backend["candidate"]["args"] == [*argv(speculation(candidate, None)[0]), "-np", "1"]
    assert backend["candidate"]["args"][:2] == ["--spec-type", "ngram-simple"]
    assert backend["baseline"]["args"][:2] == ["--spec-type", "none"]
    assert backend["baseline"]["target_gguf"] == str(ggufs["target"])
    assert server_pids(str(ggufs["target"])) == [], "a llama-server outlived the run"


def test_the_eagle3_head_drafts_on_the_server_and_every_stream_is_the_plain_one(ggufs, tmp_path):
    cfg = _cfg(
        tmp_path,
        "engine=eagle3",
        "task.limit=1",
        f"server.target_gguf={ggufs['target']}",
        f"server.eagle3_gguf={ggufs['eagle3']}",
        "run.name=eagle3",
    )
    summary = execute(cfg)
    assert summary["greedy"] and summary["diverged_tasks"] == [] and summary["regressions"] == []
    args = summary["backend"]["candidate"]["args"]
    assert args[:6] == ["--spec-type", "draft-eagle3", "--model-draft", str(ggufs["eagle3"]), "--spec-draft-n-max", "3"]
    assert summary["backend"]["candidate"]["eagle3_gguf"] == str(ggufs["eagle3"])
    candidate = summary["candidate"]
    assert candidate["unsupported"] is None and candidate["per_position"]["drafted"][0] > 0
    assert 0 < candidate["acceptance_rate"] < 1
    assert server_pids(str(ggufs["eagle3"])) == [], "a llama-server outlived the run"


def test_a_first_wins_combination_runs_whole_on_the_server_with_the_plain_streams(ggufs, tmp_path):
    cfg = _cfg(
        tmp_path,
        "engine=eagle3+ngram",
        "+engine.options.policy=first",
        "task.limit=1",
        f"server.target_gguf={ggufs['target']}",
        f"server.eagle3_gguf={ggufs['eagle3']}",
        "run.name=eagle3-ngram",
    )
    summary = execute(cfg)
    assert summary["greedy"] and summary["diverged_tasks"] == [] and summary["regressions"] == []
    assert summary["candidate"]["unsupported"] is None and summary["candidate"]["acceptance_rate"] > 0
    args = summary["backend"]["candidate"]["args"]
    assert args[args.index("--spec-type") + 1] == "ngram-simple,draft-eagle3" and str(ggufs["eagle3"]) in args


def test_a_dflash_draft_the_user_brings_drafts_on_the_server_and_every_stream_is_the_plain_one(
    ggufs, dflash_gguf, tmp_path
):
    cfg = _cfg(
        tmp_path,
        "engine=dflash",
        "task.limit=1",
        f"server.target_gguf={ggufs['target']}",
        f"server.dflash_gguf={dflash_gguf}",
        "run.name=dflash",
    )
    summary = execute(cfg)
    assert summary["greedy"] and summary["diverged_tasks"] == [] and summary["regressions"] == []
    args = summary["backend"]["candidate"]["args"]
    assert args[:6] == ["--spec-type", "draft-dflash", "--model-draft", str(dflash_gguf), "--spec-draft-n-max", "3"]
    assert summary["backend"]["candidate"]["dflash_gguf"] == str(dflash_gguf)
    candidate = summary["candidate"]
    assert candidate["unsupported"] is None and candidate["per_position"]["drafted"][0] > 0
    assert server_pids(str(dflash_gguf)) == [], "a llama-server outlived the run"


def test_dflash_without_its_draft_or_on_the_built_in_engine_is_unsupported_with_the_reason(ggufs, tmp_path):
    cfg = _cfg(tmp_path, "engine=dflash", "task.limit=1", f"server.target_gguf={ggufs['target']}", "run.name=nod")
    summary = execute(cfg)
    assert "needs a DFlash draft GGUF: server.dflash_gguf=PATH" in summary["candidate"]["unsupported"]
    assert summary["baseline"]["tasks"] == 1
    builtin = _cfg(tmp_path, "engine=dflash", "engine.backend=builtin", "task.limit=1", "run.name=builtin")
    summary = execute(builtin)
    assert "runs on engine.backend=llama-server only" in summary["candidate"]["unsupported"]


def test_a_configuration_the_server_cannot_run_is_unsupported_and_the_baseline_still_runs(ggufs, tmp_path):
    cfg = _cfg(tmp_path, "engine=layer_skip", f"server.target_gguf={ggufs['target']}", "task.limit=1", "run.name=ls")
    summary = execute(cfg)
    assert "llama-server cannot run this configuration" in summary["candidate"]["unsupported"]
    assert "early-exit" in summary["candidate"]["unsupported"]
    assert summary["baseline"]["tasks"] == 1 and "candidate" not in summary["backend"]


def test_a_wrong_backend_names_the_allowed_ones(tmp_path):
    from runners.config import check_config

    with pytest.raises(ValueError, match=r"engine\.backend='vllm'.*builtin, llama-server"):
        check_config(_cfg(tmp_path, "engine.backend=vllm"))


def test_a_missing_binary_is_one_input_error_before_any_task(tmp_path):
    cfg = _cfg(tmp_path, "server.binary=/no/such/llama-server", "run.name=missing")
    with pytest.raises(ValueError, match=r"engine.backend=llama-server: server.binary=/no/such/llama-server"):
        execute(cfg)
    assert not (tmp_path / "missing" / "repeats.jsonl").exists()
