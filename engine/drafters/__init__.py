"""Drafters by name, and their options.

A name is one registered drafter (`ngram`) or several joined by `+` (`mtp+ngram`: a combined drafter,
engine/drafters/combined.py). Options are `KEY=VALUE` pairs: a plain key (`min_match=3`) goes to the
drafter that declares it, a namespaced key (`ngram.min_match=3`) to the named child; in a combination a
plain key that several children declare is ambiguous and must be namespaced. Every lookup fails loudly
on an unknown name or key, listing the valid ones.
"""

from __future__ import annotations

from typing import Any

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
            raise ValueError(f"unknown drafter {part!r}; allowed: {sorted(DRAFTERS)} or A+B of them (e.g. {combos})")
    if len(parts) > 1:
        if "none" in parts:
            raise ValueError(f"drafter {name!r}: 'none' cannot be combined")
        if len(set(parts)) != len(parts):
            raise ValueError(f"drafter {name!r} names a drafter twice")
    return parts


def is_known_drafter(name: str) -> bool:
    """True when `name` is a registered drafter or a valid combination of them."""
    try:
        drafter_parts(name)
    except ValueError:
        return False
    return True


def drafter_options_class(name: str) -> type:
    """The options dataclass of a single drafter (CombinedOptions for A+B), failing loudly on an unknown name."""
    parts = drafter_parts(name)
    return DRAFTERS[parts[0]][1] if len(parts) == 1 else CombinedOptions


def drafter_option_keys(name: str) -> list[str]:
    """Every option key `name` accepts: plain keys and child-namespaced ones (`ngram.min_match`)."""
    parts = drafter_parts(name)
    keys = [f"{p}.{k}" for p in parts for k in option_names(DRAFTERS[p][1])]
    own = list(COMBINED_KEYS) if len(parts) > 1 else []
    plain = [k for p in parts for k in option_names(DRAFTERS[p][1])]
    unique = [k for k in dict.fromkeys(plain) if plain.count(k) == 1]
    return [*own, *unique, *keys]


def drafter_takes(name: str, key: str) -> bool:
    """True when `key` is an option of drafter `name` (plain or namespaced)."""
    parts = drafter_parts(name)
    child, dot, rest = key.partition(".")
    if dot:
        return child in parts and rest in option_names(DRAFTERS[child][1])
    if len(parts) > 1 and key in COMBINED_KEYS:
        return True
    return any(key in option_names(DRAFTERS[p][1]) for p in parts)


def build_drafter_options(name: str, values: dict[str, Any]) -> Any:
    """The options object of drafter `name` from KEY -> value pairs (strings converted; unknown keys fail)."""
    parts = drafter_parts(name)
    routed: dict[str, dict[str, Any]] = {p: {} for p in parts}
    own: dict[str, Any] = {}
    for key, value in values.items():
        child, dot, rest = key.partition(".")
        if dot:
            if child not in parts:
                raise ValueError(f"option {key!r}: {child!r} is not part of drafter {name!r} ({', '.join(parts)})")
            routed[child][rest] = value
        elif len(parts) > 1 and key in COMBINED_KEYS:
            own[key] = value
        else:
            takers = [p for p in parts if key in option_names(DRAFTERS[p][1])]
            if len(takers) > 1:
                raise ValueError(
                    f"option {key!r} is ambiguous in {name!r}: say {' or '.join(f'{t}.{key}' for t in takers)}"
                )
            if not takers:
                raise ValueError(f"unknown option {key!r} for drafter {name!r}; allowed: {drafter_option_keys(name)}")
            routed[takers[0]][key] = value
    children = {p: build_options(DRAFTERS[p][1], routed[p], f"drafter {p!r}") for p in parts}
    if len(parts) == 1:
        return children[parts[0]]
    return build_options(CombinedOptions, own, f"drafter {name!r}").with_children(children)


def _class_and_options(name: str, options: Any) -> tuple[type, Any]:
    parts = drafter_parts(name)
    if len(parts) > 1:
        return CombinedDrafter, options if options is not None else build_drafter_options(name, {})
    return DRAFTERS[parts[0]][0], options


def drafter_needs(name: str, options: Any = None) -> Needs:
    """What drafter `name` with `options` needs from the engine (a combination: the union of its children's)."""
    cls, options = _class_and_options(name, options)
    return cls.needs_for(options)


def server_only_refusal(name: str) -> str:
    """Why spectune's engine cannot run drafter `name` (one of its parts runs on llama-server only), else ""."""
    for part in drafter_parts(name):
        cls = DRAFTERS[part][0]
        if issubclass(cls, ServerOnlyDrafter):
            return refusal(part, cls.kind)
    return ""


def drafter_shared_state(name: str, options: Any = None) -> Any:
    """The engine-wide state drafter `name` keeps across sessions (None: none); it has a reset() method."""
    cls, options = _class_and_options(name, options)
    return cls.shared_state(options)


def drafter_state_bytes_per_token(name: str, options: Any, target: Any, dtype: str) -> float:
    """Bytes per context position of drafter `name`'s own state (MTP block KV, layer-skip KV; 0 for lookups)."""
    cls, options = _class_and_options(name, options)
    return float(cls.state_bytes_per_token(options, target, dtype))


def make_drafter(name: str, options: object | None, resources: DrafterResources) -> Drafter:
    """A new per-session drafter instance."""
    cls, options = _class_and_options(name, options)
    return cls(options, resources)


__all__ = [
    "DRAFTERS",
    "Draft",
    "DraftContext",
    "Drafter",
    "DrafterResources",
    "Needs",
    "Verified",
    "build_drafter_options",
    "drafter_needs",
    "drafter_option_keys",
    "drafter_options_class",
    "drafter_parts",
    "drafter_shared_state",
    "drafter_state_bytes_per_token",
    "drafter_takes",
    "is_known_drafter",
    "make_drafter",
    "server_only_refusal",
]
