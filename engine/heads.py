"""What the trained draft heads (engine/mtp.py, engine/eagle3.py) share: norms, their one-layer KV, RoPE, target checks.

A head is trained for one target: its config records the target's shape fields (FINGERPRINT_KEYS) and a
probe of its embedding weights, and loading it for another target names what differs. A head's decoder
layer keeps its own K/V per session (`HeadCache`), cropped like the target's cache when drafts are rejected.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from torch import nn

from common.errors import UnsupportedConfig
from engine.kv import grown_capacity
from engine.llama import rms_norm

# Target config fields a head depends on: a mismatch in any of them means it was trained for another model.
FINGERPRINT_KEYS = (
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
)


class HeadMismatchError(UnsupportedConfig):
    """A draft head was loaded for a target it was not trained for (a candidate using it is unsupported)."""


def target_config(model: nn.Module) -> dict[str, Any]:
    """The target config fields FINGERPRINT_KEYS names (None where a model lacks one)."""
    config = model.config.get_text_config(decoder=True)
    return {k: getattr(config, k, None) for k in FINGERPRINT_KEYS}


def weights_probe(model: nn.Module) -> list[float]:
    """16 embedding values spread over the table: they tell two checkpoints of one shape apart, in any dtype."""
    weight = model.get_input_embeddings().weight.detach()
    rows = torch.linspace(0, weight.shape[0] - 1, 16).long()
    cols = rows % weight.shape[1]
    return [float(v) for v in weight[rows, cols].double()]


def probes_match(a: list[float], b: list[float]) -> bool:
    """Whether two probes come from one checkpoint: equal within bf16's rounding of the table's scale."""
    if len(a) != len(b):
        return False
    scale = max(max(abs(x) for x in a), 1e-12)
    return max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 0.01 * scale


def fingerprint(fields: dict[str, Any]) -> str:
    """sha256 (16 hex digits) of the target config fields."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def check_head_target(kind: str, want: dict[str, Any], want_probe: list[float], target: nn.Module) -> None:
    """HeadMismatchError naming the differing fields when `target` is not the model a `kind` head was trained for."""
    have = target_config(target)
    diffs = [
        f"{k}: trained for {want.get(k)!r}, target has {have.get(k)!r}"
        for k in FINGERPRINT_KEYS
        if want.get(k) != have.get(k)
    ]
    if diffs:
        raise HeadMismatchError(f"{kind} was trained for another target: " + "; ".join(diffs))
    probe = weights_probe(target)
    if want_probe and not probes_match(probe, want_probe):
        raise HeadMismatchError(
            f"{kind} was trained for a target of the same shape but other weights (embedding probe "
            f"{want_probe[0]:.4g}, {want_probe[1]:.4g}, ... vs {probe[0]:.4g}, {probe[1]:.4g}, ...)"
        )


