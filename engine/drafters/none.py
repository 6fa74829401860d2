"""`none`: no drafting at all. Speculation OFF, the baseline of every comparison."""

from __future__ import annotations

from dataclasses import dataclass

from engine.drafters.base import Draft, DraftContext, DrafterResources


@dataclass
class NoneOptions:
    """`none` has no options."""


class NoneDrafter:
    """Proposes nothing, so every step is one plain decoding step."""

    name = "none"
    needs_target_hidden = False
    is_model = False

    def __init__(self, options: NoneOptions | None, resources: DrafterResources) -> None:
        self.options = options or NoneOptions()

    def begin(self, history: list[int]) -> None:
        """Nothing to prepare."""

    def propose(self, ctx: DraftContext) -> Draft:
        """An empty draft."""
        return Draft()

    def commit(self, history: list[int]) -> None:
        """Nothing to track."""

    def end(self, history: list[int], generated: list[int]) -> None:
        """Nothing to learn."""
