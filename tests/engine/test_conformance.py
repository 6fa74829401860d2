"""Conformance suite every drafter must pass (add a drafter: add one entry to DRAFTER_CASES).

Greedy speculative output equals plain greedy output token for token (gamma 1..6, forced stop
token, max-token edge); after every generation the target KV equals a fresh recomputation of the
history; the statistics identities hold exactly. float64 models rule out last-bit argmax ties.
Sliding-window targets (Mistral: every layer; Gemma 3: alternating with full layers) have a window
of 8, shorter than every prompt, so every rollback happens past the window. Every target runs on
transformers' forward and, where it covers the architecture, on the engine's own Llama forward
(engine/llama.py, path `torch`: float64 like the rest; the oneDNN path is fp32/bf16 only and is
checked on the bundled models in test_forward_paths.py).
"""

from __future__ import annotations

import pytest
import torch

from engine.engine import Engine, EngineConfig
from engine.forward import TransformersForward
from engine.kv import SlidingGrowingLayer, kv_tensors, new_cache
from engine.llama import covers
from engine.loading import LoadedModel
from engine.stats import GenerationStats
from engine.testing import SLIDING_WINDOW, perturbed_copy, random_model

ARCHS = ["llama", "qwen2", "mistral", "gemma3"]
# (arch, forward path): transformers' forward for all, the engine's for the architectures it covers
TARGETS = [(arch, "transformers") for arch in ARCHS] + [
    (arch, "torch") for arch in ARCHS if covers(random_model(arch).model) is None
]
DRAFT_LIMIT = 20  # position limit of the short-context draft: generations run well past it


def short_context(draft: LoadedModel, limit: int) -> LoadedModel:
    """`draft` with a smaller declared context limit (max_position_embeddings) than the target's."""
    draft.model.config.max_position_embeddings = limit
    return draft


# name -> (drafter, how to build the draft model from the target or None)
DRAFTER_CASES = {
    "none": ("none", None),
    "ngram": ("ngram", None),
    "suffix": ("suffix", None),
    "draft_model": ("draft_model", lambda t: perturbed_copy(t, noise=0.6, seed=3)),
    "draft_model_padded_vocab": ("draft_model", lambda t: perturbed_copy(t, noise=0.6, seed=4, vocab=128)),
    "draft_model_short_context": (
        "draft_model",
        lambda t: short_context(perturbed_copy(t, noise=0.6, seed=5), DRAFT_LIMIT),
    ),
}
MAX_NEW = 40
# Repetitive prompts give lookup drafters something to match; random ones test the rest.
PROMPTS = [
    [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],
    [11, 40, 3, 3, 17, 60, 2, 90, 33, 12],
]


@pytest.fixture(scope="module", params=TARGETS, ids=[f"{a}-{p}" for a, p in TARGETS])
def target(request):
    arch, path = request.param
    model = random_model(arch, seed=7, forward=path)
    assert model.forward.choice.path == path
    return model


def is_sliding(target) -> bool:
    return getattr(target.model.config, "sliding_window", None) is not None


@pytest.fixture(scope="module")
def reference(target):
    """Plain greedy continuations, computed once per target."""
    engine = Engine(target, EngineConfig(drafter="none"))
    return [engine.generate(p, MAX_NEW).tokens for p in PROMPTS]


def make_engine(target, case: str, gamma: int, **kw) -> Engine:
    drafter, build_draft = DRAFTER_CASES[case]
    draft = build_draft(target) if build_draft else None
    return Engine(target, EngineConfig(drafter=drafter, gamma=gamma, **kw), draft=draft)


def assert_identities(stats) -> None:
    assert stats.new_tokens == stats.accepted + stats.emitting_forwards, stats.to_dict()
    assert stats.prompt_tokens == stats.reused_tokens + stats.prefilled_tokens, stats.to_dict()
    assert stats.accepted <= stats.drafted
    assert sum(stats.drafted_per_position) == stats.drafted
    assert sum(stats.accepted_per_position) == stats.accepted
    assert sum(s["drafted"] for s in stats.per_drafter.values()) == stats.drafted
    assert sum(s["accepted"] for s in stats.per_drafter.values()) == stats.accepted
    assert sum(s["drafts"] for s in stats.per_drafter.values()) == stats.drafts
    assert stats.mean_accepted_length == (1 + stats.accepted / stats.drafts if stats.drafts else 1.0)


def assert_kv_matches_fresh(target, session) -> None:
    """The cache equals transformers' from-scratch forward over history[:-1] (tolerance: float64 round-off)."""
    assert session.kv_length == len(session.history) - 1
    fresh = new_cache(target.model)
    TransformersForward(target.model)(fresh, session.history[:-1])
    for layer, ((k, v), (fk, fv)) in enumerate(zip(kv_tensors(session.cache), kv_tensors(fresh), strict=True)):
        assert k.shape == fk.shape, f"layer {layer}: {k.shape} vs {fk.shape}"
        torch.testing.assert_close(k, fk, atol=1e-9, rtol=1e-9, msg=f"layer {layer} keys differ")
        torch.testing.assert_close(v, fv, atol=1e-9, rtol=1e-9, msg=f"layer {layer} values differ")


