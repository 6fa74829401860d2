"""`none`: no drafting at all. Speculation OFF, the baseline of every comparison."""

from __future__ import annotations

from dataclasses import dataclass

from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources


@dataclass
class NoneOptions:
    """`none` has no options."""


class NoneDrafter(DrafterBase):
    """Proposes nothing, so every step is one plain decoding step."""

    name = "none"

    def __init__(self, options: NoneOptions | None, resources: DrafterResources) -> None:
        super().__init__(options or NoneOptions(), resources)

    def propose(self, ctx: DraftContext) -> Draft:
        """An empty draft."""
        return Draft()
