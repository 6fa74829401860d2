"""What a GGUF file says about itself: architecture, shapes, native MTP layers, quantization, vocabulary.

    python -m serving.gguf_file FILE.gguf      # one line per fact, as spectune reads them

A llama.cpp user's model is one GGUF file; everything spectune needs besides the server comes from its
metadata. Only the header and the tensor index are read (`scan`), never the weights; the `gguf` package
supplies the format's enums and block sizes (its own reader builds an object per vocabulary entry and takes
seconds on a 150k-token file). Keys follow llama.cpp's naming,
`<architecture>.block_count` and so on; a key a file lacks takes llama.cpp's own default.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.errors import ConfigError

# llama.cpp's token types (gguf.TokenType): CONTROL tokens are the special ones a reply's text skips.
_CONTROL = 3
# The tokenizer.ggml.* ids that end a generation in llama.cpp (llama_vocab::is_eog): eos, eot and eom.
_END_KEYS = ("eos_token_id", "eot_token_id", "eom_token_id")


class GgufError(ConfigError):
    """A file that is not a readable GGUF (missing, truncated, another format); the message names it."""


@dataclass(frozen=True)
class GgufInfo:
    """The facts of one GGUF file spectune uses (the memory model, native heads, the tokenizer, the exports)."""

    path: Path
    architecture: str  # general.architecture: llama, qwen3, qwen35, mimo2, eagle3 ...
    name: str  # general.name (may be empty)
    file_type: str  # general.file_type as llama.cpp names it: F32, F16, BF16, Q8_0, Q4_K_M ...
    tensor_types: dict[str, int]  # tensor type -> how many tensors have it (a Q4_K_M file mixes several)
    weight_bytes: int  # the tensors' bytes as stored: what the server loads
    n_layer: int  # <arch>.block_count, the MTP layers (if any) included, as llama.cpp counts them
    nextn_layers: int  # <arch>.nextn_predict_layers: native MTP layers inside the file (0: none)
    n_embd: int  # <arch>.embedding_length
    n_head: int  # <arch>.attention.head_count
    n_head_kv: tuple[int, ...]  # per layer (<arch>.attention.head_count_kv, a list in hybrid files)
    key_length: int  # <arch>.attention.key_length (head_dim of K)
    value_length: int  # <arch>.attention.value_length (head_dim of V)
    context_length: int  # <arch>.context_length: the context the model was trained for
    vocab_size: int  # tokens in tokenizer.ggml.tokens (else <arch>.vocab_size)
    tokenizer_model: str  # tokenizer.ggml.model: gpt2 (BPE), llama (SentencePiece) ...
    end_ids: frozenset[int]  # ids that end a generation (eos, eot, eom)
    special_ids: frozenset[int]  # CONTROL tokens: a reply's text leaves them out
    bos_id: int | None
    chat_template: str | None  # tokenizer.chat_template
    target_hidden_size: int | None = None  # an EAGLE-3 head's <arch>.target_hidden_size: the target it was made for
    extra: dict[str, Any] = field(default_factory=dict)  # sliding-window facts and other architecture keys

    def describe(self) -> str:
        """One line: file, architecture, quantization, size, native MTP layers."""
        mtp = f", {self.nextn_layers} native MTP layer(s)" if self.nextn_layers else ""
        return (
            f"{self.path.name}: {self.architecture}, {self.file_type}, {self.weight_bytes / 2**20:.1f} MiB of weights, "
            f"{self.n_layer} layers, vocabulary {self.vocab_size}, trained context {self.context_length}{mtp}"
        )


def file_type_name(code: int) -> str:
    """llama.cpp's name of a general.file_type code (MOSTLY_Q4_K_M -> Q4_K_M), or `type <code>`."""
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(code).name
    except ValueError:
        return f"type {code}"
    return name.removeprefix("MOSTLY_").replace("ALL_F32", "F32")


# GGUF metadata value types (gguf.GGUFValueType) -> struct format; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# Arrays longer than this are skipped unless asked for (a vocabulary's 150k strings): only their length is kept.
_SMALL_ARRAY = 1024


@dataclass(frozen=True)
class Header:
    """A GGUF's metadata and tensor index, read straight from its header."""

    values: dict[str, Any]  # metadata key -> value (long arrays only when asked for by name)
    lengths: dict[str, int]  # every array key -> its length (the skipped ones too)
    tensors: dict[str, tuple[tuple[int, ...], int]]  # tensor name -> (shape, ggml type id)


def scan(path: str | Path, wanted: frozenset[str] = frozenset()) -> Header:
    """The header of the GGUF at `path`: every value except long arrays not in `wanted`, and the tensor index.

    The gguf package's reader builds an object per vocabulary entry and takes seconds on a 150k-token file;
    this reads the bytes once and skips what is not needed (GgufError names a file it cannot read).
    """
    path = Path(path)
    try:
        with path.open("rb") as f:

            def unpack(fmt: str) -> Any:
                size = struct.calcsize(fmt)
                data = f.read(size)
                if len(data) != size:
                    raise EOFError("the header ends early")
                return struct.unpack("<" + fmt, data)[0]

            def string() -> str:
                return f.read(unpack("Q")).decode(errors="replace")

            def value(kind: int, key: str | None) -> Any:
                if kind == _STRING:
                    return string()
                if kind == _ARRAY:
                    item, n = unpack("I"), unpack("Q")
                    if key is not None:
                        lengths[key] = n
                    if n > _SMALL_ARRAY and key not in wanted:
                        if item in _SCALARS:
                            f.seek(n * struct.calcsize(_SCALARS[item]), 1)
                        else:
                            for _ in range(n):
                                value(item, None)
                        return None
                    return [value(item, None) for _ in range(n)]
                if kind not in _SCALARS:
                    raise ValueError(f"unknown metadata value type {kind}")
                return unpack(_SCALARS[kind])

            if f.read(4) != b"GGUF":
                raise GgufError(f"{path}: not a GGUF file (it does not start with the GGUF magic)")
            _version, n_tensors, n_kv = unpack("I"), unpack("Q"), unpack("Q")
            values: dict[str, Any] = {}
            lengths: dict[str, int] = {}
            for _ in range(n_kv):
                key = string()
                got = value(unpack("I"), key)
                if got is not None:
                    values[key] = got
            tensors = {}
            for _ in range(n_tensors):
                name = string()
                shape = tuple(unpack("Q") for _ in range(unpack("I")))
                tensors[name] = (shape, unpack("I"))
                f.seek(8, 1)  # the data offset
    except GgufError:
        raise
    except OSError as exc:
        raise GgufError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (EOFError, ValueError, UnicodeDecodeError, struct.error, MemoryError, OverflowError) as exc:
        raise GgufError(f"{path}: cannot read it as GGUF ({type(exc).__name__}: {exc})") from None
    return Header(values, lengths, tensors)


