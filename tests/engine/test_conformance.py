"""Conformance suite every drafter must pass (add a drafter: add one entry to DRAFTER_CASES).

Greedy speculative output equals plain greedy output token for token (gamma 1..6, forced stop
token, max-token edge); after every generation the target KV equals a fresh recomputation of the
history; the statistics identities hold exactly. float64 models rule out last-bit argmax ties.
Sliding-window targets (Mistral: every layer; Gemma 3: alternating with full layers) have a window
of 8, shorter than every prompt, so every rollback happens past the window. Every target runs on
transformers' forward and, where it covers the architecture, on the engine's own Llama forward
(engine/llama.py, path `torch`: float64 like the rest; the oneDNN path is fp32/bf16 only and is
checked on the bundled models in test_forward_paths.py), and Llama and Mistral also on a `mixed` path
whose single-row steps and verification rows run on different kernels (SPLIT). Combined drafters
(`A+B`), the MTP and layer-skip drafters, and draft models with another tokenizer than the target's (character-
level BPEs trained in-process, engine.testing.text_tokenizer) run the same suite; the MTP modules are random but made
to partly agree with the targets (`agreeing_mtp`), so their drafts are both accepted and rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from engine.drafters import DraftContext
from engine.eagle3 import Eagle3Module, random_eagle3
from engine.engine import Engine, EngineConfig
from engine.forward import EngineForward, PathChoice, TransformersForward
from engine.kernels import GroupPlan, LinearPlan
from engine.kv import SlidingGrowingLayer, kv_tensors, new_cache
from engine.llama import covers
from engine.loading import LoadedModel
from engine.mtp import MtpModule, random_mtp
from engine.stats import GenerationStats
from engine.testing import (
    SLIDING_WINDOW,
    TEXT_ALPHABET,
    perturbed_copy,
    random_model,
    text_tokenizer,
    with_tokenizer,
)

ARCHS = ["llama", "qwen2", "mistral", "gemma3"]
# (arch, forward path): transformers' forward for all, the engine's for the architectures it covers
TARGETS = (
    [(arch, "transformers") for arch in ARCHS]
    + [(arch, "torch") for arch in ARCHS if covers(random_model(arch).model) is None]
    + [(arch, "mixed") for arch in ("llama", "mistral")]
)
# The mixed path as a verification step meets it: single rows on F.linear, 2 rows and more through the matmul
# over [in, out] weights, in both groups (a path mix whose kernels round differently, exact in float64).
SPLIT = LinearPlan(GroupPlan("torch", "transposed", 2), GroupPlan("torch", "transposed", 2))
DRAFT_LIMIT = 20  # position limit of the short-context draft: generations run well past it


def short_context(draft: LoadedModel, limit: int) -> LoadedModel:
    """`draft` with a smaller declared context limit (max_position_embeddings) than the target's."""
    draft.model.config.max_position_embeddings = limit
    return draft


def agreeing_mtp(target: LoadedModel, seed: int, draft_vocab: list[int] | None = None) -> MtpModule:
    """A random MTP module whose drafts these random targets accept now and then (and reject mostly).

    A plain random head (random_mtp, scale 1) is next to never accepted here: 0 or 1 of ~290 drafted
    tokens per target. So the input projection is set to pass both of its halves straight through,
    x = enorm(embed(x_{t+1})) + 1.5 * hnorm(h_t), and the block is weak (scale 0.2): the head then reads
    roughly what the target's own next step reads (the next token's embedding and the trunk state), and
    is accepted for about 3-9 % of the drafted tokens on every target (measured over PROMPTS, gamma 4).
    """
    module = random_mtp(target.model, seed=seed, draft_vocab=draft_vocab, scale=0.2)
    h = module.config.hidden_size
    with torch.no_grad():
        eye = torch.eye(h, dtype=module.eh_proj.weight.dtype)
        module.eh_proj.weight.copy_(torch.cat([eye, 1.5 * eye], dim=1))  # [h, 2h]: [embedding half, hidden half]
    return module