@pytest.mark.parametrize("case", list(DRAFTER_CASES))
@pytest.mark.parametrize("gamma", [1, 2, 3, 4, 5, 6])
def test_greedy_equals_plain(target, reference, case, gamma):
    engine = make_engine(target, case, gamma)
    for prompt, ref in zip(PROMPTS, reference, strict=True):
        session = engine.new_session()
        result = session.generate(prompt, MAX_NEW)
        assert result.tokens == ref, f"{case} gamma={gamma} diverged from plain greedy"
        assert_identities(result.stats)
        assert_kv_matches_fresh(target, session)
        assert not result.lossy
        if case == "draft_model_short_context":
            assert result.stats.draft_limit_steps > 0, "the draft's position limit was never reached"
        else:
            assert result.stats.draft_limit_steps == 0


@pytest.mark.parametrize("case", list(DRAFTER_CASES))
def test_stop_token_and_max_token_edges(target, reference, case):
    engine = make_engine(target, case, gamma=4)
    prompt, ref = PROMPTS[0], reference[0]
    stop_at = 13  # force a stop token in the middle of the reference output
    stop = ref[stop_at]
    first = ref.index(stop)
    result = engine.generate(prompt, MAX_NEW, stop_tokens=frozenset({stop}))
    assert result.tokens == ref[: first + 1] and result.finish_reason == "eos"
    assert_identities(result.stats)
    for limit in (1, 2, 5, 17):
        session = engine.new_session()
        result = session.generate(prompt, limit)
        assert result.tokens == ref[:limit] and result.finish_reason == "length"
        assert_identities(result.stats)
        assert_kv_matches_fresh(target, session)


def test_partly_agreeing_draft_sees_acceptances_and_rejections(target):
    """A perturbed copy of the target must be both accepted and rejected, or the suite proves little."""
    engine = make_engine(target, "draft_model", gamma=4)
    stats = sum((engine.generate(p, MAX_NEW).stats for p in PROMPTS), start=GenerationStats())
    assert stats.accepted > 0, "no draft token was ever accepted"
    assert stats.accepted < stats.drafted, "no draft token was ever rejected"


def test_lookup_drafters_get_accepted_on_repetitive_text(target, reference):
    for case in ("ngram", "suffix"):
        engine = make_engine(target, case, gamma=4)
        stats = engine.generate(PROMPTS[0], MAX_NEW).stats
        assert stats.drafts > 0, f"{case} never drafted on a repetitive prompt"
        assert stats.per_drafter[case]["drafted"] == stats.drafted


@pytest.mark.parametrize("case", ["ngram", "draft_model"])
def test_heuristic_gamma_stays_exact(target, reference, case):
    engine = make_engine(target, case, gamma=2, gamma_policy="heuristic", max_gamma=8)
    assert engine.generate(PROMPTS[0], MAX_NEW).tokens == reference[0]


def test_confidence_policy_stays_exact_and_stops_early(target, reference):
    engine = make_engine(target, "draft_model", gamma=6, gamma_policy="confidence", confidence=0.99)
    result = engine.generate(PROMPTS[1], MAX_NEW)
    assert result.tokens == reference[1]
    # A 0.99 threshold on a random draft stops most drafts before gamma tokens.
    assert result.stats.drafted < 6 * result.stats.target_forwards


def uncached_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding by a full forward over the whole sequence at every step (no cache at all)."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def test_plain_decoding_equals_uncached_forwards(target, reference):
    """The cache (sliding layers included) masks exactly as a fresh full forward: the reference is sound."""
    for prompt, ref in zip(PROMPTS, reference, strict=True):
        assert ref == uncached_greedy(target.model, prompt, MAX_NEW)


def test_sliding_archs_really_slide(target, reference):
    """Sliding layers get the croppable cache, and the window changes the output (so it is exercised)."""
    if not is_sliding(target):
        pytest.skip("full-attention architecture")
    cache = new_cache(target.model)
    sliding = [isinstance(layer, SlidingGrowingLayer) for layer in cache.layers]
    assert any(sliding) and all(layer.sliding_window == SLIDING_WINDOW for layer in cache.layers if layer.is_sliding)
    assert all(len(p) > SLIDING_WINDOW for p in PROMPTS)
    config = target.model.config
    config.sliding_window = 10_000  # the mask reads the window from the config at every forward
    try:
        unwindowed = uncached_greedy(target.model, PROMPTS[1], MAX_NEW)
    finally:
        config.sliding_window = SLIDING_WINDOW
    assert unwindowed != reference[1], "a window of 8 made no difference: the test would prove nothing"
