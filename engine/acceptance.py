"""Acceptance rules: which draft tokens the target keeps, and the one token it adds.

`exact` reproduces the target's own output distribution (greedy: token for token). The other
rules are lossy speed/quality trade-offs, opt-in and flagged `lossy` wherever they are reported.
Not here: drafting, KV bookkeeping, statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from common.errors import ConfigError
from engine.sampling import SamplingParams, effective_probs, greedy_ids, sample


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft."""

    accepted: int  # draft tokens accepted, a prefix of the draft
    next_token: int  # the target's token after them: correction on rejection, bonus if all accepted


class AcceptanceRule(Protocol):
    """Decides, from one target forward over [last] + draft, how much of the draft to keep."""

    name: str
    lossy: bool

    def verify(
        self,
        target_logits: torch.Tensor,  # [n + 1, V]: row i scores the token after draft[:i]
        draft: list[int],  # n draft tokens
        draft_probs: torch.Tensor | None,  # [n, V] effective q of a model drafter; None = one-hot q
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Verdict: ...


def _first_false(flags: list[bool]) -> int:
    for i, ok in enumerate(flags):
        if not ok:
            return i
    return len(flags)


@dataclass
class ExactOptions:
    """`exact` has no knobs: it is the lossless rule."""


class ExactAcceptance:
    """Lossless speculative verification (Leviathan et al. / Chen et al.).

    Greedy: accept the longest prefix of the draft equal to the target's argmax at each position;
    the next token is the target's argmax after that prefix.

    Sampling, with p the target's and q the drafter's effective distributions at position i:
        accept draft token x with probability min(1, p(x) / q(x));
        at the first rejection, sample from the residual normalize(max(0, p - q));
        if all n are accepted, sample a bonus token from p at position n.
    The emitted tokens are then distributed exactly as plain sampling from p. A deterministic
    drafter (n-gram, suffix) has q = one-hot(x): accept with probability p(x), and the residual is
    p with x removed.
    """

    name = "exact"
    lossy = False

    def __init__(self, options: ExactOptions | None = None) -> None:
        self.options = options or ExactOptions()

    def verify(self, target_logits, draft, draft_probs, params, generator) -> Verdict:
        n = len(draft)
        if params.greedy:
            best = greedy_ids(target_logits).tolist()  # [n + 1], one transfer to Python
            a = _first_false([draft[i] == best[i] for i in range(n)])
            return Verdict(a, best[a])
        p = effective_probs(target_logits, params)  # [n + 1, V]
        if n == 0:
            return Verdict(0, sample(p[0], generator))
        idx = torch.tensor(draft, device=p.device)
        p_x = p[:n].gather(-1, idx[:, None]).squeeze(-1)  # [n]
        q_x = torch.ones_like(p_x) if draft_probs is None else draft_probs.gather(-1, idx[:, None]).squeeze(-1)
        u = torch.rand(n, generator=generator, device=p.device, dtype=p.dtype)  # [n]
        # u < p/q  <=>  u * q < p ; avoids dividing by q(x) == 0 (then p(x) > 0 always accepts)
        ok = (u * q_x < p_x).tolist()
        a = _first_false(ok)
        if a == n:
            return Verdict(n, sample(p[n], generator))  # bonus token
        if draft_probs is None:
            residual = p[a].clone()
            residual[draft[a]] = 0.0
        else:
            residual = (p[a] - draft_probs[a]).clamp_min(0.0)
        total = residual.sum()
        # A rejection implies p(x) < q(x), hence mass elsewhere; guard float round-off anyway.
        residual = residual / total if total > 0 else p[a]
        return Verdict(a, sample(residual, generator))


def _scoring_probs(target_logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution lossy rules score drafts against: effective probs, or softmax(T=1) if greedy."""
    if params.greedy:
        return target_logits.float().softmax(-1)
    return effective_probs(target_logits, params)


def _target_token(target_logits_row: torch.Tensor, params: SamplingParams, generator) -> int:
    if params.greedy:
        return int(greedy_ids(target_logits_row))
    return sample(effective_probs(target_logits_row, params), generator)


class _LossyRule:
    """Shared shape of lossy rules: a per-position test, then the target's own next token."""

    name = "lossy"
    lossy = True

    def _accepts(self, target_logits: torch.Tensor, draft: list[int], params: SamplingParams) -> list[bool]:
        raise NotImplementedError

    def verify(self, target_logits, draft, draft_probs, params, generator) -> Verdict:
        n = len(draft)
        a = _first_false(self._accepts(target_logits[:n], draft, params)) if n else 0
        return Verdict(a, _target_token(target_logits[a], params, generator))


@dataclass
class TopKOptions:
    """Options of the `topk` rule."""

    k: int = 5  # accept a draft token if it is among the target's k most likely tokens

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")


class TopKAcceptance(_LossyRule):
    """Lossy: accept x when it is in the target's top-k at that position."""

    name = "topk"

    def __init__(self, options: TopKOptions | None = None) -> None:
        self.options = options or TopKOptions()

    def _accepts(self, target_logits, draft, params):
        k = min(self.options.k, target_logits.shape[-1])
        top = torch.topk(target_logits, k, dim=-1).indices  # [n, k]
        idx = torch.tensor(draft, device=top.device)[:, None]
        return (top == idx).any(-1).tolist()


@dataclass
class ThresholdOptions:
    """Options of the `threshold` rule."""

    tau: float = 0.1  # accept a draft token x when the target gives it p(x) >= tau

    def __post_init__(self) -> None:
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}")


class ThresholdAcceptance(_LossyRule):
    """Lossy: accept x when p(x) >= tau (p: the effective distribution, softmax at T=1 if greedy)."""

    name = "threshold"

    def __init__(self, options: ThresholdOptions | None = None) -> None:
        self.options = options or ThresholdOptions()

    def _accepts(self, target_logits, draft, params):
        p = _scoring_probs(target_logits, params)  # [n, V]
        p_x = p.gather(-1, torch.tensor(draft, device=p.device)[:, None]).squeeze(-1)
        return (p_x >= self.options.tau).tolist()


@dataclass
class TypicalOptions:
    """Options of the `typical` rule (Medusa's typical acceptance)."""

    epsilon: float = 0.09  # hard threshold: p(x) > epsilon always suffices
    delta: float = 0.3  # entropy-scaled threshold delta * exp(-H(p))


class TypicalAcceptance(_LossyRule):
    """Lossy: accept x when p(x) > min(epsilon, delta * exp(-H(p)))."""

    name = "typical"

    def __init__(self, options: TypicalOptions | None = None) -> None:
        self.options = options or TypicalOptions()

    def _accepts(self, target_logits, draft, params):
        p = _scoring_probs(target_logits, params)  # [n, V]
        entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)  # [n]
        bound = torch.clamp(self.options.delta * torch.exp(-entropy), max=self.options.epsilon)
        p_x = p.gather(-1, torch.tensor(draft, device=p.device)[:, None]).squeeze(-1)
        return (p_x > bound).tolist()


ACCEPTANCE_RULES: dict[str, tuple[type, type]] = {
    "exact": (ExactAcceptance, ExactOptions),
    "topk": (TopKAcceptance, TopKOptions),
    "threshold": (ThresholdAcceptance, ThresholdOptions),
    "typical": (TypicalAcceptance, TypicalOptions),
}


def acceptance_options_class(name: str) -> type:
    """The options dataclass of an acceptance rule, failing loudly on an unknown name."""
    if name not in ACCEPTANCE_RULES:
        raise ConfigError(f"unknown acceptance {name!r}; allowed: {sorted(ACCEPTANCE_RULES)}")
    return ACCEPTANCE_RULES[name][1]


def make_acceptance(name: str, options: object | None = None) -> AcceptanceRule:
    """Build an acceptance rule by name."""
    acceptance_options_class(name)
    return ACCEPTANCE_RULES[name][0](options)
