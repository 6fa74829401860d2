"""`ngram_cache`: llama.cpp's `ngram-cache` lookup, so the tuner can measure on the built-in engine what
`llama-server --spec-type ngram-cache` drafts.

Counts, for every n-gram of 1..4 tokens, how often each token followed it; drafts one token at a time from
the longest n-gram (of the history plus the tokens drafted so far) whose counts are both large enough and
dominated by one token (llama.cpp's "lax" thresholds: at least 2, 2, 1, 1 observations and a share of 66,
50, 50, 50 % for n = 1..4), up to `max_draft` tokens (llama.cpp fixes 8).

Ported from the pinned llama.cpp (common/ngram-cache.cpp common_ngram_cache_update / _draft, and
common/speculative.cpp common_speculative_impl_ngram_cache), with the choices that shape what it drafts:
- the counts grow once per draft call from the tokens the history gained since the last call, counted as a
  chunk of their own (an n-gram across two chunks is never counted), so a reply decoded a token or two at a
  time is hardly counted and what a new turn's prompt brings is;
- the counts belong to a server slot, which keeps them across requests, also another task's, and remembers
  how many tokens it counted: after a longer earlier request it counts nothing new until a prompt outgrows
  that length. The port keeps one such slot per engine (`shared_state`), what llama-server at `-np 1` does
  for the tasks it serves in turn; with several slots the server keeps one each, which the port does not
  model (every session of the engine shares the one);
- llama-server samples a token after the prompt before it drafts, so the port drafts nothing in a prompt's
  forward;
- the only tie the thresholds let through is two tokens seen equally often (50 % each); llama.cpp keeps the
  first it meets in its unordered_map, which in libstdc++ lists a small map's newest key first, so the token
  first seen later wins, here too.
llama.cpp's optional static and dynamic caches (`--lookup-cache-static/-dynamic` files) are not used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources

NGRAM_MIN, NGRAM_MAX = 1, 4  # llama.cpp's LLAMA_NGRAM_MIN / LLAMA_NGRAM_MAX
# llama.cpp's draft_min_sample_size_lax / draft_min_percent_lax, indexed by n - 1
MIN_SAMPLES = (2, 2, 1, 1)
MIN_PERCENT = (66, 50, 50, 50)
LLAMA_DRAFT = 8  # what llama-server's ngram-cache drafts, whatever --spec-draft-n-max says


@dataclass
class NgramCacheOptions:
    """Options of the `ngram_cache` drafter."""

    max_draft: int = LLAMA_DRAFT  # most tokens one proposal holds (llama-server: always 8)

    def __post_init__(self) -> None:
        if self.max_draft < 1:
            raise ConfigError(f"max_draft must be >= 1, got {self.max_draft}")


@dataclass
class CacheSlot:
    """One server slot's counts: n-gram -> {next token: count} (n of 1..4 in one dict), and tokens counted."""

    counts: dict[tuple[int, ...], dict[int, int]] = field(default_factory=dict)
    size: int = 0

    def reset(self) -> None:
        """Forget every count (a fresh server)."""
        self.counts.clear()
        self.size = 0


class NgramCacheDrafter(DrafterBase):
    """Frequency-thresholded n-gram (1..4) lookup, as llama.cpp's ngram-cache in one server slot."""

    name = "ngram_cache"

    def __init__(self, options: NgramCacheOptions | None, resources: DrafterResources) -> None:
        super().__init__(options or NgramCacheOptions(), resources)
        self._slot: CacheSlot = resources.shared if isinstance(resources.shared, CacheSlot) else CacheSlot()
        self._prompt = -1  # the generation's prompt length: no draft (and no counting) in its forward

    @classmethod
    def shared_state(cls, options: NgramCacheOptions | None) -> CacheSlot:
        """The engine's one slot, shared by its sessions (module docstring)."""
        return CacheSlot()

    def begin(self, history: list[int]) -> None:
        """A generation starts: its first draft comes after its first sampled token, as on the server."""
        self._prompt = len(history)

    def _count_chunk(self, chunk: list[int]) -> None:
        """Count the n-grams inside `chunk` alone (llama.cpp's update over the new tokens only)."""
        counts = self._slot.counts
        for n in range(NGRAM_MIN, NGRAM_MAX + 1):
            for i in range(n, len(chunk)):
                following = counts.setdefault(tuple(chunk[i - n : i]), {})
                following[chunk[i]] = following.get(chunk[i], 0) + 1

    def _next(self, seq: list[int]) -> int | None:
        """The token the longest qualifying n-gram ending `seq` predicts, else None."""
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            following = self._slot.counts.get(tuple(seq[-n:])) if len(seq) >= n else None
            if not following:
                continue
            best, best_count, total = None, 0, 0
            for token, count in reversed(following.items()):  # newest first, as llama.cpp meets them
                if count > best_count:
                    best, best_count = token, count
                total += count
            if total < MIN_SAMPLES[n - 1] or 100 * best_count < MIN_PERCENT[n - 1] * total:
                continue
            return best
        return None

    def propose(self, ctx: DraftContext) -> Draft:
        """Up to min(max_draft, ctx.max_tokens) tokens, each the prediction of the longest qualifying n-gram."""
        history = ctx.history
        if len(history) == self._prompt:
            return Draft()
        slot = self._slot
        if slot.size < len(history):  # a history no longer than what the slot counted adds nothing, as in llama.cpp
            self._count_chunk(history[slot.size :])
            slot.size = len(history)
        if len(history) < 2:  # llama.cpp's LLAMA_NGRAM_STATIC
            return Draft()
        seq = list(history[-NGRAM_MAX:])
        tokens: list[int] = []
        while len(tokens) < min(self.options.max_draft, ctx.max_tokens):
            token = self._next(seq)
            if token is None:
                break
            tokens.append(token)
            seq.append(token)
        return Draft(tokens=tokens, sources=[self.name] * len(tokens))
