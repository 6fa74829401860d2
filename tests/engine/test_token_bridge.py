"""The cross-tokenizer bridge (engine/drafters/token_bridge.py): history to draft context, proposals to target ids.

The target is the bundled tiny target's byte-level BPE (8192 ids); the drafts are byte-level BPEs of 600 ids
trained in-process on the same corpus (other merges, other ids), with or without the ChatML special tokens.
"""

from __future__ import annotations

from functools import cache

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from engine.drafters.token_bridge import WINDOW, TokenBridge, _byte_level_alphabet, complete_utf8
from engine.tiny import _corpus, fit_byte_bpe

TARGET = "models/spectune-tiny/target"
CHAT = "<|im_start|>user\nFix the test in ünïcode.py: 3.14 ≥ π<|im_end|>\n<|im_start|>assistant\n"


@cache
def target_tokenizer():
    return AutoTokenizer.from_pretrained(TARGET, local_files_only=True)


@cache
def chatml_draft() -> PreTrainedTokenizerFast:
    """Another byte-level BPE with the same ChatML specials (other merges and ids)."""
    return fit_byte_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), _corpus(), 600)


@cache
def plain_draft() -> PreTrainedTokenizerFast:
    """A byte-level BPE whose only special token is its own end of text, `</s>` (no ChatML markers)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")


def bridge(draft: PreTrainedTokenizerFast) -> TokenBridge:
    return TokenBridge(target_tokenizer(), draft, "differ")


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_draft_context_spells_the_history_with_shared_specials_kept():
    draft = chatml_draft()
    history = encode(target_tokenizer(), CHAT + "def add(a, b):\n    return a + b")
    context, _ = bridge(draft).session().context(history)
    assert draft.decode(context) == CHAT + "def add(a, b):\n    return a + b"
    assert draft.convert_tokens_to_ids("<|im_start|>") in context  # a marker carried over by its text


def test_target_specials_the_draft_lacks_are_dropped_from_its_context():
    draft = plain_draft()
    context, _ = bridge(draft).session().context(encode(target_tokenizer(), CHAT))
    assert draft.decode(context) == CHAT.replace("<|im_start|>", "").replace("<|im_end|>", "")


def test_proposal_keeps_whole_target_tokens_only():
    target, draft = target_tokenizer(), chatml_draft()
    text = "return a + b\nprint(add(2, 3))"
    ids, done = bridge(draft).to_target(encode(draft, text), 100)
    whole = encode(target, text)[:-1]  # the last token may be a piece of a longer one: dropped
    assert ids == whole and not done
    assert bridge(draft).to_target(encode(draft, text), 3) == (whole[:3], True)


def byte_id(tokenizer, byte: int) -> int:
    """A byte-level tokenizer's id of the single byte `byte` (its alphabet's character for it)."""
    character = {b: c for c, b in _byte_level_alphabet().items()}[byte]
    return tokenizer.convert_tokens_to_ids(character)


def test_proposal_cut_at_an_incomplete_character():
    target, draft = target_tokenizer(), chatml_draft()
    first, _ = "ü".encode()  # 0xC3 0xBC: the draft proposes only the first byte
    ids, done = bridge(draft).to_target([*encode(draft, "x = 'a"), byte_id(draft, first)], 100)
    assert ids == encode(target, "x = 'a")[:-1] and not done


def test_special_tokens_end_a_proposal():
    target, draft = target_tokenizer(), chatml_draft()
    shared = [*encode(draft, "done"), draft.convert_tokens_to_ids("<|im_end|>"), *encode(draft, "more text")]
    ids, done = bridge(draft).to_target(shared, 100)
    assert ids == encode(target, "done<|im_end|>") and done  # kept by its text, whole, and the proposal ends
    plain = plain_draft()
    own_eos = [*encode(plain, "done now"), plain.convert_tokens_to_ids("</s>"), *encode(plain, "more")]
    ids, done = bridge(plain).to_target(own_eos, 100)
    assert ids == encode(target, "done now") and done  # the target has no `</s>`: dropped, the proposal ends


def test_no_context_while_the_history_ends_inside_a_character():
    target, draft = target_tokenizer(), chatml_draft()
    state = bridge(draft).session()
    first, second = "ï".encode()
    history = [*encode(target, "na"), byte_id(target, first)]
    assert state.context(history) is None  # the target's next token finishes the character
    context, _ = state.context([*history, byte_id(target, second), *encode(target, "ve")])
    assert draft.decode(context) == "naïve"


def test_long_history_re_encodes_a_bounded_tail_and_keeps_a_stable_prefix():
    target, draft = target_tokenizer(), chatml_draft()
    text = CHAT + "".join(_corpus()[:2])[:6000]
    ids = encode(target, text)
    state = bridge(draft).session()
    previous: list[int] = []
    for n in range(20, len(ids), 7):
        got = state.context(ids[:n])
        if got is None:
            continue
        context, unchanged = got
        assert context[:unchanged] == previous[:unchanged]  # what it calls unchanged is
        tail = len(state.history) - state.anchors[-1].target
        assert tail <= 2 * WINDOW + 7, tail  # never the whole history again
        previous = context
    context, _ = state.context(ids)
    assert draft.decode(context) == text
    assert len(state.anchors) > len(ids) // (2 * WINDOW)  # frozen as it went


@pytest.mark.parametrize("data", [b"abc", "é".encode(), "€".encode(), "𝄞".encode()])
def test_complete_utf8_keeps_whole_characters(data: bytes):
    assert complete_utf8(data) == len(data)
    for cut in range(1, len(data)):
        assert complete_utf8(data[:cut]) == (cut if data[0] < 0x80 else 0)
