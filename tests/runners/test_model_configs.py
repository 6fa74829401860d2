"""Model configs: every `conf/model` option composes; hub pairs fail at once offline naming the missing id;
the bundled spectune-tiny pair resolves from any working directory."""

import time

import pytest
from huggingface_hub import try_to_load_from_cache

from engine.loading import ModelNotFoundError, check_same_tokenizer, load_model
from runners.config import check_config
from runners.models import PROJECT_ROOT, load_models, resolve_model_path
from tests.conftest import CONF_DIR, compose_config

HUB_PAIRS = {
    "qwen2.5-coder-1.5b": ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    "qwen2.5-coder-7b": ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
}


def _model(name: str, *overrides: str):
    cfg = compose_config("config", f"model={name}", "run.name=x", *overrides)
    check_config(cfg)
    return cfg.model


def test_every_model_option_composes_under_its_own_name():
    names = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
    assert {"spectune-tiny", *HUB_PAIRS} <= set(names)
    needs_target = {  # options without a default target, and what else they need
        "local": ["model.target=/models/mine"],
        "gguf": ["model.target=/models/mine.gguf", "engine.backend=llama-server"],
    }
    for name in names:
        model = _model(name, *needs_target.get(name, []))
        assert model.name == name, f"conf/model/{name}.yaml records the name {model.name!r}"
        assert model.target and model.dtype in ("auto", "float32")


@pytest.mark.parametrize("name", sorted(HUB_PAIRS))
def test_hub_pair_fails_fast_offline_naming_the_id(name, monkeypatch):
    monkeypatch.delenv("SPECTUNE_ALLOW_HUB", raising=False)  # cache only: never the network in tests
    model = _model(name)
    assert (model.target, model.draft) == HUB_PAIRS[name]
    assert model.dtype == "auto"
    if any(isinstance(try_to_load_from_cache(i, "config.json"), str) for i in HUB_PAIRS[name]):
        pytest.skip(f"{name} is in this machine's Hugging Face cache: loading it is not an offline failure")
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as info:
        load_models(model.target, model.draft, device="cpu", dtype=model.dtype)
    # A generous bound: without the cache-only load, transformers retries the network for ~25 s per file.
    assert time.perf_counter() - start < 5, "loading a missing hub model must not wait on the network"
    assert model.target in str(info.value) and "hf download" in str(info.value)
    with pytest.raises(ModelNotFoundError, match=model.draft):
        load_model(model.draft, device="cpu")


def test_spectune_tiny_resolves_from_any_working_directory(tmp_path, monkeypatch):
    model = _model("spectune-tiny")
    assert (model.target, model.draft) == ("models/spectune-tiny/target", "models/spectune-tiny/draft")
    assert model.dtype == "float32"  # the model card's numbers are fp32 numbers
    if not (PROJECT_ROOT / model.target).is_dir():
        pytest.skip("models/spectune-tiny is not built in this checkout")
    monkeypatch.chdir(tmp_path)  # a relative path that is not here resolves against the project root
    assert resolve_model_path(model.target) == str(PROJECT_ROOT / model.target)
    models = load_models(model.target, model.draft, device="cpu", dtype=model.dtype)
    assert models.draft is not None
    check_same_tokenizer(models.target, models.draft)
    assert models.target.model.num_parameters() > models.draft.model.num_parameters()