_HEADS: dict[tuple[int, int, bool], tuple[LoadedModel, Eagle3Module]] = {}  # the target kept: ids stay unique


def agreeing_eagle3(target: LoadedModel, seed: int, draft_vocab: list[int] | None = None) -> Eagle3Module:
    """An EAGLE-3 head trained briefly (20 Adam steps of training.eagle3's loss, chain_logits) on these targets' own
    greedy continuations of PROMPTS: accepted for most drafted tokens and rejected for some (unlike a random
    head, which is next to never accepted here), the way a head trained on the agent's own traces behaves.

    It fuses the inputs of layers 0 and 1 and the trunk output (ids 0, 1, 2 of a 2-layer target). Cached per
    target, seed and vocabulary: the drafter cases build their resources for every test.
    """
    key = (id(target), seed, draft_vocab is not None)
    if key in _HEADS:
        return _HEADS[key][1]
    # The draft-vocabulary head also adds hidden_norm(g) as its residual (norm_before_residual, training.eagle3's
    # default), so the cases cover both residuals.
    module = random_eagle3(
        target.model, seed=seed, layer_ids=[0, 1, 2], draft_vocab=draft_vocab, norm_before_residual=bool(draft_vocab)
    )
    plain = Engine(target, EngineConfig(drafter="none"))
    seqs = [[*p, *plain.generate(p, MAX_NEW).tokens] for p in PROMPTS]
    n = min(len(s) for s in seqs)
    tokens = torch.tensor([s[:n] for s in seqs])
    with torch.inference_mode():
        runs = [target.forward(target.forward.new_cache(), s[:n], keep=n, hidden=module.taps) for s in seqs]
    features = torch.stack([f for _, f in runs]).clone()  # [B, n, 3h]
    labels = torch.stack([logits.argmax(-1) for logits, _ in runs]).clone()  # the target's own next tokens
    t2d = torch.full((target.vocab_size,), -1, dtype=torch.long)
    t2d[module.d2t if module.d2t.numel() else torch.arange(target.vocab_size)] = torch.arange(module.config.rows)
    module.train().requires_grad_(True)
    optimiser = torch.optim.Adam(module.parameters(), lr=3e-3)
    for _ in range(20):
        chained = module.chain_logits(features, tokens, 3)
        loss = sum(
            F.cross_entropy(c.reshape(-1, c.shape[-1]), t2d[labels[:, j + 1 : n - 1]].reshape(-1), ignore_index=-1)
            for j, c in enumerate(chained)
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    _HEADS[key] = (target, module.eval().requires_grad_(False))
    return module


def half_vocab(target: LoadedModel, seed: int = 0) -> list[int]:
    """A shuffled half of the target's token ids (a draft vocabulary that misses some tokens the target emits)."""
    order = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(seed))
    return order[: target.vocab_size // 2].tolist()


def with_mtp(seed: int, draft_vocab: bool = False) -> Callable[[LoadedModel], dict[str, Any]]:
    return lambda t: {"mtp": agreeing_mtp(t, seed, half_vocab(t) if draft_vocab else None)}


def with_eagle3(seed: int, draft_vocab: bool = False) -> Callable[[LoadedModel], dict[str, Any]]:
    return lambda t: {"eagle3": agreeing_eagle3(t, seed, half_vocab(t) if draft_vocab else None)}


def with_draft(**kw) -> Callable[[LoadedModel], dict[str, Any]]:
    return lambda t: {"draft": perturbed_copy(t, **kw)}


def with_other_tokenizer(draft_vocab: int, seed: int, copy: bool) -> Callable[[LoadedModel], dict[str, Any]]:
    """The target with a character-level BPE of its vocabulary size, and a draft whose BPE has `draft_vocab` ids.

    copy=True: the draft is a perturbed copy of the target (its first `draft_vocab` ids spell what the target's do,
    the target's later merges reach it in shorter pieces), so its drafts are accepted now and then. copy=False: a
    random model over single characters (draft_vocab = the alphabet and the specials), accepted next to never.
    """

    def build(t: LoadedModel) -> dict[str, Any]:
        target = with_tokenizer(t, text_tokenizer(t.vocab_size), "target-bpe")
        if copy:
            draft = perturbed_copy(t, noise=0.6, seed=seed)
        else:
            draft = random_model("llama", vocab=draft_vocab, seed=seed, logit_scale=4.0)
        return {"target": target, "draft": with_tokenizer(draft, text_tokenizer(draft_vocab), "draft-bpe")}

    return build


# name -> (drafter, build_resources(target) -> Engine keyword arguments (draft=, mtp=) or None, drafter options)
DRAFTER_CASES: dict[str, tuple[str, Callable[[LoadedModel], dict[str, Any]] | None, dict[str, Any]]] = {
    "none": ("none", None, {}),
    "ngram": ("ngram", None, {}),
    "suffix": ("suffix", None, {}),
    "draft_model": ("draft_model", with_draft(noise=0.6, seed=3), {}),
    "draft_model_padded_vocab": ("draft_model", with_draft(noise=0.6, seed=4, vocab=128), {}),
    "draft_model_short_context": (
        "draft_model",
        lambda t: {"draft": short_context(perturbed_copy(t, noise=0.6, seed=5), DRAFT_LIMIT)},
        {},
    ),
    # a draft with another tokenizer: proposals carried over as text (engine/drafters/token_bridge.py)
    "draft_model_other_tokenizer": ("draft_model", with_other_tokenizer(80, seed=3, copy=True), {}),
    "draft_model_char_tokenizer": ("draft_model", with_other_tokenizer(3 + len(TEXT_ALPHABET), seed=9, copy=False), {}),
    "mtp": ("mtp", with_mtp(seed=1), {}),
    "mtp_draft_vocab": ("mtp", with_mtp(seed=2, draft_vocab=True), {}),
    "eagle3": ("eagle3", with_eagle3(seed=1), {}),
    "eagle3_draft_vocab": ("eagle3", with_eagle3(seed=2, draft_vocab=True), {}),
    "layer_skip": ("layer_skip", None, {"layers": 1}),
    "eagle3+ngram_extend": ("eagle3+ngram", with_eagle3(seed=1), {"policy": "extend", "ngram.max_draft": 2}),
    "mtp+ngram": ("mtp+ngram", with_mtp(seed=1), {}),
    # an n-gram copy capped below gamma (ngram.max_draft), so the model child continues it (mixed steps)
    "mtp+ngram_extend": ("mtp+ngram", with_mtp(seed=1), {"policy": "extend", "ngram.max_draft": 2}),
    "ngram+draft_model": (
        "ngram+draft_model",
        with_draft(noise=0.6, seed=3),
        {"policy": "extend", "ngram.max_draft": 2},
    ),
    # suffix drafts stop short of the budget, so under `extend` the MTP really continues them (mixed steps)
    "mtp+suffix_extend": ("mtp+suffix", with_mtp(seed=1), {"policy": "extend"}),
}
# drafters with a model behind them
MODEL_CASES = [
    "draft_model",
    "draft_model_other_tokenizer",
    "mtp",
    "mtp_draft_vocab",
    "eagle3",
    "eagle3_draft_vocab",
    "layer_skip",
]
MAX_NEW = 40
# Repetitive prompts give lookup drafters something to match; random ones test the rest.
PROMPTS = [
    [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],
    [11, 40, 3, 3, 17, 60, 2, 90, 33, 12],
]


def build_target(arch: str, path: str) -> LoadedModel:
    """The float64 random target of `arch` on forward `path` (mixed: the SPLIT plan)."""
    model = random_model(arch, seed=7, forward="torch" if path == "mixed" else path)
    if path == "mixed":
        model._forward = EngineForward(model.model, PathChoice("mixed", "float64", "conformance: SPLIT", SPLIT))
    assert model.forward.choice.path == path
    return model


@pytest.fixture(scope="module", params=TARGETS, ids=[f"{a}-{p}" for a, p in TARGETS])
def target(request):
    return build_target(*request.param)


def is_sliding(target) -> bool:
    return getattr(target.model.config, "sliding_window", None) is not None


@pytest.fixture(scope="module")
def reference(target):
    """Plain greedy continuations, computed once per target."""
    engine = Engine(target, EngineConfig(drafter="none"))
    return [engine.generate(p, MAX_NEW).tokens for p in PROMPTS]


def make_engine(target, case: str, gamma: int, **kw) -> Engine:
    drafter, build_resources, options = DRAFTER_CASES[case]
    resources = build_resources(target) if build_resources else {}
    target = resources.pop("target", target)  # the same weights with a tokenizer (cross-tokenizer cases)
    return Engine(target, EngineConfig(drafter=drafter, gamma=gamma, options=dict(options), **kw), **resources)


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
        result = engine.generate(prompt, MAX_NEW, session=session)
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
        result = engine.generate(prompt, limit, session=session)
        assert result.tokens == ref[:limit] and result.finish_reason == "length"
        assert_identities(result.stats)
        assert_kv_matches_fresh(target, session)


@pytest.mark.parametrize("case", MODEL_CASES)
def test_partly_agreeing_draft_sees_acceptances_and_rejections(target, case):
    """A model drafter (a perturbed copy, an agreeing MTP, the first layer) must be both accepted and rejected."""
    engine = make_engine(target, case, gamma=4)
    stats = sum((engine.generate(p, MAX_NEW).stats for p in PROMPTS), start=GenerationStats())
    assert stats.accepted > 0, f"{case}: no draft token was ever accepted"
    assert stats.accepted < stats.drafted, f"{case}: no draft token was ever rejected"


def test_lookup_drafters_get_accepted_on_repetitive_text(target, reference):
    for case in ("ngram", "suffix"):
        engine = make_engine(target, case, gamma=4)
        stats = engine.generate(PROMPTS[0], MAX_NEW).stats
        assert stats.drafts > 0, f"{case} never drafted on a repetitive prompt"
        assert stats.per_drafter[case]["drafted"] == stats.drafted


@pytest.mark.parametrize("case", ["ngram", "draft_model", "mtp", "mtp+ngram_extend", "layer_skip"])
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


def record_steps(drafter) -> list[tuple[list[str], int]]:
    """Spy on `drafter`: one (draft sources, tokens the step kept) per verification step, filled while it generates.

    An instance attribute shadows the method, so the loop calls the spies. A step without a proposal (its draft
    budget was 0) records no sources. The loop emits the accepted drafts + one token and these targets have no
    stop token, so a step kept `added - 1` draft tokens.
    """
    steps: list[tuple[list[str], int]] = []
    pending: list[list[str]] = []
    propose, commit = drafter.propose, drafter.commit

    def spy_propose(ctx):
        draft = propose(ctx)
        pending.append(list(draft.sources))
        return draft

    def spy_commit(step):
        steps.append((pending.pop() if pending else [], step.added - 1))
        commit(step)

    drafter.propose, drafter.commit = spy_propose, spy_commit
    return steps


@pytest.mark.parametrize("case", ["mtp+ngram_extend", "ngram+draft_model", "mtp+suffix_extend"])
def test_mixed_steps_are_credited_to_each_proposer(target, reference, case):
    """Under `extend` one step's draft comes from two drafters (the lookup's tokens, then the model's), and each
    token is credited to its proposer: the per-drafter counts rebuilt from the recorded drafts equal the
    statistics', and the per-drafter counts add up to the totals, position by position."""
    engine = make_engine(target, case, gamma=4)
    totals = GenerationStats()
    drafts: list[list[str]] = []
    for prompt, ref in zip(PROMPTS, reference, strict=True):
        session = engine.new_session()
        lookup, model = session.drafter.lookups[0].name, session.drafter.models[0].name
        steps = record_steps(session.drafter)
        result = engine.generate(prompt, MAX_NEW, session=session)
        assert result.tokens == ref
        expected = GenerationStats()
        for sources, kept in steps:
            if sources:
                expected.credit_step(sources, kept)
        assert result.stats.per_drafter == expected.per_drafter
        drafts += [sources for sources, _ in steps if sources]
        totals = totals + result.stats
    assert set(totals.per_drafter) == {lookup, model}, totals.per_drafter
    assert all(share["drafted"] > 0 for share in totals.per_drafter.values()), totals.per_drafter
    shares = list(totals.per_drafter.values())
    assert sum(s["drafts"] for s in shares) == totals.drafts
    assert sum(s["drafted"] for s in shares) == totals.drafted
    assert sum(s["accepted"] for s in shares) == totals.accepted
    for name, share in totals.per_drafter.items():
        assert sum(share["drafted_per_position"]) == share["drafted"], name
        assert sum(share["accepted_per_position"]) == share["accepted"], name
    for key in ("drafted_per_position", "accepted_per_position"):
        by_position: list[int] = []
        for share in shares:
            counts = share[key]
            by_position += [0] * (len(counts) - len(by_position))
            for i, count in enumerate(counts):
                by_position[i] += count
        total = getattr(totals, key)
        assert by_position + [0] * (len(total) - len(by_position)) == total, key
    mixed = [sources for sources in drafts if len(set(sources)) > 1]
    seen = sorted({tuple(sources) for sources in drafts})
    assert mixed, f"{case}: no step's draft came from two drafters; drafts' sources seen: {seen}"
    for sources in mixed:
        m = sources.count(lookup)
        assert sources == [lookup] * m + [model] * (len(sources) - m), sources


HEADS = ("mtp", "eagle3")


def mtp_child(drafter):
    """The head drafter (`mtp`, `eagle3`) itself, or that child of a combined drafter."""
    if drafter.name in HEADS:
        return drafter
    return next(child for child in drafter.children if child.name in HEADS)


def fresh_mtp_entries(target, module: MtpModule | Eagle3Module, history: list[int]):
    """The head's tapped states of history[:-1] from one forward on a fresh cache, and its layer cache built over
    them (the trunk outputs for an MTP module, the three fused layers' inputs for an EAGLE-3 head)."""
    taps = module.taps if isinstance(module, Eagle3Module) else True
    _, stored = target.forward(target.forward.new_cache(), history[:-1], hidden=taps)  # [n - 1, k h]
    cache = module.new_cache()
    module.step(cache, module.entry_rows(stored), history[1:])
    return stored, cache


def assert_mtp_state_matches(snapshots, target, module: MtpModule, history: list[int]) -> None:
    """Each snapshot (entries e, K and V of entries [0, e), stored hidden states) equals a fresh computation."""
    trunk, fresh = fresh_mtp_entries(target, module, history)
    assert any(e > 0 for e, *_ in snapshots)
    for e, k, v, hidden in snapshots:
        assert hidden.shape[0] <= len(history) - 1 and e <= hidden.shape[0]
        torch.testing.assert_close(hidden, trunk[: hidden.shape[0]], atol=1e-9, rtol=1e-9, msg="hidden states differ")
        torch.testing.assert_close(k, fresh.k[:, :e], atol=1e-9, rtol=1e-9, msg=f"block keys [0, {e}) differ")
        torch.testing.assert_close(v, fresh.v[:, :e], atol=1e-9, rtol=1e-9, msg=f"block values [0, {e}) differ")


@pytest.mark.parametrize(
    "case", ["mtp", "mtp+ngram", "mtp+suffix_extend", "eagle3", "eagle3_draft_vocab", "eagle3+ngram_extend"]
)
def test_mtp_block_cache_is_rolled_back(target, case):
    """After every MTP proposal its block cache entries [0, entries) and its stored target hidden states equal a
    from-scratch computation over the history (the target's trunk outputs of history[:-1] from one forward, then
    one MtpModule.step over all of them), so chain entries of rejected or accepted drafts never stay behind. A
    second turn that diverges from the first rolls the state back to the common prefix; after one more proposal
    at the end, every entry [0, n - 1) of the final history is right."""
    engine = make_engine(target, case, gamma=4)
    session = engine.new_session()
    drafter = mtp_child(session.drafter)
    module = drafter.module
    snapshots: list = []
    propose = drafter.propose

    def spy(ctx):
        draft = propose(ctx)
        e, cache = drafter._entries, drafter._cache
        snapshots.append((e, cache.k[:, :e].clone(), cache.v[:, :e].clone(), drafter._hidden[: drafter._known].clone()))
        return draft

    drafter.propose = spy
    engine.generate(PROMPTS[0], MAX_NEW, session=session)
    assert_mtp_state_matches(snapshots, target, module, session.history)
    snapshots.clear()
    diverged = [*session.history[: len(PROMPTS[0]) + 9], *PROMPTS[1]]  # keeps 9 generated tokens, then new ones
    engine.generate(diverged, MAX_NEW, session=session)
    assert_mtp_state_matches(snapshots, target, module, session.history)
    share = session.totals.per_drafter[drafter.name]
    assert 0 < share["accepted"] < share["drafted"], f"MTP drafts must be both accepted and rejected: {share}"
    drafter.propose = propose
    history = session.history
    drafter.propose(DraftContext(history, 1, engine.params, session.generator))
    n = len(history)
    assert drafter._entries == n - 1
    snapshot = (n - 1, drafter._cache.k[:, : n - 1], drafter._cache.v[:, : n - 1], drafter._hidden[: drafter._known])
    assert drafter._known == n - 1
    assert_mtp_state_matches([snapshot], target, module, history)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("diverge", [False, True], ids=["extend", "diverge"])
@pytest.mark.parametrize("case", ["mtp", "layer_skip", "mtp+ngram_extend"])
def test_prefix_reuse_changes_no_output(target, case, diverge, temperature):
    """A second turn in a warm session (the KV and drafter state of the first turn's prefix reused) proposes the
    same drafts and generates the same tokens as a cold session given the whole prompt; under sampling too,
    with both sessions' generators seeded alike before the turn. The second prompt extends the first turn's
    history, or diverges from it after 6 of its generated tokens (the drafter state is rolled back)."""
    engine = make_engine(target, case, gamma=4, temperature=temperature, seed=5)
    warm = engine.new_session()
    engine.generate(PROMPTS[1], 20, session=warm)
    kept = warm.history[: len(PROMPTS[1]) + 6] if diverge else warm.history
    second = [*kept, 70, 71, 72, 7, 8]
    cold = engine.new_session()
    results, drafts = [], []
    for session in (warm, cold):
        proposed: list = []
        propose = session.drafter.propose

        def spy(ctx, propose=propose, proposed=proposed):
            draft = propose(ctx)
            proposed.append((len(ctx.history), list(draft.tokens)))
            return draft

        session.drafter.propose = spy
        session.generator.manual_seed(99)
        results.append(engine.generate(second, MAX_NEW, session=session))
        drafts.append(proposed)
        assert_kv_matches_fresh(target, session)
    (w, c), (wd, cd) = results, drafts
    assert w.stats.reused_tokens > 0 and c.stats.reused_tokens == 0
    assert w.tokens == c.tokens
    assert wd == cd, "the warm session's drafter proposed other drafts than a cold one"
    assert w.stats.drafted == c.stats.drafted > 0 and w.stats.accepted == c.stats.accepted
