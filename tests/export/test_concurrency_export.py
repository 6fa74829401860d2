"""export per concurrency level: llama-server per level, vLLM's per-batch-size table, SGLang's one level, the table."""

from __future__ import annotations

import json
import re

import pytest

from engine.engine import EngineConfig
from export import keys, llama_server, readme, sglang, vllm
from export.files import dumps_strict
from export.record import APPROXIMATE, EXACT, NONE, at_level, levels_in_order, off_record
from tests.export.test_export import DRAFT, make_record

NGRAM5 = EngineConfig(drafter="ngram", gamma=5, options={"min_match": 2, "max_match": 6})
NGRAM3 = EngineConfig(drafter="ngram", gamma=3, options={"min_match": 2, "max_match": 6})
DRAFT4 = EngineConfig(drafter="draft_model", gamma=4)
SUFFIX6 = EngineConfig(drafter="suffix", gamma=6, options={"scope": "engine"})
SUFFIX2 = EngineConfig(drafter="suffix", gamma=2, options={"scope": "engine"})
MTP3 = EngineConfig(drafter="mtp", gamma=3)


def record(**changes):
    """A study's record: its engine is the single-agent best, the draft weights are the model profile's."""
    return make_record(NGRAM5, draft=DRAFT, mtp="models/spectune-tiny/mtp", **changes)


def pairs(words: list[str]) -> dict[str, str | None]:
    """Command-line words as {flag: value or None}."""
    out: dict[str, str | None] = {}
    for word in words:
        if word.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", word):
            out[word] = None
            last = word
        else:
            out[last] = word
    return out


def check_vllm_schedule(table: list[list[int]], max_num_seqs: int, num_speculative_tokens: int) -> None:
    """vLLM's own rules for the table (dynamic/utils.py): start at 1, sorted, no overlap, k >= 0; here also no gap."""
    assert table[0][0] == 1, "the first batch-size range must start at 1"
    assert table[-1][1] == max_num_seqs, "the ranges must reach max_num_seqs"
    for (lo, hi, k), nxt in zip(table, [*table[1:], None], strict=True):
        assert 1 <= lo <= hi and 0 <= k <= num_speculative_tokens
        if nxt is not None:
            assert nxt[0] == hi + 1, "ranges must be contiguous and must not overlap"


# ---- the levels ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [{}, {0: NGRAM5}, {2.0: NGRAM5}, {True: NGRAM5}, {1: "ngram"}])
def test_levels_must_be_whole_agents_with_configurations(bad):
    with pytest.raises(ValueError, match="level"):
        levels_in_order(bad)


def test_a_level_without_a_winner_is_speculation_off_with_the_study_sampling():
    base = make_record(EngineConfig(drafter="ngram", temperature=0.7, top_k=20), draft=DRAFT)
    for off in (None, EngineConfig(drafter="none")):
        assert at_level(base, off) == off_record(base)
    assert at_level(base, None).engine.temperature == 0.7 and at_level(base, None).draft is None
    assert at_level(base, DRAFT4).engine is DRAFT4 and at_level(base, DRAFT4).draft == DRAFT


# ---- llama-server: one server per level ------------------------------------------------------------------------


def test_llama_server_argv_per_level():
    best = {4: DRAFT4, 1: NGRAM5, 16: None}
    args = llama_server.level_args(record(), best)
    assert list(args) == [1, 4, 16]
    for level, words in args.items():
        flags = pairs(words)
        assert set(flags) <= set(llama_server.KNOWN_FLAGS), f"level {level}: a flag outside the pinned build"
        assert all(t in llama_server.SPEC_TYPES for t in flags["--spec-type"].split(","))
        assert flags["-np"] == str(level) and flags["-c"] == str(llama_server.pool_context(4096, level))
        assert ("--kv-unified" in flags) == (level > 1), "one KV pool for more than one slot"
        np_at = words.index("-np")
        assert words[np_at : np_at + len(llama_server.slot_args(level))] == llama_server.slot_args(level)
    assert pairs(args[1])["--spec-type"] == "ngram-simple" and pairs(args[1])["--spec-ngram-simple-size-m"] == "5"
    assert pairs(args[4])["--spec-type"] == "draft-simple" and pairs(args[4])["--spec-draft-n-max"] == "4"
    assert pairs(args[4])["--model-draft"] == f"<draft-gguf-of:{DRAFT}>"
    assert pairs(args[16])["--spec-type"] == "none" and "--model-draft" not in pairs(args[16])
    # Level 1 is exactly the single-agent export of that level's best.
    assert args[1] == llama_server.argv(llama_server.build(at_level(record(), NGRAM5))[0])


