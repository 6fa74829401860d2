"""A draft model with a shorter position limit than the target's stops drafting before its limit.

GPT-2's learned position embedding has exactly `n_positions` rows, so a single position past it
raises IndexError: the tests would crash if the drafter ever fed one.
"""

from __future__ import annotations

import copy

import pytest
import torch

from engine.drafters import DrafterResources
from engine.drafters.draft_model import DraftModelDrafter
from engine.engine import Engine, EngineConfig
from engine.loading import LoadedModel
from engine.stats import GenerationStats
from engine.testing import perturbed_copy, random_model

LIMIT = 24  # draft positions; the targets have 512
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]  # 13 tokens: drafting runs into the limit
NEW = 40


def truncated_positions(model: LoadedModel, limit: int) -> LoadedModel:
    """A GPT-2 copy that embeds only the first `limit` positions (the rest of its weights unchanged)."""
    gpt2 = copy.deepcopy(model.model)
    wpe = gpt2.transformer.wpe
    gpt2.transformer.wpe = torch.nn.Embedding.from_pretrained(wpe.weight[:limit].clone(), freeze=True)
    gpt2.config.n_positions = limit
    return LoadedModel(
        model=gpt2, tokenizer=None, path=f"{model.path}[:{limit}]", device=model.device, dtype=model.dtype
    )


@pytest.fixture(scope="module")
def pairs():
    """(target, draft) sharing a 96-token vocabulary: random GPT-2 draft beside a Llama target, and a
    GPT-2 target with a perturbed copy of itself cut to LIMIT positions (a draft that gets accepted)."""
    llama = random_model("llama", seed=7)
    gpt2 = random_model("gpt2", seed=8)
    return {
        "gpt2_beside_llama": (llama, random_model("gpt2", seed=3, max_positions=LIMIT)),
        "agreeing_gpt2": (gpt2, truncated_positions(perturbed_copy(gpt2, noise=0.3, seed=2), LIMIT)),
    }


@pytest.mark.parametrize("pair", ["gpt2_beside_llama", "agreeing_gpt2"])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_short_draft_stops_drafting_and_stays_exact(pairs, pair, gamma):
    target, draft = pairs[pair]
    plain = Engine(target).generate(PROMPT, NEW).tokens
    result = Engine(target, EngineConfig(drafter="draft_model", gamma=gamma), draft=draft).generate(PROMPT, NEW)
    stats = result.stats
    assert result.tokens == plain
    assert stats.draft_limit_steps > 0
    assert stats.drafts > 0, "the draft never drafted before its limit"
    # After the limit every step is plain: 1 token per target forward, none drafted.
    assert stats.draft_limit_steps <= stats.target_forwards - stats.drafts
    assert stats.new_tokens == stats.accepted + stats.emitting_forwards
    assert stats.prompt_tokens == stats.reused_tokens + stats.prefilled_tokens
    if pair == "agreeing_gpt2":
        assert stats.accepted > 0, "the agreeing draft was never accepted: the limit path saw no acceptances"


def test_sampling_with_a_short_draft_runs_to_the_end(pairs):
    target, draft = pairs["gpt2_beside_llama"]
    engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4, temperature=1.0), draft=draft)
    result = engine.generate(PROMPT, NEW, stop_tokens=frozenset())
    assert len(result.tokens) == NEW and result.stats.draft_limit_steps > 0


def test_counter_adds_across_turns_and_drafting_resumes_below_the_limit(pairs):
    target, draft = pairs["agreeing_gpt2"]
    engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4), draft=draft)
    session = engine.new_session()
    first = engine.generate(PROMPT, NEW, session=session)
    assert first.stats.draft_limit_steps > 0
    second = engine.generate(PROMPT[:5], 6, session=session)  # a diverging turn, far below the draft's limit
    assert second.stats.draft_limit_steps == 0 and second.stats.drafts > 0
    # 23 tokens: runs past the limit again
    third = engine.generate([*session.history, *range(3, 15)], 8, session=session)
    assert third.stats.draft_limit_steps > 0
    total = sum((r.stats for r in (first, second, third)), start=GenerationStats())
    assert session.totals.draft_limit_steps == total.draft_limit_steps
    assert GenerationStats.from_dict(session.totals.to_dict()).draft_limit_steps == total.draft_limit_steps


def test_room_ends_exactly_at_the_last_embeddable_position(pairs):
    """k draft tokens after L history tokens feed positions up to L + k - 2, so room = limit - L + 1."""
    target, draft = pairs["gpt2_beside_llama"]
    drafter = DraftModelDrafter(None, DrafterResources(target=target, draft=draft))
    assert drafter.room(LIMIT - 3) == 4
    assert drafter.room(LIMIT) == 1  # history[-1] sits at the last position; one token fits
    assert drafter.room(LIMIT + 1) == 0 and drafter.room(LIMIT + 50) == 0
    unlimited = DraftModelDrafter(None, DrafterResources(target=target, draft=perturbed_copy(target, 0.1)))
    assert unlimited.room(LIMIT + 1) == 512 - (LIMIT + 1) + 1  # the Llama copy declares 512 positions
