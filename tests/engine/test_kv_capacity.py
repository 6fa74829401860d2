"""engine.kv.capacity_bound really bounds what a growing cache allocates (the tuner's VRAM figure relies on it)."""

from engine.forward import Forward
from engine.kv import capacity_bound, new_cache
from engine.loading import load_model
from engine.tiny import make_tiny_model


def test_allocated_positions_never_exceed_the_bound(tmp_path):
    model = load_model(str(make_tiny_model(tmp_path / "m", layers=1, hidden=64, seed=1)), device="cpu", dtype="float32")
    forward, cache = Forward(model.model), new_cache(model.model)
    held = 0
    # A prefill past the minimum (capacity 300, not a power of two), steps, a long new turn: at 640 held the
    # layer has 1200 reserved, more than the next power of two.
    for chunk in [300] + [1] * 40 + [5] * 60 + [300]:
        forward(cache, [7] * chunk)
        held += chunk
        allocated = cache.layers[0]._k.shape[-2]  # the layer's reserved positions (a private, on purpose)
        assert held <= allocated <= capacity_bound(held), (held, allocated)
