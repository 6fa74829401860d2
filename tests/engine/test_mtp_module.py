"""The MTP module (engine/mtp.py): training maths == inference maths, its folder, target checks, draft vocabularies.

`chain_logits` (teacher-forced chains over whole sequences, what training.mtp optimises) must give, for every
start position and chain step, exactly the logits the `mtp` drafter computes step by step over its block cache,
or a trained module would draft something other than what it was trained on. float64 models, so equality is
to round-off.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from engine.drafters import DraftContext, DrafterResources, resolve_drafter
from engine.drafters.base import Verified
from engine.engine import Engine, EngineConfig
from engine.mtp import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    MtpMismatchError,
    MtpModule,
    load_mtp,
    random_mtp,
    read_mtp_config,
    save_mtp,
)
from engine.sampling import SamplingParams
from engine.testing import random_model

VOCAB = 96
DEPTH = 3
TOL = {"atol": 1e-10, "rtol": 1e-10}


@pytest.fixture(scope="module")
def target():
    return random_model("llama", dtype=torch.float64, seed=3)


def sequences(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def trunk_outputs(target, tokens: list[int]) -> torch.Tensor:
    """The target's trunk output (last decoder layer, before the final norm) of every token [T, h], fresh cache."""
    _, hidden = target.forward(target.forward.new_cache(), tokens, hidden=True)
    return hidden


def draft_vocab(n: int = 40, seed: int = 1) -> list[int]:
    return torch.randperm(VOCAB, generator=torch.Generator().manual_seed(seed))[:n].tolist()


# -- (a) training maths == inference maths -----------------------------------------------------------------------


@pytest.mark.parametrize("vocab", ["full", "draft"])
def test_chain_logits_equal_incremental_inference(target, vocab):
    """chain_logits step j's row t == MtpModule.step run incrementally: entries 0..t from the real hidden states,
    then chain steps fed the block's own output and the TRUE next tokens x_{t+2}, ..., x_{t+j}."""
    module = random_mtp(target.model, seed=5, draft_vocab=draft_vocab() if vocab == "draft" else None)
    batch, length = 2, 12
    tokens = sequences(batch, length)
    hidden = torch.stack([trunk_outputs(target, row.tolist()) for row in tokens])  # [B, T, h]
    with torch.no_grad():
        chained = module.chain_logits(hidden, tokens, DEPTH)
    rows = module.config.draft_vocab_size or VOCAB
    assert [tuple(c.shape) for c in chained] == [(batch, length - 1 - j, rows) for j in range(1, DEPTH + 1)]
    compared = 0
    for b in range(batch):
        seq = tokens[b].tolist()
        for t in range(length - 2):
            cache = module.new_cache()
            # entries 0..t: (h_s, x_{s+1}) for s <= t; the last output predicts x_{t+2}
            g = module.step(cache, hidden[b, : t + 1], seq[1 : t + 2])[-1:]
            for j in range(1, DEPTH + 1):
                if t >= length - 1 - j:  # no target x_{t+1+j} in the sequence
                    break
                if j > 1:
                    g = module.step(cache, g, [seq[t + j]])  # the true token x_{t+j}, not a proposal
                torch.testing.assert_close(
                    module.head_logits(g)[0], chained[j - 1][b, t], **TOL, msg=f"start {t}, step {j}, row {b}"
                )
                compared += 1
    assert compared == batch * sum(length - 1 - j for j in range(1, DEPTH + 1))


def test_chain_logits_rows_select_the_same_logits(target):
    """With `rows` (a bool mask per step) chain_logits returns exactly the selected rows of the full result."""
    module = random_mtp(target.model, seed=5, draft_vocab=draft_vocab())
    tokens = sequences(2, 11, seed=2)
    hidden = torch.stack([trunk_outputs(target, row.tolist()) for row in tokens])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        full = module.chain_logits(hidden, tokens, DEPTH)
        rows = [torch.rand(f.shape[:2], generator=gen) < 0.5 for f in full]
        picked = module.chain_logits(hidden, tokens, DEPTH, rows=rows)
    for j, (f, r, p) in enumerate(zip(full, rows, picked, strict=True), start=1):
        assert p.shape == (int(r.sum()), len(draft_vocab())), j
        torch.testing.assert_close(p, f[r], **TOL, msg=f"step {j}")


