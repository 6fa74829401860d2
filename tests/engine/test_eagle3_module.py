"""The EAGLE-3 head (engine/eagle3.py): training maths == inference maths, taps, its HF folder, target checks.

`chain_logits` (the training-time test over whole sequences, what training.eagle3 optimises) must give, for
every start position and chain step, exactly the logits the `eagle3` drafter computes step by step over its
layer cache. float64 models, so equality is to round-off.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from engine.eagle3 import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    Eagle3MismatchError,
    default_layer_ids,
    load_eagle3,
    random_eagle3,
    read_eagle3_config,
    save_eagle3,
)
from engine.engine import Engine, EngineConfig
from engine.testing import random_model

VOCAB = 96
DEPTH = 3
TOL = {"atol": 1e-10, "rtol": 1e-10}
IDS = [0, 1, 2]  # a 2-layer target: the embeddings, the first layer's output, the trunk output


@pytest.fixture(scope="module")
def target():
    return random_model("llama", dtype=torch.float64, seed=3)


def sequences(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def features(target, tokens: list[int], taps=tuple(IDS)) -> torch.Tensor:
    _, tapped = target.forward(target.forward.new_cache(), tokens, hidden=taps)
    return tapped


def draft_vocab(n: int = 40, seed: int = 1) -> list[int]:
    return torch.randperm(VOCAB, generator=torch.Generator().manual_seed(seed))[:n].tolist()


@pytest.mark.parametrize(("vocab", "normed"), [("full", False), ("draft", False), ("draft", True)])
def test_chain_logits_equal_incremental_inference(target, vocab, normed):
    """chain_logits step j's row t == ChainedHead.step run incrementally: entries 0..t from fc(real features),
    then chain steps fed the layer's own prenorm state and the TRUE next tokens (g or hidden_norm(g) residual)."""
    module = random_eagle3(
        target.model,
        seed=5,
        layer_ids=IDS,
        draft_vocab=draft_vocab() if vocab == "draft" else None,
        norm_before_residual=normed,
    )
    batch, length = 2, 12
    tokens = sequences(batch, length)
    feats = torch.stack([features(target, row.tolist()) for row in tokens])  # [B, T, 3h]
    with torch.no_grad():
        chained = module.chain_logits(feats, tokens, DEPTH)
    assert [tuple(c.shape) for c in chained] == [
        (batch, length - 1 - j, module.config.rows) for j in range(1, DEPTH + 1)
    ]
    compared = 0
    for b in range(batch):
        seq = tokens[b].tolist()
        for t in range(length - 2):
            cache = module.new_cache()
            out = module.step(cache, module.entry_rows(feats[b, : t + 1]), seq[1 : t + 2])[-1:]
            for j in range(1, DEPTH + 1):
                if t >= length - 1 - j:
                    break
                if j > 1:
                    out = module.step(cache, out, [seq[t + j]])
                torch.testing.assert_close(
                    module.head_logits(out)[0], chained[j - 1][b, t], **TOL, msg=f"start {t}, step {j}, row {b}"
                )
                compared += 1
    assert compared == batch * sum(length - 1 - j for j in range(1, DEPTH + 1))


def test_chain_reads_its_own_states_and_all_three_layers(target):
    """Step 2 reads step 1's output (the training-time test is real), and each fused layer changes the result."""
    module = random_eagle3(target.model, seed=5, layer_ids=IDS)
    tokens = sequences(1, 10)
    feats = features(target, tokens[0].tolist())[None]
    with torch.no_grad():
        step1, step2 = module.chain_logits(feats, tokens, 2)
        torch.testing.assert_close(step1, module.chain_logits(feats, tokens, 1)[0], **TOL)
        for k in range(3):  # zero one layer's block of the input: the logits move
            cut = feats.clone()
            cut[..., k * 64 : (k + 1) * 64] = 0
            assert not torch.allclose(module.chain_logits(cut, tokens, 1)[0], step1)
        module.midlayer.mlp.down_proj.weight.mul_(2.0)
        step1b, step2b = module.chain_logits(feats, tokens, 2)
    assert not torch.allclose(step2, step2b) and not torch.allclose(step1, step1b)


def test_taps_are_the_layer_inputs_transformers_reports(target):
    """Tap i == transformers' hidden_states[i] (the input of layer i), tap n == the last layer's output before the
    final norm, on the engine's forward and on transformers' own (hooks)."""
    tokens = sequences(1, 9, seed=4)[0].tolist()
    out = target.model(input_ids=torch.tensor([tokens]), output_hidden_states=True)
    states = out.hidden_states  # embeddings, after layer 1, ... (the last one after the final norm)
    tapped = features(target, tokens, taps=(0, 1))
    torch.testing.assert_close(tapped, torch.cat([states[0][0], states[1][0]], dim=-1), **TOL)
    trunk = features(target, tokens, taps=True)
    torch.testing.assert_close(features(target, tokens, taps=(2,)), trunk, **TOL)
    from engine.forward import TransformersForward

    hf = TransformersForward(target.model)
    torch.testing.assert_close(hf(hf.new_cache(), tokens, hidden=(0, 1, 2))[1], features(target, tokens), **TOL)


def test_default_layer_ids_never_read_past_the_last_layer_input():
    """llama.cpp exposes the last layer's output only for MTP models, so defaults stay below the layer count."""
    assert default_layer_ids(32) == [2, 16, 29]
    assert default_layer_ids(4) == [1, 2, 3]
    assert all(max(default_layer_ids(n)) < n for n in range(1, 40))


