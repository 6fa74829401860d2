"""Memory model of speculative decoding from a model's config.json alone (no weights loaded).

bytes = target weights + target KV × context + draft weights + draft KV × context + drafter (e.g. MTP)
weights + drafter state × context (an MTP block's KV and the target hidden states it keeps, a layer-skip
draft's k-layer KV) + verification workspace (grows with gamma + 1 rows) + a fixed runtime overhead; inverted by
`largest_context` into the longest context that fits a VRAM ceiling (the tuner's constraint).

Several sessions served at once (`sessions=N`, one per agent in flight) each hold their own target KV,
draft KV and drafter state at the context, so those terms count N times; the weights are loaded once and
shared. One batched step feeds every session's rows through one forward, so the workspace counts N
sessions' rows too.

KV counts the positions a context holds. The engine's caches (engine/kv.py GrowingLayer) reserve storage
in doublings of at least 256 positions, so at a given length they may hold up to about twice that; pass
the reserved length as `context` to bound what is allocated rather than what is used. Sliding-window
layers keep their whole history there too (exact crops), so every layer is counted at full context.
Non-goals: mixture-of-experts formulas (their count needs the safetensors header), multi-GPU sharding.
The command line (`python -m engine.memory`) is engine/memory/__main__.py.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.units import GIB

# Architectures whose parameter count the formula in ModelShape.from_config reproduces exactly
# (checked against instantiated transformers models in tests/engine/test_memory.py).
FORMULA_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

# Bytes per weight (or KV element). Float types are their storage size. Quantised types are llama.cpp's
# ggml block layouts (ggml-common.h): bytes of one block / weights per block, e.g. block_q8_0 holds a
# half-precision scale + 32 int8 = 34 bytes per 32 weights; block_q4_K holds 2 halves + 12 bytes of
# scales + 128 bytes of nibbles = 144 bytes per 256.
DTYPE_BYTES: dict[str, float] = {
    "float64": 8.0,
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
    "int8": 1.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "q6_k": 210 / 256,
    "q5_k": 176 / 256,
    "q4_k": 144 / 256,
    "q3_k": 110 / 256,
    "q2_k": 84 / 256,
    # The _M mixes are mostly their K type, with some tensors (parts of attn_v / ffn_down) in Q6_K: these
    # rates are floors, and real files run a few percent larger.
    "q5_k_m": 176 / 256,
    "q4_k_m": 144 / 256,
}
_ALIASES = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
}
# Float weight types whose activations run in the same type; other (quantised) weights are counted
# with float32 activations, as llama.cpp computes them (conservative for GPU kernels that use fp16).
_FLOAT_ACTIVATIONS = ("float64", "float32", "float16", "bfloat16")
_LOGIT_BYTES = 4  # the engine upcasts logits to float32 before softmax (engine/sampling.py)


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a dtype name (aliases such as bf16 accepted); ValueError when unknown."""
    name = _ALIASES.get(dtype.strip().lower(), dtype.strip().lower())
    if name not in DTYPE_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


def _activation_bytes(dtype: str) -> float:
    name = _ALIASES.get(dtype.strip().lower(), dtype.strip().lower())
    return dtype_bytes(name) if name in _FLOAT_ACTIVATIONS else 4.0


