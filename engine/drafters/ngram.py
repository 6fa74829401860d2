"""`ngram`: prompt-lookup drafting from the session's own history.

Finds the most recent earlier occurrence of the longest suffix of the history (between
`min_match` and `max_match` tokens) and proposes the tokens that followed it (continuing as an
overlapping copy when they run into the present). No model, no
distribution: q is one-hot. Agents re-quote code and tool output, which is where this pays.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources, Verified
from engine.drafters.token_index import HistoryMirror, TokenIndex


@dataclass
class NgramOptions:
    """Options of the `ngram` drafter."""

    min_match: int = 1  # shortest history suffix (tokens) that may trigger a lookup
    max_match: int = 4  # longest suffix compared; longer matches are preferred
    max_candidates: int = 512  # earlier occurrences examined per lookup (most recent first)
    # most tokens one proposal copies (llama.cpp's size-m); 0: the step's whole budget. Below gamma, a combined
    # drafter's `extend` policy has room to let its model child continue the copy.
    max_draft: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_match <= self.max_match:
            raise ConfigError(f"need 1 <= min_match <= max_match, got {self.min_match}, {self.max_match}")
        if self.max_draft < 0:
            raise ConfigError(f"max_draft must be >= 0 (0: no cap), got {self.max_draft}")


class NgramDrafter(DrafterBase):
    """Prompt lookup over the session history."""

    name = "ngram"

    def __init__(self, options: NgramOptions | None, resources: DrafterResources) -> None:
        super().__init__(options or NgramOptions(), resources)
        self._mirror = HistoryMirror(TokenIndex(self.options.min_match, self.options.max_candidates))

    def begin(self, history: list[int]) -> None:
        """Re-sync the index with the session history (rebuilt if the history diverged)."""
        self._mirror.sync(history, check_prefix=True)

    def propose(self, ctx: DraftContext) -> Draft:
        """The continuation of the most recent longest match, up to ctx.max_tokens tokens."""
        index = self._mirror.index
        match = index.longest_match(ctx.history, self.options.max_match)
        if match.length < self.options.min_match:
            return Draft()
        # Copy what followed the match. When the copy reaches the end of the history it goes on
        # reading the draft itself (an overlapping copy, as in LZ77): in a repeating stretch
        # "a b c a b c a b" the most recent match sits one period back, and the repetition
        # continues past the history's end instead of stopping after a token or two.
        stream = index.tokens
        tokens: list[int] = []
        src = match.positions[0] + 1  # most recent match
        limit = min(ctx.max_tokens, self.options.max_draft) if self.options.max_draft else ctx.max_tokens
        while len(tokens) < limit:
            tok = stream[src] if src < len(stream) else tokens[src - len(stream)]
            tokens.append(tok)
            src += 1
        return Draft(tokens=tokens, sources=[self.name] * len(tokens))

    def commit(self, step: Verified) -> None:
        """Index the newly accepted tokens."""
        self._mirror.sync(step.history, check_prefix=False)
