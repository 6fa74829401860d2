"""An engine-owned forward for the Llama family (Llama, Qwen2, Mistral-style), in plain torch.

Why not transformers' own forward: at batch 1 and a few new tokens a step is mostly Python and
dispatch overhead (masks, cache objects, output dataclasses per layer), and its linears cannot use
weights packed once for the kernel that is fastest here. This is the same maths written out
(gpt-fast style) over the same weight tensors the loaded model holds:

    x = embed(ids)                                                  [n, h]
    per layer:  a = rmsnorm(x);  q, k, v = a Wq, a Wk, a Wv (+ b)   [n, H d], [n, KV d], [n, KV d]
                q, k = rope(q), rope(k);  cache[len : len + n] = k, v
                x += softmax(q K^T / sqrt(d) + mask) V  Wo          (GQA: H / KV query heads per KV head)
                a = rmsnorm(x);  x += (silu(a Wg) * (a Wu)) Wd
    logits = rmsnorm(x)[-keep:] Wlm                                 [keep, V]  (x itself: the trunk output)

The KV cache (`LlamaCache`) is one preallocated buffer per layer; appending writes the new rows and a
rollback only moves the length back. Covered: what `covers` accepts; anything else stays on
transformers (engine/forward.py says so in one line).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from common.errors import ConfigError, UnsupportedConfig
from engine.kernels import COPYING_KERNELS, KERNELS, GroupPlan, LinearPlan, Switch, by_rows, make_linear
from engine.kv import grown_capacity

ARCHITECTURES = ("llama", "qwen2", "mistral")
STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # inv_freq fixed at load (dynamic / longrope rescale per call)

TRUNK = -1  # a tap id: the last decoder layer's output, before the final norm (what an MTP module reads)
Taps = bool | tuple[int, ...]  # hidden states a forward returns: True = (TRUNK,); ids = inputs of those layers


def resolve_taps(hidden: Taps, layers: int) -> tuple[int, ...]:
    """Layer ids whose inputs a forward returns, concatenated in order: id == layers (or TRUNK) is the last output.

    Tap i is the residual stream after i decoder layers (llama.cpp's `extract_layers`, vLLM's EAGLE-3 aux layer
    ids); `True` asks for the trunk output alone, `False` / `()` for nothing.
    """
    if hidden is True:
        return (layers,)
    if not hidden:
        return ()
    taps = tuple(layers if t == TRUNK else int(t) for t in hidden)
    if any(not 0 <= t <= layers for t in taps):
        raise UnsupportedConfig(f"hidden-state taps {hidden} outside [0, {layers}] for a {layers}-layer model")
    return taps


def covers(model: torch.nn.Module) -> str | None:
    """None when this forward computes `model` exactly as transformers does, else the reason it does not."""
    config = model.config
    kind = getattr(config, "model_type", "?")
    if kind not in ARCHITECTURES:
        return f"architecture {kind!r} (covered: {', '.join(ARCHITECTURES)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (covered: silu)"
    rope = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope not in STATIC_ROPE:
        return f"RoPE type {rope!r} (covered: {', '.join(STATIC_ROPE)})"
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1"
    return None


def _linear_params(layer: torch.nn.Module) -> list[torch.Tensor]:
    """The weights (and biases) of a decoder layer's linears."""
    attn, mlp = layer.self_attn, layer.mlp
    mods = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return [p for m in mods for p in m.parameters()]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / rms(x), the mean of squares taken in float32 (as transformers does)."""
    if x.dtype == torch.float32:  # one fused op; bit for bit the same sums in fp32 (tested), ~2.5 us less per call
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's pairing of the two halves of each head: (x1, x2) -> (-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Projections:
    """Several projections of one input (q, k, v or gate, up): outputs [n, out_i] each.

    Fused (one call over row-concatenated weights) when the kernel copies weights anyway (oneDNN packs
    them, `transposed` stores them [in, out]); otherwise one call per projection over the model's own
    tensors, so no weight is duplicated.
    """

    def __init__(self, modules: list[torch.nn.Linear], kernel: str) -> None:
        make = functools.partial(make_linear, kernel)
        self.sizes = [m.weight.shape[0] for m in modules]
        if kernel in COPYING_KERNELS and len(modules) > 1:
            biases = [m.bias for m in modules]
            bias = None
            if any(b is not None for b in biases):
                bias = torch.cat(
                    [
                        b if b is not None else m.weight.new_zeros(m.weight.shape[0])
                        for b, m in zip(biases, modules, strict=True)
                    ]
                )
            fused = make(torch.cat([m.weight for m in modules]), bias)
            self.run = lambda x: fused(x).split(self.sizes, dim=-1)
        else:
            linears = [make(m.weight, m.bias) for m in modules]
            self.run = lambda x: [f(x) for f in linears]

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.run(x)


class _Layer:
    """One decoder layer's weights: norms, q|k|v, o, gate|up, down (each on its kernel by fed rows)."""

    def __init__(self, layer: torch.nn.Module, plan: GroupPlan, switch: Switch, window: int | None) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.norm1, self.norm2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        self.qkv = by_rows(plan, lambda k: _Projections([attn.q_proj, attn.k_proj, attn.v_proj], k), switch)
        self.o = by_rows(plan, lambda k: make_linear(k, attn.o_proj.weight, attn.o_proj.bias), switch)
        self.gate_up = by_rows(plan, lambda k: _Projections([mlp.gate_proj, mlp.up_proj], k), switch)
        self.down = by_rows(plan, lambda k: make_linear(k, mlp.down_proj.weight, mlp.down_proj.bias), switch)
        self.window = window  # sliding window (positions a query sees, itself included), None = full


