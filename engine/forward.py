"""The one place that runs a model: new tokens at known positions over the KV cache, logits for the kept rows.

Every caller (the decode loop's prefill and verification, the draft model drafter, benchmarks) goes
through `Forward`, so a faster numeric path or an engine-owned forward (issue 12) changes one file.
It also knows how transformers names things (the cache keyword changed from `past_key_values` to
`cache` in transformers 5.2x), so the decode loop and the drafters stay plain.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


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
