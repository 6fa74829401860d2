"""The MTP module (DeepSeek-V3 shape) over a frozen target: used by the `mtp` drafter and by training.mtp.

For a position t whose target trunk output h_t (the last decoder layer's output, *before* the final
norm: llama.cpp mimo2's convention) and next token x_{t+1} are known:

    x   = eh_proj([enorm(embed(x_{t+1})); hnorm(h_t)])          2h -> h  (embed: the target's own table)
    g_t = block(x)                                               one Llama-shaped decoder layer of the
                                                                 target's width, causal over its own KV
    p(x_{t+2}) = softmax(lm_head(norm(g_t)))                     lm_head: the target's own (shared)

Chained for gamma steps: step j feeds g from step j - 1 and the token step j - 1 proposed, at the next
position, attending over the block's cache (entries of real target hidden states for the history,
then this chain's own). q/k/v and gate/up/down stay separate dense projections so an exporter can fuse
them. An optional draft vocabulary (`d2t`: draft index -> target id, the most frequent reply tokens)
restricts the head's proposals to those rows, the way EAGLE-3's draft-to-target map does: the head's
cost drops with its rows while acceptance still runs over the full target vocabulary.

Saved as a folder: config.json (shape, the target fingerprint it was trained for) + model.safetensors.
Loading checks the target matches and names what differs when it does not.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine.kv import grown_capacity
from engine.llama import rms_norm, rotate_half

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "spectune-mtp/1"
# Target config fields an MTP module depends on: a mismatch in any of them means it was trained for another model.
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


class MtpMismatchError(ValueError):
    """An MTP module was loaded for a target it was not trained for."""


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


@dataclass
class MtpConfig:
    """Shape of an MTP module and the target it was trained for."""

    hidden_size: int  # the target's width h
    num_attention_heads: int  # the block's query heads
    num_key_value_heads: int  # the block's KV heads (GQA)
    head_dim: int  # per head
    intermediate_size: int  # the block's MLP width
    rms_norm_eps: float = 1e-6  # every RMSNorm's epsilon
    rope_theta: float = 10000.0  # the block's RoPE base
    vocab_size: int = 0  # the target's vocabulary (the shared LM head's rows)
    draft_vocab_size: int = 0  # rows of the draft vocabulary (d2t); 0 = the full target vocabulary
    target: dict[str, Any] = field(default_factory=dict)  # the target config fields (FINGERPRINT_KEYS)
    target_fingerprint: str = ""  # fingerprint(target)
    target_probe: list[float] = field(default_factory=list)  # weights_probe of the target it was trained on
    trained: dict[str, Any] = field(default_factory=dict)  # how it was made (training.mtp fills this)
    format: str = FORMAT

    @classmethod
    def for_target(cls, model: nn.Module, draft_vocab_size: int = 0) -> MtpConfig:
        """The module shape that matches `model` (its width, heads, MLP width, RoPE base)."""
        c = model.config.get_text_config(decoder=True)
        hidden = int(c.hidden_size)
        heads = int(getattr(c, "num_attention_heads", None) or c.n_head)
        kv = int(getattr(c, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(c, "head_dim", None) or hidden // heads)
        inter = int(getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden)
        rope = getattr(c, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0)) if isinstance(rope, dict) else 10000.0)
        fields = target_config(model)
        return cls(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=head_dim,
            intermediate_size=inter,
            rms_norm_eps=float(getattr(c, "rms_norm_eps", None) or getattr(c, "layer_norm_epsilon", 1e-6)),
            rope_theta=theta,
            vocab_size=int(c.vocab_size),
            draft_vocab_size=draft_vocab_size,
            target=fields,
            target_fingerprint=fingerprint(fields),
            target_probe=weights_probe(model),
        )


class _Norm(nn.Module):
    """RMSNorm with a learned scale (mean of squares in float32, as the Llama family computes it)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class _Attention(nn.Module):
    def __init__(self, c: MtpConfig) -> None:
        super().__init__()
        h, d = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(h, c.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, c.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, c.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * d, h, bias=False)


class _Mlp(nn.Module):
    def __init__(self, c: MtpConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)


class _SharedHead(nn.Module):
    """The final norm; the projection is the target's own LM head (not a parameter here)."""

    def __init__(self, c: MtpConfig) -> None:
        super().__init__()
        self.norm = _Norm(c.hidden_size, c.rms_norm_eps)


