"""How well a configuration fits each production server, from the exporters' own Mapping rows.

A server *can run* a configuration when its exporter maps the drafter and the acceptance rule (no `none`
verdict on either) and, for a combination such as `mtp+ngram`, all of it (exporting only the lookup part would
run another configuration than the one measured). A runnable configuration fits `exact` when every row maps
exactly, else `approximate` (a knob with no flag, a policy the server approximates). This is what the tuner
uses to pick each server's own best configuration and what `tuner.serve` restricts a search to.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.drafters import resolve_drafter
from engine.engine import EngineConfig
from export import llama_server, sglang, trtllm, vllm
from export.record import APPROXIMATE, EXACT, NONE, ExportRecord, Mapping, is_half_export
from export.table import LLAMA, SGLANG, TRTLLM, VLLM

# Server name (as the exporters write it) -> the exporter module and the folder of its files under best/.
SERVERS = {LLAMA: llama_server, VLLM: vllm, SGLANG: sglang, TRTLLM: trtllm}
FOLDERS = {LLAMA: "llama-server", VLLM: "vllm", SGLANG: "sglang", TRTLLM: "trtllm"}


@dataclass(frozen=True)
class Fit:
    """One configuration on one server: exact | approximate | none, and why when not exact."""

    server: str
    fit: str
    reason: str

    @property
    def runnable(self) -> bool:
        """The server can run the measured configuration (exactly or approximately)."""
        return self.fit != NONE


def server_names() -> tuple[str, ...]:
    """The servers spectune exports to."""
    return tuple(SERVERS)


def mapping_rows(engine: EngineConfig, server: str) -> list[Mapping]:
    """The exporter's rows for `engine` on `server` (placeholder model paths: only the verdicts matter here)."""
    needs = resolve_drafter(engine.drafter).needs
    record = ExportRecord(
        engine=engine,
        model_name="model",
        target="target",
        draft="draft" if needs.draft_model else None,
        hardware="-",
        measured_on="cpu",
        context=0,
        confirmed={},
        cost_ratios=None,
        composed_config={},
        mtp="mtp" if needs.mtp else None,
        eagle3="eagle3" if needs.eagle3 else None,
    )
    _, rows = SERVERS[server].build(record)
    return rows


def server_fit(engine: EngineConfig, server: str) -> Fit:
    """How `engine` fits `server` (module docstring)."""
    rows = mapping_rows(engine, server)
    for row in rows:
        key = row.setting.split(" ", 1)[0]
        if row.fit == NONE and row.setting.startswith(("drafter=", "acceptance=")):
            return Fit(server, NONE, f"{row.setting}: {row.reason}")
        if key.startswith("drafter=") and "+" in engine.drafter and is_half_export(row.reason):
            return Fit(server, NONE, f"{row.setting}: {row.reason}; the measured combination runs only in spectune")
    loose = [r for r in rows if r.fit != EXACT]
    if not loose:
        return Fit(server, EXACT, "every setting maps exactly")
    return Fit(server, APPROXIMATE, "; ".join(f"{r.setting} ({r.fit})" for r in loose))


def fits(engine: EngineConfig) -> dict[str, Fit]:
    """`engine` on every server."""
    return {name: server_fit(engine, name) for name in SERVERS}