def test_llama_server_level_rows_say_what_each_server_is():
    best = {1: NGRAM5, 8: None}
    _, rows = llama_server.build_level(record(), best, 8)
    by_setting = {r.setting: r for r in rows}
    assert by_setting["concurrency=8"].fit == EXACT and "-np 8 --kv-unified" in by_setting["concurrency=8"].reason
    assert "-c 32768 = 8 x 4096" in by_setting["context=4096 per agent"].reason
    assert by_setting["concurrency=8: speculation off"].reason.endswith("--spec-type none")
    assert "one session at a time" not in by_setting
    assert llama_server.build_at(record(), 1) == llama_server.build(record())
    flags, _ = llama_server.build_level(record(context=0), best, 8)
    assert "-c" not in dict(flags), "no context measured: the server's default"
    with pytest.raises(ValueError, match="level 2 was not measured"):
        llama_server.build_level(record(), best, 2)


# ---- vLLM: one config, a draft length per batch size ----------------------------------------------------------------


def test_per_batch_size_key_is_in_the_pinned_set_with_its_type():
    assert vllm.PER_BATCH_SIZE in keys.vllm_keys()
    fields = json.loads(keys.KEYS_FILE.read_text())[keys.VLLM_NODE]
    kind = next(k for name, k, _ in fields if name == vllm.PER_BATCH_SIZE)
    assert kind == "list[tuple[int, int, int]] | None"


@pytest.mark.parametrize(
    ("lengths", "max_num_seqs", "table"),
    [
        ({1: 5}, None, [[1, 1, 5]]),
        ({1: 5}, 8, [[1, 8, 5]]),
        ({1: 5, 4: 3, 16: 0}, None, [[1, 3, 5], [4, 15, 3], [16, 16, 0]]),
        ({1: 5, 4: 3, 16: 0}, 64, [[1, 3, 5], [4, 15, 3], [16, 64, 0]]),
        ({2: 4, 8: 0}, None, [[1, 7, 4], [8, 8, 0]]),  # below the lowest level: its length
        ({1: 0, 2: 6}, None, [[1, 1, 0], [2, 2, 6]]),
    ],
)
def test_batch_size_ranges(lengths, max_num_seqs, table):
    got = vllm.batch_size_ranges(lengths, max_num_seqs)
    assert got == table
    check_vllm_schedule(got, max_num_seqs or max(lengths), max(k for *_, k in got))


def test_batch_size_ranges_refuse_what_vllm_would():
    with pytest.raises(ValueError, match="max_num_seqs=2 is below the highest measured level 4"):
        vllm.batch_size_ranges({1: 3, 4: 2}, 2)
    with pytest.raises(ValueError, match=">= 0"):
        vllm.batch_size_ranges({1: -1})
    with pytest.raises(ValueError, match=">= 1"):
        vllm.batch_size_ranges({0: 3})


def test_vllm_same_method_drafts_each_levels_length():
    best = {1: NGRAM5, 4: NGRAM3, 16: None}
    config, rows = vllm.build_levels(record(), best, max_num_seqs=32)
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 6,
        vllm.PER_BATCH_SIZE: [[1, 3, 5], [4, 15, 3], [16, 32, 0]],
    }
    assert set(config) <= keys.vllm_keys()
    json.loads(dumps_strict(config))  # what vllm-speculative-config.json would hold
    check_vllm_schedule(config[vllm.PER_BATCH_SIZE], 32, config["num_speculative_tokens"])
    table = next(r for r in rows if r.setting.startswith("best per level"))
    assert table.fit == APPROXIMATE and "1-3: 5, 4-15: 3, 16-32: 0" in table.reason
    assert "16: speculation off" in table.setting
    assert any(r.setting == "concurrency 1, 4, 16" and r.reason == "--max-num-seqs 32" for r in rows)
    assert "one session at a time" not in {r.setting for r in rows}


def test_vllm_heuristic_levels_and_a_longer_draft_at_higher_load():
    heuristic = EngineConfig(
        drafter="draft_model", gamma=2, gamma_policy="heuristic", max_gamma=7, options=dict(DRAFT4.options)
    )
    config, _ = vllm.build_levels(record(), {1: DRAFT4, 2: heuristic})
    assert config["method"] == "draft_model" and config["model"] == DRAFT
    assert config["num_speculative_tokens"] == 7 and config[vllm.PER_BATCH_SIZE] == [[1, 1, 4], [2, 2, 7]]


def test_vllm_suffix_tree_depth_follows_the_longest_draft_and_the_row_warns():
    config, rows = vllm.build_levels(record(), {1: SUFFIX2, 8: SUFFIX6})
    assert config["method"] == "suffix" and config["num_speculative_tokens"] == 6
    assert config["suffix_decoding_max_tree_depth"] == 16 + 6
    assert config[vllm.PER_BATCH_SIZE] == [[1, 7, 2], [8, 8, 6]]
    assert any("method suffix" in r.reason and "re-measure" in r.reason for r in rows)


