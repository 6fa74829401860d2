"""`ngram_map_k`: llama.cpp's `ngram-map-k` lookup, so the tuner can measure on the built-in engine what
`llama-server --spec-type ngram-map-k` drafts.

The last `size_n` tokens are looked up among earlier key positions that have `size_m` tokens after them,
and the `size_m` tokens that followed the match are drafted; how many is learnt per key: a key drafts
at most as many tokens as the target accepted the last time it drafted (so a key whose draft was rejected
at once never drafts again in this session).

Ported from the pinned llama.cpp (common/ngram-map.cpp common_ngram_map_begin / _draft / _accept in
key-only mode, common/speculative.cpp common_speculative_impl_ngram_map_k), with the choices that shape
what it finds: a key position is remembered in a map the first time it is indexed and never replaced by
a later one (within one indexing pass the most recent wins); positions indexed since the last draft are
searched linearly, newest first, in two ranges split at where the generation began, and the few
positions just before that split are never searched. Its hash map (2^18 slots, collisions drop keys) is
a dict here, exact per key. The map belongs to a server slot, which keeps it across requests, also another
task's (its positions, checked against the new tokens, stay until a shorter prompt cuts them): the port keeps
one such slot per engine (`shared_state`), what llama-server at `-np 1` does for the tasks it serves in turn;
with several slots the server keeps one each, which the port does not model. llama-server first samples a
token after the prompt, then drafts; the port likewise drafts nothing in the prompt's forward, so that its
map sees the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources, Verified


@dataclass
class NgramMapKOptions:
    """Options of the `ngram_map_k` drafter."""

    size_n: int = 2  # key length in tokens (llama.cpp --spec-ngram-map-k-size-n; its default 12 counts words)
    size_m: int = 8  # tokens that must follow a key position, and the most it drafts (--spec-ngram-map-k-size-m)

    def __post_init__(self) -> None:
        if self.size_n < 1 or self.size_m < 1:
            raise ConfigError(f"size_n and size_m must be >= 1, got {self.size_n}, {self.size_m}")


@dataclass
class _Key:
    """A key seen in a draft: where it was first matched, and how many tokens its last draft got accepted."""

    position: int
    accepted: int


@dataclass
class MapSlot:
    """One server slot's map (llama.cpp's common_ngram_map state)."""

    first: dict[tuple[int, ...], int] = field(default_factory=dict)  # key -> the position remembered (key_map)
    indexed: int = 0  # positions up to here are in `first` (key_map_last_idx)
    begin: int = 0  # history length when the generation began (size_last_begin)
    checked: int = 0  # history length at the last draft (idx_last_check)
    keys: dict[tuple[int, ...], _Key] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget the map (a fresh server)."""
        self.first.clear()
        self.keys.clear()
        self.indexed = self.begin = self.checked = 0


class NgramMapKDrafter(DrafterBase):
    """Key-only n-gram map lookup with per-key draft lengths, as llama.cpp's ngram-map-k."""

    name = "ngram_map_k"

    def __init__(self, options: NgramMapKOptions | None, resources: DrafterResources) -> None:
        super().__init__(options or NgramMapKOptions(), resources)
        self._slot: MapSlot = resources.shared if isinstance(resources.shared, MapSlot) else MapSlot()
        self._last: tuple[tuple[int, ...], int] | None = None  # (key, draft length) the next commit verifies
        self._prompt = -1  # the generation's prompt length: no draft in its forward

    @classmethod
    def shared_state(cls, options: NgramMapKOptions | None) -> MapSlot:
        """The engine's one slot, shared by its sessions (module docstring)."""
        return MapSlot()

    def begin(self, history: list[int]) -> None:
        """A generation starts: forget what lay past a history that shrank (common_ngram_map_begin)."""
        n, m, size = self.options.size_n, self.options.size_m, len(history)
        cleanup = self._slot.begin
        if cleanup > size:
            cleanup = size - n - m if size > n + m else 0
        if size < self._slot.checked:
            self._slot.first = {key: pos for key, pos in self._slot.first.items() if pos < cleanup}
            self._slot.indexed = max(cleanup - 1, 0)
            self._slot.keys = {key: k for key, k in self._slot.keys.items() if k.position < cleanup}
        self._slot.checked = self._slot.begin = self._prompt = size
        self._last = None

    def _search(self, tokens: list[int], key: tuple[int, ...], high: int, low: int) -> int:
        """The highest position in (low, high] where `key` starts, else 0."""
        n = len(key)
        for j in range(high, low, -1):
            if tuple(tokens[j : j + n]) == key:
                return j
        return 0

    def propose(self, ctx: DraftContext) -> Draft:
        """The tokens after the key's remembered position, as many as the key's last draft got accepted."""
        self._last = None
        n, m = self.options.size_n, self.options.size_m
        if len(ctx.history) == self._prompt:  # the prompt's forward: the server has not sampled yet
            return Draft()
        tokens = ctx.history[:-1]  # what llama.cpp calls the prompt; history[-1] is its sampled token
        size = len(tokens)
        if size < 2 * n + m:
            return Draft()
        self._slot.checked = size
        key = tuple(ctx.history[-n:])
        limit = size - n - m - 1  # the last position with m tokens after its key
        match = self._slot.first.get(key, 0)
        if match >= limit or tuple(tokens[match : match + n]) != key:  # an earlier task's position may hold others
            match = 0
        if not match and self._slot.begin > n + m + 1:
            match = self._search(tokens, key, self._slot.begin - n - m - 1, self._slot.indexed)
        if not match:
            match = self._search(tokens, key, limit, max(self._slot.begin, self._slot.indexed))
        self._index(tokens, limit)
        if not match:
            return Draft()
        entry = self._slot.keys.get(key)
        if entry is None or tuple(tokens[entry.position : entry.position + n]) != key:  # llama.cpp matches by position
            entry = self._slot.keys[key] = _Key(match, m)
        draft = tokens[match + n : match + n + min(m, entry.accepted, ctx.max_tokens)]
        if draft:
            self._last = key, len(draft)
        return Draft(tokens=draft, sources=[self.name] * len(draft))

    def _index(self, tokens: list[int], limit: int) -> None:
        """Remember the key at every position not yet indexed, the first pass to see a key keeping it."""
        n = self.options.size_n
        ranges = []
        if self._slot.begin > n + self.options.size_m + 1:
            ranges.append(range(self._slot.begin - n - self.options.size_m - 1, self._slot.indexed, -1))
        ranges.append(range(limit, max(self._slot.begin, self._slot.indexed), -1))
        for positions in ranges:
            for j in positions:
                self._slot.first.setdefault(tuple(tokens[j : j + n]), j)
        self._slot.indexed = max(limit, self._slot.indexed)

    def commit(self, step: Verified) -> None:
        """The key that drafted learns how many of its tokens were accepted (common_ngram_map_accept)."""
        if self._last is not None:
            key, length = self._last
            entry = self._slot.keys.get(key)  # another session's begin may have dropped it meanwhile
            if entry is not None:
                entry.accepted = min(step.added - 1, length)  # a model child may have continued the draft
            self._last = None
