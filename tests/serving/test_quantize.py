"""serving/quantize.py and the quantized types of serving/gguf.py: the refusals without a binary, then the pinned
llama-quantize on the bundled target (q4_k_m, q8_0) and llama-server generating from the q4_k_m file.

The real-binary tests skip without the pinned build (`python -m serving.llama_install`) and fail instead under
SPECTUNE_REQUIRE_LLAMA=1 (tests/serving/conftest.py). The bundled target's rows (hidden 256, ffn 704) do not all
divide into 256-value blocks, so llama-quantize gives some tensors another type: the file still declares the
type asked for, which is what `read_gguf(...).file_type` reads.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from serving import gguf, quantize
from serving.gguf import ALL_TYPES, TYPES, cached_gguf
from serving.gguf_cache import cache_file
from serving.gguf_file import read_gguf
from serving.llama_server import LlamaServer
from serving.quantize import QUANT_TYPES, cached_quantized, find_llama_quantize, quantize_gguf
from tests.serving.conftest import MODELS, REQUIRED

# ---- without a binary ---------------------------------------------------------------------------------------------


def test_the_types_are_the_converters_then_llama_quantizes_own():
    assert ALL_TYPES[: len(TYPES)] == TYPES and set(QUANT_TYPES) <= set(ALL_TYPES)
    assert len(set(ALL_TYPES)) == len(ALL_TYPES) and "q4_k_m" in ALL_TYPES and "q8_0" in QUANT_TYPES
    assert all(kind == kind.lower() for kind in QUANT_TYPES)


def test_a_bad_type_names_the_allowed_ones(tmp_path, capsys):
    source = tmp_path / "in.gguf"
    source.write_bytes(b"GGUF")
    with pytest.raises(ValueError) as err:
        quantize_gguf(source, tmp_path / "out.gguf", "q4_k_x")
    assert "'q4_k_x'" in str(err.value) and "'q4_k_m'" in str(err.value) and "'iq4_xs'" in str(err.value)
    with pytest.raises(ValueError, match=r"unknown GGUF type 'q3'; allowed: \['f32', 'f16', 'bf16', 'q8_0', 'q4_0'"):
        cached_gguf(MODELS / "target", "q3")
    with pytest.raises(ValueError, match="'q6_k'"):
        cached_quantized(source, "f16")  # the converter's types are not llama-quantize's to make from a GGUF
    assert gguf.main(["--gguf", str(source), "--type", "f16", "--out", str(tmp_path / "o.gguf")]) == 2
    err_text = capsys.readouterr().err
    assert "--gguf takes a llama-quantize type" in err_text and "q4_k_m" in err_text
    with pytest.raises(SystemExit):
        gguf.main(["--gguf", str(source), "--type", "q7", "--out", str(tmp_path / "o.gguf")])
    assert "q4_k_m" in capsys.readouterr().err, "argparse lists the choices"
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "o.gguf").exists()


def test_without_a_build_llama_quantize_is_missing_with_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError) as err:
        find_llama_quantize()
    assert "python -m serving.llama_install" in str(err.value) and str(tmp_path / "cache") in str(err.value)


def test_a_failure_is_one_line_naming_the_file_and_llama_quantizes_reason_and_leaves_nothing(tmp_path):
    tool = tmp_path / "llama-quantize"
    tool.write_text(
        "#!/bin/sh\necho 'main: quantizing' >&2\n"
        "echo 'llama_model_quantize: failed to quantize: requantizing from type q8_0 is disabled' >&2\n"
        'echo partial > "$2"; echo "main: failed to quantize model from $1" >&2\nexit 1\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    source = tmp_path / "in.gguf"
    source.write_bytes(b"GGUF")
    with pytest.raises(RuntimeError) as err:
        quantize_gguf(source, tmp_path / "out" / "q.gguf", "q4_k_m", binary=tool)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{source}: llama-quantize q4_k_m failed")
    assert text.endswith("requantizing from type q8_0 is disabled")
    assert not any((tmp_path / "out").iterdir()), "no output and no temp file is left"
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        quantize_gguf(tmp_path / "absent.gguf", tmp_path / "q.gguf", "q8_0", binary=tool)


def test_the_cache_key_of_a_gguf_follows_its_content_and_the_type(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF one")
    first = cache_file("model", [source], "q4_k_m")
    assert first == cache_file("model", [source], "q4_k_m") != cache_file("model", [source], "q8_0")
    source.write_bytes(b"GGUF two, longer")
    assert cache_file("model", [source], "q4_k_m") != first


# ---- the pinned llama-quantize on the bundled target ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tool(binary):
    """The pinned build's llama-quantize (skip, or fail under SPECTUNE_REQUIRE_LLAMA=1, without one)."""
    try:
        return find_llama_quantize()
    except FileNotFoundError as exc:
        if REQUIRED:
            raise
        pytest.skip(f"no llama-quantize here: {exc}")