@pytest.mark.parametrize("vocab", ["full", "draft"])
def test_save_load_round_trip_in_the_hf_layout(target, tmp_path, vocab):
    """The folder is the HF EAGLE-3 layout (midlayer.*, fc, lm_head, d2t offsets + t2d with a draft vocabulary,
    none without one) and loads back to a head that drafts the same tokens."""
    chosen = draft_vocab() if vocab == "draft" else None
    module = random_eagle3(target.model, seed=7, layer_ids=IDS, draft_vocab=chosen)
    save_eagle3(module, tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["eagle_aux_hidden_state_layer_ids"] == IDS and config["draft_vocab_size"] == module.config.rows
    tensors = load_file(str(tmp_path / WEIGHTS_FILE))
    assert tensors["fc.weight"].shape == (64, 192) and tensors["midlayer.self_attn.q_proj.weight"].shape[1] == 128
    assert "embed_tokens.weight" not in tensors
    if chosen:
        ids = sorted(chosen)
        assert (tensors["d2t"] + torch.arange(len(ids))).tolist() == ids
        assert tensors["t2d"].nonzero().flatten().tolist() == ids
    else:
        assert "d2t" not in tensors and "t2d" not in tensors
    loaded = load_eagle3(tmp_path, target.model)
    assert torch.equal(loaded.d2t, module.d2t)
    for (name, a), (_, b) in zip(module.state_dict().items(), loaded.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name, atol=0, rtol=0)
    prompt = sequences(1, 12, seed=9)[0].tolist()
    runs = [
        Engine(target, EngineConfig(drafter="eagle3", gamma=3), eagle3=m).generate(prompt, 20) for m in (module, loaded)
    ]
    assert runs[0].tokens == runs[1].tokens and runs[0].stats.drafted == runs[1].stats.drafted > 0


def test_loading_for_another_target_names_the_field(target, tmp_path):
    save_eagle3(random_eagle3(target.model, seed=1, layer_ids=IDS), tmp_path)
    other = random_model("llama", dtype=torch.float64, seed=3, hidden=32)
    with pytest.raises(Eagle3MismatchError, match="hidden_size: trained for 64, target has 32"):
        load_eagle3(tmp_path, other.model)
    same_shape = random_model("llama", dtype=torch.float64, seed=4)
    with pytest.raises(Eagle3MismatchError, match="same shape but other weights"):
        load_eagle3(tmp_path, same_shape.model)


def test_broken_folders_name_the_file(target, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no config\.json.*training\.eagle3"):
        read_eagle3_config(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(ValueError, match=r"config.json: not a spectune EAGLE-3 config \(not an EAGLE-3 head"):
        read_eagle3_config(tmp_path)
    save_eagle3(random_eagle3(target.model, seed=1, layer_ids=IDS), tmp_path)
    (tmp_path / WEIGHTS_FILE).write_bytes(b"broken")
    with pytest.raises(ValueError, match=r"model\.safetensors: cannot read EAGLE-3 weights"):
        load_eagle3(tmp_path, target.model)


def test_engine_refuses_eagle3_without_a_head(target):
    with pytest.raises(ValueError, match=r"needs an EAGLE-3 head .*training\.eagle3"):
        Engine(target, EngineConfig(drafter="eagle3"))


def test_norm_before_residual_is_the_residual_the_layer_adds_and_survives_the_folder(target, tmp_path):
    """With norm_before_residual the layer adds hidden_norm(g): the same weights draft differently, and the key
    (the one vLLM and llama.cpp's converter read) round-trips through config.json."""
    plain = random_eagle3(target.model, seed=3, layer_ids=IDS)
    normed = random_eagle3(target.model, seed=3, layer_ids=IDS, norm_before_residual=True)
    tokens = sequences(1, 10, seed=2)
    feats = features(target, tokens[0].tolist())[None]
    with torch.no_grad():
        for name, p in plain.state_dict().items():
            torch.testing.assert_close(p, normed.state_dict()[name], atol=0, rtol=0)
        assert not torch.allclose(plain.chain_logits(feats, tokens, 1)[0], normed.chain_logits(feats, tokens, 1)[0])
        g = normed.fc(feats[0])
        torch.testing.assert_close(  # zero attention and MLP: the prenorm state is the residual itself
            normed.midlayer.hidden_norm(g)[:3], _layer_without_updates(normed, feats, tokens)[0, :3], **TOL
        )
    save_eagle3(normed, tmp_path)
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["norm_before_residual"] is True
    assert load_eagle3(tmp_path, target.model).config.norm_before_residual is True
    save_eagle3(plain, tmp_path / "plain")
    assert load_eagle3(tmp_path / "plain", target.model).config.norm_before_residual is False


def _layer_without_updates(module, feats, tokens):
    """The layer's prenorm output with o_proj and down_proj zeroed (what is left is the residual)."""
    import copy

    bare = copy.deepcopy(module)
    bare.midlayer.self_attn.o_proj.weight.zero_()
    bare.midlayer.mlp.down_proj.weight.zero_()
    captured = {}
    original = bare._finish

    def spy(g, att):
        captured["out"] = original(g, att)
        return captured["out"]

    bare._finish = spy
    bare.chain_logits(feats, tokens, 1)
    return captured["out"]
