"""A Llama target and its spectune MTP module as one GGUF that llama-server runs with `--spec-type draft-mtp`.

    python -m serving.mtp_gguf --target models/spectune-tiny/target --mtp models/spectune-tiny/mtp --out X.gguf

llama.cpp runs MTP layers stored inside the target's own GGUF, for architectures that have them. Its `mimo2`
(MiMo-V2) is one that expresses a plain Llama exactly: with every layer full attention, no experts, value
scale 1 and rotary over the whole head, its trunk is RMSNorm, NeoX RoPE (HF's rotate_half), GQA and SwiGLU,
and its MTP layer is the DeepSeek-V3 shape spectune trains (enorm(emb) ++ hnorm(h) -> eh_proj -> one block ->
shared_head.norm -> the target's own head). So the target is written out as a MiMo-V2 Hugging Face folder
with the module as `model.mtp.layers.0`, and llama.cpp's own converter turns that into a GGUF. What that
takes, each a silent trap otherwise:
- q/k/v fused into `qkv_proj` (llama.cpp asserts it for MTP layers; the converter's --fuse-qkv does not reach them);
- `lm_head.weight` written out (mimo2 has no tied-embedding fallback);
- `layernorm_epsilon` = the model's RMSNorm eps (the converter reads that key, default 1e-5);
- a `model_type` transformers does not know (else transformers fills in MiMo's rope base, partial rotary,
  value scale and expert counts);
- `sliding_window` >= any context (only the MTP layer is marked sliding; at that size it is full attention);
- the converter told that one MTP layer is there (it assumes MiMo-V2's three).
One difference stays: llama.cpp's MTP cache starts with an entry for the first token paired with a zero hidden
state, which spectune's module never saw in training; it changes a few drafts early in a context (acceptance,
never the output). A module with a draft vocabulary (d2t) cannot be expressed and is refused.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from serving.gguf import TYPES, export_gguf, read_json
from serving.gguf_cache import cache_file

ARCHITECTURE = "MiMoV2FlashForCausalLM"
MODEL_TYPE = "spectune_mimo2"  # unknown to transformers on purpose (module docstring)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja")
# The module's target-shape record (engine/mtp.py MtpConfig.target) against the target's config.json.
_SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")


def _rope_theta(config: dict[str, Any]) -> float:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", None):
        raise ConfigError(f"rope type {kind!r}: only plain RoPE maps onto mimo2 here")
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def check_pair(target: Path, mtp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The target's and the module's configs, after checking they can be written as one mimo2 model."""
    t, m = read_json(target / "config.json"), read_json(mtp / "config.json")
    if t.get("model_type") != "llama":
        raise ConfigError(f"{target}: model_type {t.get('model_type')!r}; the mimo2 export takes a Llama target")
    if t.get("attention_bias") or t.get("mlp_bias"):
        raise ConfigError(f"{target}: biases in attention or MLP have no place in mimo2")
    if m.get("draft_vocab_size"):
        raise ConfigError(f"{mtp}: a draft vocabulary (draft_vocab_size={m['draft_vocab_size']}) cannot be expressed")
    differs = [k for k in _SHAPE_KEYS if (m.get("target") or {}).get(k) != t.get(k)]
    if differs:
        raise ConfigError(f"{mtp}: trained for another target ({', '.join(differs)} differ from {target})")
    if float(m["rms_norm_eps"]) != float(t["rms_norm_eps"]):
        raise ConfigError("the module's RMSNorm eps differs from the target's; mimo2 has one eps for every norm")
    if int(m["intermediate_size"]) != int(t["intermediate_size"]):
        raise ConfigError("the module's MLP width differs from the target's; mimo2's MTP layer takes the trunk's")
    _rope_theta(t)
    return t, m


def _fused(weights: dict[str, Any], prefix: str) -> Any:
    import torch

    parts = [weights[f"{prefix}self_attn.{n}_proj.weight"] for n in ("q", "k", "v")]
    return torch.cat(parts, dim=0).contiguous()  # rows [Q | K | V], as mimo2's graph slices them