@pytest.fixture(scope="module")
def target_f32(tool):
    return cached_gguf(MODELS / "target", "f32")


def test_every_offered_type_is_listed_by_the_pinned_llama_quantize(tool):
    import subprocess

    run = subprocess.run([str(tool), "--help"], capture_output=True, text=True, timeout=60)
    listed = {word.lower() for word in (run.stdout + run.stderr).split()}
    assert set(QUANT_TYPES) <= listed, sorted(set(QUANT_TYPES) - listed)


@pytest.mark.parametrize(("kind", "file_type"), [("q4_k_m", "Q4_K_M"), ("q8_0", "Q8_0")])
def test_the_bundled_target_quantizes_to_the_type_asked(target_f32, kind, file_type, tmp_path):
    out = quantize_gguf(target_f32, tmp_path / f"target-{kind}.gguf", kind)
    info = read_gguf(out)
    assert info.file_type == file_type, info.describe()
    assert out.stat().st_size < target_f32.stat().st_size / 2, "quantized weights take under half of f32's bytes"
    assert [p.name for p in tmp_path.iterdir()] == [out.name], "no temp file is left beside it"


def test_cached_quantized_is_made_once_and_cached_gguf_makes_quantized_types(target_f32):
    first = cached_quantized(target_f32, "q4_k_m")
    stamp = first.stat().st_mtime_ns
    assert cached_quantized(target_f32, "q4_k_m") == first and first.stat().st_mtime_ns == stamp
    assert read_gguf(first).file_type == "Q4_K_M"
    made = cached_gguf(MODELS / "target", "q5_k_m")  # from the cached f32
    assert read_gguf(made).file_type == "Q5_K_M" and cached_gguf(MODELS / "target", "q5_k_m") == made


def test_the_command_line_quantizes_a_gguf_and_converts_a_folder_through_a_temporary_f32(target_f32, tmp_path):
    out = tmp_path / "a" / "q6.gguf"
    assert gguf.main(["--gguf", str(target_f32), "--type", "q6_k", "--out", str(out)]) == 0
    assert read_gguf(out).file_type == "Q6_K"
    folder_out = tmp_path / "b" / "target-q4_0.gguf"
    assert gguf.main(["--model", str(MODELS / "target"), "--type", "q4_0", "--out", str(folder_out)]) == 0
    assert read_gguf(folder_out).file_type == "Q4_0"
    assert os.listdir(folder_out.parent) == [folder_out.name], "the f32 intermediate is gone"


def test_requantizing_needs_to_be_asked_for(target_f32, tmp_path):
    q8 = quantize_gguf(target_f32, tmp_path / "q8.gguf", "q8_0")
    with pytest.raises(RuntimeError, match=r"q8\.gguf: llama-quantize q4_0 failed: .*requantiz"):
        quantize_gguf(q8, tmp_path / "q4.gguf", "q4_0")
    assert read_gguf(quantize_gguf(q8, tmp_path / "q4.gguf", "q4_0", allow_requantize=True)).file_type == "Q4_0"


def test_llama_server_loads_the_q4_k_m_target_and_generates(binary, target_f32, tmp_path):
    from transformers import AutoTokenizer

    model = quantize_gguf(target_f32, tmp_path / "target-q4_k_m.gguf", "q4_k_m")
    tokenizer = AutoTokenizer.from_pretrained(MODELS / "target")
    ids = tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n")
    body = {"prompt": ids, "n_predict": 16, "temperature": 0.0, "top_k": 1, "return_tokens": True}
    with LlamaServer(binary, model, ["-t", "1"], log_path=tmp_path / "server.log") as server:
        reply = server.post("/completion", body)
    assert reply["timings"]["prompt_n"] == len(ids) and len(reply["tokens"]) > 0, reply.get("timings")


def test_quantize_module_finds_the_tool_of_the_pinned_build(tool):
    assert tool == quantize.build_dir() / "bin" / "llama-quantize" and os.access(tool, os.X_OK)
    assert Path(tool).parent == Path(find_llama_quantize()).parent
