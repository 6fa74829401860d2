"""Each server's own best configuration, and whether it is exported with speculation ON or OFF.

The engine's best (`spectune`) is the fastest feasible point of the study. A server's best is the fastest
feasible point that server can run, exactly or approximately (export/fit.py), so a study whose overall winner
has no production equivalent (layer_skip, a combination) still tells each server which flags to use.

"OFF" is an answer: a winner is exported with speculation ON only when its confirmation's interval lies above
`tuner.min_speedup` (its lower end compared, default 1.0) and it solved no fewer tasks than OFF beyond
`tuner.max_regressions`; otherwise the server is told to run without speculation, with the measured numbers and
the reason. Without a confirmation (tuner.confirm=false) the search trial's own paired interval decides, and the
export says it was not confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial

from engine.engine import EngineConfig
from export.fit import Fit, server_fit
from export.llama_server import TARGET as LLAMA_SERVER
from tuner import study as studies

SPECTUNE = "spectune"  # the engine's own best, whatever servers can run


@dataclass
class Winner:
    """The best feasible trial for one target (spectune or a server), if any."""

    target: str
    trial: FrozenTrial | None
    fit: Fit | None = None  # how it maps onto the server (None for spectune)

    @property
    def engine(self) -> EngineConfig | None:
        """The winning configuration."""
        return EngineConfig(**self.trial.user_attrs["engine"]) if self.trial is not None else None


@dataclass
class Decision:
    """What one target's export says: speculation ON with the winner, or OFF, and why."""

    target: str
    trial: int | None  # the winner's trial number (None: no feasible configuration for this target)
    on: bool
    reason: str
    fit: str | None = None  # exact | approximate (servers), None for spectune
    fit_reason: str = ""
    search: dict[str, Any] = field(default_factory=dict)  # the search trial's speedup, interval and value
    confirmed: dict[str, Any] | None = None  # the confirmation's figures, when it ran

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the confirmation reduced to its figures)."""
        c = self.confirmed or {}
        return {
            "target": self.target,
            "trial": self.trial,
            "on": self.on,
            "reason": self.reason,
            "fit": self.fit,
            "fit_reason": self.fit_reason,
            "search": self.search,
            "confirmed": {k: c.get(k) for k in ("speedup", "speedup_interval", "speedup_repeats", "regressions")}
            if c
            else None,
        }


def pick_winners(trials: list[FrozenTrial], servers: tuple[str, ...]) -> dict[str, Winner]:
    """spectune's best and each server's best feasible runnable trial (None where there is none)."""
    ranked = studies.feasible_candidates(trials)
    out = {SPECTUNE: Winner(SPECTUNE, ranked[0] if ranked else None)}
    for server in servers:
        out[server] = Winner(server, None)
        for trial in ranked:
            if trial.user_attrs.get("changes_numbers") and server != LLAMA_SERVER:
                continue  # another GGUF file or KV type (tuner.targets / cache_types): only llama-server runs it
            fit = server_fit(EngineConfig(**trial.user_attrs["engine"]), server)
            if fit.runnable:
                out[server] = Winner(server, trial, fit)
                break
    return out


def search_figures(trial: FrozenTrial) -> dict[str, Any]:
    """The search trial's paired speedup, its interval and objective value."""
    a = trial.user_attrs
    return {
        "speedup": a.get("speedup"),
        "low": a.get("speedup_low"),
        "high": a.get("speedup_high"),
        "value": trial.value,
        "measure": a.get("measure"),
    }


def decide(
    winner: Winner, confirmation: dict[str, Any] | None, *, min_speedup: float, max_regressions: int
) -> Decision:
    """ON only when the interval's lower end exceeds `min_speedup` (module docstring); the reason either way."""
    target = winner.target
    fit = winner.fit.fit if winner.fit else None
    fit_reason = winner.fit.reason if winner.fit else ""
    if winner.trial is None:
        what = "configuration" if target == SPECTUNE else f"configuration {target} can run"
        return Decision(target, None, False, f"no feasible {what} was measured: speculation off", fit, fit_reason)
    search = search_figures(winner.trial)
    base = Decision(target, winner.trial.number, False, "", fit, fit_reason, search, confirmation)
    if confirmation:
        interval = confirmation.get("speedup_interval") or {}
        low, high, point = interval.get("low"), interval.get("high"), interval.get("pooled")
        regressions = len(confirmation.get("regressions") or [])
        if regressions > max_regressions:
            base.reason = f"the confirmation found {regressions} regression(s) (allowed {max_regressions})"
            return base
        if low is None or high is None:
            note = interval.get("note") or "not computed"
            base.reason = f"the confirmation gave no interval ({note}), so no speedup is established"
            return base
        span = f"pooled {point:.2f}x, 95% interval [{low:.2f}, {high:.2f}] on held-out tasks"
    else:
        low, high = search.get("low"), search.get("high")
        if low is None or high is None:
            base.reason = "not confirmed, and the search trial gave no interval, so no speedup is established"
            return base
        span = f"not confirmed: the search trial's own paired interval [{low:.2f}, {high:.2f}]"
    if low > min_speedup:
        base.on = True
        base.reason = f"{span} lies above {min_speedup:g}"
    else:
        base.reason = f"{span} does not lie above {min_speedup:g}: nothing beat OFF with confidence on this machine"
    return base
