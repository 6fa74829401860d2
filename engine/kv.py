"""The KV cache: a growing (and sliding-window) layer that crops anywhere, cache cropping (rollback), sizes.

The model forward over it lives in engine/forward.py.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

MIN_CAPACITY = 256  # positions a growing layer reserves at least


def grown_capacity(capacity: int, needed: int) -> int:
    """The growth rule of every growing KV buffer: max(needed, 2 x capacity, MIN_CAPACITY) when full."""
    return max(needed, 2 * capacity, MIN_CAPACITY)


def capacity_bound(tokens: int) -> int:
    """The most positions a growing buffer holding `tokens` can have allocated.

    It grows only when full, by grown_capacity: after a growth the old capacity was below `needed`,
    so the new one is below 2 x needed (or is MIN_CAPACITY).
    """
    return max(MIN_CAPACITY, 2 * tokens)


class GrowingLayer(DynamicLayer):
    """A full-attention KV layer that appends in place into preallocated, doubling storage.

    transformers' DynamicLayer concatenates on every step, copying the whole cache each time
    (quadratic in context length over a generation); here a step writes only its new positions,
    and a rollback (crop) just moves the length back. `keys`/`values` stay views of the valid part.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._len = 0
        self._k = key_states.new_empty(0)
        self._v = value_states.new_empty(0)
        self.is_initialized = True

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        if self._k.dim() == 4 and needed <= self._k.shape[-2]:
            return
        capacity = grown_capacity(self._k.shape[-2] if self._k.dim() == 4 else 0, needed)
        b, h, _, d = key_states.shape
        k = key_states.new_empty((b, h, capacity, d))  # [b, kv_heads, capacity, head_dim]
        v = value_states.new_empty((b, h, capacity, value_states.shape[-1]))
        if self._len:
            k[:, :, : self._len] = self._k[:, :, : self._len]
            v[:, :, : self._len] = self._v[:, :, : self._len]
        self._k, self._v = k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new positions after the valid ones; return views of everything valid."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._len + key_states.shape[-2]
        self._reserve(key_states, value_states, end)
        self._k[:, :, self._len : end] = key_states
        self._v[:, :, self._len : end] = value_states
        self._len = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """Valid positions held."""
        return self._len if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last `-tokens_to_remove` positions (transformers >= 5 convention: negative)."""
        if not self.is_initialized or tokens_to_remove == 0:
            return
        if tokens_to_remove > 0:
            raise ValueError("GrowingLayer.crop takes a negative count of positions to remove")
        self._len = max(0, self._len + tokens_to_remove)
        self.keys, self.values = self._k[:, :, : self._len], self._v[:, :, : self._len]

    def reset(self) -> None:
        """Drop everything."""
        self._len = 0
        self.keys = self.values = None
        self.is_initialized = False


class SlidingGrowingLayer(GrowingLayer):
    """A sliding-window (or chunked) KV layer that keeps its whole history, so any crop is exact.

    transformers' DynamicSlidingWindowLayer keeps only the last `sliding_window - 1` positions and
    refuses to crop once past the window, so neither a rejected draft nor a diverging turn can be
    rolled back. Here every position stays stored (memory as a full-attention layer) while a forward
    still attends over the window only: `update` returns the last `sliding_window - 1` past
    positions plus the new ones, and `get_mask_sizes` reports that slice with its absolute offset,
    exactly as transformers' own layer does, so the model's sliding (or chunked) mask, built from the
    config's window on absolute positions, is the one a fresh full forward computes.
    """

    is_sliding = True

    def __init__(self, sliding_window: int) -> None:
        super().__init__()
        self.sliding_window = sliding_window

    def _first_visible(self, past: int) -> int:
        """First position any query after `past` cached positions can see."""
        return max(past - self.sliding_window + 1, 0)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv_length, kv_offset) of what `update` will return for `query_length` new positions."""
        past = self.get_seq_length()
        start = self._first_visible(past)
        return past + query_length - start, start

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Store the new positions; return only the window the new queries can attend to."""
        start = self._first_visible(self.get_seq_length())
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[:, :, start:], values[:, :, start:]

    def get_max_length(self) -> int:
        """No maximum: the whole history is kept (-1, as for full attention)."""
        return -1


def _croppable(layer):
    """Our croppable replacement for transformers' layer, or the layer itself when it has none."""
    if type(layer) is DynamicLayer:
        return GrowingLayer()
    if type(layer) is DynamicSlidingWindowLayer:
        return SlidingGrowingLayer(layer.sliding_window)
    return layer


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty KV cache for `model` whose every attention layer grows in place and crops exactly.

    Full-attention layers become GrowingLayer, sliding-window and chunked ones SlidingGrowingLayer;
    other special layers (linear attention, KV sharing placeholders) keep transformers' own.
    """
    cache = DynamicCache(config=model.config)
    cache.layers = [_croppable(layer) for layer in cache.layers]
    if cache.layer_class_to_replicate is DynamicLayer:  # configs without layer types: layers made lazily
        cache.layer_class_to_replicate = GrowingLayer
    return cache


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (how much of a cache a new prompt can keep)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def position_limit(model: torch.nn.Module) -> int | None:
    """How many positions the model can embed (`max_position_embeddings`, GPT-2's `n_positions`), if set."""
    config = model.config.get_text_config(decoder=True)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(limit) if limit else None


def cache_length(cache) -> int:
    """Tokens held in the cache."""
    return cache.get_seq_length()


def crop_cache(cache, length: int) -> None:
    """Drop every cached position >= `length` (no-op if the cache is already that short)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers >= 5: a negative count removes that many positions


def kv_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each [batch, kv_heads, seq, head_dim] (a DynamicCache or the engine's LlamaCache)."""
    if hasattr(cache, "kv_tensors"):
        return cache.kv_tensors()
    return [(layer.keys, layer.values) for layer in cache.layers]


def kv_bytes(cache) -> int:
    """Bytes held by the cache tensors."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv_tensors(cache))