class Norm(nn.Module):
    """RMSNorm with a learned scale (mean of squares in float32, as the Llama family computes it)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class HeadCache:
    """A head layer's K and V, [kv_heads, capacity, head_dim]; `length` positions valid; crop moves `length`."""

    def __init__(self, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.length = 0
        self.k = torch.empty((kv_heads, 0, head_dim), dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)

    def reserve(self, needed: int) -> None:
        """Room for `needed` positions, keeping the valid ones."""
        if needed <= self.k.shape[1]:
            return
        capacity = grown_capacity(self.k.shape[1], needed)
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_empty((old.shape[0], capacity, old.shape[2]))
            new[:, : self.length] = old[:, : self.length]
            setattr(self, name, new)

    def crop(self, length: int) -> None:
        """Keep the first `length` positions."""
        self.length = min(self.length, length)

    def allocated_bytes(self) -> int:
        """Bytes of the buffers, valid or not."""
        return self.k.numel() * self.k.element_size() * 2


class RopeTable:
    """cos, sin rows for positions from 0, computed in float32 and grown like a KV buffer."""

    def __init__(self, head_dim: int, theta: float) -> None:
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [positions, d]

    def rows(self, end: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [>= end, d]."""
        table = self._table
        if table is None or table[0].shape[0] < end or table[0].device != device or table[0].dtype != dtype:
            size = grown_capacity(table[0].shape[0] if table is not None else 0, end)
            pos = torch.arange(size, device=device, dtype=torch.float32)
            freqs = pos[:, None] * self.inv_freq.to(device)[None]  # [size, d / 2]
            emb = torch.cat((freqs, freqs), dim=-1)
            table = self._table = (emb.cos().to(dtype), emb.sin().to(dtype))
        return table

    def at(
        self, positions: torch.Tensor, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [.., d] at `positions` (any shape)."""
        end = int(positions.max()) + 1 if positions.numel() else 0
        cos, sin = self.rows(end, dtype, device)
        return cos[positions], sin[positions]


def causal(start: int, end: int, device: torch.device) -> torch.Tensor | None:
    """Which cached positions [0, end) each new entry at start..end - 1 sees (None: one entry sees them all)."""
    if end - start <= 1:
        return None
    return torch.arange(end, device=device)[None] <= torch.arange(start, end, device=device)[:, None]


def ragged_bounds(tokens: list[list[int]]) -> list[int]:
    """Row offsets of several sessions' entries laid end to end: session j's rows are [b[j], b[j + 1])."""
    bounds = [0]
    for t in tokens:
        bounds.append(bounds[-1] + len(t))
    return bounds


class ChainedHead(nn.Module):
    """A one-decoder-layer draft head chained over its own KV cache (the MTP module, the EAGLE-3 head).

    A subclass defines `_block` (its layer over rows at known positions) and sets `self.rope` (a RopeTable),
    `self.kv_heads`, `self.n_heads`, `self.head_dim`; `step` and `step_many` (one session, several ragged)
    are the same for every head. An entry at position t reads a row (the head's input state for t) and the
    token x_{t+1}; its output is the next chained step's row and, through the head's LM head, the draft of
    x_{t+2}.
    """

    kv_heads: int
    n_heads: int
    head_dim: int
    rope: RopeTable

    def anchor(self) -> torch.Tensor:
        """A weight of the head: its device and dtype are the head's."""
        raise NotImplementedError

    @property
    def stored_width(self) -> int:
        """Width of what a drafter stores per position for this head (its taps side by side)."""
        raise NotImplementedError

    def entry_rows(self, stored: torch.Tensor) -> torch.Tensor:
        """The rows a catch-up entry reads, from what the drafter stores per position (the head's own taps)."""
        return stored

    def _block(self, rows, tokens, cos, sin, attend) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def new_cache(self) -> HeadCache:
        """An empty layer KV cache for one session."""
        weight = self.anchor()
        return HeadCache(self.kv_heads, self.head_dim, weight.dtype, weight.device)

    def _attend(self, q, k, v, mask) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=self.kv_heads != self.n_heads
        )

    @torch.inference_mode()
    def step(self, cache: HeadCache, rows: torch.Tensor, tokens: list[int]) -> torch.Tensor:
        """Layer outputs [n, h] for n entries (rows [n, h], next tokens) appended at positions cache.length + i.

        The same maths as training's graph, written flat over the weight tensors (`_block`) with contiguous
        RoPE rows: at batch 1 a drafting step is mostly per-op overhead, and it runs gamma times per target
        forward (the module tests check the two agree).
        """
        start, n = cache.length, len(tokens)
        end = start + n
        cache.reserve(end)
        cos, sin = self.rope.rows(end, rows.dtype, rows.device)
        mask = causal(start, end, rows.device)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[:, start:end] = k
            cache.v[:, start:end] = v
            return self._attend(q[None], cache.k[None, :, :end], cache.v[None, :, :end], mask)[0]

        out = self._block(rows, tokens, cos[start:end], sin[start:end], attend)
        cache.length = end
        return out

    @torch.inference_mode()
    def step_many(self, caches: list[HeadCache], rows: torch.Tensor, tokens: list[list[int]]) -> torch.Tensor:
        """`step` for several sessions at once: session j's entries (its len(tokens[j]) rows, in order).

        Ragged like LlamaForward.many: every projection and the MLP run once over all sessions' rows (the
        weights are streamed once per chain step instead of once per session), attention per session over its
        own cache. Returns [rows, h], session j's rows where its input rows were.
        """
        if len(caches) == 1:
            return self.step(caches[0], rows, tokens[0])
        if len(caches) != len(tokens) or len({id(c) for c in caches}) != len(caches):
            raise ValueError("step_many: one token list per cache, and every cache once")
        starts = [c.length for c in caches]
        ends = [s + len(t) for s, t in zip(starts, tokens, strict=True)]
        bounds = ragged_bounds(tokens)
        for c, e in zip(caches, ends, strict=True):
            c.reserve(e)
        device = rows.device
        cos, sin = self.rope.rows(max(ends), rows.dtype, device)
        positions = torch.tensor([p for s, e in zip(starts, ends, strict=True) for p in range(s, e)], device=device)
        masks = [causal(s, e, device) for s, e in zip(starts, ends, strict=True)]

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = []
            for j, cache in enumerate(caches):
                a, b, s, e = bounds[j], bounds[j + 1], starts[j], ends[j]
                cache.k[:, s:e] = k[:, a:b]
                cache.v[:, s:e] = v[:, a:b]
                out.append(self._attend(q[None, :, a:b], cache.k[None, :, :e], cache.v[None, :, :e], masks[j])[0])
            return torch.cat(out, dim=1)  # [H, rows, d]

        out = self._block(rows, [t for ts in tokens for t in ts], cos[positions], sin[positions], attend)
        for c, e in zip(caches, ends, strict=True):
            c.length = e
        return out

    # -- the target's vocabulary: the head proposes over a draft vocabulary (d2t), acceptance runs over the target's

    @property
    def vocab(self) -> int:
        """The target's vocabulary size (q rows are over it)."""
        return self.config.vocab_size

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's embedding of target token ids [..] -> [.., h]."""
        if self._target is None:
            raise RuntimeError(f"{type(self).__name__}.bind(target) first: the head uses the target's embedding")
        return self._target[0](tokens)

    def full_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [n, Vd] spread over the target vocabulary [n, V] (-inf elsewhere)."""
        if not self.d2t.numel():
            return draft_logits
        out = draft_logits.new_full((draft_logits.shape[0], self.vocab), float("-inf"))
        return out.index_copy_(1, self.d2t, draft_logits)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary indexes."""
        return self.d2t[draft_ids] if self.d2t.numel() else draft_ids
