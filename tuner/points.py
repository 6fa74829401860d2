"""The points of a search space: which drafters' sub-spaces are finite, and which of their points are unmeasured.

A small sub-space (layer_skip: gamma x layers, a handful of points) should be exhausted, not resampled: when the
sampler proposes a point measured before, the objective reuses the earlier value (tuner/objective.py) and queues
an unmeasured point of the same drafter instead, and a study whose every point is measured stops. Enumeration
walks `tuner.space.suggest` itself with a stand-in trial that takes every branch, so conditional knobs
(max_gamma only under the heuristic policy) give exactly the points the sampler can produce.
"""

from __future__ import annotations

import random
from typing import Any

from engine.engine import EngineConfig
from tuner.space import Space, suggest

LIMIT = 5000  # a drafter with more points than this counts as unbounded


class _Unbounded(Exception):
    """The branch being walked draws a continuous value (or too many)."""


class _Walker:
    """A stand-in for an Optuna trial: each suggest takes the branch `path` names, recording how many there were."""

    def __init__(self, path: list[int]) -> None:
        self.path, self.depth = path, 0
        self.sizes: list[int] = []
        self.params: dict[str, Any] = {}

    def _pick(self, name: str, values: list[Any]) -> Any:
        if not values or len(values) > LIMIT:
            raise _Unbounded(name)
        if self.depth == len(self.path):
            self.path.append(0)
        value = values[self.path[self.depth]]
        self.sizes.append(len(values))
        self.depth += 1
        self.params[name] = value
        return value

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self._pick(name, list(choices))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return self._pick(name, list(range(int(low), int(high) + 1, int(step or 1))))

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False):
        if step is None:
            raise _Unbounded(name)
        count = round((high - low) / step) + 1
        return self._pick(name, [low + i * step for i in range(count)] if count <= LIMIT else [])


def drafter_points(space: Space, base: EngineConfig) -> dict[str, list[dict[str, Any]] | None]:
    """Every parameter set the space can produce, by drafter; None for a drafter with a continuous knob."""
    out: dict[str, list[dict[str, Any]] | None] = {}
    path: list[int] = []
    while True:
        walker = _Walker(path)
        try:
            suggest(walker, space, base)  # type: ignore[arg-type]  # duck-typed trial
            drafter = walker.params["drafter"]
            found = out.setdefault(drafter, [])
            if found is not None:
                found.append(dict(walker.params))
                if len(found) > LIMIT:
                    raise _Unbounded(drafter)
            del path[walker.depth :]  # a branch this walk did not reach (a knob another policy draws)
        except _Unbounded:
            drafter = walker.params.get("drafter")
            out[drafter] = None
            path[:] = path[:1]  # the rest of this drafter's branches are unbounded too: go to the next drafter
            walker.sizes = walker.sizes[:1]
        # the next branch: the deepest decision that has another value left
        while path and path[-1] + 1 >= walker.sizes[len(path) - 1]:
            path.pop()
        if not path:
            return out
        path[-1] += 1


def unmeasured(points: list[dict[str, Any]], seen: set[str], key) -> list[dict[str, Any]]:
    """The points whose key is not in `seen`."""
    return [p for p in points if key(p) not in seen]


def pick(points: list[dict[str, Any]], seed: int) -> dict[str, Any] | None:
    """One of `points`, chosen with `seed` (None when there is none)."""
    return random.Random(seed).choice(points) if points else None


def space_size(points: dict[str, list[dict[str, Any]] | None]) -> int | None:
    """How many points the whole space has (None when a drafter is unbounded)."""
    if any(p is None for p in points.values()):
        return None
    return sum(len(p) for p in points.values() if p is not None)


def study_size(space: Space, base: EngineConfig, targets: int, cache_types: int) -> int | None:
    """The points a study may measure (None when a knob is continuous): every drafter point on each of `targets`
    target files and `cache_types` KV types (a llama-server study's choices; 1 and 1 otherwise)."""
    size = space_size(drafter_points(space, base))
    return None if size is None else size * targets * cache_types