def test_chain_logits_depend_on_the_chain(target):
    """Step 2's logits read step 1's output: another module output at step 1 changes step 2 (the chain is real)."""
    module = random_mtp(target.model, seed=5)
    tokens = sequences(1, 10)
    hidden = trunk_outputs(target, tokens[0].tolist())[None]
    with torch.no_grad():
        step1, step2 = module.chain_logits(hidden, tokens, 2)
        plain = module.chain_logits(hidden, tokens, 1)[0]
        torch.testing.assert_close(step1, plain, **TOL)  # depth does not change earlier steps
        module.mlp.down_proj.weight.mul_(2.0)
        step1b, step2b = module.chain_logits(hidden, tokens, 2)
    assert not torch.allclose(step2, step2b) and not torch.allclose(step1, step1b)


def test_chain_logits_have_gradients_for_the_module_only(target):
    """Training updates the module; the target's shared embedding and head get no gradient (frozen)."""
    module = random_mtp(target.model, seed=5)
    module.requires_grad_(True)
    tokens = sequences(1, 8)
    hidden = trunk_outputs(target, tokens[0].tolist())[None].clone()
    target.model.requires_grad_(False)
    loss = sum(c.logsumexp(-1).sum() for c in module.chain_logits(hidden, tokens, 2))
    loss.backward()
    assert module.eh_proj.weight.grad is not None and module.eh_proj.weight.grad.abs().sum() > 0
    assert module.self_attn.q_proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in target.model.parameters())


# -- (b) save / load ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab", ["full", "draft"])
def test_save_load_round_trip(target, tmp_path, vocab):
    module = random_mtp(target.model, seed=6, draft_vocab=draft_vocab() if vocab == "draft" else None)
    folder = save_mtp(module, tmp_path / "mtp")
    assert sorted(p.name for p in folder.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    saved = load_file(str(folder / WEIGHTS_FILE))
    embed = target.model.get_input_embeddings().weight
    head = target.model.get_output_embeddings().weight
    assert not any("embed" in k or "lm_head" in k for k in saved), sorted(saved)
    assert all(t.shape != embed.shape and t.shape != head.shape for t in saved.values()), "a [V, h] table was saved"
    assert set(saved) == set(module.state_dict())
    config = json.loads((folder / CONFIG_FILE).read_text())
    assert config["hidden_size"] == 64 and config["vocab_size"] == VOCAB
    assert config["draft_vocab_size"] == (40 if vocab == "draft" else 0)

    loaded = load_mtp(folder, target.model)
    assert loaded.eh_proj.weight.dtype == torch.float64
    assert loaded.config == module.config
    for (k, a), (k2, b) in zip(module.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b), k
    tokens = sequences(1, 10)[0].tolist()
    hidden = trunk_outputs(target, tokens)
    outs = []
    for m in (module, loaded):
        cache = m.new_cache()
        g = m.step(cache, hidden[:-1], tokens[1:])
        g2 = m.step(cache, g[-1:], [tokens[3]])
        outs.append((g, g2, m.head_logits(g), m.full_logits(m.head_logits(g2))))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_loaded_module_drafts_identically(target, tmp_path):
    """An engine with the loaded module generates and drafts exactly as one with the original."""
    module = random_mtp(target.model, seed=6, draft_vocab=draft_vocab(80))
    loaded = load_mtp(save_mtp(module, tmp_path / "mtp"), target.model)
    prompt = [4, 8, 15, 16, 23, 42, 4, 8]
    engines = [Engine(target, EngineConfig(drafter="mtp", gamma=3), mtp=m) for m in (module, loaded)]
    results = [engine.generate(prompt, 24) for engine in engines]
    assert results[0].tokens == results[1].tokens
    assert results[0].stats.drafted == results[1].stats.drafted > 0
    assert results[0].stats.accepted == results[1].stats.accepted


@pytest.mark.parametrize("vocab", ["full", "draft"])
def test_module_owns_none_of_the_targets_tensors(vocab):
    """The target's embedding and LM head are shared, not owned: not among the module's parameters or state, not
    cast by the module's .to(), not counted twice in the engine's weight bytes."""
    target = random_model("llama", dtype=torch.float64, seed=3)  # its own: .to() below must not touch the fixture's
    module = random_mtp(target.model, seed=6, draft_vocab=draft_vocab() if vocab == "draft" else None)
    shared = [target.model.get_input_embeddings().weight, target.model.get_output_embeddings().weight]
    assert not any(p is s for p in module.parameters() for s in shared), [n for n, _ in module.named_parameters()]
    assert set(module.state_dict()) == {n for n, _ in module.named_parameters()} | {"d2t"}
    engine = Engine(target, EngineConfig(drafter="mtp"), mtp=module)
    own = sum(p.numel() * p.element_size() for p in module.parameters())
    assert engine.weight_bytes == sum(p.numel() * p.element_size() for p in target.model.parameters()) + own
    module.to(torch.float32)
    assert all(s.dtype == torch.float64 for s in shared), "the module's .to() cast the target's tensors"


# -- (c) the target check and broken folders ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("other", "field"),
    [
        ({"hidden": 32}, "hidden_size"),
        ({"vocab": 80}, "vocab_size"),
        ({"layers": 3}, "num_hidden_layers"),
    ],
)
def test_loading_for_another_shape_names_the_field(target, tmp_path, other, field):
    folder = save_mtp(random_mtp(target.model, seed=6), tmp_path / "mtp")
    wrong = random_model("llama", dtype=torch.float64, seed=3, **other)
    with pytest.raises(MtpMismatchError, match=rf"{field}: trained for \d+, target has \d+"):
        load_mtp(folder, wrong.model)
    with pytest.raises(MtpMismatchError, match=field):
        random_mtp(target.model, seed=6).bind(wrong.model)


