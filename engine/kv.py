"""Model forwards over a growing KV cache, and cache cropping (rollback).

One place knows how transformers names things (the cache keyword changed from
`past_key_values` to `cache` in transformers 5.2x), so the decode loop and the drafters stay plain.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty dynamic KV cache for `model`."""
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    """Tokens held in the cache."""
    return cache.get_seq_length()


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Drop every cached position >= `length` (no-op if the cache is already that short)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers >= 5: a negative count removes that many positions


def kv_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each [batch, kv_heads, seq, head_dim]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def kv_bytes(cache: DynamicCache) -> int:
    """Bytes held by the cache tensors."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv_tensors(cache))


def _cache_keyword(model: torch.nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class Forward:
    """Calls a causal LM on new tokens at known positions, appending to a KV cache."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self._cache_kw = _cache_keyword(model)

    @torch.inference_mode()
    def __call__(
        self,
        cache: DynamicCache,
        tokens: list[int],
        keep: int = 1,
        hidden: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the last `keep` positions [keep, V] (and last hidden states [keep, h] if asked).

        Positions are taken from the cache length (host-side int), so the caller keeps the cache
        cropped to exactly the tokens it has committed.
        """
        start = cache.get_seq_length()
        ids = torch.tensor([tokens], device=self.device)  # [1, n]
        pos = torch.arange(start, start + len(tokens), device=self.device)[None]  # [1, n]
        out = self.model(
            input_ids=ids,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=hidden,
            **{self._cache_kw: cache},
        )
        last_hidden = out.hidden_states[-1][0, -keep:] if hidden else None
        return out.logits[0], last_hidden  # [keep, V], [keep, h]
