"""A session: one conversation's token history, target KV cache and drafter state.

Each turn passes the full token history it wants continued; the session keeps the KV of the
longest prefix it shares with what it already holds (prefix-cache reuse across an agent's turns)
and crops the rest, so an extending turn prefills only its new tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.kv import crop_cache
from engine.stats import GenerationStats

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.speculative import GenerationResult


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Session:
    """Token history + KV cache of one conversation (batch size 1)."""

    def __init__(self, engine: Engine, seed: int) -> None:
        self.engine = engine
        self.history: list[int] = []  # every token so far; the KV holds history[:-1]
        self.cache = engine.forward.new_cache()
        self.drafter = engine.new_drafter()
        self.policy = engine.new_gamma_policy()
        self.generator = torch.Generator(device=engine.device).manual_seed(seed)
        self.totals = GenerationStats()  # sum over this session's generations

    @property
    def kv_length(self) -> int:
        """Positions held in the target KV cache."""
        return self.cache.get_seq_length()

    def prepare(self, prompt: list[int]) -> int:
        """Adopt `prompt` as the history; keep the reusable KV prefix and return its length.

        At most len(prompt) - 1 positions are reused: the last prompt token is always fed to the
        target, because its logits choose the first new token.
        """
        reuse = min(common_prefix(self.history, prompt), self.kv_length, len(prompt) - 1)
        crop_cache(self.cache, reuse)
        self.history = list(prompt)
        return reuse

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop_tokens: frozenset[int] | None = None,
    ) -> GenerationResult:
        """Continue this session with `prompt` (the whole conversation so far, as token ids)."""
        from engine.speculative import generate

        return generate(self, prompt, max_new_tokens, stop_tokens)
