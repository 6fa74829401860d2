"""serving/eagle3_gguf.py: an EAGLE-3 head folder to the GGUF the real, pinned llama-server drafts from.

Without a binary: the folder checks (one line naming the file at fault) and the d2t offsets read as absolute
ids. With the binary and converter (tests/serving/conftest.py: skip with the reason without them, fail under
SPECTUNE_REQUIRE_LLAMA=1): the GGUF carries absolute d2t ids and the layer ids, the cache converts once per
folder contents, and llama-server loads target + head with `--spec-type draft-eagle3`, drafts with it and
serves the same greedy tokens as without speculation.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest

import serving.eagle3_gguf as eagle3_gguf_module
from engine.eagle3 import random_eagle3, save_eagle3
from serving.eagle3_gguf import absolute_d2t, cached_eagle3_gguf, check_head, eagle3_gguf, main
from serving.gguf import converter_dir
from serving.llama_server import LlamaServer

MODELS = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"
TARGET = MODELS / "target"
LAYER_IDS = [1, 2, 3]  # inputs of the target's decoder layers 1, 2 and 3 (it has 4)
DRAFT_VOCAB = sorted(random.Random(0).sample(range(8192), 1024))  # smaller than the target's: d2t is not identity
REPEATED = (
    "def total(items):\n    result = 0\n    for item in items:\n        result += item.price\n    return result\n"
)


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> Path:
    """A random EAGLE-3 head for the bundled target, saved in the HF EAGLE-3 layout (engine/eagle3.py)."""
    from engine.loading import load_model

    target = load_model(str(TARGET), device="cpu", dtype="float32").model
    module = random_eagle3(target, seed=0, layer_ids=LAYER_IDS, draft_vocab=DRAFT_VOCAB)
    return save_eagle3(module, tmp_path_factory.mktemp("eagle3") / "head")


def _edited(head: Path, tmp_path: Path, **changes) -> Path:
    """A copy of `head` whose config.json has `changes` (None removes a key)."""
    copy = shutil.copytree(head, tmp_path / "head")
    config = json.loads((copy / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_the_head_checks_out_and_its_d2t_offsets_are_absolute_draft_ids(head):
    config = check_head(head, TARGET)
    assert config["eagle_aux_hidden_state_layer_ids"] == LAYER_IDS and config["draft_vocab_size"] == len(DRAFT_VOCAB)
    assert absolute_d2t(head) == DRAFT_VOCAB  # HF stores offsets (target id = i + d2t[i]); these are the ids


def test_a_folder_without_config_json_is_one_line_naming_the_file(tmp_path, capsys):
    (tmp_path / "head").mkdir()
    code = main(["--target", str(TARGET), "--head", str(tmp_path / "head"), "--out", str(tmp_path / "x.gguf")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and f"{tmp_path / 'head' / 'config.json'}: no such file" in err
    with pytest.raises(FileNotFoundError, match=r"config\.json: no such file"):
        eagle3_gguf(tmp_path / "head", TARGET, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_hidden_layers": 2}, "num_hidden_layers is 2; an EAGLE-3 head has exactly 1"),
        ({"draft_vocab_size": None}, "draft_vocab_size None"),
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}, "must be three target layer ids in 0..3"),
        ({"eagle_aux_hidden_state_layer_ids": [1, 2]}, "must be three target layer ids"),
        ({"vocab_size": 4096}, "vocab_size 4096 differs from the target's 8192"),
        ({"draft_vocab_size": 512}, "lm_head.weight has 1024 rows, draft_vocab_size is 512"),
    ],
)
def test_a_broken_config_is_one_line_naming_it(head, tmp_path, capsys, changes, message):
    broken = _edited(head, tmp_path, **changes)
    code = main(["--target", str(TARGET), "--head", str(broken), "--out", str(tmp_path / "x.gguf")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert err.startswith(f"error: {broken / 'config.json'}: ") or err.startswith(f"error: {broken}/model"), err
    assert message in err


def test_missing_weights_name_the_file(head, tmp_path):
    broken = _edited(head, tmp_path)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors: no such file"):
        check_head(broken, TARGET)


# -- with the pinned converter and llama-server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def head_gguf(binary, head, tmp_path_factory) -> Path:
    return eagle3_gguf(head, TARGET, tmp_path_factory.mktemp("eagle3-gguf") / "head.gguf")


def test_the_gguf_holds_absolute_d2t_ids_and_the_layer_ids(head_gguf):
    sys.path.insert(0, str(converter_dir() / "gguf-py"))
    try:
        from gguf import GGUFReader
    finally:
        sys.path.pop(0)
    reader = GGUFReader(str(head_gguf))
    fields = {name: field.contents() for name, field in reader.fields.items()}
    assert fields["general.architecture"] == "eagle3"
    assert fields["eagle3.target_layers"] == LAYER_IDS and fields["eagle3.target_hidden_size"] == 256
    tensors = {t.name: t for t in reader.tensors}
    assert "t2d" not in tensors and "token_embd.weight" not in tensors  # the target's embedding is used
    assert [int(i) for i in tensors["d2t"].data] == DRAFT_VOCAB  # absolute target ids, in draft order


def test_the_cache_converts_once_per_folder_contents(binary, head, tmp_path, monkeypatch):
    real = eagle3_gguf_module.cache_file
    monkeypatch.setattr(eagle3_gguf_module, "cache_file", lambda n, f, k: tmp_path / real(n, f, k).name)
    copy = shutil.copytree(head, tmp_path / "head")
    first = cached_eagle3_gguf(str(TARGET), str(copy), "f32")
    stamp = first.stat().st_mtime_ns
    assert cached_eagle3_gguf(str(TARGET), str(copy), "f32") == first and first.stat().st_mtime_ns == stamp
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")  # an edited head: a new file
    assert cached_eagle3_gguf(str(TARGET), str(copy), "f32") != first


def test_llama_server_drafts_with_the_head_and_serves_the_same_greedy_tokens(binary, ggufs, head_gguf, tmp_path):
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(TARGET).encode(REPEATED * 4)
    body = {"prompt": prompt, "n_predict": 24, "temperature": 0.0, "top_k": 1, "return_tokens": True}
    body["ignore_eos"] = True  # a fixed length: several draft rounds
    with LlamaServer(binary, ggufs["target"], ["-t", "1"], log_path=tmp_path / "off.log") as server:
        off = server.post("/completion", body)
    args = ["-t", "1", "--spec-type", "draft-eagle3", "-md", str(head_gguf), "--spec-draft-n-max", "4"]
    with LlamaServer(binary, ggufs["target"], args, log_path=tmp_path / "on.log") as server:
        on = server.post("/completion", body)
        log = server.log_text()
    assert on["timings"].get("draft_n", 0) > 0, on["timings"]  # the head drafted
    assert on["tokens"] == off["tokens"] and len(on["tokens"]) == 24
    assert f"loading draft model '{head_gguf}'" in log and "draft acceptance" in log
