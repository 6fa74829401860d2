"""A draft_model whose draft has another tokenizer than the target's, as each server export carries it.

llama-server (b11434), SGLang (0.5.23) and TensorRT-LLM (its pinned DraftTargetDecodingConfig) cannot run such a
draft: speculation off, with the reason; vLLM 0.33.0 runs it as draft_model with use_heterogeneous_vocab
(approximate: it drafts over the shared tokens).
"""

from __future__ import annotations

import pytest
from test_export import DRAFT, make_record

from engine.engine import EngineConfig
from engine.tiny import make_tiny_model
from export import llama_server, sglang, trtllm, vllm
from export.record import APPROXIMATE, NONE, other_tokenizer_reason

ENGINE = EngineConfig(drafter="draft_model", gamma=4)


@pytest.fixture(scope="module")
def other_draft(tmp_path_factory) -> str:
    """A tiny draft folder whose byte-level BPE has 400 tokens (the bundled target's has 8192)."""
    return str(make_tiny_model(tmp_path_factory.mktemp("xtok") / "draft", layers=1, hidden=32, vocab=400, seed=5))


def test_reason_names_the_difference_only_for_another_tokenizer(other_draft):
    reason = other_tokenizer_reason(make_record(ENGINE, draft=other_draft))
    assert reason is not None and "8192 vs 400 tokens" in reason
    assert other_tokenizer_reason(make_record(ENGINE, draft=str(DRAFT))) is None  # the bundled draft shares it
    assert other_tokenizer_reason(make_record(EngineConfig(drafter="ngram"), draft=other_draft)) is None
    assert other_tokenizer_reason(make_record(ENGINE, draft="org/some-hub-draft")) is None  # unreadable here


def test_llama_server_and_sglang_turn_speculation_off_with_the_reason(other_draft):
    record = make_record(ENGINE, draft=other_draft)
    flags, rows = llama_server.build(record)
    assert ("--spec-type", "none") in flags and not any(name == "--model-draft" for name, _ in flags)
    row = next(r for r in rows if r.setting.startswith("drafter=draft_model"))
    assert row.fit == NONE and "b11434" in row.reason and "8192 vs 400 tokens" in row.reason
    flags, rows = sglang.build(record)
    assert not any(name.startswith("--speculative") for name, _ in flags)
    row = next(r for r in rows if r.setting.startswith("drafter=draft_model"))
    assert row.fit == NONE and "8192 vs 400 tokens" in row.reason
    same_flags, _ = llama_server.build(make_record(ENGINE, draft=str(DRAFT)))
    assert ("--spec-type", "draft-simple") in same_flags  # a same-tokenizer draft is exported as before


def test_vllm_exports_a_heterogeneous_vocabulary_draft(other_draft):
    config, rows = vllm.build(make_record(ENGINE, draft=other_draft))
    assert config["method"] == "draft_model" and config["use_heterogeneous_vocab"] is True
    assert config["model"] == other_draft
    row = next(r for r in rows if r.setting.startswith("drafter=draft_model"))
    assert row.fit == APPROXIMATE and "8192 vs 400 tokens" in row.reason
    same, _ = vllm.build(make_record(ENGINE, draft=str(DRAFT)))
    assert "use_heterogeneous_vocab" not in same
    levels, _ = vllm.build_levels(make_record(ENGINE, draft=other_draft), {1: ENGINE, 2: ENGINE})
    assert levels is not None and levels["use_heterogeneous_vocab"] is True


def test_trtllm_turns_speculation_off_with_the_reason(other_draft):
    options, rows = trtllm.build(make_record(ENGINE, draft=other_draft))
    assert options == {}  # no speculative_config: TensorRT-LLM runs without speculation
    row = next(r for r in rows if r.setting.startswith("drafter=draft_model"))
    assert row.fit == NONE and "8192 vs 400 tokens" in row.reason and "DraftTargetDecodingConfig" in row.reason
    same, _ = trtllm.build(make_record(ENGINE, draft=str(DRAFT)))
    assert same["speculative_config"]["decoding_type"] == "Draft_Target"
