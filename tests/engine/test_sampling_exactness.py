"""Exact speculative sampling must reproduce the target's own sampling distribution.

On a tiny-vocabulary model the joint distribution of the first two generated tokens is computed
exactly from the target's logits; samples from the engine are compared to it with a chi-square
goodness-of-fit test. Fixed seeds make every p-value reproducible. Pass: p > ALPHA. Negative
controls (the rule without its residual step, and a lossy rule) must fail the same test, which
shows the test has the power to catch a broken rule.

Measured with these seeds (2,000 samples each): exact rules p = 0.09 .. 0.66 (none, draft_model,
ngram; two sampling settings); without the residual p = 5e-14; lossy topk(k=3) p = 9e-70.

The MTP drafter proposes nothing on a turn's first step (the target has not yet produced the hidden state
of the last prompt token), so a 2-token generation in a fresh session would never draft with it. Its tests
draw every sample in one warm session instead: each sample continues PROMPT again (the session reuses the
prefix, and the drafter its hidden states and block cache, rolled back to PROMPT), generating 3 tokens so
that the first step drafts 2 chained tokens; the joint of the first two tokens is compared as above.
Measured (MTP_SAMPLES = 300): mtp, mtp+ngram and mtp+suffix (extend; suffix+MTP mixed drafts carry one-hot
rows, then q rows) p = 0.05 .. 0.91; without the residual p = 4e-8.

A draft with another tokenizer (a character-level BPE of 10 ids over "ab" against the target's 8) proposes
re-tokenized text, verified one-hot (engine/drafters/token_bridge.py). Measured (SAMPLES): p = 0.61 (t1) and
0.35 (t0.8_topk5_topp0.95); without the residual p = 2e-46; acceptance 0.23 of its proposals.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from engine.acceptance import ExactAcceptance, Verdict
from engine.eagle3 import random_eagle3
from engine.engine import Engine, EngineConfig
from engine.mtp import random_mtp
from engine.sampling import SamplingParams, effective_probs, sample
from engine.stats import GenerationStats
from engine.testing import random_model, text_tokenizer, with_tokenizer

VOCAB = 8
SAMPLES = 2000
ALPHA = 1e-3  # exact rules must give p > ALPHA; broken ones p < ALPHA
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repetitive, so the n-gram drafter proposes too
MTP_SAMPLES = 300  # fewer than SAMPLES (each costs a few MTP block steps too); broken rules still give p << ALPHA
SETTINGS = {
    "t1": SamplingParams(temperature=1.0),
    "t0.8_topk5_topp0.95": SamplingParams(temperature=0.8, top_k=5, top_p=0.95),
}


@pytest.fixture(scope="module")
def models():
    # Scaled LM heads make p and q peaked and different, so rejections (and residuals) are common.
    target = random_model("llama", vocab=VOCAB, hidden=32, layers=1, seed=11, logit_scale=6.0)
    draft = random_model("llama", vocab=VOCAB, hidden=32, layers=1, seed=12, logit_scale=6.0)
    return target, draft


def exact_joint(target, params: SamplingParams) -> torch.Tensor:
    """P(x1, x2) under plain sampling, computed from the target's logits [V, V]."""
    with torch.inference_mode():
        model = target.model
        first = effective_probs(model(torch.tensor([PROMPT])).logits[0, -1], params)  # [V]
        rows = torch.tensor([[*PROMPT, x] for x in range(VOCAB)])  # [V, len + 1]
        second = effective_probs(model(rows).logits[:, -1], params)  # [V, V]
    return first[:, None] * second


def p_value(engine: Engine, expected: torch.Tensor, draw=None, samples: int = SAMPLES) -> float:
    """Chi-square p-value of `samples` draws (x1, x2) against `expected`; default draw: a fresh 2-token generation."""
    if draw is None:
        draw = lambda: engine.generate(PROMPT, 2, stop_tokens=frozenset()).tokens  # noqa: E731
    counts = torch.zeros(VOCAB * VOCAB, dtype=torch.float64)
    for _ in range(samples):
        x1, x2 = draw()
        counts[x1 * VOCAB + x2] += 1
    exp = expected.flatten() * samples
    # Pool cells with expected count < 5 into one bin, as the chi-square approximation needs.
    small = exp < 5
    obs_bins = torch.cat([counts[~small], counts[small].sum()[None]])
    exp_bins = torch.cat([exp[~small], exp[small].sum()[None]])
    if exp_bins[-1] == 0:
        obs_bins, exp_bins = obs_bins[:-1], exp_bins[:-1]
    exp_bins = exp_bins * obs_bins.sum() / exp_bins.sum()
    return float(chisquare(obs_bins.numpy(), exp_bins.numpy()).pvalue)


