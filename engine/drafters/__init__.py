"""Drafters by name. `make_drafter` fails loudly on an unknown name, listing the valid ones."""

from __future__ import annotations

from engine.drafters.base import Draft, DraftContext, Drafter, DrafterResources
from engine.drafters.draft_model import DraftModelDrafter, DraftModelOptions
from engine.drafters.ngram import NgramDrafter, NgramOptions
from engine.drafters.none import NoneDrafter, NoneOptions
from engine.drafters.suffix import SuffixDrafter, SuffixOptions

# name -> (drafter class, options dataclass). A new drafter is one file plus one line here.
DRAFTERS: dict[str, tuple[type, type]] = {
    "none": (NoneDrafter, NoneOptions),
    "ngram": (NgramDrafter, NgramOptions),
    "suffix": (SuffixDrafter, SuffixOptions),
    "draft_model": (DraftModelDrafter, DraftModelOptions),
}


def drafter_options_class(name: str) -> type:
    """The options dataclass of a drafter, failing loudly on an unknown name."""
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; allowed: {sorted(DRAFTERS)}")
    return DRAFTERS[name][1]


def make_drafter(name: str, options: object | None, resources: DrafterResources) -> Drafter:
    """A new per-session drafter instance."""
    drafter_options_class(name)
    return DRAFTERS[name][0](options, resources)


__all__ = [
    "DRAFTERS",
    "Draft",
    "DraftContext",
    "Drafter",
    "DrafterResources",
    "drafter_options_class",
    "make_drafter",
]
