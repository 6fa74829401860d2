"""Drafters by name, and their options.

A name is one registered drafter (`ngram`) or several joined by `+` (`mtp+ngram`: a combined drafter,
engine/drafters/combined.py). Options are `KEY=VALUE` pairs: a plain key (`min_match=3`) goes to the
drafter that declares it, a namespaced key (`ngram.min_match=3`) to the named child; in a combination a
plain key that several children declare is ambiguous and must be namespaced. Every lookup fails loudly
on an unknown name or key, listing the valid ones. A name is resolved once, where it enters, into a
`DrafterSpec` (`resolve_drafter`): its parts, class, options and `Needs`, which callers pass on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, Drafter, DrafterResources, Needs, Verified
from engine.drafters.combined import COMBINED_KEYS, CombinedDrafter, CombinedOptions
from engine.drafters.draft_model import DraftModelDrafter, DraftModelOptions
from engine.drafters.eagle3 import Eagle3Drafter, Eagle3Options
from engine.drafters.layer_skip import LayerSkipDrafter, LayerSkipOptions
from engine.drafters.mtp import MtpDrafter, MtpOptions
from engine.drafters.ngram import NgramDrafter, NgramOptions
from engine.drafters.ngram_cache import NgramCacheDrafter, NgramCacheOptions
from engine.drafters.ngram_map_k import NgramMapKDrafter, NgramMapKOptions
from engine.drafters.none import NoneDrafter, NoneOptions
from engine.drafters.server_only import DFlashDrafter, DSparkDrafter, ServerDraftOptions, ServerOnlyDrafter, refusal
from engine.drafters.suffix import SuffixDrafter, SuffixOptions
from engine.options import build_options, option_names

# name -> (drafter class, options dataclass). A new drafter is one file plus one line here.
DRAFTERS: dict[str, tuple[type, type]] = {
    "none": (NoneDrafter, NoneOptions),
    "ngram": (NgramDrafter, NgramOptions),
    "suffix": (SuffixDrafter, SuffixOptions),
    "ngram_cache": (NgramCacheDrafter, NgramCacheOptions),
    "ngram_map_k": (NgramMapKDrafter, NgramMapKOptions),
    "draft_model": (DraftModelDrafter, DraftModelOptions),
    "mtp": (MtpDrafter, MtpOptions),
    "eagle3": (Eagle3Drafter, Eagle3Options),
    "layer_skip": (LayerSkipDrafter, LayerSkipOptions),
    # llama-server only (engine/drafters/server_only.py): the engine refuses them
    "dflash": (DFlashDrafter, ServerDraftOptions),
    "dspark": (DSparkDrafter, ServerDraftOptions),
}
# Combinations the configs and docs name; any A+B of registered drafters works.
COMBINED_EXAMPLES = ("mtp+ngram", "eagle3+ngram")


def drafter_parts(name: str) -> list[str]:
    """The registered drafters a name stands for (one, or the children of an A+B combination)."""
    parts = [p.strip() for p in name.split("+")]
    for part in parts:
        if part not in DRAFTERS:
            combos = ", ".join(COMBINED_EXAMPLES)
            raise ConfigError(f"unknown drafter {part!r}; allowed: {sorted(DRAFTERS)} or A+B of them (e.g. {combos})")
    if len(parts) > 1:
        if "none" in parts:
            raise ConfigError(f"drafter {name!r}: 'none' cannot be combined")
        if len(set(parts)) != len(parts):
            raise ConfigError(f"drafter {name!r} names a drafter twice")
    return parts


def is_known_drafter(name: str) -> bool:
    """True when `name` is a registered drafter or a valid combination of them."""
    try:
        drafter_parts(name)
    except ConfigError:
        return False
    return True


def drafter_option_keys(name: str) -> list[str]:
    """Every option key `name` accepts: plain keys and child-namespaced ones (`ngram.min_match`)."""
    parts = drafter_parts(name)
    keys = [f"{p}.{k}" for p in parts for k in option_names(DRAFTERS[p][1])]
    own = list(COMBINED_KEYS) if len(parts) > 1 else []
    plain = [k for p in parts for k in option_names(DRAFTERS[p][1])]
    unique = [k for k in dict.fromkeys(plain) if plain.count(k) == 1]
    return [*own, *unique, *keys]


def build_drafter_options(name: str, values: dict[str, Any]) -> Any:
    """The options object of drafter `name` from KEY -> value pairs (strings converted; unknown keys fail)."""
    return _options(name, drafter_parts(name), values)


def _options(name: str, parts: list[str] | tuple[str, ...], values: dict[str, Any]) -> Any:
    routed: dict[str, dict[str, Any]] = {p: {} for p in parts}
    own: dict[str, Any] = {}
    for key, value in values.items():
        child, dot, rest = key.partition(".")
        if dot:
            if child not in parts:
                raise ConfigError(f"option {key!r}: {child!r} is not part of drafter {name!r} ({', '.join(parts)})")
            routed[child][rest] = value
        elif len(parts) > 1 and key in COMBINED_KEYS:
            own[key] = value
        else:
            takers = [p for p in parts if key in option_names(DRAFTERS[p][1])]
            if len(takers) > 1:
                raise ConfigError(
                    f"option {key!r} is ambiguous in {name!r}: say {' or '.join(f'{t}.{key}' for t in takers)}"
                )
            if not takers:
                raise ConfigError(f"unknown option {key!r} for drafter {name!r}; allowed: {drafter_option_keys(name)}")
            routed[takers[0]][key] = value
    children = {p: build_options(DRAFTERS[p][1], routed[p], f"drafter {p!r}") for p in parts}
    if len(parts) == 1:
        return children[parts[0]]
    classes = {p: DRAFTERS[p][0] for p in parts}
    return build_options(CombinedOptions, own, f"drafter {name!r}").with_children(children, classes)


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter name resolved once: its parts, its class, its options and what it needs (`resolve_drafter`).

    Made where a name enters (a run's config, a search space, an `EngineConfig` the engine validates) and
    passed on, so nothing downstream parses the name again.
    """

    name: str  # as given: one registered drafter, or A+B
    parts: tuple[str, ...]  # the registered drafters it stands for (one, or the combination's children)
    cls: type  # the drafter class (CombinedDrafter for A+B)
    options: Any  # its options object, defaults filled
    needs: Needs  # what it needs from the engine (a combination: the union of its children's)

    @property
    def refusal(self) -> str:
        """Why spectune's engine cannot run it (one of its parts runs on llama-server only), else ""."""
        for part in self.parts:
            cls = DRAFTERS[part][0]
            if issubclass(cls, ServerOnlyDrafter):
                return refusal(part, cls.kind)
        return ""

    def takes(self, key: str) -> bool:
        """True when `key` is one of its options (plain or namespaced)."""
        child, dot, rest = key.partition(".")
        if dot:
            return child in self.parts and rest in option_names(DRAFTERS[child][1])
        if len(self.parts) > 1 and key in COMBINED_KEYS:
            return True
        return any(key in option_names(DRAFTERS[p][1]) for p in self.parts)

    def with_values(self, values: dict[str, Any]) -> DrafterSpec:
        """The same drafter with its options built from KEY -> value pairs (strings converted; unknown keys fail)."""
        options = _options(self.name, self.parts, values)
        return replace(self, options=options, needs=self.cls.needs_for(options))

    def shared_state(self) -> Any:
        """The engine-wide state it keeps across sessions (None: none); it has a reset() method."""
        return self.cls.shared_state(self.options)

    def state_bytes_per_token(self, target: Any, dtype: str) -> float:
        """Bytes per context position of its own state (MTP block KV, layer-skip KV; 0 for lookups)."""
        return float(self.cls.state_bytes_per_token(self.options, target, dtype))

    def make(self, resources: DrafterResources) -> Drafter:
        """A new per-session drafter instance."""
        return self.cls(self.options, resources)


def drafter_needs(name: str) -> Needs:
    """What drafter `name` needs with its default options: `resolve_drafter(name).needs`.

    Kept for callers that hold only a name and ask nothing else of it; a caller that asks more, or passes the
    answer on, resolves the name once with `resolve_drafter` and keeps the spec.
    """
    return resolve_drafter(name).needs


def resolve_drafter(name: str, values: dict[str, Any] | None = None) -> DrafterSpec:
    """Drafter `name` with options from `values` (default options when None), resolved once.

    Fails loudly on an unknown name or option, listing the valid ones.
    """
    parts = drafter_parts(name)
    options = _options(name, parts, values or {})
    cls = CombinedDrafter if len(parts) > 1 else DRAFTERS[parts[0]][0]
    return DrafterSpec(name, tuple(parts), cls, options, cls.needs_for(options))


__all__ = [
    "DRAFTERS",
    "Draft",
    "DraftContext",
    "Drafter",
    "DrafterResources",
    "DrafterSpec",
    "Needs",
    "Verified",
    "build_drafter_options",
    "drafter_needs",
    "drafter_option_keys",
    "drafter_parts",
    "is_known_drafter",
    "resolve_drafter",
]
