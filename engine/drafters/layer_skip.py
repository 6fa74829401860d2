"""`layer_skip`: self-speculation with the target's own first k layers, its final norm and its LM head.

No second model and no training: the draft is a view of the target that stops after `layers` decoder
layers (engine.forward.first_layers, built once per loaded target and shared by every session). It keeps
its own k-layer KV cache, synced to the session history by common prefix like `draft_model`'s (so a
rejection rolls back for free), and costs about k / L of a target step per draft token. LayerSkip's
sharing of those k layers' KV with the verification forward is not done: it would make the loop start
the target's forward at layer k (a special case), and costs k / L of the target's KV, which the memory
model counts. In a batch its sessions draft together as draft_model's do (the inherited `propose_many`):
every session's view is the same one forward, built once per target and k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import ConfigError, UnsupportedConfig
from engine.drafters.base import DrafterBase, DrafterResources, Needs
from engine.drafters.draft_model import DraftModelDrafter
from engine.memory import layer_skip_state_bytes_per_token


@dataclass
class LayerSkipOptions:
    """Options of the `layer_skip` drafter."""

    layers: int = 1  # decoder layers of the target the draft runs (>= 1, fewer than the target has)

    def __post_init__(self) -> None:
        if self.layers < 1:
            raise ConfigError(f"layer_skip.layers must be >= 1, got {self.layers}")


class LayerSkipDrafter(DraftModelDrafter):
    """The target's first `layers` layers draft autoregressively (DraftModelDrafter over a truncated view)."""

    name = "layer_skip"
    NEEDS = Needs(distribution=True)

    @classmethod
    def state_bytes_per_token(cls, options: LayerSkipOptions | None, target: Any, dtype: str) -> float:
        """The K and V of the draft's own `layers`-layer cache."""
        return layer_skip_state_bytes_per_token(target, (options or LayerSkipOptions()).layers, dtype)

    def __init__(self, options: LayerSkipOptions | None, resources: DrafterResources) -> None:
        options = options or LayerSkipOptions()
        DrafterBase.__init__(self, options, resources)  # not DraftModelDrafter's: there is no draft model
        target = resources.target
        if options.layers >= target.num_layers:
            raise UnsupportedConfig(
                f"layer_skip.layers={options.layers} must be below the target's {target.num_layers} layers"
            )
        self._use(target.first_layers(options.layers), target.vocab_size)
