"""A GGUF file is the whole model on engine.backend=llama-server: no Hugging Face folder, no weights in Python.

The stand-ins are the bundled models converted to GGUF (tests/serving/conftest.py), copied alone into a
folder of their own so nothing of the Hugging Face model is beside them. What is checked: the file's facts
from its metadata (native MTP layers included); both tokenizers a GGUF-only target can have (llama.cpp's own
through the vocabulary server, token for token the prompts llama.cpp's own templating gives, on two
architectures; and the Hugging Face one a file carries); a GGUF-only run that loads no weights and drafts
with the file's own MTP layers, OFF on the same file; the tuner offering draft-mtp from those layers; and
the checks made before a server starts, each one line naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from engine.drafters import Needs
from runners.config import available_heads, check_config
from serving.gguf_checks import check_eagle3_head, check_mtp_layers, check_same_vocabulary, check_tokenizer
from serving.gguf_file import GgufError, read_gguf
from serving.gguf_tokenizer import embedded_tokenizer_json, gguf_tokenizer
from serving.server_tokenizer import ServerTokenizer
from tests.conftest import runner_config
from tests.serving.conftest import MODELS, server_pids

MESSAGES = [
    {"role": "system", "content": "You are a coding agent.\n  Reply with one bash block."},
    {"role": "user", "content": "Fix `parse()` in a.py:\n\tdef parse(s):\n\t\treturn s <|im_end|> é"},
]


@pytest.fixture
def alone(gguf_only):
    """The stand-in files, each alone in a folder without any Hugging Face file."""
    return gguf_only


def _cfg(tmp: Path, *overrides: str):
    return runner_config(
        tmp,
        "model=gguf",
        "engine.backend=llama-server",
        "task.split=test",
        "task.limit=1",
        "server.threads=1",
        "tracking=none",
        *overrides,
    )


def test_the_files_facts_come_from_its_metadata(alone):
    target, mimo2 = read_gguf(alone["target"]), read_gguf(alone["mtp"])
    config = json.loads((MODELS / "target" / "config.json").read_text())
    assert (target.architecture, target.file_type, target.nextn_layers) == ("llama", "F32", 0)
    assert (mimo2.architecture, mimo2.nextn_layers) == ("mimo2", 1)  # the module is a layer of the file
    assert target.n_layer == config["num_hidden_layers"] and target.n_embd == config["hidden_size"]
    assert target.context_length == config["max_position_embeddings"]
    assert target.vocab_size == config["vocab_size"] and target.end_ids == {config["eos_token_id"]}
    weights = (MODELS / "target" / "model.safetensors").stat().st_size  # f32 both: the same tensors' bytes
    assert abs(target.weight_bytes - weights) < 0.01 * weights


def test_a_file_that_is_not_gguf_is_one_line_naming_it(tmp_path):
    broken = tmp_path / "model.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 7)  # the magic, then a truncated header
    with pytest.raises(GgufError, match=r"model\.gguf: cannot read it as GGUF"):
        read_gguf(broken)
    (tmp_path / "notes.gguf").write_text("hello")
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_gguf(tmp_path / "notes.gguf")
    with pytest.raises(GgufError, match="no such GGUF file"):
        read_gguf(tmp_path / "missing.gguf")


@pytest.mark.parametrize("name", ["target", "mtp"])  # llama and mimo2: two architectures
def test_llama_cpps_own_tokenizer_gives_the_prompt_llama_cpp_templates(binary, alone, name):
    """The vocabulary server's prompt ids equal the server's own /apply-template then /tokenize, token for token."""
    tokenizer = ServerTokenizer(alone[name], binary)
    try:
        mine = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
        server = tokenizer._running()
        text = server.post("/apply-template", {"messages": MESSAGES})["prompt"]
        theirs = server.post("/tokenize", {"content": text, "add_special": True, "parse_special": True})["tokens"]
        assert mine == theirs and len(mine) > 20
        assert tokenizer.decode(mine) == text
        assert tokenizer.all_special_ids == [0, 1, 2] and tokenizer.eos_token == "<|endoftext|>"
        assert tokenizer.decode(mine, skip_special_tokens=True).count("<|im_start|>") == 0
    finally:
        tokenizer.close()
    assert server_pids(str(alone[name])) == [], "the vocabulary server outlived close()"


def test_a_file_carrying_its_hugging_face_tokenizer_runs_with_it(binary, alone):
    """The bundled models' pre-tokenizer is unknown to llama.cpp: the converter embeds the folder's tokenizer,
    and the GGUF-only target then tokenizes exactly as the folder does."""
    assert embedded_tokenizer_json(alone["target"]) is not None
    tokenizer = gguf_tokenizer(alone["target"], binary)
    folder = AutoTokenizer.from_pretrained(MODELS / "target")
    text = "def add(a, b):\n    return a + b  # Ünïcode <|im_end|>\n\n  x"
    assert tokenizer.encode(text, add_special_tokens=False) == folder.encode(text, add_special_tokens=False)
    assert tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True) == folder.apply_chat_template(
        MESSAGES, add_generation_prompt=True
    )
    assert sorted(tokenizer.all_special_ids) == sorted(folder.all_special_ids)
    assert tokenizer.eos_token_id == folder.eos_token_id


def test_a_gguf_only_run_loads_no_weights_and_drafts_with_the_files_own_mtp_layers(
    binary, alone, tmp_path, monkeypatch, capsys
):
    import runners.models
    from runners.run import execute

    def no_weights(*args, **kwargs):
        raise AssertionError("a llama-server run loaded torch weights")

    monkeypatch.setattr(runners.models, "load_model", no_weights)
    mtp = ("engine=mtp", "engine.gamma=3", f"model.target={alone['mtp']}")
    cfg = _cfg(tmp_path, *mtp, "run.name=mtp", "hardware=rtx4060")
    assert available_heads(cfg).mtp  # no model.mtp folder, no server.mtp_gguf: the file's own layers
    summary = execute(cfg)
    baseline, candidate = summary["baseline"], summary["candidate"]
    sides = summary["backend"]
    assert sides["baseline"]["target_gguf"] == sides["candidate"]["target_gguf"] == str(alone["mtp"])
    assert "--spec-type draft-mtp" in " ".join(sides["candidate"]["args"])
    assert candidate["acceptance_rate"] > 0 and summary["diverged_tasks"] == []
    assert baseline["successes"] == 1  # the stand-in solves its task: the embedded tokenizer is the folder's
    assert server_pids(str(alone["mtp"])) == [], "a llama-server outlived the run"
    if binary.backend == "cpu":  # hardware=rtx4060 on a CPU build: said in one line before anything runs
        assert "is a CPU build: its timings are this CPU's, not rtx4060's" in capsys.readouterr().out


def test_a_plain_file_offers_no_mtp_and_says_what_would(alone, tmp_path):
    cfg = _cfg(tmp_path, f"model.target={alone['target']}", "engine=mtp", "run.name=x")
    assert not available_heads(cfg).mtp
    with pytest.raises(ValueError, match=r"a target GGUF with MTP layers, or server\.mtp_gguf"):
        check_config(cfg)
    with pytest.raises(ValueError, match=r"server\.cache_type_k='q9'.*choose one of: f32, f16, bf16, q8_0"):
        check_config(_cfg(tmp_path, f"model.target={alone['target']}", "server.cache_type_k=q9", "run.name=x"))
    with pytest.raises(ValueError, match=r"engine\.backend=llama-server only"):
        check_config(_cfg(tmp_path, f"model.target={alone['target']}", "engine.backend=builtin", "run.name=x"))


def test_files_for_another_model_are_refused_before_a_server_starts(alone, tmp_path):
    target = read_gguf(alone["target"])
    with pytest.raises(ValueError, match=r"server\.mtp_gguf=.*Tiny-target-F32\.gguf: llama\.nextn_predict_layers"):
        check_mtp_layers(target, "server.mtp_gguf")
    draft = read_gguf(alone["draft"])  # a narrower model: a head made for the target does not fit it
    with pytest.raises(ValueError, match=r"eagle3\.target_hidden_size is 256, .*\.embedding_length is 64"):
        check_eagle3_head(draft, read_gguf(alone["eagle3"]), "server.eagle3_gguf")
    check_eagle3_head(target, read_gguf(alone["eagle3"]), "server.eagle3_gguf")  # its own target: fine
    check_same_vocabulary(target, draft, "server.draft_gguf")


def test_a_gguf_of_another_vocabulary_is_refused_naming_the_field(binary, alone, tmp_path):
    from engine.tiny import make_tiny_model
    from serving.gguf import export_gguf

    other = make_tiny_model(tmp_path / "other", layers=1, hidden=64, seed=3)  # its own, different tokenizer
    other_gguf = export_gguf(other, tmp_path / "other.gguf", "f32")
    folder = AutoTokenizer.from_pretrained(MODELS / "target")
    with pytest.raises(ValueError, match=r"other\.gguf: tokenizer\.ggml\.tokens(\[\d+\])? .*another model"):
        check_tokenizer(read_gguf(other_gguf), folder, "server.target_gguf")
    with pytest.raises(ValueError, match=r"server\.draft_gguf=.*other\.gguf: .*another model"):
        check_same_vocabulary(read_gguf(alone["target"]), read_gguf(other_gguf), "server.draft_gguf")
    check_tokenizer(read_gguf(alone["target"]), folder, "server.target_gguf")  # the folder's own file passes


def test_a_separate_mtp_file_beside_another_target_file_is_refused(binary, alone, tmp_path):
    from runners.backends.llama_server_setup import server_settings
    from runners.models import load_models

    cfg = _cfg(
        tmp_path, "model=spectune-tiny", f"server.target_gguf={alone['target']}", f"server.mtp_gguf={alone['mtp']}"
    )
    models = load_models(str(MODELS / "target"), None, weights=False)
    with pytest.raises(ValueError, match="two files: OFF would run on one and draft-mtp on the other"):
        server_settings(cfg, models, tmp_path, Needs(mtp=True))
    cfg = _cfg(tmp_path, "model=spectune-tiny", f"server.mtp_gguf={alone['target']}")
    with pytest.raises(ValueError, match="nextn_predict_layers is absent"):
        server_settings(cfg, models, tmp_path, Needs(mtp=True))
    cfg = _cfg(tmp_path, "model=spectune-tiny", f"server.mtp_gguf={alone['mtp']}")
    settings = server_settings(cfg, models, tmp_path, Needs(mtp=True))
    assert settings.target_gguf == settings.mtp_gguf == alone["mtp"]  # OFF runs on the MTP file too


def test_on_measured_against_a_reference_file_and_kv_types_runs_off_there(alone, tmp_path):
    """server.reference_*: OFF on the plain file with f16 KV, ON with the MTP file's heads and a q8_0 KV cache."""
    from runners.run import execute
    from tuner.setup import check

    reference = (
        "engine=mtp",
        "engine.gamma=2",
        f"model.target={alone['mtp']}",
        f"server.reference_gguf={alone['target']}",
    )
    kv = ("server.cache_type_k=q8_0", "server.cache_type_v=q8_0", "server.reference_cache_type_k=f16")
    summary = execute(_cfg(tmp_path, *reference, *kv, "server.reference_cache_type_v=f16", "run.name=ref"))
    off, on = summary["backend"]["baseline"], summary["backend"]["candidate"]
    assert (off["target_gguf"], on["target_gguf"]) == (str(alone["target"]), str(alone["mtp"]))
    assert "-ctk" not in off["args"] and on["args"][on["args"].index("-ctk") + 1] == "q8_0"
    assert summary["candidate"]["acceptance_rate"] > 0 and summary["candidate"]["tasks"] == 1
    other = _cfg(tmp_path, *reference, "run.name=x")
    with pytest.raises(ValueError, match=r"server\.reference_gguf: a study measures ON and OFF on one file"):
        check(other)  # the tuner replays one file's recording: it refuses a reference
