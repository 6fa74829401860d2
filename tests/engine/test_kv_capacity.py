"""engine.kv.capacity_bound really bounds what a growing cache allocates (the tuner's VRAM figure relies on it)."""

import pytest

from engine.forward import make_forward
from engine.kv import capacity_bound
from engine.loading import load_model
from engine.tiny import make_tiny_model


def reserved(cache) -> int:
    """Positions a cache has allocated: transformers' growing layer (a private, on purpose) or the engine's buffer."""
    return cache.capacity if hasattr(cache, "capacity") else cache.layers[0]._k.shape[-2]


@pytest.mark.parametrize("path", ["transformers", "torch"])
def test_allocated_positions_never_exceed_the_bound(tmp_path, path):
    model = load_model(str(make_tiny_model(tmp_path / "m", layers=1, hidden=64, seed=1)), device="cpu", dtype="float32")
    forward = make_forward(model.model, path)
    cache = forward.new_cache()
    held = 0
    # A prefill past the minimum (capacity 300, not a power of two), steps, a long new turn: at 640 held the
    # layer has 1200 reserved, more than the next power of two.
    for chunk in [300] + [1] * 40 + [5] * 60 + [300]:
        forward(cache, [7] * chunk)
        held += chunk
        allocated = reserved(cache)
        assert held <= allocated <= capacity_bound(held), (held, allocated)
