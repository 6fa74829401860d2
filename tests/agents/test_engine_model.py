"""EngineModel through the agent loop with a tiny random model: one session per task, KV reuse across
turns (no history prefilled twice), context limits, and greedy speculation leaving the ids unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.engine_model import EngineModel
from agents.loop import AgentConfig, run_agent
from agents.prompts import SYSTEM_PROMPT, ChatRenderer, instance_prompt
from engine.engine import Engine, EngineConfig
from engine.loading import load_model
from engine.tiny import make_tiny_model
from tasks.sandbox.local import LocalSandbox
from tasks.schema import Instance

INSTANCE = Instance("demo__junk-1", "junk", "0" * 40, "Nothing works; please fix it.")
CONFIG = AgentConfig(max_steps=3, max_format_errors=3, max_new_tokens=16)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny"), layers=1, hidden=64)
    return load_model(str(folder), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("junk")
    (src / "main.py").write_text("print('hi')\n")
    return src


def solve(model: EngineModel, tokenizer, project: Path, trajectory: Path | None, config: AgentConfig = CONFIG):
    with LocalSandbox() as sb:
        sb.start(project)
        return run_agent(INSTANCE, model, sb, tokenizer, config, trajectory)


def test_turns_reuse_the_kv_and_never_prefill_history_twice(target, project, tmp_path):
    model = EngineModel(Engine(target, EngineConfig(drafter="ngram", gamma=3)), target.tokenizer, "tiny")
    assert model.context_limit == target.model.config.max_position_embeddings and model.lossy is False
    result = solve(model, target.tokenizer, project, tmp_path / "t.json")
    # A random model writes junk: every turn is a format error.
    assert result.status in ("format_errors", "step_limit") and result.steps == 3, result.message
    steps = json.loads((tmp_path / "t.json").read_text())["steps"]
    turns = [s["stats"] for s in steps]
    prompts = [s["prompt_tokens"] for s in steps]
    replies = [s["reply_tokens"] for s in steps]
    assert [t["prompt_tokens"] for t in turns] == prompts
    assert turns[0]["reused_tokens"] == 0 and turns[0]["prefilled_tokens"] == prompts[0]
    for k in range(1, len(turns)):
        # Everything up to the previous reply's last token is in the KV; that token (emitted, never fed)
        # and the closing + observation + header are all that is computed.
        assert turns[k]["reused_tokens"] == prompts[k - 1] + replies[k - 1] - 1, f"turn {k} re-prefilled history"
        assert turns[k]["prefilled_tokens"] == prompts[k] - prompts[k - 1] - replies[k - 1] + 1
    total = result.stats
    assert total is not None
    assert total.prompt_tokens == result.prompt_tokens == sum(prompts)
    assert total.reused_tokens == total.prompt_tokens - total.prefilled_tokens
    # Every conversation token the target saw was computed once: prefilled, or fed while decoding.
    fed_while_decoding = sum(r - 1 for r in replies[:-1])
    assert total.prefilled_tokens + fed_while_decoding == prompts[-1]
    assert total.new_tokens == len(result.generated_ids) == sum(replies)
    assert result.max_context_tokens == max(p + r for p, r in zip(prompts, replies, strict=True))


def test_each_task_gets_a_fresh_session(target, project):
    model = EngineModel(Engine(target, EngineConfig()), target.tokenizer, "tiny")
    config = AgentConfig(max_steps=1, max_new_tokens=8)
    first = solve(model, target.tokenizer, project, None, config)
    second = solve(model, target.tokenizer, project, None, config)
    assert first.stats.reused_tokens == second.stats.reused_tokens == 0
    assert first.generated_ids == second.generated_ids, "same task, greedy: same reply"
    assert model.session is None, "end() releases the session"


def test_greedy_speculation_gives_the_plain_ids(target, project):
    plain = solve(EngineModel(Engine(target, EngineConfig()), target.tokenizer, "off"), target.tokenizer, project, None)
    spec = EngineModel(Engine(target, EngineConfig(drafter="ngram", gamma=4)), target.tokenizer, "on")
    on = solve(spec, target.tokenizer, project, None)
    assert on.generated_ids == plain.generated_ids and on.status == plain.status


def test_engine_context_limit_ends_the_task(target, project):
    opening = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instance_prompt(INSTANCE)}]
    first = len(ChatRenderer(target.tokenizer).first(opening))
    engine = Engine(target, EngineConfig())
    engine.context_limit = first + CONFIG.max_new_tokens + 4  # a model with a small window: one turn fits
    result = solve(EngineModel(engine, target.tokenizer, "tiny"), target.tokenizer, project, None)
    assert (result.status, result.steps) == ("context_exceeded", 1), result.message
    assert result.max_context_tokens <= engine.context_limit


def test_sampling_seed_makes_a_task_replayable(target, project):
    config = AgentConfig(max_steps=1, max_new_tokens=12)
    engine = Engine(target, EngineConfig(temperature=1.0))
    runs = [solve(EngineModel(engine, target.tokenizer, "t", seed=7), target.tokenizer, project, None, config)]
    engine.new_session()  # sessions created in between must not matter
    runs.append(solve(EngineModel(engine, target.tokenizer, "t", seed=7), target.tokenizer, project, None, config))
    assert runs[0].generated_ids == runs[1].generated_ids
