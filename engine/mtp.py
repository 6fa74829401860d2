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
    FINGERPRINT_KEYS,
    ChainedHead,
    HeadCache,
    HeadMismatchError,
    Norm,
    RopeTable,
    check_head_target,
    fingerprint,
    probes_match,
    target_config,
    weights_probe,
)
from engine.llama import rms_norm, rotate_half

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "spectune-mtp/1"
MtpMismatchError = HeadMismatchError  # the name tests and callers know
MtpCache = HeadCache
_Norm = Norm
__all__ = ["FINGERPRINT_KEYS", "fingerprint", "probes_match", "target_config", "weights_probe"]  # re-exported


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


class MtpModule(ChainedHead):
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
        self.n_heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.rope = RopeTable(c.head_dim, c.rope_theta)

    def anchor(self) -> torch.Tensor:
        """eh_proj's weight: the module's device and dtype."""
        return self.eh_proj.weight

    @property
    def stored_width(self) -> int:
        """The target's trunk output per position: h."""
        return self.config.hidden_size

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

    def head_logits(self, g: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the target's if d2t is empty) of block outputs g [.., h]."""
        return F.linear(self.shared_head.norm(g), self._head_weight, self._head_bias)

    # -- maths shared by inference and training -----------------------------------------------------------------

    def _input(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """eh_proj([enorm(embed(x_{t+1})); hnorm(h_t)]) for hidden [.., h] and next tokens [..]."""
        emb = self.embed(tokens).to(hidden.dtype)
        return self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [.., H, n, d], k and v [.., KV, n, d] of rows x [.., n, h] at `positions` [.., n]."""
        c, attn = self.config, self.self_attn
        a = self.input_layernorm(x)
        shape = x.shape[:-1]
        q = attn.q_proj(a).view(*shape, c.num_attention_heads, c.head_dim).transpose(-2, -3)
        k = attn.k_proj(a).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        v = attn.v_proj(a).view(*shape, c.num_key_value_heads, c.head_dim).transpose(-2, -3)
        cos, sin = self.rope.at(positions, x.dtype, x.device)
        cos, sin = cos.unsqueeze(-3), sin.unsqueeze(-3)  # broadcast over heads
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    def _finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The block after attention: o_proj residual, then the MLP residual. att [.., H, n, d] -> [.., n, h]."""
        n = att.shape[-2]
        merged = att.transpose(-2, -3).reshape(*att.shape[:-3], n, -1)
        x = x + self.self_attn.o_proj(merged)
        a = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(a)) * self.mlp.up_proj(a))

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


def check_target(config: MtpConfig, target: nn.Module) -> None:
    """MtpMismatchError naming the differing fields when `target` is not the model `config` was trained for."""
    check_head_target("MTP module", config.target, config.target_probe, target)


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
            raise ConfigError(f"format {data.get('format')!r}, expected {FORMAT!r}")
        return MtpConfig(**data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not a spectune MTP config ({exc})") from None


def load_mtp(folder: str | Path, target: nn.Module) -> MtpModule:
    """The MTP module in `folder`, on the target's device and dtype and bound to it (checked against it)."""
    from safetensors.torch import load_file

    config = read_mtp_config(folder)
    check_target(config, target)
    path = Path(folder) / WEIGHTS_FILE
    try:
        state = load_file(str(path))
    except Exception as exc:  # safetensors raises several kinds; the message names the file
        raise ConfigError(f"{path}: cannot read MTP weights ({exc})") from None
    module = MtpModule(config)
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ConfigError(f"{path}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
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
