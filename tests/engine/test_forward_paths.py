"""The numeric paths of engine/forward.py: the engine's Llama forward against transformers, its
preallocated KV buffer, which path `auto` picks and says it picked, and the fast paths on the bundled
models (greedy ON == OFF for every drafter). Greedy exactness over all drafters and gammas is the
conformance suite's (test_conformance.py, float64, both forwards)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from engine.engine import Engine, EngineConfig
from engine.forward import ONEDNN_MIN_WIDTH, TransformersForward, choose_path, make_forward
from engine.host import probe
from engine.kv import MIN_CAPACITY, capacity_bound, crop_cache, kv_tensors
from engine.llama import LlamaCache
from engine.loading import load_model
from engine.testing import random_model
from tests.conftest import skip_unless_path_runs

BUNDLED = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"
COVERED = ["llama", "qwen2", "mistral", "qwen2_sliding"]  # sliding: window 8, shorter than the prompt
# Stated tolerances, relative to the largest logit: fp32 through oneDNN reorders sums (measured ~1e-6);
# bf16 keeps 8 mantissa bits. (F.linear in fp32 and bf16 measured bit-identical to transformers.)
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
PROMPT = [(i * 37 + 5) % 96 for i in range(30)]


def model_in(arch: str, dtype: torch.dtype, hidden: int = 256):
    model = random_model(arch, seed=3, dtype=torch.float32, hidden=hidden, logit_scale=20.0)
    model.model.to(dtype)
    return model


@pytest.mark.parametrize("path", ["torch", "onednn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("arch", COVERED)
def test_engine_forward_logits_equal_transformers(arch, dtype, path):
    """Prefill, a rollback, then a 5-row verification: every row's logits within the stated tolerance."""
    skip_unless_path_runs(path, dtype)
    model = model_in(arch, dtype)
    reference, ours = TransformersForward(model.model), make_forward(model.model, path)
    assert ours.choice.path == path
    ref_cache, our_cache = reference.new_cache(), ours.new_cache()
    rows = []
    for feed in (PROMPT, PROMPT[20:25]):
        rows.append((reference(ref_cache, feed, keep=len(feed))[0], ours(our_cache, feed, keep=len(feed))[0]))
        crop_cache(ref_cache, 20)
        crop_cache(our_cache, 20)
    for ref, got in rows:
        assert got.shape == ref.shape and got.dtype == ref.dtype
        scale = float(ref.float().abs().max())
        diff = float((got.float() - ref.float()).abs().max())
        assert diff <= TOLERANCE[dtype] * scale, f"{arch} {dtype} {path}: max |diff| {diff:.2e} vs scale {scale:.1f}"
        if dtype == torch.float32:
            assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_hidden_states_are_the_last_layers_output_before_the_final_norm_for_every_fed_token():
    model = model_in("qwen2", torch.float32)
    with torch.inference_mode():
        states = model.model(input_ids=torch.tensor([PROMPT]), output_hidden_states=True).hidden_states
        # transformers' last entry is after the final norm: the trunk output is the last layer's own
        layer_out = model.model.model.layers[-1]
        caught = []
        handle = layer_out.register_forward_hook(
            lambda m, a, out: caught.append(out[0] if isinstance(out, tuple) else out)
        )
        model.model(input_ids=torch.tensor([PROMPT]))
        handle.remove()
    trunk = caught[0][0]  # [n, h]
    torch.testing.assert_close(model.model.model.norm(trunk), states[-1][0], atol=1e-6, rtol=1e-6)
    reference = TransformersForward(model.model)
    ref_logits, ref_hidden = reference(reference.new_cache(), PROMPT, 3, True)
    ours = make_forward(model.model, "torch")
    logits, hidden = ours(ours.new_cache(), PROMPT, keep=3, hidden=True)
    assert hidden.shape == (len(PROMPT), model.model.config.hidden_size)
    torch.testing.assert_close(ref_hidden, trunk, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(hidden, trunk, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(logits, ref_logits, atol=1e-6, rtol=1e-6)
    assert ours(ours.new_cache(), PROMPT, keep=3)[1] is None


def test_preallocated_cache_rolls_back_by_moving_its_length():
    model = model_in("llama", torch.float64, hidden=64)
    forward = make_forward(model.model, "torch")
    cache = forward.new_cache()
    assert isinstance(cache, LlamaCache) and cache.capacity == 0
    forward(cache, PROMPT)
    assert cache.get_seq_length() == len(PROMPT) and cache.capacity == MIN_CAPACITY
    storage = cache.k[0].data_ptr()
    crop_cache(cache, 12)  # a rollback: no copy, no reallocation
    assert cache.get_seq_length() == 12 and cache.k[0].data_ptr() == storage
    forward(cache, PROMPT[12:])  # rewriting the cropped positions gives what a fresh prefill holds
    fresh = forward.new_cache()
    forward(fresh, PROMPT)
    for (k, v), (fk, fv) in zip(kv_tensors(cache), kv_tensors(fresh), strict=True):
        assert k.shape == (1, 1, len(PROMPT), 32)
        assert torch.equal(k, fk) and torch.equal(v, fv)
    long = [t % 96 for t in range(300)]
    forward(cache, long)  # past the first block: doubles, keeps the valid positions
    assert cache.capacity == 2 * MIN_CAPACITY <= capacity_bound(cache.get_seq_length())
    assert torch.equal(kv_tensors(cache)[0][0][:, :, : len(PROMPT)], kv_tensors(fresh)[0][0])
    with pytest.raises(ValueError, match="negative"):
        cache.crop(3)


def test_auto_picks_onednn_where_it_measured_faster_and_torch_otherwise():
    assert ONEDNN_MIN_WIDTH == {torch.float32: 1024, torch.bfloat16: 256}
    bf16 = choose_path(model_in("llama", torch.bfloat16).model)
    if probe().onednn_bf16:
        assert bf16.describe() == "onednn bfloat16 (auto: engine llama forward, oneDNN-packed linears)"
    else:  # an AVX2-only host: what this host lacks, in the reason (tests/engine/test_host.py forces this case)
        assert bf16.path == "torch" and "oneDNN's bf16 linear needs" in bf16.reason
    fp32 = choose_path(model_in("llama", torch.float32).model)  # 256 wide: F.linear is faster in fp32
    assert fp32.path == "torch" and "hidden size 256 < 1024" in fp32.reason
    assert choose_path(model_in("llama", torch.float32, hidden=1024).model).path == "onednn"
    narrow = choose_path(model_in("llama", torch.bfloat16, hidden=64).model)
    why = "hidden size 64 < 256" if probe().onednn_bf16 else "oneDNN's bf16 linear needs"
    assert narrow.path == "torch" and why in narrow.reason
    assert choose_path(random_model("llama").model).path == "torch"  # float64: oneDNN has no fp64 linear


@pytest.mark.parametrize("arch", ["gemma3", "gpt2"])
def test_uncovered_architectures_fall_back_to_transformers_with_one_line(arch, caplog):
    model = random_model(arch)
    with caplog.at_level(logging.WARNING, logger="spectune.forward"):
        forward = model.forward
    assert isinstance(forward, TransformersForward) and forward.choice.path == "transformers"
    notes = [r.getMessage() for r in caplog.records if r.name == "spectune.forward"]
    assert len(notes) == 1 and "does not cover architecture" in notes[0] and "\n" not in notes[0]
    with pytest.raises(ValueError, match="does not cover architecture"):
        make_forward(model.model, "torch")


def test_forced_paths_that_cannot_run_say_why():
    with pytest.raises(ValueError, match="unknown forward path 'fast'; allowed: auto, transformers, torch, onednn"):
        choose_path(random_model("llama").model, "fast")
    with pytest.raises(ValueError, match=r"runs float32, bfloat16, not float64 \(paths that run here: auto, transf"):
        make_forward(random_model("llama").model, "onednn")
    forced = choose_path(random_model("llama").model, "transformers")
    assert forced.path == "transformers" and forced.reason.startswith("forced")


def test_load_model_rejects_an_unknown_path_before_loading(tmp_path):
    with pytest.raises(ValueError, match="unknown forward path"):
        load_model(str(tmp_path / "does-not-exist"), device="cpu", forward="quick")


@pytest.fixture(scope="module")
def test_instance_prompt():
    """The agent's real context on a swe-lite test instance (the scripted expert's longest turn)."""
    from bench.agent_prompts import agent_prompts

    tokenizer = load_model(str(BUNDLED / "target"), device="cpu", dtype="float32").tokenizer
    return agent_prompts(tokenizer, "test", count=1)[0].ids


@pytest.mark.parametrize(
    ("path", "dtype"), [("onednn", "float32"), ("onednn", "bfloat16"), ("torch", "bfloat16")], ids="-".join
)
def test_bundled_models_on_cpu_paths_keep_on_equal_to_off(path, dtype, test_instance_prompt):
    """Greedy ON == OFF for every drafter on the oneDNN path for the bundled pair, fp32 and bf16, and in bf16 on
    F.linear too, which every CPU runs (so a host without oneDNN's bf16 still checks bf16); F.linear in fp32 is
    transformers' numbers bit for bit, checked above and by the conformance suite."""
    skip_unless_path_runs(path, getattr(torch, dtype))
    target = load_model(str(BUNDLED / "target"), device="cpu", dtype=dtype, forward=path)
    draft = load_model(str(BUNDLED / "draft"), device="cpu", dtype=dtype, forward=path)
    assert target.forward.choice.path == path
    off = Engine(target, EngineConfig(drafter="none")).generate(test_instance_prompt, 96, stop_tokens=frozenset())
    for drafter in ("ngram", "suffix", "draft_model"):
        engine = Engine(target, EngineConfig(drafter=drafter, gamma=4), draft=draft)
        on = engine.generate(test_instance_prompt, 96, stop_tokens=frozenset())
        assert on.tokens == off.tokens, f"{drafter} on {path} {dtype} diverged from plain decoding"
        assert on.stats.accepted > 0, f"{drafter} never got a token accepted: the check would prove little"
