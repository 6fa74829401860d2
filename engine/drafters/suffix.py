"""`suffix`: frequency-scored lookup over this session and earlier finished generations.

Agent traffic repeats itself across turns and tasks, so besides the session's own history the
drafter may read an engine-wide index of finished generations (`scope="engine"`). It matches the
longest suffix of the context, then follows the most frequent continuation while the product of
continuation frequencies stays >= `min_token_prob`; longer matches allow longer drafts.
`scope="session"` (or `Engine.reset_drafter_state()`) guarantees one measurement never drafts from
another's output.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources, Verified
from engine.drafters.token_index import HistoryMirror, TokenIndex

SCOPES = ("session", "engine")


@dataclass
class SuffixOptions:
    """Options of the `suffix` drafter."""

    min_match: int = 2  # shortest context suffix (tokens) that may trigger a draft
    max_match: int = 16  # longest context suffix compared
    match_factor: float = 1.0  # draft at most ceil(match_factor * match length) tokens
    min_token_prob: float = 0.1  # stop when the product of continuation frequencies drops below
    max_candidates: int = 128  # earlier occurrences examined per lookup (most recent first)
    scope: str = "engine"  # "session": own history only; "engine": plus finished generations

    def __post_init__(self) -> None:
        if not 1 <= self.min_match <= self.max_match:
            raise ConfigError(f"need 1 <= min_match <= max_match, got {self.min_match}, {self.max_match}")
        if self.scope not in SCOPES:
            raise ConfigError(f"unknown suffix scope {self.scope!r}; allowed: {list(SCOPES)}")
        if self.match_factor <= 0:
            raise ConfigError(f"match_factor must be > 0, got {self.match_factor}")


class SuffixDrafter(DrafterBase):
    """Frequency-scored suffix lookup."""

    name = "suffix"

    def __init__(self, options: SuffixOptions | None, resources: DrafterResources) -> None:
        super().__init__(options or SuffixOptions(), resources)
        self._mirror = HistoryMirror(TokenIndex(self.options.min_match, self.options.max_candidates))
        self._shared = resources.shared if self.options.scope == "engine" else None

    @classmethod
    def shared_state(cls, options: SuffixOptions | None) -> TokenIndex | None:
        """The engine-wide index of finished generations that sessions with scope=engine share."""
        options = options or SuffixOptions()
        return TokenIndex(options.min_match, options.max_candidates) if options.scope == "engine" else None

    def begin(self, history: list[int]) -> None:
        """Re-sync the session index with the history (rebuilt if it diverged)."""
        self._mirror.sync(history, check_prefix=True)

    def _indexes(self) -> list[TokenIndex]:
        return [self._mirror.index] + ([self._shared] if self._shared is not None else [])

    def propose(self, ctx: DraftContext) -> Draft:
        """Follow the most frequent continuation of the longest match."""
        opts = self.options
        found = [(idx, idx.longest_match(ctx.history, opts.max_match)) for idx in self._indexes()]
        best = max(m.length for _, m in found)
        if best < opts.min_match:
            return Draft()
        # Several indexes matching equally far pool their candidates, so counts add up.
        live = [(idx, m.positions) for idx, m in found if m.length == best]
        limit = min(ctx.max_tokens, max(1, math.ceil(opts.match_factor * best)))
        tokens: list[int] = []
        prob = 1.0
        while len(tokens) < limit:
            counts: Counter[int] = Counter()
            for idx, positions in live:
                counts.update(idx.next_counts(positions))
            if not counts:
                break
            tok, n = counts.most_common(1)[0]
            prob *= n / sum(counts.values())
            if prob < opts.min_token_prob:
                break
            tokens.append(tok)
            live = [(idx, [p + 1 for p in positions if idx.successor(p) == tok]) for idx, positions in live]
        return Draft(tokens=tokens, sources=[self.name] * len(tokens))

    def commit(self, step: Verified) -> None:
        """Index the newly accepted tokens."""
        self._mirror.sync(step.history, check_prefix=False)

    def end(self, history: list[int], generated: list[int]) -> None:
        """Add the finished generation (with a little left context) to the engine-wide index."""
        if self._shared is None or not generated:
            return
        start = max(0, len(history) - len(generated) - self.options.max_match)
        self._shared.new_stream()
        self._shared.append(history[start:])