@dataclass(frozen=True)
class ModelShape:
    """Architecture facts of a decoder-only model, as config.json states them."""

    params: int  # parameter count, tied embeddings counted once
    layers: int  # decoder layers (num_hidden_layers)
    kv_heads: int  # key/value heads per layer (grouped-query attention)
    head_dim: int  # width of one attention head
    hidden: int  # residual width (hidden_size)
    vocab: int  # embedding rows (config vocab_size, padding included)
    max_positions: int | None  # max_position_embeddings; None when the config sets none
    tied_embeddings: bool  # whether the LM head reuses the input embedding
    heads: int = 0  # query heads; 0 = unknown (hidden // head_dim assumed)
    intermediate: int = 0  # MLP width; 0 = unknown (4 × hidden assumed)

    @classmethod
    def from_config(cls, config: dict[str, Any], params: int | None = None) -> ModelShape:
        """Shape of a Llama / Mistral / Qwen2 / Qwen3-style config dict; `params` overrides the formula's count."""
        if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
            config = config["text_config"]  # multimodal wrappers keep the language model's config here

        def need(key: str) -> int:
            value = config.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{key!r} is missing or not a positive integer (got {value!r})")
            return value

        hidden, layers, heads = need("hidden_size"), need("num_hidden_layers"), need("num_attention_heads")
        vocab, inter = need("vocab_size"), need("intermediate_size")
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads  # some configs write "head_dim": null
        tied = bool(config.get("tie_word_embeddings", False))  # False: these model classes' default
        limit = config.get("max_position_embeddings") or config.get("n_positions")
        shape = cls(
            params=params or 0,
            layers=layers,
            kv_heads=int(kv_heads),
            head_dim=int(head_dim),
            hidden=hidden,
            vocab=vocab,
            max_positions=int(limit) if limit else None,
            tied_embeddings=tied,
            heads=heads,
            intermediate=inter,
        )
        if params is not None:
            return shape
        model_type = str(config.get("model_type", ""))
        if model_type not in FORMULA_MODEL_TYPES:
            raise ConfigError(
                f"model_type {model_type!r} has no parameter formula here (known: {', '.join(FORMULA_MODEL_TYPES)}); "
                "keep model.safetensors beside config.json to count parameters from its header"
            )
        return replace(shape, params=_formula_params(config, shape, model_type))

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements one position adds over all layers."""
        return self.layers * self.kv_heads * self.head_dim * 2


def _formula_params(config: dict[str, Any], shape: ModelShape, model_type: str) -> int:
    """Parameters of a pre-norm decoder: embeddings, attention, gated MLP, RMSNorms, LM head."""
    hidden, head_dim, inter, vocab = shape.hidden, shape.head_dim, shape.intermediate, shape.vocab
    q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden  # q, k, v, o projections
    if model_type == "qwen2":
        attention += q + 2 * kv  # Qwen2 always biases q/k/v, never o
    elif config.get("attention_bias", False):
        attention += q + 2 * kv + hidden  # Llama / Qwen3 attention_bias covers q, k, v and o
    if model_type == "qwen3":
        attention += 2 * head_dim  # per-head RMSNorm of queries and keys
    mlp = 3 * hidden * inter + (2 * inter + hidden if config.get("mlp_bias", False) else 0)  # gate, up, down
    per_layer = attention + mlp + 2 * hidden  # input and post-attention norms
    return vocab * hidden + shape.layers * per_layer + hidden + (0 if shape.tied_embeddings else vocab * hidden)


# ---- reading a model folder or the Hugging Face cache --------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def safetensors_params(path: Path) -> dict[str, int]:
    """Elements per tensor name, read from a safetensors file's JSON header only (never the tensors)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ConfigError(f"{path} is too short to be a safetensors file ({len(head)} bytes)")
            (size,) = struct.unpack("<Q", head)  # little-endian u64: header length
            if size > path.stat().st_size - 8:
                raise ConfigError(f"{path} is truncated: its header claims {size} bytes")
            header = json.loads(handle.read(size))
    except FileNotFoundError:
        raise ConfigError(f"{path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"{path} has a corrupt safetensors header (not JSON)") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path} has a corrupt safetensors header (not a JSON object)")
    counts = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = info.get("shape") if isinstance(info, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ConfigError(f"{path} has a corrupt safetensors header (tensor {name!r} has no valid shape)")
        counts[name] = math.prod(shape)
    return counts


def _looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else that is not on disk was meant as a folder.
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def _hub_file(repo_id: str, filename: str, cache_dir: str | Path | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir)  # cache only: no network
    except HFValidationError as exc:
        raise ConfigError(f"{repo_id!r} is neither a model folder nor a valid hub id ({exc})") from None
    return Path(found) if isinstance(found, str) else None


def model_shape(path_or_id: str, *, cache_dir: str | Path | None = None) -> ModelShape:
    """Shape of a model folder or a hub id in the local Hugging Face cache; exact params from safetensors headers."""
    folder = Path(path_or_id).expanduser()
    if folder.exists() or _looks_like_path(path_or_id):
        if not folder.is_dir():
            raise ConfigError(
                f"model folder {folder} not found" if not folder.exists() else f"{folder} is not a folder"
            )

        def locate(name: str) -> Path | None:
            return folder / name if (folder / name).is_file() else None

        config_path = folder / "config.json"
    else:

        def locate(name: str) -> Path | None:
            return _hub_file(path_or_id, name, cache_dir)

        found = locate("config.json")
        if found is None:
            raise ConfigError(f"config.json of {path_or_id!r} is not a local folder nor in the Hugging Face cache")
        config_path = found
    config = _read_json(config_path)
    params = None
    index = locate("model.safetensors.index.json")
    single = locate("model.safetensors")
    if single is not None or index is not None:
        if single is not None:
            counts = safetensors_params(single)
        else:
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ConfigError(f"{index} has no 'weight_map' naming the weight shards")
            counts = {}
            for shard in sorted(set(map(str, weight_map.values()))):
                shard_path = locate(shard)
                if shard_path is None:
                    raise ConfigError(f"{index} lists the shard {shard}, which is not there")
                counts.update(safetensors_params(shard_path))
        if config.get("tie_word_embeddings", False):
            counts.pop("lm_head.weight", None)  # some tied checkpoints store the shared matrix twice
        params = sum(counts.values())
    try:
        return ModelShape.from_config(config, params=params)
    except ValueError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None


# ---- the estimate -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each part of a speculative-decoding setup needs at its peak."""

    target_weights: int  # target parameters in the weight dtype
    target_kv: int  # target K/V over the context
    draft_weights: int  # draft model parameters (0 without one)
    draft_kv: int  # draft K/V over the same context
    drafter_weights: int  # other drafter weights (MTP module), as given
    drafter_kv: int  # per-position drafter state over the context (MTP block KV + kept hidden states, layer-skip KV)
    workspace: int  # transient activations and logits of the largest forward
    overhead: int  # fixed runtime allocation (CUDA context, allocator), as given
    dtype: str = ""  # weight dtype, for describe()
    context: int = 0  # tokens the KV terms cover per session, for describe()
    sessions: int = 1  # sessions served at once, each holding its own KV and drafter state at `context`

    @property
    def total(self) -> int:
        """Sum of every part."""
        return sum(getattr(self, name) for name in PARTS)

    def as_dict(self) -> dict[str, int | str]:
        """Every field plus the total, e.g. for logging as trial attributes (`sessions` only when above 1)."""
        data = asdict(self)
        if self.sessions == 1:
            del data["sessions"]  # one session: the same record as before sessions were counted
        return {**data, "total": self.total}

    def describe(self) -> str:
        """One line, e.g. 'needs 15.2 GiB in bfloat16 (weights 14.2, KV 0.9 at 4096 tokens, ...)'."""
        unit, scale = ("GiB", GIB) if self.total >= GIB else ("MiB", 1 << 20)
        each = "" if self.sessions == 1 else f" x {self.sessions} sessions"
        parts = [
            f"weights {self.target_weights / scale:.1f}",
            f"KV {self.target_kv / scale:.1f} at {self.context} tokens{each}",
        ]
        if self.draft_weights or self.draft_kv:
            parts += [f"draft weights {self.draft_weights / scale:.1f}", f"draft KV {self.draft_kv / scale:.1f}"]
        if self.drafter_weights:
            parts.append(f"drafter {self.drafter_weights / scale:.1f}")
        if self.drafter_kv:
            parts.append(f"drafter state {self.drafter_kv / scale:.1f}")
        parts.append(f"workspace {self.workspace / scale:.1f}")
        if self.overhead:
            parts.append(f"overhead {self.overhead / scale:.1f}")
        return f"needs {self.total / scale:.1f} {unit} in {self.dtype} ({', '.join(parts)} {unit})"


PARTS = tuple(f.name for f in fields(MemoryEstimate))[:8]  # the byte fields in order (not dtype, context, sessions)


def check_sessions(sessions: int) -> int:
    """`sessions` when it is a whole number >= 1; ValueError otherwise."""
    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise ConfigError(f"sessions must be an integer >= 1 (sessions served at once), got {sessions!r}")
    return sessions


def mtp_weight_bytes(target: ModelShape, dtype: str, draft_vocab: int = 0) -> int:
    """Bytes of an MTP module for `target` (engine/mtp.py): eh_proj 2h x h, one decoder block, 5 norms, and the
    draft vocabulary's copy of the LM head rows (Vd x h; the full head is the target's own, shared)."""
    h, d = target.hidden, target.head_dim
    heads = target.heads or h // d
    inter = target.intermediate or 4 * h
    params = 2 * h * h + (2 * heads + 2 * target.kv_heads) * d * h + 3 * h * inter + 5 * h + draft_vocab * h
    return math.ceil(params * dtype_bytes(dtype))


def mtp_state_bytes_per_token(target: ModelShape, dtype: str) -> float:
    """Per position: the MTP block's K and V (one layer) plus the target hidden state the drafter keeps."""
    return (2 * target.kv_heads * target.head_dim + target.hidden) * dtype_bytes(dtype)


def eagle3_weight_bytes(target: ModelShape, dtype: str, draft_vocab: int = 0) -> int:
    """Bytes of an EAGLE-3 head for `target` (engine/eagle3.py): fc 3h x h, one decoder layer whose q/k/v read
    2h, 4 norms, and its own LM head (Vd x h; the full vocabulary's V x h when it has no draft vocabulary)."""
    h, d = target.hidden, target.head_dim
    heads = target.heads or h // d
    inter = target.intermediate or 4 * h
    rows = draft_vocab or target.vocab
    params = 3 * h * h + (heads + 2 * target.kv_heads) * d * 2 * h + heads * d * h + 3 * h * inter + 4 * h + rows * h
    return math.ceil(params * dtype_bytes(dtype))


def eagle3_state_bytes_per_token(target: ModelShape, dtype: str) -> float:
    """Per position: the head's K and V (one layer) plus the three target hidden states the drafter keeps."""
    return (2 * target.kv_heads * target.head_dim + 3 * target.hidden) * dtype_bytes(dtype)


def layer_skip_state_bytes_per_token(target: ModelShape, layers: int, dtype: str) -> float:
    """Per position: the K and V of a layer-skip draft's own `layers`-layer cache."""
    return 2 * layers * target.kv_heads * target.head_dim * dtype_bytes(dtype)


def kv_bytes_for(shape: ModelShape, tokens: int, kv_dtype: str) -> int:
    """K/V bytes of `tokens` positions: layers × kv_heads × head_dim × 2 × bytes per element × tokens."""
    return math.ceil(shape.kv_elements_per_token * tokens * dtype_bytes(kv_dtype))


def _forward_bytes(shape: ModelShape, rows: int, keep: int, attended: int, act: float) -> int:
    """Transient bytes of one forward over `rows` new positions keeping `keep` logits rows.

    Per row, everything one decoder layer holds at once (earlier layers' intermediates are freed under
    inference mode): residual + normed input (2 × hidden), q, k, v and attention output
    ((2 × heads + 2 × kv_heads) × head_dim), gate, up and their product (3 × intermediate), in the
    activation dtype; plus attention scores rows × heads × attended × 4 (float32 softmax, as the eager
    / math path materialises them; fused kernels need less). Logits: keep × vocab × (activation bytes
    + float32 copy + float32 probabilities).
    """
    heads = shape.heads or shape.hidden // shape.head_dim
    inter = shape.intermediate or 4 * shape.hidden
    per_row = act * (2 * shape.hidden + (2 * heads + 2 * shape.kv_heads) * shape.head_dim + 3 * inter)
    scores = rows * heads * attended * 4
    logits = keep * shape.vocab * (act + 2 * _LOGIT_BYTES)
    return math.ceil(rows * per_row + scores + logits)


def workspace_bytes(
    target: ModelShape,
    *,
    dtype: str,
    context: int,
    gamma: int = 0,
    draft: ModelShape | None = None,
    draft_dtype: str | None = None,
    prefill_tokens: int = 0,
    sessions: int = 1,
) -> int:
    """The largest transient of a step: verification, prefill or a draft forward (see _forward_bytes).

    Verification feeds k = gamma + 1 rows attending to the whole context, while the draft's float32
    probabilities (gamma × vocab × 4) are held. A prefill of P tokens (the engine's first forward of a
    turn: prompt suffix + draft) is counted without scores, since its long forwards use sdpa's fused
    kernels; P = 0 leaves prefill out. With `sessions` N, one batched step (engine/batch.py) carries
    every session's rows in one target forward and one draft forward per chain step, and a wave of N
    agents may all prefill in the same step, so every row count and held q is N times one session's.
    """
    n = check_sessions(sessions)
    k = gamma + 1
    prefill = min(prefill_tokens, context)
    act = _activation_bytes(dtype)
    held_q = n * gamma * target.vocab * _LOGIT_BYTES
    need = _forward_bytes(target, n * k, n * k, context, act) + held_q
    if prefill:
        need = max(need, _forward_bytes(target, n * (prefill + gamma), n * k, 0, act))
    if draft is not None and gamma:
        dact = _activation_bytes(draft_dtype or dtype)
        step = _forward_bytes(draft, n, n, context, dact) + held_q  # one draft token each, earlier q rows held
        need = max(need, step, _forward_bytes(draft, n * prefill, n, 0, dact) if prefill else 0)
    return need


def estimate_memory(
    target: ModelShape,
    *,
    dtype: str,
    context: int,
    gamma: int = 0,
    draft: ModelShape | None = None,
    draft_dtype: str | None = None,
    kv_dtype: str | None = None,
    drafter_weight_bytes: int = 0,
    overhead_bytes: int = 0,
    prefill_tokens: int = 0,
    drafter_bytes_per_token: float = 0.0,
    sessions: int = 1,
) -> MemoryEstimate:
    """Peak bytes of decoding `context` tokens with `gamma` draft tokens per step (gamma 0: plain decoding).

    `drafter_bytes_per_token`: the drafter's own per-position state (mtp_state_bytes_per_token,
    layer_skip_state_bytes_per_token), counted over the context like the KV. `sessions`: sessions served
    at once, each up to `context` tokens; the weights (and drafter weights) count once, each session's
    target KV, draft KV and drafter state N times, the batched step's workspace N sessions' rows.
    """
    check_sessions(sessions)
    for name, value in (
        ("context", context),
        ("gamma", gamma),
        ("drafter_weight_bytes", drafter_weight_bytes),
        ("overhead_bytes", overhead_bytes),
        ("prefill_tokens", prefill_tokens),
        ("drafter_bytes_per_token", drafter_bytes_per_token),
    ):
        if value < 0:
            raise ConfigError(f"{name} must be >= 0, got {value}")
    draft_dtype = draft_dtype or dtype
    # Each session's caches are its own (engine/session.py): one session's bytes, times the sessions.
    return MemoryEstimate(
        target_weights=math.ceil(target.params * dtype_bytes(dtype)),
        target_kv=kv_bytes_for(target, context, kv_dtype or dtype) * sessions,
        draft_weights=math.ceil(draft.params * dtype_bytes(draft_dtype)) if draft else 0,
        draft_kv=kv_bytes_for(draft, context, kv_dtype or draft_dtype) * sessions if draft else 0,
        drafter_weights=drafter_weight_bytes,
        drafter_kv=math.ceil(drafter_bytes_per_token * context) * sessions,
        workspace=workspace_bytes(
            target,
            dtype=dtype,
            context=context,
            gamma=gamma,
            draft=draft,
            draft_dtype=draft_dtype,
            prefill_tokens=prefill_tokens,
            sessions=sessions,
        ),
        overhead=overhead_bytes,
        dtype=dtype,
        context=context,
        sessions=sessions,
    )


def context_cap(target: ModelShape, draft: ModelShape | None = None) -> int | None:
    """The longest context both models can embed (max_position_embeddings), None when neither sets one."""
    limits = [m.max_positions for m in (target, draft) if m is not None and m.max_positions]
    return min(limits) if limits else None


def largest_context(target: ModelShape, ceiling_bytes: int, **kwargs: Any) -> int:
    """Largest context whose estimate_memory(**kwargs) fits `ceiling_bytes`, capped at position limits; 0 if none.

    With `sessions=N` it is the context each of N sessions may hold at once (a server's `-c` is N times it).
    """
    if "context" in kwargs:
        raise TypeError("largest_context chooses the context itself; do not pass context=")

    def fits(tokens: int) -> bool:
        return estimate_memory(target, context=tokens, **kwargs).total <= ceiling_bytes

    cap = context_cap(target, kwargs.get("draft"))
    if not fits(0):
        return 0
    if cap is not None and fits(cap):
        return cap
    hi = cap
    if hi is None:  # no limit: double until it no longer fits (KV grows at least one byte per token)
        hi = 1
        while fits(hi):
            hi *= 2
    lo = 0  # invariant: fits(lo) and not fits(hi); the estimate never shrinks as context grows
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