def make(target, draft, drafter: str, params: SamplingParams, mtp=None, eagle3=None, **kw) -> Engine:
    config = EngineConfig(
        drafter=drafter,
        gamma=2,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=1234,
        **kw,
    )
    return Engine(target, config, draft=draft if drafter == "draft_model" else None, mtp=mtp, eagle3=eagle3)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("drafter", ["none", "draft_model", "ngram"])
def test_exact_sampling_matches_plain_distribution(models, drafter, setting):
    target, draft = models
    params = SETTINGS[setting]
    engine = make(target, draft, drafter, params)
    p = p_value(engine, exact_joint(target, params))
    assert p > ALPHA, f"{drafter} exact sampling deviates from plain sampling (chi-square p={p:.2e})"


def test_draft_is_rejected_often_enough_to_matter(models):
    """The negative controls only bite if rejections happen: check they do."""
    target, draft = models
    engine = make(target, draft, "draft_model", SETTINGS["t1"])
    stats = engine.generate(PROMPT, 2).stats
    for _ in range(200):
        stats = stats + engine.generate(PROMPT, 2, stop_tokens=frozenset()).stats
    assert 0.1 < stats.acceptance_rate < 0.9, stats.acceptance_rate


class NoResidualAcceptance(ExactAcceptance):
    """Broken on purpose: on rejection it samples from p instead of normalize(max(0, p - q))."""

    def verify(self, target_logits, draft, draft_probs, params, generator) -> Verdict:
        n = len(draft)
        p = effective_probs(target_logits, params)
        q = (
            draft_probs
            if draft_probs is not None
            else torch.nn.functional.one_hot(torch.tensor(draft, dtype=torch.long), p.shape[-1]).to(p.dtype)
        )
        for i, x in enumerate(draft):
            if torch.rand((), generator=generator, dtype=p.dtype) * q[i, x] >= p[i, x]:
                return Verdict(i, sample(p[i], generator))
        return Verdict(n, sample(p[n], generator))


def test_negative_control_without_residual_fails(models):
    target, draft = models
    params = SETTINGS["t1"]
    engine = make(target, draft, "draft_model", params)
    engine.acceptance = NoResidualAcceptance()
    p = p_value(engine, exact_joint(target, params))
    assert p < ALPHA, f"the test failed to detect a rule without the residual step (p={p:.2e})"


def test_negative_control_lossy_topk_fails_and_is_flagged(models):
    target, draft = models
    params = SETTINGS["t1"]
    engine = make(target, draft, "draft_model", params, acceptance="topk", options={"k": 3})
    assert engine.lossy and engine.generate(PROMPT, 2).lossy
    p = p_value(engine, exact_joint(target, params))
    assert p < ALPHA, f"the test failed to detect the lossy topk rule (p={p:.2e})"


@pytest.fixture(scope="module")
def other_tokenizer_models(models):
    """The target with a character-level BPE of its 8 ids over "ab", and a random 10-id draft with a 10-id BPE.

    The draft's tokens are carried over as text and re-tokenized (engine/drafters/token_bridge.py): its proposals
    are one-hot, with no draft distribution over the target's ids.
    """
    target, _ = models
    draft = random_model("llama", vocab=10, hidden=32, layers=1, seed=13, logit_scale=6.0)
    return (
        with_tokenizer(target, text_tokenizer(VOCAB, "ab"), "ab-bpe"),
        with_tokenizer(draft, text_tokenizer(10, "ab"), "ab-bpe10"),
    )


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_exact_sampling_with_other_tokenizer_draft_matches_plain_distribution(other_tokenizer_models, setting):
    target, draft = other_tokenizer_models
    params = SETTINGS[setting]
    engine = make(target, draft, "draft_model", params)
    assert engine.tokenizer_pair is not None
    p = p_value(engine, exact_joint(target, params))
    assert p > ALPHA, f"other-tokenizer draft_model exact sampling deviates from plain sampling (chi-square p={p:.2e})"


def test_other_tokenizer_draft_is_rejected_often_enough_to_matter(other_tokenizer_models):
    """The negative control below only bites if the re-tokenized proposals are both accepted and rejected."""
    target, draft = other_tokenizer_models
    engine = make(target, draft, "draft_model", SETTINGS["t1"])
    stats = sum((engine.generate(PROMPT, 2, stop_tokens=frozenset()).stats for _ in range(200)), GenerationStats())
    assert stats.drafts > 100, stats.drafts
    assert 0.1 < stats.acceptance_rate < 0.9, stats.acceptance_rate


def test_negative_control_without_residual_fails_with_other_tokenizer_draft(other_tokenizer_models):
    target, draft = other_tokenizer_models
    params = SETTINGS["t1"]
    engine = make(target, draft, "draft_model", params)
    engine.acceptance = NoResidualAcceptance()
    p = p_value(engine, exact_joint(target, params))
    assert p < ALPHA, f"the test failed to detect a rule without the residual step with re-tokenized drafts (p={p:.2e})"


