"""Checks made before a llama-server starts, from the files' metadata: each mismatch is one line naming file and field.

Without them a GGUF of another model than the tokenizer's runs to the end and solves nothing, and an MTP file
without MTP layers ends in a server log nobody reads. Everything here reads metadata only (serving.gguf_file).
"""

from __future__ import annotations

from typing import Any

from common.errors import ConfigError
from serving.gguf_file import GgufInfo, token_strings

# Converters rewrite a few entries of a vocabulary (padding, added tokens' spelling); another model's file
# differs almost everywhere. More than this share of differing ids is another model.
DIFFERING_SHARE = 0.01


def _first_differing(a: list[str], b: list[str]) -> int | None:
    """The first id where the lists differ, when more than DIFFERING_SHARE of them do; else None."""
    differing = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    if len(differing) > DIFFERING_SHARE * max(1, min(len(a), len(b))):
        return differing[0]
    return None


def check_tokenizer(info: GgufInfo, tokenizer: Any, where: str) -> None:
    """The GGUF's vocabulary (tokenizer.ggml.tokens) must be the tokenizer's: same string at every id the
    tokenizer has. A converter pads the file's list up to the model's embedding rows, so it may be longer."""
    vocab = tokenizer.get_vocab()
    mine = [""] * (max(vocab.values()) + 1 if vocab else 0)
    for token, i in vocab.items():
        mine[i] = token
    theirs = token_strings(info.path)
    if len(theirs) < len(mine):
        raise ConfigError(
            f"{where}={info.path}: tokenizer.ggml.tokens has {len(theirs)} tokens, the tokenizer in use "
            f"{len(mine)}: the file is another model's"
        )
    at = _first_differing(mine, theirs[: len(mine)])
    if at is not None:
        raise ConfigError(
            f"{where}={info.path}: tokenizer.ggml.tokens[{at}] is {theirs[at]!r}, the tokenizer in use has "
            f"{mine[at]!r}: the file is another model's (its vocabulary differs)"
        )


def check_same_vocabulary(target: GgufInfo, other: GgufInfo, where: str) -> None:
    """A draft, head or MTP file must speak the target file's vocabulary (same tokenizer.ggml.tokens)."""
    if other.vocab_size != target.vocab_size:
        raise ConfigError(
            f"{where}={other.path}: its vocabulary has {other.vocab_size} tokens, the target's "
            f"({target.path.name}) {target.vocab_size}: a file for another model"
        )
    at = _first_differing(token_strings(target.path), token_strings(other.path))
    if at is not None:
        raise ConfigError(
            f"{where}={other.path}: tokenizer.ggml.tokens[{at}] differs from the target's ({target.path.name}): "
            "a file for another model"
        )


def check_mtp_layers(info: GgufInfo, where: str) -> None:
    """draft-mtp runs MTP layers stored inside the model file: it must have some."""
    if info.nextn_layers < 1:
        raise ConfigError(
            f"{where}={info.path}: {info.architecture}.nextn_predict_layers is "
            f"{'absent' if info.nextn_layers == 0 else info.nextn_layers}: the file holds no MTP layers for draft-mtp"
        )


def check_eagle3_head(target: GgufInfo, head: GgufInfo, where: str) -> None:
    """An EAGLE-3 head reads the target's hidden states: made for this target's width and vocabulary."""
    if head.architecture != "eagle3":
        raise ConfigError(f"{where}={head.path}: general.architecture is {head.architecture!r}, not 'eagle3'")
    if head.target_hidden_size is not None and int(head.target_hidden_size) != target.n_embd:
        raise ConfigError(
            f"{where}={head.path}: eagle3.target_hidden_size is {head.target_hidden_size}, the target's "
            f"({target.path.name}) {target.architecture}.embedding_length is {target.n_embd}: a head for another target"
        )
    check_same_vocabulary(target, head, where)
