"""Quantized GGUF files (q4_k_m, q8_0, ...) made by the pinned llama.cpp's own `llama-quantize`.

    python -m serving.gguf --gguf IN.gguf --type q4_k_m --out OUT.gguf      # a GGUF you have
    python -m serving.gguf --model FOLDER --type q4_k_m --out OUT.gguf      # a model folder: f32 first, then this

`llama-quantize` is built beside `llama-server` by `python -m serving.llama_install`. Which type each tensor
gets is llama.cpp's choice: a tensor whose rows do not divide into the type's blocks (256 values for the
k-quants) falls back to another type, so a small model's file mixes several; `read_gguf(path).file_type`
(serving/gguf_file.py) names the type the file declares. Not offered: the types that need an importance
matrix (iq1_*, iq2_*, iq3_xxs) and the ternary ones, which spectune has no way to make or judge.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from common.errors import ConfigError
from common.files import atomic_path
from serving.gguf_cache import cache_file
from serving.llama_binary import build_dir, foreign_build

# llama-quantize's type names (its --help, pinned release), lowercase; each is also a server.gguf_type.
QUANT_TYPES = (
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "q8_0",
    "q2_k",
    "q3_k_m",
    "q4_k_s",
    "q4_k_m",
    "q5_k_s",
    "q5_k_m",
    "q6_k",
    "iq4_nl",
    "iq4_xs",
)


def check_type(kind: str) -> str:
    """`kind` as llama-quantize's name (uppercase); ValueError listing the allowed ones."""
    if kind not in QUANT_TYPES:
        raise ConfigError(f"unknown quantized GGUF type {kind!r}; allowed: {list(QUANT_TYPES)}")
    return kind.upper()


def find_llama_quantize() -> Path:
    """`llama-quantize` of the pinned build, beside its llama-server; FileNotFoundError with how to get it."""
    folder = build_dir()
    path = folder / "bin" / "llama-quantize"
    foreign = foreign_build(folder)
    if foreign is not None:
        raise FileNotFoundError(f"{path}: {foreign}; python -m serving.llama_install rebuilds it")
    if not (path.is_file() and path.stat().st_mode & 0o111):
        raise FileNotFoundError(
            f"no llama-quantize at {path}; build it once with llama-server: python -m serving.llama_install "
            "(about 10-20 min on 2 cores)"
        )
    return path


def _reason(stderr: str, code: int) -> str:
    """llama-quantize's own reason: its `failed to quantize: WHY` line when it printed one, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    why = [line for line in lines if "failed to quantize:" in line]
    return (why or lines or [f"exit code {code}"])[-1]


def quantize_gguf(
    source: str | Path,
    out: str | Path,
    kind: str,
    *,
    allow_requantize: bool = False,
    binary: str | Path | None = None,
) -> Path:
    """Write `source` (a GGUF) quantized to `kind` at `out`, whole or not at all; returns `out`.

    `allow_requantize`: accept a source whose tensors are already quantized (llama-quantize refuses them
    otherwise, and says so). A failure is one RuntimeError line naming the file and llama-quantize's reason.
    """
    name = check_type(kind)
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such GGUF file")
    tool = Path(binary) if binary else find_llama_quantize()
    with atomic_path(out) as partial:  # only a complete file gets the name
        argv = [str(tool), *(["--allow-requantize"] if allow_requantize else []), str(source), str(partial), name]
        run = subprocess.run(argv, capture_output=True, text=True)
        if run.returncode != 0 or not partial.is_file():
            raise RuntimeError(f"{source}: llama-quantize {kind} failed: {_reason(run.stderr, run.returncode)}")
    return out


def cached_quantized(source: str | Path, kind: str) -> Path:
    """`source` (a GGUF) quantized to `kind`, made once and kept in the cache (serving/gguf_cache.py):
    keyed by the source's path, size and modification time, the type and the pinned release."""
    check_type(kind)
    source = Path(source).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such GGUF file")
    out = cache_file(source.stem, [source], kind)
    return out if out.is_file() else quantize_gguf(source, out, kind)