class LlamaCache:
    """Preallocated K and V per layer, [kv_heads, capacity, head_dim]; `length` positions are valid.

    Grows by engine.kv.grown_capacity, as GrowingLayer does, so the memory model's
    capacity bound holds for both; a rollback (`crop`) only moves `length`.
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.length = 0
        self.graphs: dict[int, object] = {}  # CUDA graphs bound to these buffers, by k (engine/graphs.py)
        self._shape = (kv_heads, 0, head_dim)
        self.k = [torch.empty(self._shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(self._shape, dtype=dtype, device=device) for _ in range(layers)]

    @property
    def capacity(self) -> int:
        """Positions allocated per layer."""
        return self.k[0].shape[1]

    def reserve(self, needed: int) -> None:
        """Make room for `needed` positions, keeping the valid ones."""
        if needed <= self.capacity:
            return
        capacity = grown_capacity(self.capacity, needed)
        self.graphs.clear()  # they point at the old buffers
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                new = old.new_empty((old.shape[0], capacity, old.shape[2]))  # [kv_heads, capacity, d]
                new[:, : self.length] = old[:, : self.length]
                store[i] = new

    def get_seq_length(self) -> int:
        """Valid positions held (the DynamicCache name, so engine.kv's helpers take either cache)."""
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last `-tokens_to_remove` positions (negative count, as transformers >= 5)."""
        if tokens_to_remove > 0:
            raise ValueError("LlamaCache.crop takes a negative count of positions to remove")
        self.length = max(0, self.length + tokens_to_remove)

    def kv_tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) per layer as [1, kv_heads, length, head_dim] views, DynamicCache's layout."""
        n = self.length
        return [(k[None, :, :n], v[None, :, :n]) for k, v in zip(self.k, self.v, strict=True)]

    def allocated_bytes(self) -> int:
        """Bytes of the buffers, valid or not."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


class LlamaForward:
    """Runs a covered transformers Llama-family model with its own maths, over the model's weight tensors.

    `kernel` names the linear implementation (KERNELS) of every call; `plan` instead chooses it per group
    of linears and fed rows (engine/forward_plan.py). `torch` reads the model's own tensors (no copy);
    `onednn` packs fused copies once here, so those weights are held twice in RAM (`packed_bytes`; the
    transformers module stays loaded: transformers' cases in the benchmark and the tests use it).
    """

    def __init__(self, model: torch.nn.Module, kernel: str = "torch", plan: LinearPlan | None = None) -> None:
        if (reason := covers(model)) is not None:
            raise UnsupportedConfig(f"the engine's Llama forward does not cover {reason}")
        if kernel not in KERNELS:
            raise ConfigError(f"unknown linear kernel {kernel!r}; allowed: {', '.join(KERNELS)}")
        config, body = model.config, model.model
        self.plan = plan = plan or LinearPlan.uniform(kernel)
        self.kernel = kernel if not plan.mixed else "mixed"
        self.dtype = body.embed_tokens.weight.dtype
        self.device = body.embed_tokens.weight.device
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim**-0.5
        window = getattr(config, "sliding_window", None)
        # Qwen2 lists each layer's kind; Mistral has no list: a set window applies to every layer.
        types = (
            getattr(config, "layer_types", None)
            or ["sliding_attention" if window else "full_attention"] * config.num_hidden_layers
        )
        # Where each group switches kernels; only the plan measurement moves these (engine/forward_plan.py).
        self.switches = {"layers": Switch(plan.layers.from_rows), "head": Switch(plan.head.from_rows)}
        with torch.no_grad():
            self.layers = [
                _Layer(layer, plan.layers, self.switches["layers"], window if kind == "sliding_attention" else None)
                for layer, kind in zip(body.layers, types, strict=True)
            ]
            self.embed = body.embed_tokens.weight  # [V, h]
            self.norm = body.norm.weight
            head = model.lm_head
            self.lm_head = by_rows(plan.head, lambda k: make_linear(k, head.weight, head.bias), self.switches["head"])
        # Bytes of the packed copies: every oneDNN group holds its weights a second time.
        linears = sum(p.numel() * p.element_size() for layer in body.layers for p in _linear_params(layer))
        head_bytes = sum(p.numel() * p.element_size() for p in head.parameters())
        copies = {kernel: 0 for kernel in COPYING_KERNELS}  # one copy per copying kernel a group uses
        for group, size in ((plan.layers, linears), (plan.head, head_bytes)):
            for kernel in {group.single, group.many} & set(COPYING_KERNELS):
                copies[kernel] += size
        self.packed_bytes = sum(copies.values())
        rotary = body.rotary_emb
        self.inv_freq = rotary.inv_freq.float()  # [d / 2]
        self.rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        self._cos = self._sin = torch.empty(0, self.head_dim, dtype=self.dtype, device=self.device)
        self._retired: list[tuple[torch.Tensor, torch.Tensor]] = []

    def new_cache(self) -> LlamaCache:
        """An empty KV cache for this model."""
        return LlamaCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)

    def _rope_table(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for positions [0, end), [end, d], computed as transformers' rotary embedding does."""
        if end > self._cos.shape[0]:
            size = grown_capacity(self._cos.shape[0], end)
            pos = torch.arange(size, device=self.device, dtype=torch.float32)
            freqs = pos[:, None] * self.inv_freq.to(self.device)[None]  # [size, d / 2], float32
            emb = torch.cat((freqs, freqs), dim=-1)  # [size, d]
            self._retired.append((self._cos, self._sin))  # captured CUDA graphs may still read the old ones
            self._cos = (emb.cos() * self.rope_scale).to(self.dtype)
            self._sin = (emb.sin() * self.rope_scale).to(self.dtype)
        return self._cos, self._sin

    @staticmethod
    def _mask(
        start: int, n: int, first: int, window: int | None, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """What each new query at start + i adds to its scores over cached positions [first, start + n), [n, L].

        0 where it may attend, -inf elsewhere: the additive form attention turns a boolean mask into at
        every call, made once per forward instead of once per layer.
        """
        if n == 1 and (window is None or first >= start + 1 - window):
            return None  # one query sees every position it is given
        q = torch.arange(start, start + n, device=device)[:, None]
        k = torch.arange(first, start + n, device=device)[None]
        allowed = k <= q
        if window is not None:
            allowed &= q - k < window
        return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))

    def _decoder(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: Callable[[int, int | None, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        taps: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every decoder layer over new rows x [n, h] at the positions of cos/sin [n, d]; (trunk output, taps).

        `attend(i, window, q, k, v)` stores layer i's new K/V [KV, n, d] where the caller keeps them and
        returns the attention output [n, H d] of the queries q [H, n, d]: one cache, a static buffer, or
        several sessions' caches, each over its own rows. `taps` (resolve_taps' ids): the inputs of those
        layers, concatenated [n, len(taps) h] (None when none are asked).
        """
        n, d = x.shape[0], self.head_dim
        caught: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            if i in taps:
                caught[i] = x
            q, k, v = layer.qkv(rms_norm(x, layer.norm1, self.eps))  # [n, H d], [n, KV d], [n, KV d]
            q = q.view(n, self.heads, d).transpose(0, 1)  # [H, n, d]
            k = k.view(n, self.kv_heads, d).transpose(0, 1)  # [KV, n, d]
            v = v.view(n, self.kv_heads, d).transpose(0, 1)  # [KV, n, d]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            x = x + layer.o(attend(i, layer.window, q, k, v))
            gate, up = layer.gate_up(rms_norm(x, layer.norm2, self.eps))  # [n, I] each
            x = x + layer.down(F.silu(gate) * up)
        caught[len(self.layers)] = x
        return x, (torch.cat([caught[t] for t in taps], dim=-1) if taps else None)

    def _attention(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """softmax(q K^T / sqrt(d) + mask) V for q [H, n, d] over keys/values [KV, L, d]: [n, H d]."""
        att = F.scaled_dot_product_attention(
            q[None],
            keys[None],
            values[None],
            attn_mask=mask,
            scale=self.scale,
            enable_gqa=self.kv_heads != self.heads,
        )  # [1, H, n, d]
        return att[0].transpose(0, 1).reshape(q.shape[1], self.heads * self.head_dim)

    def _masks(self, start: int, n: int) -> Callable[[int | None], tuple[int, torch.Tensor | None]]:
        """(first visible position, additive mask) of n new queries at `start`, per window, made once per forward."""
        masks: dict[int | None, tuple[int, torch.Tensor | None]] = {}

        def of(window: int | None) -> tuple[int, torch.Tensor | None]:
            if window not in masks:  # earliest position any new query sees, and the mask from there
                first = 0 if window is None else max(0, start + 1 - window)
                masks[window] = (first, self._mask(start, n, first, window, self.device, self.dtype))
            return masks[window]

        return of

    @torch.inference_mode()
    def __call__(
        self, cache: LlamaCache, tokens: list[int], keep: int = 1, hidden: Taps = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the last `keep` positions [keep, V] (and, if asked, hidden states of every fed token).

        `hidden=True`: the trunk output [n, h], the last decoder layer's before the final norm (what an MTP
        module reads); a tuple of tap ids (resolve_taps): those layers' inputs side by side [n, k h] (EAGLE-3).
        """
        start, n = cache.length, len(tokens)
        end = start + n
        cache.reserve(end)
        cos, sin = self._rope_table(end)
        masks = self._masks(start, n)

        def attend(i: int, window: int | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[i][:, start:end] = k
            cache.v[i][:, start:end] = v
            first, mask = masks(window)
            return self._attention(q, cache.k[i][:, first:end], cache.v[i][:, first:end], mask)

        x = self.embed[torch.tensor(tokens, device=self.device)]  # [n, h]
        x, tapped = self._decoder(x, cos[start:end], sin[start:end], attend, resolve_taps(hidden, len(self.layers)))
        cache.length = end
        last = rms_norm(x[-keep:], self.norm, self.eps)  # [keep, h]
        return self.lm_head(last), tapped

    @torch.inference_mode()
    def many(
        self, caches: list[LlamaCache], feeds: list[list[int]], keeps: list[int], hidden: Taps = False
    ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """One forward for several sessions: session j's `feeds[j]` appended to `caches[j]` at its own position.

        Ragged: sessions differ in length, fed tokens and kept rows. Every linear (and the LM head over all
        kept rows) runs once over the rows of all sessions, which is what a batch saves: the weights are
        streamed once per step instead of once per session. Attention runs per session over its own cache.
        Returns, per session, what `__call__` would: logits [keeps[j], V] and, if asked, hidden rows [n_j, k h].
        """
        if not (len(caches) == len(feeds) == len(keeps)):
            raise ValueError("many: caches, feeds and keeps must have one entry per session")
        if len({id(c) for c in caches}) != len(caches):
            raise ValueError("many: a cache appears twice (one session cannot be in a batch twice)")
        starts = [c.length for c in caches]
        ends = [s + len(f) for s, f in zip(starts, feeds, strict=True)]
        bounds = [0]  # session j's rows are [bounds[j], bounds[j + 1]) of the batch
        for f in feeds:
            bounds.append(bounds[-1] + len(f))
        for c, e in zip(caches, ends, strict=True):
            c.reserve(e)
        cos, sin = self._rope_table(max(ends))
        spans = zip(starts, ends, strict=True)
        positions = torch.tensor([p for s, e in spans for p in range(s, e)], device=self.device)
        masks = [self._masks(s, len(f)) for s, f in zip(starts, feeds, strict=True)]

        def attend(i: int, window: int | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = []
            for j, cache in enumerate(caches):
                a, b, s, e = bounds[j], bounds[j + 1], starts[j], ends[j]
                cache.k[i][:, s:e] = k[:, a:b]
                cache.v[i][:, s:e] = v[:, a:b]
                first, mask = masks[j](window)
                out.append(self._attention(q[:, a:b], cache.k[i][:, first:e], cache.v[i][:, first:e], mask))
            return torch.cat(out)

        x = self.embed[torch.tensor([t for f in feeds for t in f], device=self.device)]  # [rows, h]
        x, tapped = self._decoder(x, cos[positions], sin[positions], attend, resolve_taps(hidden, len(self.layers)))
        for c, e in zip(caches, ends, strict=True):
            c.length = e
        kept = [r for j, keep in enumerate(keeps) for r in range(bounds[j + 1] - keep, bounds[j + 1])]
        logits = self.lm_head(rms_norm(x[kept], self.norm, self.eps)).split(keeps)  # [keep_j, V] each
        return [(logits[j], tapped[bounds[j] : bounds[j + 1]] if hidden else None) for j in range(len(caches))]

    def static_cache(self, capacity: int) -> LlamaCache:
        """A cache whose buffers hold `capacity` positions from the start and never move (static_step's)."""
        cache = self.new_cache()
        cache.reserve(capacity)
        for t in (*cache.k, *cache.v):
            t.zero_()  # attention over the whole buffer reads unwritten rows (masked out: they must be finite)
        self._rope_table(cache.capacity)
        return cache

    def static_step(self, cache: LlamaCache, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Logits [k, V] of k = len(ids) new tokens at positions `pos` [k], every shape fixed by k and the capacity.

        K/V are written at `pos` (index_copy_) and each query attends over the whole buffer under a mask
        computed on the device from `pos`, so no host value enters and a CUDA graph can replay it
        (engine/graphs.py). The caller keeps `cache.length` (host side) in step.
        """
        cap = cache.capacity
        cos, sin = self._cos[pos], self._sin[pos]  # [k, d]
        behind = pos[:, None] - torch.arange(cap, device=pos.device)[None]  # [k, cap]: query minus key position
        seen = behind >= 0  # causal
        masks = {None: seen}
        for window in {layer.window for layer in self.layers} - {None}:
            masks[window] = seen & (behind < window)

        def attend(i: int, window: int | None, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            cache.k[i].index_copy_(1, pos, k)
            cache.v[i].index_copy_(1, pos, v)
            return self._attention(q, cache.k[i], cache.v[i], masks[window])

        x, _ = self._decoder(self.embed[ids], cos, sin, attend)
        return self.lm_head(rms_norm(x, self.norm, self.eps))
