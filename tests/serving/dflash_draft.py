"""A tiny random DFlash draft for the bundled target, as llama.cpp's converter takes it (tests only).

spectune neither trains nor runs DFlash drafts; the `dflash` / `dspark` drafters hand a draft GGUF the user
brings to llama-server. To test that path on the real server, this writes the smallest draft the pinned
converter accepts (`DFlashDraftModel`: one Qwen3-style layer over three of the target's hidden states, a
block of 4, the last token id as the mask) with random weights, and converts it with `--target-model-dir`.
Its drafts are nonsense, so nearly all are rejected: the stream must still be plain greedy's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from serving.gguf import export_gguf


def write_dflash_folder(target: Path, out: Path, seed: int = 0) -> Path:
    """The Hugging Face folder of a random DFlash draft shaped for `target` (a Llama-style config.json)."""
    config = json.loads((target / "config.json").read_text())
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd, ff, vocab = config.get("head_dim") or h // heads, config["intermediate_size"], config["vocab_size"]
    # outputs of target layers 0..2 (llama.cpp reads them as the inputs of layers 1..3: the last layer's own
    # output is not one it can extract)
    layers = list(range(min(3, config["num_hidden_layers"] - 1)))
    out.mkdir(parents=True, exist_ok=True)
    draft = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": h,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "intermediate_size": ff,
        "num_hidden_layers": 1,
        "vocab_size": vocab,
        "rms_norm_eps": config.get("rms_norm_eps", 1e-6),
        "rope_theta": 10000.0,
        "max_position_embeddings": config.get("max_position_embeddings", 4096),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "dflash_config": {"block_size": 4, "target_layer_ids": layers, "mask_token_id": vocab - 1},
    }
    (out / "config.json").write_text(json.dumps(draft, indent=1))
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    p = "model.layers.0."
    tensors = {
        "model.fc.weight": rand(h, h * len(layers)),
        "model.hidden_norm.weight": torch.ones(h),
        "model.norm.weight": torch.ones(h),
        "lm_head.weight": rand(vocab, h),
        p + "input_layernorm.weight": torch.ones(h),
        p + "post_attention_layernorm.weight": torch.ones(h),
        p + "self_attn.q_proj.weight": rand(heads * hd, h),
        p + "self_attn.k_proj.weight": rand(kv * hd, h),
        p + "self_attn.v_proj.weight": rand(kv * hd, h),
        p + "self_attn.o_proj.weight": rand(h, heads * hd),
        p + "self_attn.q_norm.weight": torch.ones(hd),
        p + "self_attn.k_norm.weight": torch.ones(hd),
        p + "mlp.gate_proj.weight": rand(ff, h),
        p + "mlp.up_proj.weight": rand(ff, h),
        p + "mlp.down_proj.weight": rand(h, ff),
    }
    save_file(tensors, str(out / "model.safetensors"))
    return out


def random_dflash_gguf(target: Path, out_dir: Path) -> Path:
    """A random DFlash draft for `target`, converted to GGUF by the pinned converter (needs it installed)."""
    folder = write_dflash_folder(target, out_dir / "dflash-hf")
    return export_gguf(folder, out_dir / "dflash.gguf", "f32", extra_args=["--target-model-dir", str(target)])