def tensor_bytes(shape: tuple[int, ...], type_id: int) -> int:
    """Bytes a tensor of `shape` takes at ggml type `type_id` (its block size and bytes per block)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    elements = 1
    for n in shape:
        elements *= n
    return elements // block * size


def read_gguf(path: str | Path) -> GgufInfo:
    """The facts of the GGUF at `path` (cached per file version); GgufError naming the file when it cannot be read."""
    path = Path(path).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError as exc:
        raise GgufError(f"{path}: no such GGUF file ({exc.strerror})") from None
    if path.is_dir():
        raise GgufError(f"{path}: a folder, not a GGUF file")
    return _read(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=32)
def _read(path: Path, size: int, mtime_ns: int) -> GgufInfo:
    from gguf import GGMLQuantizationType

    header = scan(path, frozenset({"tokenizer.ggml.token_type"}))
    fields = header.values
    arch = fields.get("general.architecture")
    if not arch:
        raise GgufError(f"{path}: no general.architecture in its metadata")

    def key(name: str, default: Any = None) -> Any:
        return fields.get(f"{arch}.{name}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_head = int(_first(key("attention.head_count", 0)))
    head_kv = key("attention.head_count_kv", n_head)
    n_head_kv = tuple(int(h) for h in head_kv) if isinstance(head_kv, list) else (int(head_kv),)
    head_dim = n_embd // n_head if n_head else 0
    vocab = header.lengths.get("tokenizer.ggml.tokens") or int(key("vocab_size", 0))
    types = fields.get("tokenizer.ggml.token_type") or []
    ends = {int(v) for k in _END_KEYS if (v := fields.get(f"tokenizer.ggml.{k}")) is not None}
    try:
        tensor_types = Counter(GGMLQuantizationType(t).name for _, t in header.tensors.values())
        weight_bytes = sum(tensor_bytes(shape, t) for shape, t in header.tensors.values())
    except (ValueError, KeyError) as exc:
        raise GgufError(f"{path}: a tensor of a type this gguf package does not know ({exc})") from None
    extra = {
        name: key(name)
        for name in ("attention.sliding_window", "attention.sliding_window_pattern", "full_attention_interval")
        if key(name) is not None
    }
    return GgufInfo(
        path=path,
        architecture=str(arch),
        name=str(fields.get("general.name", "")),
        file_type=file_type_name(int(fields.get("general.file_type", 0))),
        tensor_types=dict(tensor_types),
        weight_bytes=int(weight_bytes),
        n_layer=n_layer,
        nextn_layers=int(key("nextn_predict_layers", 0)),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_length=int(key("attention.key_length", head_dim)),
        value_length=int(key("attention.value_length", head_dim)),
        context_length=int(key("context_length", 0)),
        vocab_size=int(vocab),
        tokenizer_model=str(fields.get("tokenizer.ggml.model", "")),
        end_ids=frozenset(ends),
        special_ids=frozenset(i for i, t in enumerate(types) if int(t) == _CONTROL),
        bos_id=fields.get("tokenizer.ggml.bos_token_id"),
        chat_template=fields.get("tokenizer.chat_template"),
        target_hidden_size=key("target_hidden_size"),
        extra=extra,
    )


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def token_strings(path: str | Path) -> list[str]:
    """The vocabulary's token strings, by id (tokenizer.ggml.tokens)."""
    info = read_gguf(path)
    return list(_tokens(info.path, info.path.stat().st_mtime_ns))


@lru_cache(maxsize=8)
def _tokens(path: Path, mtime_ns: int) -> tuple[str, ...]:
    return tuple(scan(path, frozenset({"tokenizer.ggml.tokens"})).values.get("tokenizer.ggml.tokens") or ())


def metadata_value(path: str | Path, key: str) -> Any:
    """One metadata value of the file (a long array included when asked for by name), None when absent."""
    return scan(read_gguf(path).path, frozenset({key})).values.get(key)


def is_gguf(name: str | Path | None) -> bool:
    """Whether `name` names a GGUF file (by its suffix; read_gguf checks the contents)."""
    return bool(name) and str(name).lower().endswith(".gguf")


def main(argv: list[str] | None = None) -> int:
    """Command line: the facts of each file."""
    parser = argparse.ArgumentParser(prog="python -m serving.gguf_file", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="GGUF files")
    args = parser.parse_args(argv)
    for name in args.files:
        try:
            info = read_gguf(name)
        except GgufError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(info.describe())
        print(f"  tensor types: {', '.join(f'{k} x{v}' for k, v in sorted(info.tensor_types.items()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
