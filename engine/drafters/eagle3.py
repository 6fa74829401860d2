"""`eagle3`: an EAGLE-3 head (engine/eagle3.py) chained from three of the target's hidden states proposes the draft.

An entry of the head's layer cache at position t reads (g_t = fc of the target's inputs of the head's
three layers at t, x_{t+1}); chained steps read the layer's own prenorm state instead of g. What the
drafter stores per position is the three tapped states side by side (Needs.taps from the head's config);
the chain, catch-up, batch and turn start are engine/drafters/chained_head.py's, shared with `mtp`. This
is what llama-server's `--spec-type draft-eagle3` does with the head's GGUF (serving/eagle3_gguf.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine.drafters.base import Needs
from engine.drafters.chained_head import ChainedHeadDrafter
from engine.heads import ChainedHead
from engine.memory import eagle3_state_bytes_per_token


@dataclass
class Eagle3Options:
    """Options of the `eagle3` drafter (the head itself comes from the engine's `eagle3`)."""


class Eagle3Drafter(ChainedHeadDrafter):
    """Chained EAGLE-3 head over the target's low, middle and high hidden states."""

    name = "eagle3"
    # The taps are the head's layer ids, known once the head is (needs_with); the class-level needs say "some".
    NEEDS = Needs(distribution=True, eagle3=True)
    RESOURCE = "eagle3"
    MISSING = (
        "drafter 'eagle3' needs an EAGLE-3 head (--eagle3 DIR / model.eagle3; train one: python -m training.eagle3)"
    )

    def needs_with(self, head: ChainedHead) -> Needs:
        """The class's needs plus the head's three taps."""
        return replace(self.needs, taps=head.taps)

    @classmethod
    def state_bytes_per_token(cls, options: Eagle3Options | None, target: Any, dtype: str) -> float:
        """The head's one-layer KV and the three target hidden states kept per position."""
        return eagle3_state_bytes_per_token(target, dtype)
