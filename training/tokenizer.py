"""The bundled tokenizer: byte-level BPE trained on the swe-lite sources and expert trajectories.

Pre-tokenization splits text into lines (each keeping its newline) instead of words, so BPE can
merge whole phrases and code lines that recur in the suite: a trajectory takes about a quarter of
the tokens a word-level split gives, which is what makes training on two CPU cores affordable.
Any byte string still encodes (the full byte alphabet is in the vocabulary), so text round-trips.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from engine.tiny import fit_byte_bpe
from tasks.swelite.projects import list_projects, project_dir, project_files

LINE = Regex(r"[^\n]*\n?")  # one line with its newline (the last line may have none)


def project_sources() -> list[str]:
    """Texts of every file of the clean swe-lite projects, in a fixed order."""
    texts = []
    for name in list_projects():
        root = project_dir(name)
        texts.extend((root / rel).read_text(encoding="utf-8") for rel in project_files(root))
    return texts


def train_tokenizer(texts: Iterable[str], vocab_size: int, max_length: int) -> PreTrainedTokenizerFast:
    """A deterministic line-split byte-level BPE of at most `vocab_size` tokens, ChatML specials and template."""
    split_lines = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(LINE, behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return fit_byte_bpe(split_lines, texts, vocab_size, model_max_length=max_length)
