"""An append-only index of token streams for lookup drafting (n-gram and suffix drafters).

Every position whose token has a successor is indexed under the `key_len` tokens ending there.
A query takes the candidates sharing the context's last `key_len` tokens, measures how far each
match extends backwards (up to `max_match`) and keeps the longest: memory stays O(tokens), unlike
a depth-D suffix trie (O(tokens x D)), at the price of capping candidates to the most recent ones.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

_SEP = -1  # separates streams so no match or continuation crosses from one stream into the next


@dataclass
class Match:
    """Positions (in `TokenIndex.tokens`) whose preceding tokens match the context's suffix."""

    length: int  # matched suffix length, equal for all positions
    positions: list[int]  # each position's token is the last matched one; its successor follows


class TokenIndex:
    """Token streams laid end to end, indexed by `key_len`-grams."""

    def __init__(self, key_len: int = 1, max_candidates: int = 256) -> None:
        if key_len < 1:
            raise ValueError(f"key_len must be >= 1, got {key_len}")
        self.key_len = key_len
        self.max_candidates = max_candidates
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}
        self._stream_start = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        """Forget every stream."""
        self.tokens.clear()
        self._index.clear()
        self._stream_start = 0

    def new_stream(self) -> None:
        """Later appends start a new stream (no match crosses the boundary)."""
        if self.tokens and self.tokens[-1] != _SEP:
            self.tokens.append(_SEP)
        self._stream_start = len(self.tokens)

    def stream(self) -> list[int]:
        """The tokens of the current stream (a copy)."""
        return self.tokens[self._stream_start :]

    def stream_length(self) -> int:
        """Tokens in the current stream, without copying them (a step's commit asks this)."""
        return len(self.tokens) - self._stream_start

    def append(self, new_tokens: list[int]) -> None:
        """Extend the current stream; a position becomes findable once its successor exists."""
        k = self.key_len
        for tok in new_tokens:
            self.tokens.append(tok)
            end = len(self.tokens) - 2  # the position that just got a successor
            if end - k + 1 >= self._stream_start:
                key = tuple(self.tokens[end - k + 1 : end + 1])
                self._index.setdefault(key, []).append(end)

    def longest_match(self, context: list[int], max_match: int) -> Match:
        """Most recent candidates whose preceding tokens match the longest suffix of `context`."""
        k = self.key_len
        if len(context) < k:
            return Match(0, [])
        cands = self._index.get(tuple(context[-k:]))
        if not cands:
            return Match(0, [])
        cands = cands[-self.max_candidates :]
        tokens, best, best_pos = self.tokens, 0, []
        limit = min(max_match, len(context))
        for pos in reversed(cands):  # most recent first
            n = k
            while n < limit and pos - n >= 0 and tokens[pos - n] == context[-1 - n]:
                n += 1
            if n > best:
                best, best_pos = n, [pos]
            elif n == best:
                best_pos.append(pos)
        return Match(best, best_pos)

    def successor(self, pos: int) -> int | None:
        """The token after `pos`, or None at a stream end."""
        nxt = pos + 1
        if nxt >= len(self.tokens) or self.tokens[nxt] == _SEP:
            return None
        return self.tokens[nxt]

    def next_counts(self, positions: list[int]) -> Counter[int]:
        """How often each token follows the given positions."""
        counts: Counter[int] = Counter()
        for pos in positions:
            tok = self.successor(pos)
            if tok is not None:
                counts[tok] += 1
        return counts


class HistoryMirror:
    """Keeps a `TokenIndex` stream equal to a session history that mostly grows.

    Appends are incremental; if the history diverged from what was indexed (a new turn's prompt
    rewrote earlier tokens), the stream is rebuilt from scratch.
    """

    def __init__(self, index: TokenIndex) -> None:
        self.index = index
        self.index.new_stream()

    def sync(self, history: list[int], check_prefix: bool) -> None:
        """Bring the stream up to `history`; `check_prefix` compares the indexed part first (O(n))."""
        mine = self.index.stream_length()
        diverged = mine > len(history) or (check_prefix and self.index.stream() != history[:mine])
        if diverged:
            self.index.reset()
            self.index.new_stream()
            mine = 0
        if len(history) > mine:
            self.index.append(history[mine:])
