"""What a GGUF file says about itself: architecture, shapes, native MTP layers, quantization, vocabulary.

    python -m serving.gguf_file FILE.gguf      # one line per fact, as spectune reads them

A llama.cpp user's model is one GGUF file; everything spectune needs besides the server comes from its
metadata (read with the `gguf` package, which maps the file instead of loading it: the weights are
never read, only the header and the tensor index). Keys follow llama.cpp's naming,
`<architecture>.block_count` and so on; a key a file lacks takes llama.cpp's own default.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

# llama.cpp's token types (gguf.TokenType): CONTROL tokens are the special ones a reply's text skips.
_CONTROL = 3
# The tokenizer.ggml.* ids that end a generation in llama.cpp (llama_vocab::is_eog): eos, eot and eom.
_END_KEYS = ("eos_token_id", "eot_token_id", "eom_token_id")


class GgufError(ValueError):
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

    @property
    def kv_layers(self) -> int:
        """Layers that hold KV for the trunk (llama.cpp's MTP layers keep their own, counted the same way)."""
        return self.n_layer

    def kv_bytes_per_token(self, k_bytes_per_value: float, v_bytes_per_value: float) -> float:
        """KV bytes one position takes over every layer, for K and V stored at the given bytes per value."""
        heads = self.n_head_kv if len(self.n_head_kv) == self.n_layer else (self.n_head_kv[0],) * self.n_layer
        return sum(h * (self.key_length * k_bytes_per_value + self.value_length * v_bytes_per_value) for h in heads)

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


def _value(fields: dict[str, Any], key: str, default: Any = None) -> Any:
    found = fields.get(key)
    if found is None:
        return default
    value = found.contents()
    return value


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
    from gguf import GGUFReader

    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise GgufError(f"{path}: not a GGUF file (it does not start with the GGUF magic)")
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf package raises ValueError, IndexError, struct errors on damaged files
        raise GgufError(f"{path}: cannot read it as GGUF ({type(exc).__name__}: {exc})") from None
    fields = reader.fields
    arch = _value(fields, "general.architecture")
    if not arch:
        raise GgufError(f"{path}: no general.architecture in its metadata")

    def key(name: str, default: Any = None) -> Any:
        return _value(fields, f"{arch}.{name}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_head = int(_first(key("attention.head_count", 0)))
    head_kv = key("attention.head_count_kv", n_head)
    n_head_kv = tuple(int(h) for h in head_kv) if isinstance(head_kv, list) else (int(head_kv),)
    head_dim = n_embd // n_head if n_head else 0
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = len(tokens.data) if tokens is not None else int(key("vocab_size", 0))
    types = _value(fields, "tokenizer.ggml.token_type") or []
    ends = {int(v) for k in _END_KEYS if (v := _value(fields, f"tokenizer.ggml.{k}")) is not None}
    tensor_types = Counter(t.tensor_type.name for t in reader.tensors)
    extra = {
        name: key(name)
        for name in ("attention.sliding_window", "attention.sliding_window_pattern", "full_attention_interval")
        if key(name) is not None
    }
    return GgufInfo(
        path=path,
        architecture=str(arch),
        name=str(_value(fields, "general.name", "")),
        file_type=file_type_name(int(_value(fields, "general.file_type", 0))),
        tensor_types=dict(tensor_types),
        weight_bytes=int(sum(int(t.n_bytes) for t in reader.tensors)),
        n_layer=n_layer,
        nextn_layers=int(key("nextn_predict_layers", 0)),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_length=int(key("attention.key_length", head_dim)),
        value_length=int(key("attention.value_length", head_dim)),
        context_length=int(key("context_length", 0)),
        vocab_size=vocab,
        tokenizer_model=str(_value(fields, "tokenizer.ggml.model", "")),
        end_ids=frozenset(ends),
        special_ids=frozenset(i for i, t in enumerate(types) if int(t) == _CONTROL),
        bos_id=_value(fields, "tokenizer.ggml.bos_token_id"),
        chat_template=_value(fields, "tokenizer.chat_template"),
        target_hidden_size=key("target_hidden_size"),
        extra=extra,
    )


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def token_strings(path: str | Path) -> list[str]:
    """The vocabulary's token strings, by id (tokenizer.ggml.tokens)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(read_gguf(path).path))
    found = reader.fields.get("tokenizer.ggml.tokens")
    return list(found.contents()) if found is not None else []


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
