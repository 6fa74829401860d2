"""The tokenizer of a GGUF-only target: the one the file itself names.

A file either carries a Hugging Face tokenizer (`tokenizer.huggingface.json`, GGUF's key for a tokenizer
llama.cpp cannot reproduce: spectune's converter writes it for the bundled models, whose line-level
pre-tokenizer llama.cpp lacks) or relies on llama.cpp's own vocabulary code (every model llama.cpp
supports). The first is built here with `tokenizers`, exactly as the folder's would be; the second is
llama.cpp's own, answered by a vocabulary-only llama-server (serving.server_tokenizer). Either way the end
ids, special tokens and chat template come from the file's metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from serving.gguf_file import metadata_value, read_gguf, token_strings
from serving.llama_binary import LlamaBinary
from serving.server_tokenizer import ServerTokenizer

HF_JSON = "tokenizer.huggingface.json"


def embedded_tokenizer_json(path: str | Path) -> str | None:
    """The Hugging Face tokenizer.json a GGUF carries, if any."""
    value = metadata_value(path, HF_JSON)
    return str(value) if value is not None else None


def embedded_tokenizer(path: str | Path, tokenizer_json: str) -> Any:
    """A transformers fast tokenizer from the file's tokenizer.huggingface.json, with the file's special tokens."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    info = read_gguf(path)
    tokens = token_strings(info.path)

    def name(token_id: int | None) -> str | None:
        return tokens[token_id] if token_id is not None and 0 <= token_id < len(tokens) else None

    eos = min(info.end_ids) if info.end_ids else None
    specials = [tokens[i] for i in sorted(info.special_ids) if i not in {eos, info.bos_id}]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json),
        eos_token=name(eos),
        bos_token=name(info.bos_id),
        additional_special_tokens=specials,
    )
    tokenizer.chat_template = info.chat_template
    return tokenizer


def gguf_tokenizer(path: str | Path, binary: LlamaBinary, *, log_dir: Path | None = None) -> Any:
    """The tokenizer a GGUF-only target runs with: its embedded HF tokenizer, else llama.cpp's own."""
    carried = embedded_tokenizer_json(path)
    if carried is not None:
        return embedded_tokenizer(path, carried)
    return ServerTokenizer(path, binary, log_dir=log_dir)
