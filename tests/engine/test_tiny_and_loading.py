"""Tests for the tiny model factory (engine.tiny) and model loading (engine.loading); CPU only, offline."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, Qwen2ForCausalLM

from engine.loading import (
    LoadedModel,
    ModelNotFoundError,
    TokenizerMismatchError,
    check_same_tokenizer,
    cpu_has_native_bf16,
    load_model,
    resolve_device,
    resolve_dtype,
)
from engine.tiny import CHAT_TEMPLATE, make_tiny_model, train_tokenizer
from engine.tiny import main as tiny_main

REPO_ROOT = Path(__file__).resolve().parents[2]
# Small enough that building one model takes well under a second on a slow CPU.
TINY = {"layers": 2, "hidden": 64, "vocab": 512}


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama target with 2 heads (so 1 KV head: grouped-query attention)."""
    return make_tiny_model(tmp_path_factory.mktemp("target"), heads=2, **TINY)


@pytest.fixture(scope="module")
def target(target_dir: Path) -> LoadedModel:
    """The tiny target, loaded on CPU."""
    return load_model(str(target_dir), device="cpu")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("arch", "cls"), [("llama", LlamaForCausalLM), ("qwen2", Qwen2ForCausalLM)])
def test_tiny_model_loads_with_transformers(tmp_path: Path, arch: str, cls: type) -> None:
    out = make_tiny_model(tmp_path / arch, arch=arch, heads=2, **TINY)
    assert out == tmp_path / arch
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert isinstance(model, cls)
    config = model.config
    assert config.vocab_size == 512 and len(tokenizer) <= 512
    assert (config.num_attention_heads, config.num_key_value_heads) == (2, 1)
    assert config.tie_word_embeddings is False
    assert config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert config.pad_token_id == tokenizer.pad_token_id
    assert config.bos_token_id == tokenizer.bos_token_id
    ids = tokenizer("def f(x):\n    return x", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512)


def test_same_seed_same_weights_different_seed_different(tmp_path: Path) -> None:
    a = make_tiny_model(tmp_path / "a", seed=3, **TINY)
    b = make_tiny_model(tmp_path / "b", seed=3, **TINY)
    c = make_tiny_model(tmp_path / "c", seed=4, **TINY)
    assert _sha(a / "model.safetensors") == _sha(b / "model.safetensors")
    assert _sha(a / "tokenizer.json") == _sha(b / "tokenizer.json")
    weights_a, weights_c = load_file(a / "model.safetensors"), load_file(c / "model.safetensors")
    assert weights_a.keys() == weights_c.keys()
    assert not torch.equal(
        weights_a["model.layers.0.mlp.up_proj.weight"], weights_c["model.layers.0.mlp.up_proj.weight"]
    )


def test_factory_leaves_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_tiny_model(tmp_path / "m", **TINY)
    assert torch.equal(torch.rand(3), expected)


def test_tokenizer_from_gives_identical_tokenizer_and_padded_draft(
    tmp_path: Path, target_dir: Path, target: LoadedModel
) -> None:
    draft_dir = make_tiny_model(tmp_path / "draft", layers=1, hidden=64, vocab=640, tokenizer_from=target_dir)
    draft = load_model(str(draft_dir), device="cpu")
    assert draft.tokenizer.get_vocab() == target.tokenizer.get_vocab()
    assert draft.tokenizer.chat_template == target.tokenizer.chat_template
    assert (draft.vocab_size, target.vocab_size) == (640, 512)
    assert draft.eos_token_ids == target.eos_token_ids
    check_same_tokenizer(target, draft)  # differing config.vocab_size is padding, not a mismatch

    # Without --vocab the draft is sized to the tokenizer.
    sized = make_tiny_model(tmp_path / "sized", layers=1, hidden=64, vocab=None, tokenizer_from=target_dir)
    assert AutoModelForCausalLM.from_pretrained(sized).config.vocab_size == len(target.tokenizer)
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        make_tiny_model(tmp_path / "small", layers=1, hidden=64, vocab=300, tokenizer_from=target_dir)


def test_vocab_larger_than_bpe_reaches_is_padded(tmp_path: Path) -> None:
    out = make_tiny_model(tmp_path / "big", layers=1, hidden=64, vocab=20000)
    loaded = load_model(str(out), device="cpu")
    assert loaded.vocab_size == 20000
    assert len(loaded.tokenizer) < 20000


