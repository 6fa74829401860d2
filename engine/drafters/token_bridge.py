"""Drafting with a draft model whose tokenizer differs from the target's: proposals carried over as text.

The draft's ids mean nothing to the target, so the two meet in bytes of text. Before each proposal the
session's target history is turned into the draft's context: every target token becomes its bytes, and the
draft's tokenizer encodes that text. After drafting, the draft's tokens become bytes again and the target's
tokenizer encodes them; the target verifies those ids as it verifies any draft.

What is lost in translation, and how it is handled:

- Boundaries. The last target token of a re-tokenized proposal may be a piece of a longer token (the draft
  wrote "hel", the target would say "hello" next step): it is dropped, so only whole tokens are proposed. A
  proposal that ends in a special token keeps it: a special token is never a piece of a longer one.
- Bytes that are not UTF-8. A byte-level token may end in the middle of a character; a draft proposal's
  incomplete trailing character is cut before re-tokenizing, and while the target history itself ends inside
  a character nothing is proposed (the target's next token finishes it).
- Special tokens (chat markers such as `<|im_start|>`, EOS) carry over by their text when the other side has
  a special token of that text, and are dropped otherwise: a target marker the draft lacks is left out of
  the draft's context; a draft special the target lacks ends the proposal (there is nothing to verify after
  the draft's own end of text). A draft that starts its encodings with BOS gets it in front of its context.
- Cost. Re-encoding the whole history every step would be O(n^2) over a generation. The draft's context is a
  frozen prefix plus a re-encoded tail: when the tail passes 2 x WINDOW target tokens, its older part up to a
  cut (a target token that starts with whitespace, where BPE pre-tokenizers split anyway, else any token
  boundary at a whole character) is encoded once and frozen. Each step re-encodes at most ~2 x WINDOW
  tokens, and the frozen ids never change, so the draft's KV cache keeps them.

Exactness. The proposal is deterministic given the history (greedy draft tokens, then fixed conversions), and
there is no draft distribution over target ids, so it is verified as a one-hot proposal (Draft.probs None):
greedy verification keeps plain greedy token for token, and exact sampling accepts x with probability
p_target(x) and on rejection samples normalize(max(p - onehot(x), 0)), which emits every token with exactly
p_target's probability whatever x was (tests/engine/test_sampling_exactness.py).

The published approaches this follows: transformers' universal assisted generation
(AssistedCandidateGeneratorDifferentTokenizers: decode the draft's new tokens, re-encode them for the target
with a look-behind window, align the overlap) and llama.cpp's cross-vocabulary draft (detokenize the draft's
tokens, tokenize the text for the target). Both carry proposals as text; here alignment is by byte offsets
of whole target tokens instead of matching token diagonals, and the draft's side keeps a frozen prefix.
Not done: vLLM's token-level intersection (TLI: the draft restricted to tokens both vocabularies share) or
string-level exact verification of the draft's own distribution (Timor et al., 2025).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from transformers import PreTrainedTokenizerBase

WINDOW = 32  # target tokens of history re-encoded every step (the tail holds WINDOW .. 2 x WINDOW)
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece byte fallback
STOP = None  # a draft piece that ends the proposal (a special token the target lacks)


@cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the others shift to U+0100 and up."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for byte in range(256):
        if byte in kept:
            table[chr(byte)] = byte
        else:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


def _is_byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer's decoder maps token characters to bytes (GPT-2, Qwen, Llama 3 style)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and type(backend.decoder).__name__ == "ByteLevel"


def special_texts(tokenizer: PreTrainedTokenizerBase) -> set[str]:
    """The texts of a tokenizer's special tokens (BOS, EOS, chat markers, added special tokens)."""
    texts = set(tokenizer.all_special_tokens)
    texts |= {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
    return texts


class PieceTable:
    """The bytes of each id of one tokenizer, computed once per id."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, keep_specials: set[str]) -> None:
        self.tokenizer = tokenizer
        self.size = len(tokenizer)
        self._byte_level = _is_byte_level(tokenizer)
        self._added = {i: t for i, t in tokenizer.added_tokens_decoder.items()}
        self._keep = keep_specials  # special texts the other side knows: kept, other specials are STOP
        self._pieces: dict[int, bytes | None] = {}
        # Decoding [ref, id] and removing ref's text keeps a piece's leading space (SentencePiece drops it alone).
        self._ref = tokenizer.convert_tokens_to_ids("a") if "a" in tokenizer.get_vocab() else None

    def piece(self, token: int) -> bytes | None:
        """The bytes token `token` stands for; STOP (None) for a special token the other side lacks."""
        if token not in self._pieces:
            self._pieces[token] = self._compute(token)
        return self._pieces[token]

    def is_special(self, token: int) -> bool:
        """Whether `token` is one of the tokenizer's special tokens."""
        added = self._added.get(token)
        return added is not None and added.special

    def _compute(self, token: int) -> bytes | None:
        added = self._added.get(token)
        if added is not None:
            if added.special:
                return added.content.encode() if added.content in self._keep else STOP
            return added.content.encode()
        if token >= self.size:  # embedding padding past the tokenizer: no text
            return b""
        text = self.tokenizer.convert_ids_to_tokens(token)
        if self._byte_level:
            alphabet = _byte_level_alphabet()
            if all(c in alphabet for c in text):
                return bytes(alphabet[c] for c in text)
        match = _BYTE_TOKEN.fullmatch(text)
        if match:
            return bytes([int(match.group(1), 16)])
        if self._ref is None:
            return self.tokenizer.decode([token]).encode()
        base = self.tokenizer.decode([self._ref])
        return self.tokenizer.decode([self._ref, token])[len(base) :].encode()


def complete_utf8(data: bytes) -> int:
    """The length of `data` without an incomplete UTF-8 character at its end (invalid bytes elsewhere are kept)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)  # ASCII: complete
        if byte >= 0xC0:  # a lead byte: complete when its continuation bytes are all there
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)  # only continuation bytes (invalid): nothing to wait for


class TokenBridge:
    """What one target / draft tokenizer pair shares across sessions: the pieces of both sides."""

    def __init__(self, target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase, reason: str) -> None:
        self.reason = reason  # how the tokenizers differ (engine.loading.tokenizer_difference)
        self.target_tokenizer, self.draft_tokenizer = target, draft
        self.target_pieces = PieceTable(target, special_texts(draft))
        self.draft_pieces = PieceTable(draft, special_texts(target))
        self.draft_size = len(draft)  # the draft's ids that have text; logits beyond are padding
        self.draft_start = list(draft("", add_special_tokens=True)["input_ids"])  # BOS where the draft adds one

    def encode_draft(self, data: bytes) -> list[int]:
        """The draft's ids of `data` (text; bytes that are not UTF-8 become U+FFFD)."""
        return self.draft_tokenizer.encode(data.decode("utf-8", "replace"), add_special_tokens=False)

    def to_target(self, draft_ids: list[int], limit: int) -> tuple[list[int], bool]:
        """(whole target tokens of the draft's proposal, at most `limit`; whether drafting more cannot change them).

        Done when there are `limit` whole tokens, or the proposal ended at a special token.
        """
        data, closed = bytearray(), False
        for token in draft_ids:
            piece = self.draft_pieces.piece(token)
            if piece is STOP:
                closed = True
                break
            data += piece
            if self.draft_pieces.is_special(token):  # a special the target knows: whole, and the draft's text ends
                closed = True
                break
        if not closed:
            del data[complete_utf8(bytes(data)) :]
        text = bytes(data).decode("utf-8", "replace")
        ids = self.target_tokenizer.encode(text, add_special_tokens=False) if text else []
        if not closed and ids:
            ids.pop()  # may be a piece of a longer target token
        return ids[:limit], closed or len(ids) >= limit

    def session(self) -> BridgeState:
        """A new per-session mapping of the target history to the draft's context."""
        return BridgeState(self)


@dataclass
class _Anchor:
    """A cut: the draft ids [:drafted] encode exactly the target history [:target] (its first `offset` bytes)."""

    target: int
    offset: int
    drafted: int


@dataclass
class BridgeState:
    """One session's target history as bytes, and the draft's frozen context prefix (see the module docstring)."""

    bridge: TokenBridge
    history: list[int] = field(default_factory=list)  # target ids mapped so far
    data: bytearray = field(default_factory=bytearray)  # their bytes
    ends: list[int] = field(default_factory=list)  # ends[i]: byte offset after history[i]
    frozen: list[int] = field(default_factory=list)  # the draft ids of data[:anchors[-1].offset]
    anchors: list[_Anchor] = field(default_factory=list)
    verified: int = 0  # history[:verified] is known to equal the session's (reset by begin)

    def __post_init__(self) -> None:
        self.frozen = list(self.bridge.draft_start)
        self.anchors = [_Anchor(0, 0, len(self.frozen))]

    def begin(self) -> None:
        """A new generation: the history may have changed anywhere."""
        self.verified = 0

    def context(self, seq: list[int]) -> tuple[list[int], int] | None:
        """(the draft's context for target ids `seq`, how many leading ids are unchanged since the last call).

        None while `seq` ends inside a UTF-8 character: the proposal could not start at a character.
        """
        c = self.verified
        limit = min(len(self.history), len(seq))
        while c < limit and self.history[c] == seq[c]:
            c += 1
        self._cut(c)
        unchanged = len(self.frozen)
        pieces = self.bridge.target_pieces
        for token in seq[c:]:
            self.data += pieces.piece(token) or b""  # a special the draft lacks: dropped
            self.ends.append(len(self.data))
        self.history.extend(seq[c:])
        self.verified = len(seq)
        end = bytes(self.data[-4:])
        if complete_utf8(end) < len(end):
            return None
        self._freeze()
        tail = self.bridge.encode_draft(bytes(self.data[self.anchors[-1].offset :]))
        return self.frozen + tail, min(unchanged, len(self.frozen))

    def _cut(self, keep: int) -> None:
        """Forget the history past `keep` tokens, and the anchors beyond it."""
        del self.history[keep:], self.ends[keep:]
        del self.data[self.ends[-1] if self.ends else 0 :]
        while self.anchors[-1].target > keep:
            self.anchors.pop()
        del self.frozen[self.anchors[-1].drafted :]

    def _freeze(self) -> None:
        """Freeze the tail's older part when the tail passes 2 x WINDOW target tokens."""
        last = self.anchors[-1]
        if len(self.history) - last.target <= 2 * WINDOW:
            return
        latest = len(self.history) - WINDOW
        cut = next((j for j in range(latest, last.target, -1) if self._splits(j)), None)
        if cut is None:  # no word boundary: any token boundary at a whole character
            cut = next((j for j in range(latest, last.target, -1) if self._whole(j)), None)
        if cut is None:
            return
        offset = self.ends[cut - 1]
        self.frozen += self.bridge.encode_draft(bytes(self.data[last.offset : offset]))
        self.anchors.append(_Anchor(cut, offset, len(self.frozen)))

    def _whole(self, j: int) -> bool:
        """Whether the bytes before target token j end at a whole character."""
        head = bytes(self.data[max(0, self.ends[j - 1] - 4) : self.ends[j - 1]])
        return complete_utf8(head) == len(head)

    def _splits(self, j: int) -> bool:
        """Whether target token j starts with whitespace (where BPE pre-tokenizers split) at a whole character."""
        start = self.ends[j - 1]
        return start < len(self.data) and self.data[start : start + 1].isspace() and self._whole(j)
