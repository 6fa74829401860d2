"""export: drafter `eagle3` for vLLM and SGLang, against the pinned key sets and each server's layer-id convention.

vLLM 0.33.0 reads the head folder as spectune writes it (ids = inputs of those target layers); SGLang 0.5.23
reads only eagle_config's ids and captures the input of layer id + 1, so its export writes a copy of the
head's config with ids - 1 (export/sglang.py docstring).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from engine.eagle3 import random_eagle3, save_eagle3
from engine.engine import EngineConfig
from export import keys, llama_server, readme, sglang, vllm, write_exports
from export.fit import server_fit
from export.record import APPROXIMATE, EXACT, NONE, off_record, read_eagle3_head
from tests.export.test_export import flag_dict, make_record

TARGET = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny" / "target"
EAGLE3 = EngineConfig(drafter="eagle3", gamma=4)


@pytest.fixture(scope="module")
def tiny_target():
    from engine.loading import load_model

    return load_model(str(TARGET), device="cpu", dtype="float32").model


def _head(target, folder: Path, layer_ids: list[int], draft_vocab: list[int] | None = None) -> Path:
    return save_eagle3(random_eagle3(target, seed=0, layer_ids=layer_ids, draft_vocab=draft_vocab), folder)


@pytest.fixture(scope="module")
def head(tiny_target, tmp_path_factory) -> Path:
    """A head reading the inputs of target layers 1, 2, 3 with a 1024-token draft vocabulary."""
    return _head(tiny_target, tmp_path_factory.mktemp("eagle3") / "head", [1, 2, 3], list(range(0, 8192, 8)))


def test_vllm_runs_the_head_folder_as_written_with_pinned_keys(head, tmp_path):
    write_exports(tmp_path, make_record(EAGLE3, eagle3=str(head)))
    config = json.loads((tmp_path / vllm.FILE).read_text())
    assert config == {"method": "eagle3", "model": str(head), "num_speculative_tokens": 4}
    assert set(config) <= keys.vllm_keys() and config["method"] in vllm.METHODS
    rows = {r.setting: r for r in vllm.build(make_record(EAGLE3, eagle3=str(head)))[1]}
    assert rows["drafter=eagle3"].fit == EXACT and "_get_eagle3_aux_layers_from_config" in rows["drafter=eagle3"].reason


def test_sglang_runs_eagle3_on_a_copy_with_its_own_layer_ids(head, tmp_path):
    write_exports(tmp_path, make_record(EAGLE3, eagle3=str(head)))
    flags = flag_dict(tmp_path / sglang.FILE)
    assert set(flags) <= keys.sglang_flags()
    builtins = re.search(r"Builtins: ([A-Z0-9, ]+)\.", keys.sglang_help("--speculative-algorithm")).group(1)
    assert flags["--speculative-algorithm"] == "EAGLE3" and "EAGLE3" in builtins.split(", ")
    copy = tmp_path.resolve() / sglang.HEAD_DIR
    assert flags == {
        "--speculative-algorithm": "EAGLE3",
        "--speculative-draft-model-path": str(copy),
        "--speculative-num-steps": "4",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "5",
    }
    config = json.loads((copy / "config.json").read_text())
    original = json.loads((head / "config.json").read_text())
    # SGLang captures the input of layer id + 1: spectune's inputs of layers 1, 2, 3 are its 0, 1, 2
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": True}
    assert {k: v for k, v in config.items() if k != "eagle_config"} == original  # everything else as written
    assert (copy / "model.safetensors").resolve() == (head / "model.safetensors").resolve()
    write_exports(tmp_path, make_record(EAGLE3, eagle3=str(head)))  # a second export replaces the copy
    assert "eagle_config.eagle_aux_hidden_state_layer_ids = [0, 1, 2]" in (tmp_path / readme.FILE).read_text()


def test_the_last_layers_output_is_out_of_sglangs_reach_but_not_vllms(tiny_target, tmp_path):
    last = _head(tiny_target, tmp_path / "head", [1, 2, 4], list(range(1024)))  # 4: after the target's 4 layers
    record = make_record(EAGLE3, eagle3=str(last))
    write_exports(tmp_path / "best", record)
    assert "--speculative-algorithm" not in flag_dict(tmp_path / "best" / sglang.FILE)
    assert not (tmp_path / "best" / sglang.HEAD_DIR).exists()
    row = next(r for r in sglang.build(record)[1] if r.setting == "drafter=eagle3")
    assert row.fit == NONE and "never captures" in row.reason
    assert json.loads((tmp_path / "best" / vllm.FILE).read_text())["method"] == "eagle3"


def test_a_full_vocabulary_head_with_d2t_is_refused_by_vllm(tiny_target, tmp_path):
    from safetensors.torch import load_file, save_file

    full = _head(tiny_target, tmp_path / "head", [1, 2, 3])  # draft vocabulary = the target's
    # spectune writes no maps on a full-vocabulary head; heads trained elsewhere often carry a zero d2t anyway
    weights = full / "model.safetensors"
    state = load_file(str(weights))
    state["d2t"] = torch.zeros(8192, dtype=torch.int64)
    save_file(state, str(weights))
    info = read_eagle3_head(full)
    assert info is not None and info.has_d2t and info.draft_vocab_size == info.vocab_size
    write_exports(tmp_path / "best", make_record(EAGLE3, eagle3=str(full)))
    assert json.loads((tmp_path / "best" / vllm.FILE).read_text()) == {}
    assert "refuses to load that d2t" in (tmp_path / "best" / readme.FILE).read_text()
    assert flag_dict(tmp_path / "best" / sglang.FILE)["--speculative-algorithm"] == "EAGLE3"  # SGLang takes it


def test_an_unreadable_head_still_exports_and_says_what_sglang_needs(tmp_path):
    record = make_record(EAGLE3, eagle3="/nowhere/eagle3")
    write_exports(tmp_path, record)
    assert json.loads((tmp_path / vllm.FILE).read_text())["model"] == "/nowhere/eagle3"
    assert flag_dict(tmp_path / sglang.FILE)["--speculative-algorithm"] == "EAGLE3"
    assert not (tmp_path / sglang.HEAD_DIR).exists()
    assert "could not be read here" in (tmp_path / sglang.FILE).read_text()
    assert server_fit(EAGLE3, "vLLM").fit == EXACT and server_fit(EAGLE3, "SGLang").fit == APPROXIMATE


def test_confidence_and_sampling_rows_and_off_drops_the_head(head):
    engine = EngineConfig(drafter="eagle3", gamma=5, gamma_policy="confidence", confidence=0.4, temperature=0.7)
    record = make_record(engine, eagle3=str(head), eagle3_gguf="/x/head.gguf")
    for rows in (vllm.build(record)[1], sglang.build(record)[1]):
        fits = {r.setting.split(" ")[0]: r.fit for r in rows}
        assert fits["gamma_policy=confidence"] == NONE and fits["temperature=0.7"] == APPROXIMATE
    off = off_record(record)
    assert off.eagle3 is None and off.eagle3_gguf is None and off.engine.drafter == "none"


def test_llama_server_runs_the_head_gguf_as_draft_eagle3(head):
    engine = EngineConfig(drafter="eagle3", gamma=3, gamma_policy="confidence", confidence=0.3)
    flags = dict(llama_server.build(make_record(engine, eagle3=str(head), eagle3_gguf="/x/head.gguf"))[0])
    assert flags["--spec-type"] == "draft-eagle3" and flags["--model-draft"] == "/x/head.gguf"
    assert flags["--spec-draft-n-max"] == "3" and flags["--spec-draft-p-min"] == "0.3"
    assert set(flags) <= set(llama_server.KNOWN_FLAGS) and "draft-eagle3" in llama_server.SPEC_TYPES
    # Without a measured GGUF the file names the conversion (both folders: the converter reads the target's)
    unconverted = dict(llama_server.build(make_record(engine, eagle3=str(head)))[0])
    assert unconverted["--model-draft"] == f"<eagle3-gguf-of:{make_record(engine).target}+{head}>"
    assert llama_server.not_runnable(engine) is None


def test_eagle3_with_a_lookup_runs_first_wins_on_llama_server_and_never_half(head):
    engine = EngineConfig(drafter="eagle3+ngram", gamma=4, options={"ngram.min_match": 2})
    flags = dict(llama_server.build(make_record(engine, eagle3=str(head), eagle3_gguf="/x/head.gguf"))[0])
    assert flags["--spec-type"] == "ngram-simple,draft-eagle3" and flags["--model-draft"] == "/x/head.gguf"
    assert flags["--spec-ngram-simple-size-n"] == "2" and flags["--spec-draft-n-max"] == "4"
    assert llama_server.not_runnable(engine) is None
    extend = EngineConfig(drafter="eagle3+ngram", gamma=4, options={"policy": "extend", "ngram.min_match": 2})
    reason = llama_server.not_runnable(extend)
    assert reason is not None and "draft-eagle3" in reason and "first-wins" in reason


def test_a_head_with_norm_before_residual_runs_on_vllm_and_llama_server_but_not_sglang(tiny_target, tmp_path):
    head = save_eagle3(
        random_eagle3(
            tiny_target, seed=0, layer_ids=[1, 2, 3], draft_vocab=list(range(1024)), norm_before_residual=True
        ),
        tmp_path / "head",
    )
    assert json.loads((head / "config.json").read_text())["norm_before_residual"] is True
    record = make_record(EAGLE3, eagle3=str(head), eagle3_gguf="/x/head.gguf")
    write_exports(tmp_path / "best", record)
    assert json.loads((tmp_path / "best" / vllm.FILE).read_text())["method"] == "eagle3"
    assert "--speculative-algorithm" not in flag_dict(tmp_path / "best" / sglang.FILE)
    row = next(r for r in sglang.build(record)[1] if r.setting == "drafter=eagle3")
    assert row.fit == NONE and "norm_before_residual" in row.reason
    assert dict(llama_server.build(record)[0])["--spec-type"] == "draft-eagle3"
