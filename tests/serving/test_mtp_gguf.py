"""serving/mtp_gguf.py without a binary: the MiMo-V2 folder it writes, and the pairs it refuses.

The folder must carry what llama.cpp's converter and mimo2 graph need (module docstring): fused q/k/v in
[Q | K | V] row order, an explicit LM head, the module under model.mtp.layers.0 with its own head norm,
the eps under the key the converter reads, a model_type transformers does not know. The GGUF and the
server run on it are checked in test_export_on_server.py and test_crossengine.py (binary needed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from serving.mtp_gguf import MODEL_TYPE, main, write_mimo2_folder

MODELS = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"


def test_the_folder_holds_the_trunk_and_the_module_as_mimo2_expects(tmp_path):
    out = write_mimo2_folder(MODELS / "target", MODELS / "mtp", tmp_path / "m")
    weights = load_file(str(out / "model.safetensors"))
    trunk = load_file(str(MODELS / "target" / "model.safetensors"))
    module = load_file(str(MODELS / "mtp" / "model.safetensors"))
    fused = weights["model.layers.2.self_attn.qkv_proj.weight"]
    parts = [trunk[f"model.layers.2.self_attn.{n}_proj.weight"] for n in "qkv"]
    assert torch.equal(fused, torch.cat(parts)) and "model.layers.2.self_attn.q_proj.weight" not in weights
    assert torch.equal(weights["lm_head.weight"], trunk["model.embed_tokens.weight"])
    layer = "model.mtp.layers.0."
    assert torch.equal(weights[layer + "eh_proj.weight"], module["eh_proj.weight"])
    assert torch.equal(weights[layer + "shared_head.norm.weight"], module["shared_head.norm.weight"])
    assert torch.equal(
        weights[layer + "self_attn.qkv_proj.weight"],
        torch.cat([module[f"self_attn.{n}_proj.weight"] for n in "qkv"]),
    )
    config = json.loads((out / "config.json").read_text())
    target = json.loads((MODELS / "target" / "config.json").read_text())
    assert config["architectures"] == ["MiMoV2FlashForCausalLM"] and config["model_type"] == MODEL_TYPE
    assert config["layernorm_epsilon"] == target["rms_norm_eps"] and config["n_routed_experts"] == 0
    assert config["hybrid_layer_pattern"] == [0] * target["num_hidden_layers"]
    assert config["sliding_window"] >= target["max_position_embeddings"]
    assert (out / "tokenizer.json").is_file()


def test_a_module_for_another_target_or_with_a_draft_vocabulary_is_refused(tmp_path, capsys):
    code = main(["--target", str(MODELS / "draft"), "--mtp", str(MODELS / "mtp"), "--out", str(tmp_path / "x.gguf")])
    assert code == 2 and "trained for another target" in capsys.readouterr().err
    module = shutil.copytree(MODELS / "mtp", tmp_path / "mtp")
    config = json.loads((module / "config.json").read_text())
    (module / "config.json").write_text(json.dumps({**config, "draft_vocab_size": 1024}))
    with pytest.raises(ValueError, match="draft vocabulary"):
        write_mimo2_folder(MODELS / "target", module, tmp_path / "m")
    assert not (tmp_path / "x.gguf").exists()