def write_mimo2_folder(target: str | Path, mtp: str | Path, out: str | Path) -> Path:
    """Write the target + module as a MiMo-V2 Hugging Face folder at `out` (config.json, weights, tokenizer)."""
    from safetensors.torch import load_file, save_file

    target, mtp, out = Path(target), Path(mtp), Path(out)
    t, m = check_pair(target, mtp)
    trunk = load_file(str(target / "model.safetensors"))
    module = load_file(str(mtp / "model.safetensors"))
    weights: dict[str, Any] = {}
    for name, tensor in trunk.items():
        if ".self_attn.k_proj." in name or ".self_attn.v_proj." in name:
            continue
        if ".self_attn.q_proj." in name:
            prefix = name[: name.index("self_attn.")]
            weights[f"{prefix}self_attn.qkv_proj.weight"] = _fused(trunk, prefix)
        else:
            weights[name] = tensor.contiguous()
    weights.setdefault("lm_head.weight", trunk["model.embed_tokens.weight"].clone())  # tied in HF: written out
    layer = "model.mtp.layers.0."
    for name in ("enorm", "hnorm", "input_layernorm", "post_attention_layernorm"):
        weights[f"{layer}{name}.weight"] = module[f"{name}.weight"]
    weights[f"{layer}eh_proj.weight"] = module["eh_proj.weight"]  # columns [emb | hidden]: llama.cpp's order
    weights[f"{layer}self_attn.qkv_proj.weight"] = _fused(module, "")
    weights[f"{layer}self_attn.o_proj.weight"] = module["self_attn.o_proj.weight"]
    for name in ("gate_proj", "up_proj", "down_proj"):
        weights[f"{layer}mlp.{name}.weight"] = module[f"mlp.{name}.weight"]
    weights[f"{layer}shared_head.norm.weight"] = module["shared_head.norm.weight"]  # else the trunk's norm is used
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    layers, head_dim = (
        int(t["num_hidden_layers"]),
        int(t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]),
    )
    eps = float(t["rms_norm_eps"])
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": t["vocab_size"],
        "hidden_size": t["hidden_size"],
        "intermediate_size": t["intermediate_size"],
        "moe_intermediate_size": t["intermediate_size"],  # read by the converter, unused without experts
        "n_routed_experts": 0,
        "topk_method": "noaux_tc",
        "num_hidden_layers": layers,
        "hybrid_layer_pattern": [0] * layers,  # every trunk layer full attention
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": head_dim,
        "v_head_dim": head_dim,
        "swa_num_attention_heads": m["num_attention_heads"],  # the MTP layer is written as the sliding kind
        "swa_num_key_value_heads": m["num_key_value_heads"],
        "swa_head_dim": m["head_dim"],
        "swa_v_head_dim": m["head_dim"],
        "sliding_window": 1 << 20,  # >= any -c: the MTP layer's window is then full attention
        "rope_theta": _rope_theta(t),
        "swa_rope_theta": float(m["rope_theta"]),
        "partial_rotary_factor": 1.0,
        "rms_norm_eps": eps,
        "layernorm_epsilon": eps,  # the key the converter reads for every norm
        "attention_value_scale": 1.0,
        "max_position_embeddings": t["max_position_embeddings"],
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "bos_token_id": t.get("bos_token_id"),
        "eos_token_id": t.get("eos_token_id"),
        "pad_token_id": t.get("pad_token_id"),
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copy(target / name, out / name)
    return out


def export_mtp_gguf(target: str | Path, mtp: str | Path, out: str | Path, kind: str = "f32") -> Path:
    """Target + MTP module -> one mimo2 GGUF at `out` (through a temporary MiMo-V2 folder); returns it."""
    with tempfile.TemporaryDirectory(prefix="spectune-mimo2-") as tmp:
        folder = write_mimo2_folder(target, mtp, Path(tmp) / "model")
        return export_gguf(folder, out, kind, mtp_layers=1)


def cached_mtp_gguf(target: str | Path, mtp: str | Path, kind: str = "f32") -> Path:
    """export_mtp_gguf once per (target, module, type), kept in the cache beside the plain GGUFs."""
    out = cache_file("mimo2", [target, mtp], kind)
    return out if out.is_file() else export_mtp_gguf(target, mtp, out, kind)


def main(argv: list[str] | None = None) -> int:
    """Command line; prints the written file."""
    parser = argparse.ArgumentParser(prog="python -m serving.mtp_gguf", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the target's Hugging Face folder (Llama)")
    parser.add_argument("--mtp", required=True, help="the MTP module folder (python -m training.mtp writes one)")
    parser.add_argument("--out", required=True, help="the .gguf file to write")
    parser.add_argument("--type", default="f32", choices=TYPES, help="weight type (default f32: exact streams)")
    args = parser.parse_args(argv)
    try:
        print(export_mtp_gguf(args.target, args.mtp, args.out, args.type))
    except (FileNotFoundError, ValueError, RuntimeError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