@pytest.fixture(scope="module")
def mtp_module(models):
    """A random MTP module over the target: its head is the target's own (scaled) LM head, so q is peaked; the
    random block makes it differ from p (acceptance about 0.6, so residual steps are common)."""
    return random_mtp(models[0].model, seed=0, scale=1.0)


def warm_draws(engine: Engine, stats: list[GenerationStats]):
    """(x1, x2) draws from one warm session (see the module docstring); each generation's stats go to `stats`."""
    session = engine.new_session()
    # the target's hidden states of PROMPT[:-1]
    engine.generate(PROMPT[:-1], 1, stop_tokens=frozenset(), session=session)

    def draw() -> list[int]:
        result = engine.generate(PROMPT, 3, stop_tokens=frozenset(), session=session)
        stats.append(result.stats)
        return result.tokens[:2]

    return draw


def total(stats: list[GenerationStats]) -> GenerationStats:
    return sum(stats, start=GenerationStats())


MTP_DRAFTERS = {"mtp": {}, "mtp+ngram": {"policy": "extend"}, "mtp+suffix": {"policy": "extend"}}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("drafter", list(MTP_DRAFTERS))
def test_exact_sampling_with_mtp_matches_plain_distribution(models, mtp_module, drafter, setting):
    target, draft = models
    params = SETTINGS[setting]
    engine = make(target, draft, drafter, params, mtp=mtp_module, options=MTP_DRAFTERS[drafter])
    steps: list[GenerationStats] = []
    p = p_value(engine, exact_joint(target, params), warm_draws(engine, steps), MTP_SAMPLES)
    assert p > ALPHA, f"{drafter} exact sampling deviates from plain sampling (chi-square p={p:.2e})"
    stats = total(steps)
    names = drafter.split("+")
    assert set(stats.per_drafter) == set(names) and all(stats.per_drafter[n]["drafted"] > 0 for n in names)
    mtp = stats.per_drafter["mtp"]
    assert 0 < mtp["accepted"] < mtp["drafted"], mtp
    if drafter == "mtp+suffix":  # mixed drafts (one-hot rows, then the MTP's q rows): the MTP continued suffix's
        assert max(mtp["drafted_per_position"]) > mtp["drafts"], stats.per_drafter


def test_mtp_is_rejected_often_enough_to_matter(models, mtp_module):
    """The negative control below only bites if MTP drafts are rejected: check they are, and chained drafts too."""
    target, draft = models
    engine = make(target, draft, "mtp", SETTINGS["t1"], mtp=mtp_module)
    steps: list[GenerationStats] = []
    draw = warm_draws(engine, steps)
    for _ in range(200):
        draw()
    stats = total(steps)
    # Every sample's first step drafts 2 chained tokens (a second step, after an early rejection, drafts 1).
    assert stats.drafted_per_position[1] == 200 and stats.drafted_per_position[0] >= 200, stats.drafted_per_position
    assert 0.1 < stats.acceptance_rate < 0.9, stats.acceptance_rate
    assert 0 < stats.accepted_per_position[1] < stats.accepted_per_position[0]


def test_negative_control_without_residual_fails_with_mtp(models, mtp_module):
    target, draft = models
    params = SETTINGS["t1"]
    engine = make(target, draft, "mtp", params, mtp=mtp_module)
    engine.acceptance = NoResidualAcceptance()
    p = p_value(engine, exact_joint(target, params), warm_draws(engine, []), MTP_SAMPLES)
    assert p < ALPHA, f"the test failed to detect a rule without the residual step with mtp drafts (p={p:.2e})"


@pytest.fixture(scope="module")
def eagle3_head(models):
    """A random EAGLE-3 head whose LM head is the target's own (so q is peaked) over a random layer: its drafts are
    accepted about as often as the random MTP module's, so residual steps are common."""
    target = models[0]
    head = random_eagle3(target.model, seed=0)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.model.get_output_embeddings().weight)
    return head


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_exact_sampling_with_eagle3_matches_plain_distribution(models, eagle3_head, setting):
    target, draft = models
    params = SETTINGS[setting]
    engine = make(target, draft, "eagle3", params, eagle3=eagle3_head)
    steps: list[GenerationStats] = []
    p = p_value(engine, exact_joint(target, params), warm_draws(engine, steps), MTP_SAMPLES)
    assert p > ALPHA, f"eagle3 exact sampling deviates from plain sampling (chi-square p={p:.2e})"
    share = total(steps).per_drafter["eagle3"]
    assert 0 < share["accepted"] < share["drafted"], share


def test_negative_control_without_residual_fails_with_eagle3(models, eagle3_head):
    target, draft = models
    params = SETTINGS["t1"]
    engine = make(target, draft, "eagle3", params, eagle3=eagle3_head)
    engine.acceptance = NoResidualAcceptance()
    p = p_value(engine, exact_joint(target, params), warm_draws(engine, []), MTP_SAMPLES)
    assert p < ALPHA, f"the test failed to detect a rule without the residual step with eagle3 drafts (p={p:.2e})"