def test_train_tokenizer_is_fast_deterministic_and_validated() -> None:
    start = time.perf_counter()
    first = train_tokenizer(512)
    assert time.perf_counter() - start < 5
    assert first.get_vocab() == train_tokenizer(512).get_vocab()
    assert len(first) == 512
    assert [first.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [
        0,
        1,
        2,
    ]
    text = "naïve café → 😀\tx = {'a': 1}"
    assert first.decode(first.encode(text)) == text  # byte-level: any text round-trips
    with pytest.raises(ValueError, match="at least"):
        train_tokenizer(100)


def test_chat_template_renders(target: LoadedModel) -> None:
    tokenizer = target.tokenizer
    assert tokenizer.chat_template == CHAT_TEMPLATE
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # transformers 5 returns a BatchEncoding from a tokenizing apply_chat_template, not a list of ids.
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert ids == tokenizer.encode(text)
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3


def test_loaded_model_fields(target: LoadedModel, target_dir: Path) -> None:
    assert target.path == str(target_dir.resolve())
    assert target.device == torch.device("cpu") and target.dtype == torch.float32
    assert not target.model.training
    assert next(target.model.parameters()).dtype == torch.float32
    im_end = target.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert target.eos_token_ids == {target.tokenizer.eos_token_id, im_end}


def test_cli_writes_model(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = ["--arch", "qwen2", "--layers", "1", "--hidden", "64", "--vocab", "300", "--dtype", "float64"]
    result = subprocess.run(
        [sys.executable, "-m", "engine.tiny", str(out), *args, "--seed", "7"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "parameters" in lines[0] and str(out) in lines[0]
    loaded = load_model(str(out), device="cpu", dtype="float64")
    assert isinstance(loaded.model, Qwen2ForCausalLM)
    assert loaded.vocab_size == 300 and loaded.dtype == torch.float64
    assert next(loaded.model.parameters()).dtype == torch.float64


def test_cli_reports_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: a second interpreter would spend seconds importing torch just to print an error.
    with pytest.raises(SystemExit) as info:
        tiny_main([str(tmp_path / "x"), "--hidden", "64", "--heads", "3"])
    assert info.value.code == 2
    assert "multiple of heads" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_missing_path_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFoundError, match="no-such-model") as info:
        load_model(str(missing), device="cpu")
    assert str(missing) in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(ModelNotFoundError, match="not found"):
        load_model("./definitely/not/here", device="cpu")


def test_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match=r"config\.json"):
        load_model(str(tmp_path / "empty"), device="cpu")


def test_unknown_hub_id_fails_fast_with_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECTUNE_ALLOW_HUB", raising=False)
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as info:
        load_model("nonexistent-org/nonexistent-model", device="cpu")
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert "nonexistent-org/nonexistent-model" in message
    assert "local" in message and "--model" in message


def test_resolve_device_and_dtype() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in {"cpu", "cuda"}
    with pytest.raises(ValueError, match=r"auto, cpu, cuda, cuda:N"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda:0")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    # A CPU never casts an fp32 checkpoint down; a bf16 one stays bf16 where the CPU computes bf16 natively.
    assert resolve_dtype("auto", "cpu", checkpoint=torch.float32) == torch.float32
    native = torch.float32 if not cpu_has_native_bf16() else torch.bfloat16
    assert resolve_dtype("auto", "cpu", checkpoint=torch.bfloat16) == native
    assert resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert resolve_dtype("FP16", "cpu") == torch.float16
    assert resolve_dtype("float64", "cpu") == torch.float64
    with pytest.raises(ValueError, match=r"allowed: auto, float32, fp32, bfloat16"):
        resolve_dtype("int8", "cpu")


def test_check_same_tokenizer_rejects_different_tokenizers(tmp_path: Path, target: LoadedModel) -> None:
    other_dir = make_tiny_model(tmp_path / "other", layers=1, hidden=64, vocab=400)
    other = load_model(str(other_dir), device="cpu")
    with pytest.raises(TokenizerMismatchError, match=r"512 vs 400 tokens") as info:
        check_same_tokenizer(target, other)
    assert target.path in str(info.value) and other.path in str(info.value)
    assert "first differing id" in str(info.value)
    assert isinstance(info.value, ValueError)

    # Same vocabulary but a different eos token is still a mismatch: generation would stop elsewhere.
    renamed = train_tokenizer(512)
    renamed.eos_token = "<|im_end|>"
    impostor = LoadedModel(target.model, renamed, "impostor", target.device, target.dtype)
    with pytest.raises(TokenizerMismatchError, match="eos_token"):
        check_same_tokenizer(target, impostor)


def test_broken_model_files_are_named_not_loaded_half_random(tmp_path: Path, target_dir: Path) -> None:
    import json
    import shutil

    from safetensors.torch import save_file

    from engine.loading import ModelFileError

    def copy(name: str) -> Path:
        return Path(shutil.copytree(target_dir, tmp_path / name))

    folder = copy("sharded")  # an index that names a shard which is not there
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    weight_map = {"lm_head.weight": "model-00001-of-00002.safetensors", "x": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelFileError, match=r"model-00002-of-00002\.safetensors, which is missing"):
        load_model(str(folder), device="cpu")
    folder = copy("tokenizer")
    (folder / "tokenizer.json").write_text("{")
    with pytest.raises(ModelFileError, match=r"tokenizer\.json is not valid JSON at line 1"):
        load_model(str(folder), device="cpu")
    folder = copy("missing-tensor")  # transformers would initialise it randomly and only warn
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.0.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFileError, match=r"lack 1 tensor\(s\).*up_proj"):
        load_model(str(folder), device="cpu")
    folder = copy("no-type")
    config = json.loads((folder / "config.json").read_text())
    del config["model_type"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match="model_type"):
        load_model(str(folder), device="cpu")
