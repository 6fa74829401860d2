"""The EAGLE-3 head over a frozen target: used by the `eagle3` drafter and by training.eagle3.

EAGLE-3 (Li et al., 2025) drafts from three of the target's hidden states instead of its last one. For a
position t with known target features (the inputs of decoder layers lo, mid, hi: the residual stream after
that many layers, the ids in the config; an id equal to the layer count is the last layer's output) and
next token x_{t+1}:

    g_t  = fc([f_lo; f_mid; f_hi])                                3h -> h: the fused features
    x    = [input_layernorm(embed(x_{t+1})); hidden_norm(g_t)]   2h: the target's own embedding table
    y    = r_t + o_proj(attn(q, k, v of x))                      one decoder layer, causal over its own KV;
                                                                 r_t = g_t, or hidden_norm(g_t) with
                                                                 norm_before_residual (what training.eagle3
                                                                 writes: see Eagle3Config)
    out  = y + mlp(post_attention_layernorm(y))                  the prenorm state
    p(x_{t+2}) = softmax(lm_head(norm(out)))                      its own LM head, over a draft vocabulary

Chained for gamma steps: step j reads step j - 1's prenorm state in place of g and the token it proposed, at
the next position (EAGLE-3's training-time test: the head is trained on its own outputs the same way). The
maths is llama.cpp's (src/models/eagle3.cpp of the pinned release) with norm_before_fc off, so the GGUF of a
head (serving/eagle3_gguf.py) drafts the same tokens.

Saved in the Hugging Face EAGLE-3 folder layout that vLLM, SGLang and llama.cpp's converter load:
config.json (`LlamaForCausalLMEagle3`, one hidden layer, `draft_vocab_size`, `eagle_aux_hidden_state_layer_ids`,
and spectune's own block: the target fingerprint it was trained for, how it was trained) and
model.safetensors (fc, midlayer.*, norm, lm_head, and with a draft vocabulary d2t as offsets and t2d). The
embedding is the target's. Layer ids follow llama.cpp's and vLLM's convention (the input of layer id); SGLang
reads id - 1 (export/sglang.py writes its copy of the config).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from common.errors import ConfigError
from engine.heads import (
    ChainedHead,
    HeadMismatchError,
    Norm,
    RopeTable,
    check_head_target,
    fingerprint,
    target_config,
    weights_probe,
)
from engine.llama import rms_norm, rotate_half

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "spectune-eagle3/1"
ARCHITECTURE = "LlamaForCausalLMEagle3"

Eagle3MismatchError = HeadMismatchError


def default_layer_ids(layers: int) -> list[int]:
    """Low, middle and high feature layers: EAGLE-3's (2, n // 2, n - 3) from 8 layers, else (1, n // 2, n - 1)."""
    if layers >= 8:
        return [2, layers // 2, layers - 3]
    # Never the layer count itself: llama.cpp exposes the last layer's output only for models with MTP layers.
    top = max(0, layers - 1)
    return [min(1, top), min(max(1, layers // 2), top), top]


@dataclass
class Eagle3Config:
    """Shape of an EAGLE-3 head and the target it was trained for."""

    hidden_size: int  # the head's width (the target's)
    num_attention_heads: int  # the layer's query heads
    num_key_value_heads: int  # the layer's KV heads (GQA)
    head_dim: int  # per head
    intermediate_size: int  # the layer's MLP width
    layer_ids: list[int]  # target layers whose inputs are fused (lo, mid, hi); == layer count: the last output
    target_hidden_size: int  # width of each target feature
    rms_norm_eps: float = 1e-6  # every RMSNorm's epsilon
    rope_theta: float = 10000.0  # the layer's RoPE base
    max_position_embeddings: int = 4096  # the target's context (written for the servers' configs)
    vocab_size: int = 0  # the target's vocabulary
    draft_vocab_size: int = 0  # rows of the head's LM head (d2t); 0 = the full target vocabulary
    # The layer's residual is hidden_norm(g) instead of g (the HF key vLLM and llama.cpp read; SGLang 0.5.23 always
    # adds g). A target's residual stream can be huge (the bundled one's rms is ~70 against embeddings' 0.09): with g
    # as the residual the layer's own contribution drowns in it, and the head trains slowly and generalises worse.
    norm_before_residual: bool = False
    target: dict[str, Any] = field(default_factory=dict)  # the target config fields (engine.heads.FINGERPRINT_KEYS)
    target_fingerprint: str = ""  # fingerprint(target)
    target_probe: list[float] = field(default_factory=list)  # weights_probe of the target it was trained on
    trained: dict[str, Any] = field(default_factory=dict)  # how it was made (training.eagle3 fills this)
    format: str = FORMAT

    @classmethod
    def for_target(
        cls,
        model: nn.Module,
        layer_ids: list[int] | None = None,
        draft_vocab_size: int = 0,
        norm_before_residual: bool = False,
    ) -> Eagle3Config:
        """The head shape that matches `model` (its width, heads, MLP width, RoPE base), fusing `layer_ids`."""
        c = model.config.get_text_config(decoder=True)
        hidden = int(c.hidden_size)
        heads = int(getattr(c, "num_attention_heads", None) or c.n_head)
        layers = int(c.num_hidden_layers)
        ids = list(layer_ids) if layer_ids is not None else default_layer_ids(layers)
        if len(ids) != 3 or not all(0 <= i <= layers for i in ids):
            raise ConfigError(f"EAGLE-3 fuses three target layers in [0, {layers}]; got layer ids {ids}")
        rope = getattr(c, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0)) if isinstance(rope, dict) else 10000.0)
        fields = target_config(model)
        return cls(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=int(getattr(c, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(c, "head_dim", None) or hidden // heads),
            intermediate_size=int(getattr(c, "intermediate_size", None) or 4 * hidden),
            layer_ids=ids,
            target_hidden_size=hidden,
            rms_norm_eps=float(getattr(c, "rms_norm_eps", None) or 1e-6),
            rope_theta=theta,
            max_position_embeddings=int(getattr(c, "max_position_embeddings", None) or 4096),
            vocab_size=int(c.vocab_size),
            draft_vocab_size=draft_vocab_size,
            norm_before_residual=norm_before_residual,
            target=fields,
            target_fingerprint=fingerprint(fields),
            target_probe=weights_probe(model),
        )

    @property
    def rows(self) -> int:
        """Rows of the LM head: the draft vocabulary's, or the target's."""
        return self.draft_vocab_size or self.vocab_size

    def hf_config(self) -> dict[str, Any]:
        """config.json in the HF EAGLE-3 layout (vLLM, SGLang, llama.cpp's converter), spectune's own block inside."""
        spectune = {k: v for k, v in asdict(self).items() if k in ("target", "target_fingerprint", "target_probe")}
        spectune.update(format=self.format, trained=self.trained, draft_vocab_size=self.draft_vocab_size)
        return {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": 1,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.rows,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "target_hidden_size": self.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": list(self.layer_ids),
            "norm_before_residual": self.norm_before_residual,
            "spectune": spectune,
        }

    @classmethod
    def from_hf(cls, data: dict[str, Any]) -> Eagle3Config:
        """The config of an HF EAGLE-3 config.json written by `hf_config` (KeyError/ValueError when it is not one)."""
        if data.get("num_hidden_layers") != 1 or "draft_vocab_size" not in data:
            raise ConfigError("not an EAGLE-3 head (it needs num_hidden_layers 1 and draft_vocab_size)")
        own = data.get("spectune") or {}
        if own.get("format") != FORMAT:
            raise ConfigError(f"format {own.get('format')!r}, expected {FORMAT!r} (a head trained by training.eagle3)")
        return cls(
            hidden_size=data["hidden_size"],
            num_attention_heads=data["num_attention_heads"],
            num_key_value_heads=data["num_key_value_heads"],
            head_dim=data["head_dim"],
            intermediate_size=data["intermediate_size"],
            layer_ids=list(data["eagle_aux_hidden_state_layer_ids"]),
            target_hidden_size=data["target_hidden_size"],
            rms_norm_eps=data["rms_norm_eps"],
            rope_theta=data["rope_theta"],
            max_position_embeddings=data["max_position_embeddings"],
            vocab_size=data["vocab_size"],
            draft_vocab_size=own.get("draft_vocab_size", data["draft_vocab_size"]),
            norm_before_residual=bool(data.get("norm_before_residual", False)),
            target=own.get("target", {}),
            target_fingerprint=own.get("target_fingerprint", ""),
            target_probe=own.get("target_probe", []),
            trained=own.get("trained", {}),
        )


class _Attention(nn.Module):
    def __init__(self, c: Eagle3Config) -> None:
        super().__init__()
        h, d = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(2 * h, c.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(2 * h, c.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(2 * h, c.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * d, h, bias=False)


class _Mlp(nn.Module):
    def __init__(self, c: Eagle3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)


class _Layer(nn.Module):
    """The decoder layer (HF name `midlayer`): attention over [embedding; g], then the MLP."""

    def __init__(self, c: Eagle3Config) -> None:
        super().__init__()
        self.input_layernorm = Norm(c.hidden_size, c.rms_norm_eps)
        self.hidden_norm = Norm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c)
        self.post_attention_layernorm = Norm(c.hidden_size, c.rms_norm_eps)
        self.mlp = _Mlp(c)


class Eagle3Module(ChainedHead):
    """One EAGLE-3 head; `bind(target)` attaches the target's embedding table (shared, never copied or saved)."""

    def __init__(self, config: Eagle3Config) -> None:
        super().__init__()
        self.config = c = config
        self.fc = nn.Linear(3 * c.target_hidden_size, c.hidden_size, bias=False)
        self.midlayer = _Layer(c)
        self.norm = Norm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.rows, bias=False)
        d2t = torch.arange(c.draft_vocab_size) if c.draft_vocab_size else torch.empty(0, dtype=torch.long)
        self.register_buffer("d2t", d2t)  # draft index -> target token id (empty: the full vocabulary)
        object.__setattr__(self, "_target", None)  # (embedding,) of the bound target, outside nn.Module's registry
        self.n_heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.rope = RopeTable(c.head_dim, c.rope_theta)

    def anchor(self) -> torch.Tensor:
        """fc's weight: the head's device and dtype."""
        return self.fc.weight

    @property
    def stored_width(self) -> int:
        """The three target features per position: 3 h_target."""
        return len(self.config.layer_ids) * self.config.target_hidden_size

    @property
    def taps(self) -> tuple[int, ...]:
        """The target layer inputs the head reads, in order (engine.forward's tap ids)."""
        return tuple(self.config.layer_ids)

    def bind(self, target: nn.Module) -> Eagle3Module:
        """Attach `target`'s embedding table (and check it is the model this head was trained for)."""
        check_target(self.config, target)
        object.__setattr__(self, "_target", (target.get_input_embeddings(),))
        return self

    @torch.inference_mode()
    def entry_rows(self, stored: torch.Tensor) -> torch.Tensor:
        """g = fc(features) of stored target features [n, 3 h_target]."""
        return self.fc(stored)

    def head_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary of prenorm states [.., h]."""
        return self.lm_head(self.norm(out))

    # -- inference: ChainedHead.step / step_many run `_block` over the layer's cache ---------------------------

    def _block(
        self,
        g: torch.Tensor,
        tokens: list[int],
        cos: torch.Tensor,
        sin: torch.Tensor,
        attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The layer over rows (g [n, h], next tokens) at the positions of cos/sin [n, d]: prenorm states [n, h]."""
        c, layer = self.config, self.midlayer
        attn, mlp, n, eps, d = layer.self_attn, layer.mlp, len(tokens), c.rms_norm_eps, c.head_dim
        emb = self.embed(torch.tensor(tokens, device=g.device)).to(g.dtype)
        normed = rms_norm(g, layer.hidden_norm.weight, eps)
        x = torch.cat([rms_norm(emb, layer.input_layernorm.weight, eps), normed], -1)  # [n, 2h]
        q = F.linear(x, attn.q_proj.weight).view(n, c.num_attention_heads, d).transpose(0, 1)  # [H, n, d]
        k = F.linear(x, attn.k_proj.weight).view(n, c.num_key_value_heads, d).transpose(0, 1)  # [KV, n, d]
        v = F.linear(x, attn.v_proj.weight).view(n, c.num_key_value_heads, d).transpose(0, 1)
        att = attend(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v)  # [H, n, d]
        residual = normed if c.norm_before_residual else g
        y = residual + F.linear(att.transpose(0, 1).reshape(n, -1), attn.o_proj.weight)
        a = rms_norm(y, layer.post_attention_layernorm.weight, eps)
        up = F.silu(F.linear(a, mlp.gate_proj.weight)) * F.linear(a, mlp.up_proj.weight)
        return y + F.linear(up, mlp.down_proj.weight)

    # -- training: chained steps over whole sequences (training-time test) -------------------------------------

    def _qkv(self, g: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor):
        """q [.., H, n, d], k and v [.., KV, n, d] of rows g [.., n, h] with next tokens [.., n] at `positions`."""
        c, layer = self.config, self.midlayer
        emb = self.embed(tokens).to(g.dtype)
        x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(g)], dim=-1)
        shape = g.shape[:-1]
        attn = layer.self_attn
        q = attn.q_proj(x).view(*shape, c.num_attention_heads, c.head_dim).transpose(-2, -3)
        k = attn.k_proj(x).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        v = attn.v_proj(x).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        cos, sin = self.rope.at(positions, g.dtype, g.device)
        cos, sin = cos.unsqueeze(-3), sin.unsqueeze(-3)  # broadcast over heads
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def _finish(self, g: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The layer after attention: o_proj plus the g (or hidden_norm(g)) residual, then the MLP residual.

        att [.., H, n, d].
        """
        layer = self.midlayer
        n = att.shape[-2]
        residual = layer.hidden_norm(g) if self.config.norm_before_residual else g
        y = residual + layer.self_attn.o_proj(att.transpose(-2, -3).reshape(*att.shape[:-3], n, -1))
        a = layer.post_attention_layernorm(y)
        return y + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(a)) * layer.mlp.up_proj(a))

    def chain_logits(
        self, features: torch.Tensor, tokens: torch.Tensor, depth: int, rows: list[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Draft-vocabulary logits of chained steps 1..depth for every start position (training-time test).

        features [B, T, 3 h_t] the target's fused-layer inputs, tokens [B, T] the sequence. Step 1 at start t
        reads (g_t = fc(f_t), x_{t+1}) and predicts x_{t+2}; step j reads step j - 1's prenorm state and x_{t+j}
        (the true token: teacher-forced inputs, the head's own states), sits at position t + j - 1, and attends
        to the real entries at positions <= t plus its own chain's earlier steps: what inference's cache holds
        then. Returns [B, T - 1 - j, Vd] per step j; with `rows` (per step a bool [B, T - 1 - j]) only those
        rows, flattened [N_j, Vd].
        """
        B, T, _ = features.shape
        device = features.device
        pos = torch.arange(T, device=device)
        g = self.fc(features[:, : T - 1])  # [B, T-1, h]: entry t for t = 0..T-2
        q, k, v = self._qkv(g, tokens[:, 1:], pos[: T - 1].expand(B, -1))
        real_k, real_v = k, v
        causal = pos[: T - 1, None] >= pos[None, : T - 1]
        out = self._finish(g, self._attend(q, k, v, causal))

        def head(o: torch.Tensor, j: int) -> torch.Tensor:
            kept = o[:, : T - 1 - j]
            return self.head_logits(kept if rows is None else kept[rows[j - 1]])

        logits = [head(out, 1)]
        chain_k: list[torch.Tensor] = []
        chain_v: list[torch.Tensor] = []
        for j in range(2, depth + 1):
            n = T - 1 - (j - 1)
            g = out[:, :n]
            q, k, v = self._qkv(g, tokens[:, j : j + n], pos[j - 1 : j - 1 + n].expand(B, -1))
            chain_k = [ck[:, :, :n] for ck in chain_k] + [k]
            chain_v = [cv[:, :, :n] for cv in chain_v] + [v]
            keys = torch.cat([real_k, *chain_k], dim=-2)
            values = torch.cat([real_v, *chain_v], dim=-2)
            same = torch.eye(n, dtype=torch.bool, device=device)
            mask = torch.cat([causal[:n], *([same] * len(chain_k))], dim=-1)
            out = self._finish(g, self._attend(q, keys, values, mask))
            logits.append(head(out, j))
        return logits


def check_target(config: Eagle3Config, target: nn.Module) -> None:
    """Eagle3MismatchError naming the differing fields when `target` is not the model `config` was trained for."""
    check_head_target("EAGLE-3 head", config.target, config.target_probe, target)
    layers = int(target.config.get_text_config(decoder=True).num_hidden_layers)
    if any(not 0 <= i <= layers for i in config.layer_ids):
        raise Eagle3MismatchError(f"EAGLE-3 head reads layers {config.layer_ids}; the target has {layers}")


def save_eagle3(module: Eagle3Module, folder: str | Path) -> Path:
    """Write the HF EAGLE-3 folder: config.json and model.safetensors (d2t as offsets, t2d; no embedding)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    c = module.config
    (folder / CONFIG_FILE).write_text(json.dumps(c.hf_config(), indent=2) + "\n")
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items() if k != "d2t"}
    if module.d2t.numel():  # a full-vocabulary head has no maps (vLLM refuses d2t on one; llama.cpp, SGLang: optional)
        d2t = module.d2t.detach().cpu()
        state["d2t"] = (d2t - torch.arange(d2t.numel())).to(torch.int64)  # HF convention: target id = i + d2t[i]
        t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
        t2d[d2t] = True
        state["t2d"] = t2d
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})
    return folder


def read_eagle3_config(folder: str | Path) -> Eagle3Config:
    """The config of an EAGLE-3 folder; a missing or broken file names the file and the problem."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"EAGLE-3 folder {Path(folder)} has no {CONFIG_FILE} (train one: python -m training.eagle3)"
        )
    try:
        return Eagle3Config.from_hf(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{path}: not a spectune EAGLE-3 config ({exc})") from None


def load_eagle3(folder: str | Path, target: nn.Module) -> Eagle3Module:
    """The EAGLE-3 head in `folder`, on the target's device and dtype and bound to it (checked against it)."""
    from safetensors.torch import load_file

    config = read_eagle3_config(folder)
    check_target(config, target)
    path = Path(folder) / WEIGHTS_FILE
    try:
        state = load_file(str(path))
    except Exception as exc:  # safetensors raises several kinds; the message names the file
        raise ConfigError(f"{path}: cannot read EAGLE-3 weights ({exc})") from None
    offsets = state.pop("d2t", None)
    state.pop("t2d", None)
    module = Eagle3Module(config)
    if config.draft_vocab_size:
        if offsets is None or offsets.numel() != config.draft_vocab_size:
            raise ConfigError(f"{path}: d2t must hold {config.draft_vocab_size} entries")
        state["d2t"] = offsets.long() + torch.arange(offsets.numel())
    else:
        state["d2t"] = module.d2t
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ConfigError(f"{path}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
    weight = target.get_input_embeddings().weight
    module = module.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
    return module.bind(target)


def random_eagle3(
    target: nn.Module,
    seed: int = 0,
    layer_ids: list[int] | None = None,
    draft_vocab: list[int] | None = None,
    scale: float = 1.0,
    norm_before_residual: bool = False,
) -> Eagle3Module:
    """A randomly initialised head bound to `target` (tests, and training's starting point)."""
    config = Eagle3Config.for_target(
        target, layer_ids, draft_vocab_size=len(draft_vocab or []), norm_before_residual=norm_before_residual
    )
    torch.manual_seed(seed)
    module = Eagle3Module(config)
    with torch.no_grad():
        if draft_vocab:
            module.d2t.copy_(torch.tensor(sorted(draft_vocab)))
        for p in module.parameters():
            if p.dim() == 2:
                p.normal_(0.0, scale / math.sqrt(p.shape[1]))
    weight = target.get_input_embeddings().weight
    return module.to(device=weight.device, dtype=weight.dtype).eval().bind(target)