def test_loading_for_other_weights_names_the_probe(target, tmp_path):
    """A same-shape target whose embedding clearly differs (scaled by 1.5) is refused, naming the weights probe."""
    folder = save_mtp(random_mtp(target.model, seed=6, draft_vocab=draft_vocab()), tmp_path / "mtp")
    other = random_model("llama", dtype=torch.float64, seed=3)
    with torch.no_grad():
        other.model.get_input_embeddings().weight.mul_(1.5)
    with pytest.raises(MtpMismatchError, match=r"same shape but other weights \(embedding probe"):
        load_mtp(folder, other.model)
    # The engine checks too: a module for one target given with another.
    with pytest.raises(MtpMismatchError, match="embedding probe"):
        Engine(other, EngineConfig(drafter="mtp"), mtp=random_mtp(target.model, seed=6))


def test_loading_for_another_checkpoint_of_the_same_shape_is_refused(target, tmp_path):
    """Another random initialisation of the same config (seed 4 instead of 3) is another model: refused too."""
    folder = save_mtp(random_mtp(target.model, seed=6, draft_vocab=draft_vocab()), tmp_path / "mtp")
    other = random_model("llama", dtype=torch.float64, seed=4)
    assert not torch.equal(other.model.get_input_embeddings().weight, target.model.get_input_embeddings().weight)
    with pytest.raises(MtpMismatchError, match="embedding probe"):
        load_mtp(folder, other.model)


def test_probe_does_not_depend_on_dtype(target, tmp_path):
    """A module saved for the float64 target loads for the same weights in float32 (the probe is dtype-independent)."""
    folder = save_mtp(random_mtp(target.model, seed=6, draft_vocab=draft_vocab()), tmp_path / "mtp")
    target32 = random_model("llama", dtype=torch.float32, seed=3)
    loaded = load_mtp(folder, target32.model)
    assert loaded.eh_proj.weight.dtype == torch.float32


def test_missing_folder_names_the_config_file(target, tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path / 'nowhere'} has no {CONFIG_FILE}"):
        load_mtp(tmp_path / "nowhere", target.model)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not a spectune MTP config"),
        ('{"format": "other/1"}', "format 'other/1', expected 'spectune-mtp/1'"),
        ('{"format": "spectune-mtp/1", "hidden_size": 64}', "not a spectune MTP config"),
    ],
)
def test_broken_config_names_the_file(target, tmp_path, text, problem):
    folder = save_mtp(random_mtp(target.model, seed=6), tmp_path / "mtp")
    (folder / CONFIG_FILE).write_text(text)
    with pytest.raises(ValueError, match=str(folder / CONFIG_FILE)) as info:
        read_mtp_config(folder)
    assert problem in str(info.value)
    with pytest.raises(ValueError, match=CONFIG_FILE):
        load_mtp(folder, target.model)


