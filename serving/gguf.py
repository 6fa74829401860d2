"""Export a spectune (Hugging Face) model folder to GGUF with llama.cpp's own converter, or quantize a GGUF.

    python -m serving.gguf --model models/spectune-tiny/target --out runs/gguf/target-f32.gguf [--type f32]
    python -m serving.gguf --model models/spectune-tiny/target --out runs/gguf/target-q4_k_m.gguf --type q4_k_m
    python -m serving.gguf --gguf IN.gguf --type q4_k_m --out OUT.gguf

The converter writes `TYPES` itself; the other `ALL_TYPES` (serving/quantize.py's `QUANT_TYPES`: q4_k_m, q6_k,
...) are the converter's f32, kept in a temporary file beside the output, then the pinned `llama-quantize`.

The converter is the pinned release's `convert_hf_to_gguf.py` (with its `conversion/` package and
`gguf-py/`), kept beside the binary by `python -m serving.llama_install`. It refuses tokenizers whose
pre-tokenizer it does not know ("BPE pre-tokenizer was not recognized"); the bundled models' line-level
pre-tokenizer is one. Then, and only then, the file is written with the pre-tokenizer name `--pre`
(default "default") and a warning: the server's own *text* tokenisation of such a model is not
spectune's, so spectune drives it with token ids only (`/completion` with `"prompt": [ids]`), which
is what the agent loop has anyway; the folder's tokenizer.json goes into the file as
`tokenizer.huggingface.json` (GGUF's key for such a tokenizer), so a run on the file alone
(`model=gguf`, serving/gguf_tokenizer.py) tokenizes as the folder does. Real models (Qwen, Llama) convert as usual.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.files import atomic_path
from serving.gguf_cache import cache_file
from serving.llama_binary import INSTALL_HINT, build_dir
from serving.quantize import QUANT_TYPES, quantize_gguf

TYPES = ("f32", "f16", "bf16", "q8_0")  # what the converter writes itself
# Every type a model folder can be exported to: the converter's, then llama-quantize's others (f32 first).
ALL_TYPES = TYPES + tuple(kind for kind in QUANT_TYPES if kind not in TYPES)
# Run in a fresh interpreter: import the pinned converter, make an unknown pre-tokenizer fall back to
# a named one (reported on stderr), then run the converter's own command line unchanged.
# A mimo2 folder (serving/mtp_gguf.py) holds fewer MTP layers than the 3 the converter assumes for MiMo-V2
# (conversion/mimo.py: _n_nextn, not read from the config): `nextn` sets the count it writes.
_RUNNER = """
import runpy, sys
convert, pre, nextn = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [convert, convert + "/gguf-py"]
if nextn:
    import conversion.mimo
    conversion.mimo.MimoV2Model._n_nextn = int(nextn)
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        print(f"spectune: pre-tokenizer not known to llama.cpp; writing {pre!r} (drive the server with token ids)",
              file=sys.stderr)
        hf_json = self.dir_model / "tokenizer.json"
        if hf_json.is_file():  # GGUF's own key for a tokenizer llama.cpp cannot run: the file stays self-contained
            self.gguf_writer.add_string("tokenizer.huggingface.json", hf_json.read_text())
        return pre
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [convert + "/convert_hf_to_gguf.py", *sys.argv[4:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def read_json(path: Path) -> dict[str, Any]:
    """A model folder's JSON file (config.json); ValueError naming the file when it cannot be read as JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read it as JSON ({exc})") from None


def converter_dir(explicit: str | Path | None = None) -> Path:
    """The folder holding convert_hf_to_gguf.py (explicit, else the pinned build's convert/)."""
    folder = Path(explicit) if explicit else build_dir() / "convert"
    if not (folder / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(f"no convert_hf_to_gguf.py in {folder}; {INSTALL_HINT}")
    return folder


def export_gguf(
    model: str | Path,
    out: str | Path,
    kind: str = "f32",
    *,
    pre: str = "default",
    converter: str | Path | None = None,
    mtp_layers: int | None = None,
    extra_args: Sequence[str] = (),
) -> Path:
    """Convert `model` to a GGUF file at `out`; returns it. Errors name the model and the converter's message.

    `kind`: one of ALL_TYPES; a llama-quantize type is converted to f32 first (a temporary file beside `out`).
    `mtp_layers`: how many MTP layers a mimo2 folder holds (serving/mtp_gguf.py); None for other models.
    `extra_args`: more converter flags (serving/eagle3_gguf.py: `--target-model-dir TARGET`).
    """
    if kind not in ALL_TYPES:
        raise ConfigError(f"unknown GGUF type {kind!r}; allowed: {list(ALL_TYPES)}")
    model, out = Path(model), Path(out)
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"{model}: not a model folder (no config.json)")
    if kind not in TYPES:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:  # the f32 goes with it
            f32 = Path(tmp) / "f32.gguf"
            export_gguf(model, f32, pre=pre, converter=converter, mtp_layers=mtp_layers, extra_args=extra_args)
            return quantize_gguf(f32, out, kind)
    folder = converter_dir(converter)
    nextn = "" if mtp_layers is None else str(mtp_layers)
    with atomic_path(out) as partial:  # only a complete file gets the name
        argv = [sys.executable, "-c", _RUNNER, str(folder), pre, nextn, str(model), "--outfile", str(partial)]
        argv += ["--outtype", kind, *extra_args]
        run = subprocess.run(argv, capture_output=True, text=True)
        if run.returncode != 0:
            lines = [line for line in run.stderr.splitlines() if line.strip()]
            raise RuntimeError(f"{model}: llama.cpp's converter failed: {lines[-1] if lines else run.returncode}")
        for line in run.stderr.splitlines():
            if line.startswith("spectune:"):
                print(line, file=sys.stderr)
    return out


def cached_gguf(model: str | Path, kind: str = "f32", *, converter: str | Path | None = None) -> Path:
    """The GGUF of a model folder, converted once and kept in the cache (`cache_file`); any of ALL_TYPES.

    A llama-quantize type starts from the cached f32 when there is one, else from a temporary f32.
    """
    if kind not in ALL_TYPES:
        raise ConfigError(f"unknown GGUF type {kind!r}; allowed: {list(ALL_TYPES)}")
    model = Path(model).resolve()
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"{model}: not a model folder (no config.json)")
    out = cache_file(model.name, [model], kind)
    if out.is_file():
        return out
    f32 = cache_file(model.name, [model], "f32")
    if kind not in TYPES and f32.is_file():
        return quantize_gguf(f32, out, kind)
    return export_gguf(model, out, kind, converter=converter)


def main(argv: list[str] | None = None) -> int:
    """Command line; prints the written file."""
    parser = argparse.ArgumentParser(prog="python -m serving.gguf", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a Hugging Face model folder (config.json + weights)")
    source.add_argument("--gguf", help="a GGUF file to quantize with llama-quantize (--type q4_k_m, q8_0, ...)")
    parser.add_argument("--out", required=True, help="the .gguf file to write")
    parser.add_argument(
        "--type",
        default="f32",
        choices=ALL_TYPES,
        help=f"weight type (default f32: exact streams); {', '.join(TYPES)} by the converter, others by llama-quantize",
    )
    parser.add_argument("--pre", default="default", help="pre-tokenizer name to write when llama.cpp knows none")
    parser.add_argument("--converter", help="folder with convert_hf_to_gguf.py (default: the pinned build's)")
    parser.add_argument(
        "--allow-requantize", action="store_true", help="with --gguf: accept a source that is already quantized"
    )
    args = parser.parse_args(argv)
    try:
        if args.gguf:
            if args.type not in QUANT_TYPES:
                raise ConfigError(f"--gguf takes a llama-quantize type; allowed: {list(QUANT_TYPES)}")
            print(quantize_gguf(args.gguf, args.out, args.type, allow_requantize=args.allow_requantize))
        else:
            print(export_gguf(args.model, args.out, args.type, pre=args.pre, converter=args.converter))
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
