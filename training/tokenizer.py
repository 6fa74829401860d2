"""The bundled tokenizer: byte-level BPE trained on the swe-lite sources and expert trajectories.

Pre-tokenization splits text into lines (each keeping its newline) instead of words, so BPE can
merge whole phrases and code lines that recur in the suite: a trajectory takes about a quarter of
the tokens a word-level split gives, which is what makes training on two CPU cores affordable.
Any byte string still encodes (the full byte alphabet is in the vocabulary), so text round-trips.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from engine.tiny import CHAT_TEMPLATE, EOS_TOKEN, IM_END, IM_START, SPECIAL_TOKENS
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
    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + {len(SPECIAL_TOKENS)} specials)")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(LINE, behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes, seen or not
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