class MtpCache:
    """The block's K and V, [kv_heads, capacity, head_dim]; `length` positions valid; crop moves `length`."""

    def __init__(self, c: MtpConfig, dtype: torch.dtype, device: torch.device) -> None:
        self.length = 0
        self.k = torch.empty((c.num_key_value_heads, 0, c.head_dim), dtype=dtype, device=device)
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


class MtpModule(nn.Module):
    """One MTP module; `bind(target)` attaches the target's embedding and LM head (shared, never copied or saved)."""

    def __init__(self, config: MtpConfig) -> None:
        super().__init__()
        self.config = c = config
        self.enorm = _Norm(c.hidden_size, c.rms_norm_eps)
        self.hnorm = _Norm(c.hidden_size, c.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=False)
        self.input_layernorm = _Norm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c)
        self.post_attention_layernorm = _Norm(c.hidden_size, c.rms_norm_eps)
        self.mlp = _Mlp(c)
        self.shared_head = _SharedHead(c)
        d2t = torch.arange(c.draft_vocab_size) if c.draft_vocab_size else torch.empty(0, dtype=torch.long)
        self.register_buffer("d2t", d2t)  # draft index -> target token id (empty: the full vocabulary)
        # The target's modules are held outside nn.Module's registry (object.__setattr__), so they are
        # neither saved with this module nor moved or cast by .to(); RoPE frequencies stay float32 likewise.
        object.__setattr__(self, "_target", None)  # (embedding, LM head) of the bound target
        object.__setattr__(self, "_head_weight", None)  # [V or V_draft, h]: the target's LM head rows proposals use
        object.__setattr__(self, "_head_bias", None)
        self._inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [positions, d]

    # -- binding to the target ---------------------------------------------------------------------------------

    def bind(self, target: nn.Module) -> MtpModule:
        """Attach `target`'s embedding table and LM head (and check it is the model this module was trained for)."""
        check_target(self.config, target)
        object.__setattr__(self, "_target", (target.get_input_embeddings(), target.get_output_embeddings()))
        self.refresh_head()
        return self

    def refresh_head(self) -> None:
        """Re-read the LM head rows of the draft vocabulary (after d2t or the device changes)."""
        head = self._target[1]
        weight = head.weight
        bias = getattr(head, "bias", None)
        if self.d2t.numel():
            weight, bias = weight[self.d2t].detach(), (bias[self.d2t].detach() if bias is not None else None)
        # Not nn.Module attributes: the target's own Parameter would be registered (saved, cast, trained) here.
        object.__setattr__(self, "_head_weight", weight)
        object.__setattr__(self, "_head_bias", bias)

    @property
    def vocab(self) -> int:
        """The target's vocabulary size (q rows are over it)."""
        return self.config.vocab_size

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's embedding of target token ids [..] -> [.., h]."""
        if self._target is None:
            raise RuntimeError("MtpModule.bind(target) first: the module shares the target's embedding and head")
        return self._target[0](tokens)

    def head_logits(self, g: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the target's if d2t is empty) of block outputs g [.., h]."""
        return F.linear(self.shared_head.norm(g), self._head_weight, self._head_bias)

    def full_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [n, Vd] spread over the target vocabulary [n, V] (-inf elsewhere)."""
        if not self.d2t.numel():
            return draft_logits
        out = draft_logits.new_full((draft_logits.shape[0], self.vocab), float("-inf"))
        return out.index_copy_(1, self.d2t, draft_logits)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary indexes."""
        return self.d2t[draft_ids] if self.d2t.numel() else draft_ids

    # -- maths shared by inference and training -----------------------------------------------------------------

    def _input(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """eh_proj([enorm(embed(x_{t+1})); hnorm(h_t)]) for hidden [.., h] and next tokens [..]."""
        emb = self.embed(tokens).to(hidden.dtype)
        return self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))

    def _rope_rows(self, end: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [>= end, d] for positions from 0, a table computed in float32 and grown like a KV buffer."""
        table, device = self._table, self.eh_proj.weight.device
        if table is None or table[0].shape[0] < end or table[0].device != device or table[0].dtype != dtype:
            size = grown_capacity(table[0].shape[0] if table is not None else 0, end)
            pos = torch.arange(size, device=device, dtype=torch.float32)
            freqs = pos[:, None] * self._inv_freq.to(device)[None]  # [size, d / 2]
            emb = torch.cat((freqs, freqs), dim=-1)
            table = self._table = (emb.cos().to(dtype), emb.sin().to(dtype))
        return table

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [.., d] at `positions` (any shape)."""
        end = int(positions.max()) + 1 if positions.numel() else 0
        cos, sin = self._rope_rows(end, dtype)
        return cos[positions], sin[positions]

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [.., H, n, d], k and v [.., KV, n, d] of rows x [.., n, h] at `positions` [.., n]."""
        c, attn = self.config, self.self_attn
        a = self.input_layernorm(x)
        shape = x.shape[:-1]
        q = attn.q_proj(a).view(*shape, c.num_attention_heads, c.head_dim).transpose(-2, -3)
        k = attn.k_proj(a).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        v = attn.v_proj(a).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        cos, sin = self._rope(positions, x.dtype)
        cos, sin = cos.unsqueeze(-3), sin.unsqueeze(-3)  # broadcast over heads
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def _finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The block after attention: o_proj residual, then the MLP residual. att [.., H, n, d] -> [.., n, h]."""
        n = att.shape[-2]
        merged = att.transpose(-2, -3).reshape(*att.shape[:-3], n, -1)
        x = x + self.self_attn.o_proj(merged)
        a = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(a)) * self.mlp.up_proj(a))

    def _attend(self, q, k, v, mask) -> torch.Tensor:
        c = self.config
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=c.num_key_value_heads != c.num_attention_heads
        )

    # -- inference: one step over the block's cache -------------------------------------------------------------

    def new_cache(self) -> MtpCache:
        """An empty block KV cache for one session."""
        weight = self.eh_proj.weight
        return MtpCache(self.config, weight.dtype, weight.device)

    @torch.inference_mode()
    def step(self, cache: MtpCache, hidden: torch.Tensor, tokens: list[int]) -> torch.Tensor:
        """Block outputs g [n, h] for n entries (hidden [n, h], next tokens) appended at positions cache.length + i.

        The same maths as `_input`, `_qkv` and `_finish` (training's), written flat over the weight tensors
        (`_block`) with contiguous RoPE rows: at batch 1 a drafting step is mostly per-op overhead, and it runs
        gamma times per target forward (tests/engine/test_mtp_module.py checks the two agree).
        """
        start, n = cache.length, len(tokens)
        end = start + n
        cache.reserve(end)
        cos, sin = self._rope_rows(end, hidden.dtype)
        mask = _causal(start, end, hidden.device)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[:, start:end] = k
            cache.v[:, start:end] = v
            return self._attend(q[None], cache.k[None, :, :end], cache.v[None, :, :end], mask)[0]

        g = self._block(hidden, tokens, cos[start:end], sin[start:end], attend)
        cache.length = end
        return g

    @torch.inference_mode()
    def step_many(self, caches: list[MtpCache], hidden: torch.Tensor, tokens: list[list[int]]) -> torch.Tensor:
        """`step` for several sessions at once: session j's entries (its len(tokens[j]) rows of hidden, in order).

        Ragged like LlamaForward.many: every projection and the MLP run once over all sessions' rows (the
        weights are streamed once per chain step instead of once per session), attention per session over its
        own cache. Returns g [rows, h], session j's rows where its hidden rows were.
        """
        if len(caches) == 1:
            return self.step(caches[0], hidden, tokens[0])
        if len(caches) != len(tokens) or len({id(c) for c in caches}) != len(caches):
            raise ValueError("step_many: one token list per cache, and every cache once")
        starts = [c.length for c in caches]
        ends = [s + len(t) for s, t in zip(starts, tokens, strict=True)]
        bounds = [0]  # session j's rows are [bounds[j], bounds[j + 1])
        for t in tokens:
            bounds.append(bounds[-1] + len(t))
        for c, e in zip(caches, ends, strict=True):
            c.reserve(e)
        device = hidden.device
        cos, sin = self._rope_rows(max(ends), hidden.dtype)
        positions = torch.tensor([p for s, e in zip(starts, ends, strict=True) for p in range(s, e)], device=device)
        masks = [_causal(s, e, device) for s, e in zip(starts, ends, strict=True)]

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = []
            for j, cache in enumerate(caches):
                a, b, s, e = bounds[j], bounds[j + 1], starts[j], ends[j]
                cache.k[:, s:e] = k[:, a:b]
                cache.v[:, s:e] = v[:, a:b]
                out.append(self._attend(q[None, :, a:b], cache.k[None, :, :e], cache.v[None, :, :e], masks[j])[0])
            return torch.cat(out, dim=1)  # [H, rows, d]

        g = self._block(hidden, [t for ts in tokens for t in ts], cos[positions], sin[positions], attend)
        for c, e in zip(caches, ends, strict=True):
            c.length = e
        return g

    def _block(
        self,
        hidden: torch.Tensor,
        tokens: list[int],
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The block over rows (hidden [n, h], next tokens) at the positions of cos/sin [n, d]: g [n, h].

        `attend(q, k, v)` stores the rows' K/V [KV, n, d] (RoPE applied) in whichever caches own them and returns
        the attention output [H, n, d] of the queries q [H, n, d]: one session's cache (`step`) or several's.
        """
        c, attn, mlp = self.config, self.self_attn, self.mlp
        n, eps, d = len(tokens), c.rms_norm_eps, c.head_dim
        emb = self.embed(torch.tensor(tokens, device=hidden.device)).to(hidden.dtype)
        x = F.linear(
            torch.cat([rms_norm(emb, self.enorm.weight, eps), rms_norm(hidden, self.hnorm.weight, eps)], -1),
            self.eh_proj.weight,
        )  # [n, h]
        a = rms_norm(x, self.input_layernorm.weight, eps)
        q = F.linear(a, attn.q_proj.weight).view(n, c.num_attention_heads, d).transpose(0, 1)  # [H, n, d]
        k = F.linear(a, attn.k_proj.weight).view(n, c.num_key_value_heads, d).transpose(0, 1)  # [KV, n, d]
        v = F.linear(a, attn.v_proj.weight).view(n, c.num_key_value_heads, d).transpose(0, 1)
        att = attend(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v)  # [H, n, d]
        x = x + F.linear(att.transpose(0, 1).reshape(n, -1), attn.o_proj.weight)
        a = rms_norm(x, self.post_attention_layernorm.weight, eps)
        return x + F.linear(
            F.silu(F.linear(a, mlp.gate_proj.weight)) * F.linear(a, mlp.up_proj.weight), mlp.down_proj.weight
        )

    # -- training: teacher-forced chains over whole sequences ---------------------------------------------------

    def chain_logits(
        self, hidden: torch.Tensor, tokens: torch.Tensor, depth: int, rows: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Draft-vocabulary logits of chained steps 1..depth for every start position, teacher-forced.

        hidden [B, T, h] target trunk outputs, tokens [B, T] the sequence. Step 1 at start t reads
        (h_t, x_{t+1}) and predicts x_{t+2}; step j reads step j - 1's output and x_{t+j}, sits at
        position t + j - 1, and attends to the real entries at positions <= t plus its own chain's
        earlier steps, exactly what inference's cache holds then. Returns [B, T - 1 - j, Vd] per step j
        (start positions t = 0 .. T - 2 - j, whose targets x_{t+1+j} exist); with `rows` (per step a
        bool [B, T - 1 - j]) only those rows, flattened [N_j, Vd]: the head is most of the cost.
        """
        B, T, _ = hidden.shape
        device = hidden.device
        pos = torch.arange(T, device=device)
        x = self._input(hidden[:, : T - 1], tokens[:, 1:])  # [B, T-1, h]: entry t for t = 0..T-2
        q, k, v = self._qkv(x, pos[: T - 1].expand(B, -1))
        real_k, real_v = k, v  # [B, KV, T-1, d]
        causal = pos[: T - 1, None] >= pos[None, : T - 1]  # query t sees real entries <= t
        g = self._finish(x, self._attend(q, k, v, causal))  # step 1 outputs

        def head(g: torch.Tensor, j: int) -> torch.Tensor:
            kept = g[:, : T - 1 - j]
            return self.head_logits(kept if rows is None else kept[rows[j - 1]])

        out = [head(g, 1)]
        chain_k: list[torch.Tensor] = []
        chain_v: list[torch.Tensor] = []
        for j in range(2, depth + 1):
            n = T - 1 - (j - 1)  # starts with an input token x_{t+j}: t <= T - 1 - j
            x = self._input(g[:, :n], tokens[:, j : j + n])  # [B, n, h]
            q, k, v = self._qkv(x, pos[j - 1 : j - 1 + n].expand(B, -1))
            chain_k = [ck[:, :, :n] for ck in chain_k] + [k]
            chain_v = [cv[:, :, :n] for cv in chain_v] + [v]
            # keys: real entries (query start t sees those <= t), then each chain step's entry of the same start
            keys = torch.cat([real_k, *chain_k], dim=-2)
            values = torch.cat([real_v, *chain_v], dim=-2)
            same = torch.eye(n, dtype=torch.bool, device=device)
            mask = torch.cat([causal[:n], *([same] * len(chain_k))], dim=-1)  # [n, T-1 + (j-1) n]
            g = self._finish(x, self._attend(q, keys, values, mask))
            out.append(head(g, j))
        return out


def _causal(start: int, end: int, device: torch.device) -> torch.Tensor | None:
    """Which cached positions [0, end) each new entry at start..end - 1 sees (None: one entry sees them all)."""
    if end - start <= 1:
        return None
    return torch.arange(end, device=device)[None] <= torch.arange(start, end, device=device)[:, None]


def check_target(config: MtpConfig, target: nn.Module) -> None:
    """MtpMismatchError naming the differing fields when `target` is not the model `config` was trained for."""
    have = target_config(target)
    want = config.target
    diffs = [
        f"{k}: trained for {want.get(k)!r}, target has {have.get(k)!r}"
        for k in FINGERPRINT_KEYS
        if want.get(k) != have.get(k)
    ]
    if diffs:
        raise MtpMismatchError("MTP module was trained for another target: " + "; ".join(diffs))
    probe = weights_probe(target)
    if config.target_probe and not probes_match(probe, config.target_probe):
        raise MtpMismatchError(
            "MTP module was trained for a target of the same shape but other weights (embedding probe "
            f"{config.target_probe[0]:.4g}, {config.target_probe[1]:.4g}, ... vs {probe[0]:.4g}, {probe[1]:.4g}, ...)"
        )


def save_mtp(module: MtpModule, folder: str | Path) -> Path:
    """Write config.json and model.safetensors (the target's shared embedding and head are not saved)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(module.config), indent=2) + "\n")
    tensors = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})
    return folder


def read_mtp_config(folder: str | Path) -> MtpConfig:
    """The config of an MTP folder; a missing or broken file names the file and the problem."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"MTP folder {Path(folder)} has no {CONFIG_FILE} (train one: python -m training.mtp)")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT!r}")
        return MtpConfig(**data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a spectune MTP config ({exc})") from None


def load_mtp(folder: str | Path, target: nn.Module) -> MtpModule:
    """The MTP module in `folder`, on the target's device and dtype and bound to it (checked against it)."""
    from safetensors.torch import load_file

    config = read_mtp_config(folder)
    check_target(config, target)
    path = Path(folder) / WEIGHTS_FILE
    try:
        state = load_file(str(path))
    except Exception as exc:  # safetensors raises several kinds; the message names the file
        raise ValueError(f"{path}: cannot read MTP weights ({exc})") from None
    module = MtpModule(config)
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
    weight = target.get_input_embeddings().weight
    module = module.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
    return module.bind(target)


def random_mtp(target: nn.Module, seed: int = 0, draft_vocab: list[int] | None = None, scale: float = 1.0) -> MtpModule:
    """A randomly initialised module bound to `target` (tests, and training's starting point)."""
    config = MtpConfig.for_target(target, draft_vocab_size=len(draft_vocab or []))
    torch.manual_seed(seed)
    module = MtpModule(config)
    with torch.no_grad():
        if draft_vocab:
            module.d2t.copy_(torch.tensor(draft_vocab))
        for p in module.parameters():
            if p.dim() == 2:
                p.normal_(0.0, scale / math.sqrt(p.shape[1]))
    weight = target.get_input_embeddings().weight
    return module.to(device=weight.device, dtype=weight.dtype).eval().bind(target)
