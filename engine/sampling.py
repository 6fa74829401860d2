"""Sampling parameters and the effective distribution they define.

Target and draft logits go through the *same* transform (temperature, top-k, top-p) so that the
acceptance rule compares like with like. Not a logits-processor framework: only what decoding needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from common.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen from the target's logits."""

    temperature: float = 0.0  # 0 → greedy (argmax); > 0 → sample from softmax(logits / T)
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose mass reaches p; 1.0 keeps all

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0.0


def greedy_ids(logits: torch.Tensor) -> torch.Tensor:
    """The argmax of every row of `logits` [..., V] (the first one on a tie, as argmax).

    Through max(): on the CPU it is 2-3x faster than argmax (measured 5.7 vs 11.5 us over 8192 fp32
    logits, 18 vs 52 us over 5 rows), and a verification step takes one per step.
    """
    return logits.max(-1).indices


def effective_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p; rows of `logits` [..., V] are independent.

    For greedy decoding this is the one-hot of the argmax, so the exact acceptance rule below
    reduces to "draft token == target argmax".
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if params.greedy:
        return torch.nn.functional.one_hot(greedy_ids(logits), logits.shape[-1]).to(logits.dtype)
    scores = logits / params.temperature
    vocab = scores.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(scores, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(-1)
        # Drop a token when the mass *before* it already reaches top_p (the top token always stays).
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a 1-D probability vector."""
    return int(torch.multinomial(probs, 1, generator=generator).item())