def test_broken_or_missing_weights_name_the_file(target, tmp_path):
    folder = save_mtp(random_mtp(target.model, seed=6), tmp_path / "mtp")
    (folder / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match=rf"{WEIGHTS_FILE}: cannot read MTP weights"):
        load_mtp(folder, target.model)
    (folder / WEIGHTS_FILE).unlink()
    with pytest.raises(ValueError, match=WEIGHTS_FILE):
        load_mtp(folder, target.model)


def test_unbound_module_says_bind_first(target):
    config = random_mtp(target.model, seed=6).config
    with pytest.raises(RuntimeError, match=r"bind\(target\)"):
        MtpModule(config).to(torch.float64).embed(torch.tensor([1]))


# -- (d) draft vocabulary ------------------------------------------------------------------------------------------


def test_draft_vocabulary_maps_into_the_target_vocabulary(target):
    d2t = draft_vocab()
    module = random_mtp(target.model, seed=7, draft_vocab=d2t)
    full = random_mtp(target.model, seed=7)  # same seed: the same weights, all rows of the head
    assert module.d2t.tolist() == d2t
    full_parameters = dict(full.named_parameters())
    for name, weight in module.named_parameters():
        assert torch.equal(weight, full_parameters[name]), name
    tokens = sequences(1, 9)[0].tolist()
    hidden = trunk_outputs(target, tokens)
    g = module.step(module.new_cache(), hidden[:-1], tokens[1:])  # [8, h]
    draft_logits = module.head_logits(g)  # [8, 40]
    assert draft_logits.shape == (8, len(d2t))
    torch.testing.assert_close(draft_logits, full.head_logits(g)[:, d2t], **TOL)  # the head's d2t rows

    spread = module.full_logits(draft_logits)  # [8, V]
    assert spread.shape == (8, VOCAB)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[d2t] = False
    assert torch.isneginf(spread[:, outside]).all()
    assert torch.equal(spread[:, d2t], draft_logits)
    assert torch.isfinite(spread[:, d2t]).all()
    probs = spread.softmax(-1)
    assert (probs[:, outside] == 0).all()

    indexes = torch.tensor([0, 5, 39, 5])
    assert module.to_target_ids(indexes).tolist() == [d2t[0], d2t[5], d2t[39], d2t[5]]
    assert module.to_target_ids(draft_logits.argmax(-1)).tolist() == spread.argmax(-1).tolist()
    # Without a draft vocabulary both are the identity.
    assert full.to_target_ids(indexes).tolist() == indexes.tolist()
    assert torch.equal(full.full_logits(draft_logits), draft_logits)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_vocabulary_drafter_proposes_only_its_tokens(target, temperature):
    """The `mtp` drafter with a draft vocabulary proposes target ids in d2t, with q zero outside it when sampling."""
    d2t = draft_vocab()
    module = random_mtp(target.model, seed=7, draft_vocab=d2t)
    drafter = resolve_drafter("mtp").make(DrafterResources(target=target, mtp=module))
    history = sequences(1, 12, seed=3)[0].tolist()
    hidden = trunk_outputs(target, history[:-1])
    drafter.begin(history)
    drafter.commit(Verified(history, len(history), hidden, 0))
    params = SamplingParams(temperature=temperature)
    draft = drafter.propose(DraftContext(history, 6, params, torch.Generator().manual_seed(0)))
    assert len(draft.tokens) == 6 and set(draft.tokens) <= set(d2t)
    assert draft.sources == ["mtp"] * 6
    if temperature == 0.0:
        assert draft.probs is None
    else:
        assert draft.probs.shape == (6, VOCAB)
        outside = [t for t in range(VOCAB) if t not in d2t]
        assert (draft.probs[:, outside] == 0).all()
        torch.testing.assert_close(draft.probs.sum(-1), torch.ones(6, dtype=torch.float64), **TOL)
        assert all(draft.probs[i, tok] > 0 for i, tok in enumerate(draft.tokens))
