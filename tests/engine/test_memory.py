"""Tests for the memory model (engine.memory): counts against real models and caches, inversion, errors, CLI."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from engine.engine import Engine, EngineConfig
from engine.kv import kv_bytes, kv_tensors
from engine.loading import load_model
from engine.memory import (
    DTYPE_BYTES,
    GIB,
    PARTS,
    ModelShape,
    dtype_bytes,
    estimate_memory,
    kv_bytes_for,
    largest_context,
    model_shape,
    safetensors_params,
    workspace_bytes,
)
from engine.memory.__main__ import main
from engine.tiny import make_tiny_model
from tests.conftest import needs_cuda

torch.set_num_threads(1)  # the test machine's cores are shared

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLE = REPO_ROOT / "models" / "spectune-tiny"
TARGET, DRAFT = BUNDLE / "target", BUNDLE / "draft"
PROMPT = [5, 17, 300, 42, 9, 1000, 77, 5, 17, 300]  # short, so the caches stay in their first reservation
NEW = 40

# Qwen2.5-Coder-7B(-Instruct) config.json, public values (q/k/v biases come with model_type qwen2).
QWEN_CODER_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}

pytestmark = pytest.mark.skipif(not TARGET.is_dir(), reason="models/spectune-tiny is not built in this checkout")


def unique_params(model: torch.nn.Module) -> int:
    """Parameter count of a loaded model; .parameters() yields a tied (shared) tensor once."""
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def shapes() -> dict[str, ModelShape]:
    return {"target": model_shape(str(TARGET)), "draft": model_shape(str(DRAFT))}


# ---- parameter counts and weight bytes ------------------------------------------------------------


@pytest.mark.parametrize("which", ["target", "draft"])
def test_param_count_formula_equals_loaded_model_and_safetensors_header(which: str) -> None:
    folder = BUNDLE / which
    formula = ModelShape.from_config(json.loads((folder / "config.json").read_text())).params
    header = sum(safetensors_params(folder / "model.safetensors").values())
    real = unique_params(AutoModelForCausalLM.from_pretrained(folder))
    assert formula == header == real == model_shape(str(folder)).params
    assert model_shape(str(folder)).tied_embeddings  # the bundled pair ties its LM head to the embedding


@pytest.mark.parametrize(
    ("config_class", "extra"),
    [
        (LlamaConfig, {}),
        (LlamaConfig, {"attention_bias": True, "mlp_bias": True, "head_dim": 24}),
        (LlamaConfig, {"tie_word_embeddings": True}),
        (MistralConfig, {}),
        (Qwen2Config, {}),
        (Qwen2Config, {"tie_word_embeddings": True, "num_key_value_heads": 1}),
        (Qwen3Config, {"head_dim": 32}),
        (Qwen3Config, {"head_dim": 16, "attention_bias": True}),
    ],
)
def test_param_formula_matches_transformers_architectures(config_class: type, extra: dict) -> None:
    config = config_class(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=extra.pop("num_key_value_heads", 2),
        intermediate_size=96,
        vocab_size=128,
        **extra,
    )
    real = unique_params(AutoModelForCausalLM.from_config(config))  # random init: no weights needed
    assert ModelShape.from_config(config.to_dict()).params == real


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("which", ["target", "draft"])
def test_weight_bytes_equal_loaded_tensors(shapes: dict[str, ModelShape], which: str, dtype: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(BUNDLE / which, dtype=getattr(torch, dtype))
    real = sum(p.numel() * p.element_size() for p in model.parameters())
    assert estimate_memory(shapes[which], dtype=dtype, context=0).target_weights == real


def test_dtype_bytes_are_llama_cpp_block_sizes() -> None:
    # ggml-common.h: block_q8_0 = fp16 scale + 32 int8; block_q4_0 = fp16 scale + 16 bytes of nibbles;
    # block_q4_K = 2 fp16 + 12 scale bytes + 128 nibble bytes per 256; block_q6_K = 128 + 64 + 16 + 2 per 256.
    assert DTYPE_BYTES["q8_0"] == 34 / 32 and DTYPE_BYTES["q4_0"] == 18 / 32
    assert DTYPE_BYTES["q4_k"] == DTYPE_BYTES["q4_k_m"] == 4.5 / 8 and DTYPE_BYTES["q6_k"] == 6.5625 / 8
    assert dtype_bytes("BF16") == dtype_bytes("bfloat16") == 2 and dtype_bytes("fp32") == 4
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        dtype_bytes("int3")


# ---- KV bytes against the engine's real caches ------------------------------------------------------


def held_bytes(cache) -> int:
    """Bytes of the storage behind every key/value tensor (what is allocated, reserve included)."""
    return sum(t.untyped_storage().nbytes() for pair in kv_tensors(cache) for t in pair)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kv_bytes_equal_engine_caches(shapes: dict[str, ModelShape], dtype: str) -> None:
    target = load_model(str(TARGET), device="cpu", dtype=dtype)
    draft = load_model(str(DRAFT), device="cpu", dtype=dtype)
    engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4), draft=draft)
    session = engine.new_session()
    result = engine.generate(PROMPT, NEW, stop_tokens=frozenset(), session=session)  # no early stop: a known length
    assert result.stats.new_tokens == NEW and result.stats.drafted > 0
    # The drafter keeps its own cache; engine/drafters/draft_model.py names it _cache.
    for name, cache in (("target", session.cache), ("draft", session.drafter._cache)):
        shape, length = shapes[name], cache.get_seq_length()
        # The target holds the history but its last token; the draft syncs lazily, at its next proposal.
        assert length == len(PROMPT) + NEW - 1 if name == "target" else length > len(PROMPT)
        per_token = kv_bytes_for(shape, 1, dtype)
        element = torch.empty(0, dtype=target.dtype).element_size()
        assert per_token == shape.layers * shape.kv_heads * shape.head_dim * 2 * element
        # The valid positions: exactly KV-per-token × the cache's length.
        assert kv_bytes(cache) == kv_bytes_for(shape, length, dtype)
        # What is allocated: GrowingLayer reserves whole positions ahead (at least 256), so the storage is
        # the formula at the reserved length, never less than the valid part.
        held = held_bytes(cache)
        reserved, rest = divmod(held, per_token)
        assert rest == 0 and reserved >= length
        kv = estimate_memory(shapes["target"], dtype=dtype, context=reserved, gamma=4, draft=shapes["draft"])
        assert (kv.target_kv if name == "target" else kv.draft_kv) == held


def test_other_tokenizer_draft_counted_with_its_own_vocabulary(shapes: dict[str, ModelShape], tmp_path: Path) -> None:
    """A draft with another tokenizer (400 ids, the target's 8192) is counted from its own shape: its embedding and
    LM head rows and its KV over its own tokens."""
    folder = make_tiny_model(tmp_path / "other", layers=1, hidden=64, vocab=400, seed=3)
    target = load_model(str(TARGET), device="cpu", dtype="float32")
    draft = load_model(str(folder), device="cpu", dtype="float32")
    engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4), draft=draft)
    assert engine.tokenizer_pair is not None  # the pair is cross-tokenizer
    session = engine.new_session()
    prompt = target.tokenizer.encode("def add(a, b):\n    return a + b\n")
    assert engine.generate(prompt, NEW, stop_tokens=frozenset(), session=session).stats.drafted > 0
    shape = model_shape(str(folder))
    assert shape.vocab == 400 != shapes["target"].vocab
    estimate = estimate_memory(shapes["target"], dtype="float32", context=256, gamma=4, draft=shape)
    assert estimate.draft_weights == sum(p.numel() * p.element_size() for p in draft.model.parameters())
    cache = session.drafter._cache  # its own ids: as many positions as the draft's tokenizer spells the history in
    held = sum(t.untyped_storage().nbytes() for pair in kv_tensors(cache) for t in pair)
    reserved = held // kv_bytes_for(shape, 1, "float32")
    assert estimate_memory(shapes["target"], dtype="float32", context=reserved, draft=shape).draft_kv == held


def test_quantised_kv_dtype_scales_kv_only(shapes: dict[str, ModelShape]) -> None:
    full = estimate_memory(shapes["target"], dtype="bfloat16", context=1024)
    q8 = estimate_memory(shapes["target"], dtype="bfloat16", context=1024, kv_dtype="q8_0")
    assert q8.target_kv == full.target_kv * 34 // 64 and q8.target_weights == full.target_weights


# ---- a 7B target against an 8 GiB card ------------------------------------------------------------------


def test_qwen_coder_7b_does_not_fit_8_gib_in_bfloat16() -> None:
    shape = ModelShape.from_config(QWEN_CODER_7B)
    assert shape.params == 7_615_616_512  # the published "7.61B"
    assert (shape.kv_heads, shape.head_dim, shape.max_positions, shape.tied_embeddings) == (4, 128, 32768, False)
    assert kv_bytes_for(shape, 1, "bfloat16") == 28 * 4 * 128 * 2 * 2  # 56 KiB per token
    estimate = estimate_memory(shape, dtype="bfloat16", context=4096, gamma=4)
    assert estimate.target_weights > 14 * GIB and estimate.total > 8 * GIB
    assert largest_context(shape, 8 * GIB, dtype="bfloat16", gamma=4) == 0
    # In llama.cpp's Q4_K the weights take ~4 GiB, leaving room for a long context on the same card.
    fits = largest_context(shape, 8 * GIB, dtype="q4_k_m", kv_dtype="bfloat16", gamma=4, overhead_bytes=GIB // 2)
    assert fits == 32768  # capped at max_position_embeddings


# ---- inverting the estimate -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dtype": "float32"},
        {"dtype": "bfloat16", "gamma": 4, "with_draft": True},
        {"dtype": "q4_k_m", "kv_dtype": "q8_0", "gamma": 7, "prefill_tokens": 3000, "overhead_bytes": 12345},
        {"dtype": "float16", "gamma": 2, "with_draft": True, "draft_dtype": "float32", "drafter_weight_bytes": 999},
    ],
)
@pytest.mark.parametrize("headroom", [1, 777_777, 9_000_001, 123_456_789])
def test_largest_context_is_exact(shapes: dict[str, ModelShape], kwargs: dict, headroom: int) -> None:
    kwargs = dict(kwargs)
    unlimited = {name: dataclasses.replace(s, max_positions=None) for name, s in shapes.items()}
    if kwargs.pop("with_draft", False):
        kwargs["draft"] = unlimited["draft"]
    target = unlimited["target"]
    ceiling = estimate_memory(target, context=0, **kwargs).total + headroom
    best = largest_context(target, ceiling, **kwargs)
    assert estimate_memory(target, context=best, **kwargs).total <= ceiling
    assert estimate_memory(target, context=best + 1, **kwargs).total > ceiling


def test_largest_context_caps_and_floors(shapes: dict[str, ModelShape]) -> None:
    target, draft = shapes["target"], shapes["draft"]
    assert target.max_positions == draft.max_positions == 4096
    assert largest_context(target, 64 * GIB, dtype="float32") == 4096
    short = dataclasses.replace(draft, max_positions=1000)
    assert largest_context(target, 64 * GIB, dtype="float32", gamma=3, draft=short) == 1000
    weights = estimate_memory(target, dtype="float32", context=0).total
    assert largest_context(target, weights - 1, dtype="float32") == 0  # not even the weights fit
    with pytest.raises(TypeError, match="context"):
        largest_context(target, GIB, dtype="float32", context=5)


def test_workspace_grows_with_gamma_and_prefill(shapes: dict[str, ModelShape]) -> None:
    target, draft = shapes["target"], shapes["draft"]
    sizes = [workspace_bytes(target, dtype="bfloat16", context=2048, gamma=g, draft=draft) for g in range(6)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    plain = workspace_bytes(target, dtype="bfloat16", context=2048, gamma=4)
    assert workspace_bytes(target, dtype="bfloat16", context=2048, gamma=4, prefill_tokens=2048) > plain
    # logits of k = gamma + 1 rows at least: model dtype + float32 copy + float32 probabilities
    assert plain >= 5 * target.vocab * (2 + 4 + 4)


def test_estimate_parts_total_and_description(shapes: dict[str, ModelShape]) -> None:
    estimate = estimate_memory(
        shapes["target"], dtype="bfloat16", context=4096, gamma=4, draft=shapes["draft"], overhead_bytes=GIB
    )
    as_dict = estimate.as_dict()
    assert estimate.total == sum(as_dict[p] for p in PARTS) == as_dict["total"]
    assert estimate.draft_kv == kv_bytes_for(shapes["draft"], 4096, "bfloat16") > 0
    line = estimate.describe()
    assert "\n" not in line and line.startswith("needs 1.0 GiB in bfloat16 (weights 0.0, KV 0.0 at 4096 tokens")
    small = estimate_memory(shapes["target"], dtype="float32", context=100).describe()
    assert small.startswith("needs 19.") and small.endswith("MiB)")  # MiB below 1 GiB
    with pytest.raises(ValueError, match="context must be >= 0"):
        estimate_memory(shapes["target"], dtype="float32", context=-1)


# ---- files: errors and the hub cache -----------------------------------------------------------------------


def _copy_config(folder: Path, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text if text is not None else (TARGET / "config.json").read_text())
    return folder


def _one_line_naming(exc: pytest.ExceptionInfo, path: Path) -> None:
    message = str(exc.value)
    assert str(path) in message and "\n" not in message


def test_errors_name_the_file(tmp_path: Path) -> None:
    broken = _copy_config(tmp_path / "broken", '{"hidden_size": 64,')
    with pytest.raises(ValueError, match="not valid JSON") as exc:
        model_shape(str(broken))
    _one_line_naming(exc, broken / "config.json")

    config = json.loads((TARGET / "config.json").read_text())
    del config["num_hidden_layers"]
    lacking = _copy_config(tmp_path / "lacking", json.dumps(config))
    with pytest.raises(ValueError, match="'num_hidden_layers' is missing") as exc:
        model_shape(str(lacking))
    _one_line_naming(exc, lacking / "config.json")

    with pytest.raises(ValueError, match="not found") as exc:
        model_shape(str(tmp_path / "absent"))
    _one_line_naming(exc, tmp_path / "absent")

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not found") as exc:
        model_shape(str(tmp_path / "empty"))
    _one_line_naming(exc, tmp_path / "empty" / "config.json")

    truncated = _copy_config(tmp_path / "truncated")
    (truncated / "model.safetensors").write_bytes((TARGET / "model.safetensors").read_bytes()[:200])
    with pytest.raises(ValueError, match="truncated") as exc:
        model_shape(str(truncated))
    _one_line_naming(exc, truncated / "model.safetensors")

    sharded = _copy_config(tmp_path / "sharded")
    index = sharded / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ValueError, match="lists the shard model-00001-of-00002") as exc:
        model_shape(str(sharded))
    _one_line_naming(exc, index)

    other = _copy_config(tmp_path / "gemma", json.dumps({**config, "num_hidden_layers": 2, "model_type": "gemma"}))
    with pytest.raises(ValueError, match="model_type 'gemma' has no parameter formula") as exc:
        model_shape(str(other))
    _one_line_naming(exc, other / "config.json")


def test_unknown_architecture_counts_from_safetensors_header(tmp_path: Path) -> None:
    config = {**json.loads((TARGET / "config.json").read_text()), "model_type": "somethingnew"}
    folder = _copy_config(tmp_path / "new", json.dumps(config))
    (folder / "model.safetensors").symlink_to(TARGET / "model.safetensors")
    assert model_shape(str(folder)).params == model_shape(str(TARGET)).params


def test_hub_cache_is_read_without_network(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--spectune--tiny"
    snapshot = _copy_config(repo / "snapshots" / commit)
    (snapshot / "model.safetensors").symlink_to(TARGET / "model.safetensors")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert model_shape("spectune/tiny", cache_dir=tmp_path) == model_shape(str(TARGET))
    with pytest.raises(ValueError, match="'spectune/absent' is not a local folder nor in the Hugging Face cache"):
        model_shape("spectune/absent", cache_dir=tmp_path)


# ---- the command line -----------------------------------------------------------------------------------------


def test_cli_prints_breakdown_and_largest_context(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", str(TARGET), "--draft", str(DRAFT), "--dtype", "bfloat16", "--context", "8192", "--gamma", "4"]
    assert main([*argv, "--ceiling-gib", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("needs ") and "target_kv" in out and "draft_weights" in out
    assert "exceeds the models' position limit of 4096" in out
    assert "largest context under 8 GiB: 4096 tokens" in out
    assert main(["--model", str(TARGET), "--dtype", "float32", "--ceiling-gib", "0.02"]) == 0
    tokens = int(capsys.readouterr().out.rsplit("GiB: ", 1)[1].split()[0])
    assert tokens == largest_context(model_shape(str(TARGET)), int(0.02 * GIB), dtype="float32")


def test_cli_module_errors_exit_2_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "engine.memory", "--model", str(tmp_path / "absent"), "--dtype", "bfloat16"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().count("\n") == 0 and str(tmp_path / "absent") in run.stderr


# ---- CUDA: the estimate against the allocator -------------------------------------------------------------


@needs_cuda
def test_estimate_bounds_cuda_peak(shapes: dict[str, ModelShape]) -> None:
    device = torch.device("cuda")
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    target = load_model(str(TARGET), device="cuda", dtype="bfloat16")
    draft = load_model(str(DRAFT), device="cuda", dtype="bfloat16")
    weights = sum(p.numel() * p.element_size() for m in (target, draft) for p in m.model.parameters())
    engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4), draft=draft)
    engine.generate(PROMPT, NEW, stop_tokens=frozenset())  # warm-up: cuBLAS workspaces etc. stay allocated
    gc.collect()
    runtime = torch.cuda.memory_allocated(device) - base - weights  # fixed overhead (rotary buffers, cuBLAS)
    assert runtime >= 0
    session = engine.new_session()
    torch.cuda.reset_peak_memory_stats(device)
    engine.generate(PROMPT, NEW, stop_tokens=frozenset(), session=session)
    peak = torch.cuda.max_memory_allocated(device) - base
    caches = {"target": session.cache, "draft": session.drafter._cache}  # the drafter's own cache
    held = sum(held_bytes(c) for c in caches.values())
    reserved = max(held_bytes(c) // kv_bytes_for(shapes[name], 1, "bfloat16") for name, c in caches.items())
    estimate = estimate_memory(
        shapes["target"],
        dtype="bfloat16",
        context=reserved,
        gamma=4,
        draft=shapes["draft"],
        overhead_bytes=runtime,
        prefill_tokens=len(PROMPT),
    )
    # Weights and reserved KV are what stays allocated between generations (the allocator only rounds up,
    # to 512 bytes per block); whatever else the session keeps is small next to the workspace term.
    steady = torch.cuda.memory_allocated(device) - base - runtime
    assert 0 <= steady - (estimate.target_weights + estimate.draft_weights + held) <= estimate.workspace
    assert estimate.target_kv + estimate.draft_kv >= held
    # The measured peak stays within the estimate.
    assert peak <= estimate.total


def test_mtp_and_layer_skip_terms_count_what_the_drafters_allocate():
    """The MTP module's bytes, its per-position state (block KV + kept hidden) and a layer-skip draft's KV."""
    from engine.drafters.layer_skip import LayerSkipDrafter, LayerSkipOptions
    from engine.drafters.mtp import MtpDrafter
    from engine.memory import layer_skip_state_bytes_per_token, mtp_state_bytes_per_token, mtp_weight_bytes
    from engine.mtp import random_mtp

    target = load_model(str(TARGET), device="cpu", dtype="float32")
    shape = model_shape(str(TARGET))
    vocab = list(range(0, 2048, 2))
    module = random_mtp(target.model, seed=0, draft_vocab=vocab)
    held = sum(p.numel() * p.element_size() for p in module.parameters()) + module._head_weight.numel() * 4
    assert mtp_weight_bytes(shape, "float32", draft_vocab=len(vocab)) == held

    engine = Engine(target, EngineConfig(drafter="mtp", gamma=3), mtp=module)
    session = engine.new_session()
    engine.generate(PROMPT * 3, 20, session=session)
    drafter = session.drafter
    assert isinstance(drafter, MtpDrafter)
    positions = drafter._cache.k.shape[1]  # the block cache's reservation (the hidden buffer grows alike)
    assert drafter._hidden.shape[0] == positions
    allocated = drafter._cache.allocated_bytes() + drafter._hidden.numel() * drafter._hidden.element_size()
    assert allocated == mtp_state_bytes_per_token(shape, "float32") * positions

    skip = LayerSkipDrafter(LayerSkipOptions(layers=1), _resources(target))
    skip.propose(_context(PROMPT * 3))
    per_token = layer_skip_state_bytes_per_token(shape, 1, "float32")
    assert kv_bytes(skip._cache) == per_token * skip._cache.get_seq_length()
    estimate = estimate_memory(shape, dtype="float32", context=1000, drafter_bytes_per_token=per_token)
    assert estimate.drafter_kv == math.ceil(per_token * 1000) and estimate.total == sum(
        estimate.as_dict()[p] for p in PARTS
    )


def _resources(target):
    from engine.drafters import DrafterResources

    return DrafterResources(target=target)


def _context(history):
    from engine.drafters import DraftContext
    from engine.sampling import SamplingParams

    return DraftContext(history, 4, SamplingParams(), None)


# ---- several sessions at once ----------------------------------------------------------------------------------


SESSION_CASES = {
    "plain": {"dtype": "bfloat16"},
    "draft": {"dtype": "bfloat16", "gamma": 4, "with_draft": True, "prefill_tokens": 512},
    "mtp": {"dtype": "float32", "gamma": 3, "drafter_weight_bytes": 12345, "mtp_state": True},
    "quantised": {"dtype": "q4_k_m", "kv_dtype": "q8_0", "gamma": 2, "overhead_bytes": 777},
}


def _session_kwargs(shapes: dict[str, ModelShape], case: str) -> dict:
    from engine.memory import mtp_state_bytes_per_token

    kwargs = dict(SESSION_CASES[case])
    if kwargs.pop("with_draft", False):
        kwargs["draft"] = shapes["draft"]
    if kwargs.pop("mtp_state", False):
        kwargs["drafter_bytes_per_token"] = mtp_state_bytes_per_token(shapes["target"], kwargs["dtype"])
    return kwargs


@pytest.mark.parametrize("case", sorted(SESSION_CASES))
def test_four_sessions_add_three_sessions_of_kv_and_share_the_weights(shapes, case):
    kwargs = _session_kwargs(shapes, case)
    one = estimate_memory(shapes["target"], context=1000, **kwargs)
    assert one == estimate_memory(shapes["target"], context=1000, sessions=1, **kwargs)  # the default is one
    four = estimate_memory(shapes["target"], context=1000, sessions=4, **kwargs)
    for per_session in ("target_kv", "draft_kv", "drafter_kv"):
        assert getattr(four, per_session) == getattr(one, per_session) * 4, f"{per_session} is not 4 sessions' worth"
    for shared in ("target_weights", "draft_weights", "drafter_weights", "overhead"):
        assert getattr(four, shared) == getattr(one, shared), f"{shared} counted per session"
    kv_dtype = kwargs.get("kv_dtype", kwargs["dtype"])
    assert four.target_kv - one.target_kv == 3 * kv_bytes_for(shapes["target"], 1000, kv_dtype)
    # One batched step carries four sessions' rows: its transient grows, never shrinks.
    assert four.workspace == workspace_bytes(
        shapes["target"],
        dtype=kwargs["dtype"],
        context=1000,
        gamma=kwargs.get("gamma", 0),
        draft=kwargs.get("draft"),
        prefill_tokens=kwargs.get("prefill_tokens", 0),
        sessions=4,
    )
    assert one.workspace < four.workspace <= 4 * one.workspace
    assert four.total == sum(four.as_dict()[p] for p in PARTS) and four.sessions == 4


def test_sessions_in_the_record_and_the_description(shapes):
    one = estimate_memory(shapes["target"], dtype="float32", context=100)
    four = estimate_memory(shapes["target"], dtype="float32", context=100, sessions=4)
    assert "sessions" not in one.as_dict() and four.as_dict()["sessions"] == 4  # one session: the record as before
    assert "x 4 sessions" in four.describe() and "sessions" not in one.describe()


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_sessions_below_one_or_not_whole_are_refused(shapes, bad):
    with pytest.raises(ValueError, match="sessions must be an integer >= 1"):
        estimate_memory(shapes["target"], dtype="float32", context=100, sessions=bad)
    with pytest.raises(ValueError, match="sessions must be an integer >= 1"):
        workspace_bytes(shapes["target"], dtype="float32", context=100, sessions=bad)


def test_largest_context_per_session_shrinks_with_sessions_and_is_exact(shapes):
    target = dataclasses.replace(shapes["target"], max_positions=None)
    kwargs = {"dtype": "bfloat16", "gamma": 4}
    ceiling = estimate_memory(target, context=20_000, **kwargs).total
    alone = largest_context(target, ceiling, **kwargs)
    four = largest_context(target, ceiling, sessions=4, **kwargs)
    assert 0 < four < alone
    assert estimate_memory(target, context=four, sessions=4, **kwargs).total <= ceiling
    assert estimate_memory(target, context=four + 1, sessions=4, **kwargs).total > ceiling


def test_cli_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", str(TARGET), "--dtype", "float32", "--sessions", "4", "--ceiling-gib", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "x 4 sessions" in out and "per session (4 sessions at once)" in out
    assert main(["--model", str(TARGET), "--dtype", "float32", "--sessions", "0"]) == 2
    assert "sessions must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("vocab", [None, list(range(0, 2048, 2))])
def test_eagle3_terms_count_what_the_drafter_allocates(vocab):
    """The EAGLE-3 head's bytes (its own LM head included) and its per-position state (layer KV + 3 kept states)."""
    from engine.drafters.eagle3 import Eagle3Drafter
    from engine.eagle3 import random_eagle3
    from engine.memory import eagle3_state_bytes_per_token, eagle3_weight_bytes

    target = load_model(str(TARGET), device="cpu", dtype="float32")
    shape = model_shape(str(TARGET))
    head = random_eagle3(target.model, seed=0, draft_vocab=vocab)
    held = sum(p.numel() * p.element_size() for p in head.parameters())
    assert eagle3_weight_bytes(shape, "float32", draft_vocab=len(vocab or [])) == held

    engine = Engine(target, EngineConfig(drafter="eagle3", gamma=3), eagle3=head)
    session = engine.new_session()
    engine.generate(PROMPT * 3, 20, session=session)
    drafter = session.drafter
    assert isinstance(drafter, Eagle3Drafter)
    positions = drafter._cache.k.shape[1]
    assert drafter._hidden.shape[0] == positions
    allocated = drafter._cache.allocated_bytes() + drafter._hidden.numel() * drafter._hidden.element_size()
    assert allocated == eagle3_state_bytes_per_token(shape, "float32") * positions
