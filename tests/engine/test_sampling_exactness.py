"""Exact speculative sampling must reproduce the target's own sampling distribution.

On a tiny-vocabulary model the joint distribution of the first two generated tokens is computed
exactly from the target's logits; samples from the engine are compared to it with a chi-square
goodness-of-fit test. Fixed seeds make every p-value reproducible. Pass: p > ALPHA. Negative
controls (the rule without its residual step, and a lossy rule) must fail the same test, which
shows the test has the power to catch a broken rule.

Measured with these seeds (2,000 samples each): exact rules p = 0.09 .. 0.66 (none, draft_model,
ngram; two sampling settings); without the residual p = 5e-14; lossy topk(k=3) p = 9e-70.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from engine.acceptance import ExactAcceptance, Verdict
from engine.engine import Engine, EngineConfig
from engine.sampling import SamplingParams, effective_probs, sample
from engine.testing import random_model

VOCAB = 8
SAMPLES = 2000
ALPHA = 1e-3  # exact rules must give p > ALPHA; broken ones p < ALPHA
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repetitive, so the n-gram drafter proposes too
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


def p_value(engine: Engine, expected: torch.Tensor) -> float:
    counts = torch.zeros(VOCAB * VOCAB, dtype=torch.float64)
    for _ in range(SAMPLES):
        x1, x2 = engine.generate(PROMPT, 2, stop_tokens=frozenset()).tokens
        counts[x1 * VOCAB + x2] += 1
    exp = expected.flatten() * SAMPLES
    # Pool cells with expected count < 5 into one bin, as the chi-square approximation needs.
    small = exp < 5
    obs_bins = torch.cat([counts[~small], counts[small].sum()[None]])
    exp_bins = torch.cat([exp[~small], exp[small].sum()[None]])
    if exp_bins[-1] == 0:
        obs_bins, exp_bins = obs_bins[:-1], exp_bins[:-1]
    exp_bins = exp_bins * obs_bins.sum() / exp_bins.sum()
    return float(chisquare(obs_bins.numpy(), exp_bins.numpy()).pvalue)


def make(target, draft, drafter: str, params: SamplingParams, **kw) -> Engine:
    config = EngineConfig(drafter=drafter, gamma=2, temperature=params.temperature, top_k=params.top_k,
                          top_p=params.top_p, seed=1234, **kw)
    return Engine(target, config, draft=draft if drafter == "draft_model" else None)


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
        q = draft_probs if draft_probs is not None else torch.nn.functional.one_hot(
            torch.tensor(draft, dtype=torch.long), p.shape[-1]).to(p.dtype)
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
