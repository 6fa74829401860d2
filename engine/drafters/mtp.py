"""`mtp`: an MTP module (engine/mtp.py) chained from the target's trunk output proposes the draft.

An entry of the module's block cache at position t reads (h_t, x_{t+1}), h_t the target's last decoder
layer's output before the final norm; the chain, the catch-up entries, the batch and the first step of a
turn (no draft: the last token's hidden state is not known yet) are engine/drafters/chained_head.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.drafters.base import Needs
from engine.drafters.chained_head import ChainedHeadDrafter
from engine.llama import TRUNK
from engine.memory import mtp_state_bytes_per_token


@dataclass
class MtpOptions:
    """Options of the `mtp` drafter (the module itself comes from the engine's `mtp`)."""


class MtpDrafter(ChainedHeadDrafter):
    """Chained MTP module over the target's trunk output."""

    name = "mtp"
    NEEDS = Needs(taps=(TRUNK,), distribution=True, mtp=True)
    RESOURCE = "mtp"
    MISSING = "drafter 'mtp' needs MTP weights (--mtp DIR / model.mtp; train them: python -m training.mtp)"

    @classmethod
    def state_bytes_per_token(cls, options: MtpOptions | None, target: Any, dtype: str) -> float:
        """The module's one-layer block KV and the target hidden state kept per position."""
        return mtp_state_bytes_per_token(target, dtype)
