"""Draft-length policies: how many tokens to draft at each step.

`fixed` always asks for gamma; `heuristic` grows after a fully accepted draft and shrinks after a
rejection (the schedule transformers calls "heuristic"); `confidence` asks for gamma but lets a
model drafter stop early when its top probability falls below a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import ConfigError

GAMMA_POLICIES = ("fixed", "heuristic", "confidence")


@dataclass
class GammaPolicy:
    """State of one session's draft-length policy."""

    name: str = "fixed"  # one of GAMMA_POLICIES
    gamma: int = 4  # draft tokens per step (the start value for `heuristic`)
    max_gamma: int = 16  # upper bound for `heuristic`
    confidence: float = 0.4  # `confidence`: stop drafting when the draft's top probability < this

    def __post_init__(self) -> None:
        if self.name not in GAMMA_POLICIES:
            raise ConfigError(f"unknown gamma policy {self.name!r}; allowed: {list(GAMMA_POLICIES)}")
        if self.gamma < 1:
            raise ConfigError(f"gamma must be >= 1, got {self.gamma}")
        if self.max_gamma < self.gamma:
            raise ConfigError(f"max_gamma ({self.max_gamma}) must be >= gamma ({self.gamma})")
        if not 0.0 <= self.confidence <= 1.0:
            raise ConfigError(f"confidence threshold must be in [0, 1], got {self.confidence}")
        self.current = self.gamma

    def next_length(self) -> int:
        """Draft tokens to ask for now."""
        return self.current

    def stop_below(self) -> float | None:
        """Confidence threshold passed to model drafters (None: never stop early)."""
        return self.confidence if self.name == "confidence" else None

    def update(self, drafted: int, accepted: int) -> None:
        """Adapt after a verification step (only `heuristic` adapts)."""
        if self.name != "heuristic" or drafted == 0:
            return
        if accepted == drafted:
            self.current = min(self.max_gamma, self.current + 2)
        else:
            self.current = max(1, self.current - 1)