@pytest.mark.parametrize(
    ("best", "why"),
    [
        ({1: NGRAM5, 4: DRAFT4}, "level 1 runs ngram gamma=5 max_match=6 min_match=2 and level 4 draft_model gamma=4"),
        ({1: NGRAM5, 4: EngineConfig(drafter="ngram", gamma=3, options={"min_match": 3})}, "one set of options"),
        ({1: SUFFIX6, 2: EngineConfig(drafter="suffix", gamma=6, options={"scope": "session"})}, "one method"),
        ({1: MTP3, 4: NGRAM3}, "level 1's best, mtp, does not run here: method 'mtp' reads MTP layers"),
    ],
)
def test_vllm_refuses_levels_it_cannot_carry_in_one_config(best, why):
    config, rows = vllm.build_levels(record(), best)
    assert config is None and len(rows) == 1
    assert rows[0].fit == NONE and rows[0].setting == vllm.PER_BATCH_SIZE and why in rows[0].reason


def test_vllm_speculation_off_everywhere_is_no_speculative_config():
    config, rows = vllm.build_levels(record(), {1: None, 4: EngineConfig(drafter="none")})
    assert config == {}
    assert any("speculation off at every level" in r.reason for r in rows)


def test_vllm_lossy_rule_at_any_level_is_reported():
    lossy = EngineConfig(drafter="ngram", gamma=3, acceptance="topk", options={"min_match": 2, "max_match": 6, "k": 3})
    config, rows = vllm.build_levels(record(), {1: NGRAM5, 4: lossy})
    assert config is not None and config[vllm.PER_BATCH_SIZE] == [[1, 3, 5], [4, 4, 3]]
    fits = {r.setting: r.fit for r in rows}
    assert fits["acceptance=exact"] == EXACT and fits["acceptance=topk"] == NONE


# ---- SGLang: one level's best -----------------------------------------------------------------------------------


def test_sglang_has_no_per_batch_size_length_in_the_pinned_set():
    # The nearest flags exist (so the row's reason names real ones) but adapt to acceptance, not to load.
    assert {"--speculative-adaptive", "--speculative-adaptive-config"} <= keys.sglang_flags()
    assert "acceptance rate" in keys.sglang_help("--speculative-adaptive")
    assert not [f for f in keys.sglang_flags() if "batch" in f], "a per-batch-size flag appeared: map it"


def test_sglang_exports_the_highest_level_and_says_what_is_not_carried():
    best = {1: DRAFT4, 8: NGRAM3}
    flags, rows = sglang.build_levels(record(), best)
    assert set(dict(flags)) <= keys.sglang_flags()
    assert "--speculative-adaptive" not in dict(flags) and "--speculative-adaptive-config" not in dict(flags)
    assert flags == sglang.build(at_level(record(), NGRAM3))[0]
    assert dict(flags)["--speculative-algorithm"] == "NGRAM"
    row = rows[-1]
    assert row.fit == APPROXIMATE and row.setting == "best per level: 1: draft_model gamma=4; 8: ngram gamma=3 " + (
        "max_match=6 min_match=2"
    )
    assert "exported the best at 8 at once" in row.reason and "--speculative-adaptive" in row.reason
    assert any(r.setting == "concurrency=8" and r.reason.endswith("--max-running-requests 8") for r in rows)
    assert "--max-running-requests 8 " in sglang.command(record(), 8)
    assert sglang.command(record()) == sglang.command(record(), 1)


def test_sglang_chosen_level_off_and_levels_that_agree():
    flags, rows = sglang.build_levels(record(), {1: DRAFT4, 8: None}, level=8)
    assert flags == [] and rows[-1].fit == APPROXIMATE
    flags, rows = sglang.build_levels(record(), {1: DRAFT4, 8: None}, level=1)
    assert dict(flags)["--speculative-algorithm"] == "STANDALONE" and "one session at a time" in {
        r.setting for r in rows
    }
    flags, rows = sglang.build_levels(record(), {1: NGRAM5, 4: NGRAM5})
    assert rows[-1].fit == EXACT and "the same configuration was best at every level" in rows[-1].reason
    assert sglang.build_levels(record(), {1: None, 4: EngineConfig(drafter="none")})[1][-1].fit == EXACT
    with pytest.raises(ValueError, match="level 3 was not measured"):
        sglang.build_levels(record(), {1: NGRAM5}, level=3)


# ---- the table of levels ----------------------------------------------------------------------------------------


def test_levels_table():
    best = {4: NGRAM3, 1: NGRAM5, 16: None}
    speedups = {1: {"speedup": 1.374, "low": 1.118, "high": 1.612}, 4: 1.05}
    lines = readme.levels_lines(best, speedups)
    assert lines == [
        "| agents at once | best configuration | speedup over OFF at that level |",
        "|---|---|---|",
        "| 1 | ngram gamma=5 max_match=6 min_match=2 | 1.37x [1.12, 1.61] |",
        "| 4 | ngram gamma=3 max_match=6 min_match=2 | 1.05x |",
        "| 16 | speculation off | - |",
    ]
    assert readme.levels_lines({2: DRAFT4})[-1] == "| 2 | draft_model gamma=4 | - |"
