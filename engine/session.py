"""A session: one conversation's token history, target KV cache and drafter state (state only).

Each turn passes the full token history it wants continued; the session keeps the KV of the
longest prefix it shares with what it already holds (prefix-cache reuse across an agent's turns)
and crops the rest, so an extending turn prefills only its new tokens. Decoding lives in
engine/decode.py, which is given the session; the session knows nothing of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.drafters import Drafter
from engine.gamma import GammaPolicy
from engine.kv import common_prefix, crop_cache
from engine.stats import GenerationStats


@dataclass
class Session:
    """Token history + KV cache + drafter state of one conversation."""

    cache: Any  # the target forward's KV cache (LlamaCache, or a DynamicCache on transformers' forward)
    drafter: Drafter  # this session's drafter instance (its own indexes, draft KV)
    policy: GammaPolicy  # this session's draft-length policy
    generator: torch.Generator  # this session's sampling RNG
    history: list[int] = field(default_factory=list)  # every token so far; the KV holds history[:-1]
    totals: GenerationStats = field(default_factory=GenerationStats)  # sum over this session's generations

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
