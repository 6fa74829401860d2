"""The drafter -> server table (export/table.py) is the one the writers follow and the one docs/servers.md shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.drafters import DRAFTERS
from engine.engine import EngineConfig
from export import ExportRecord, llama_server, sglang, trtllm, vllm
from export.record import NONE
from export.table import LLAMA, SERVERS, SGLANG, TABLE, TRTLLM, VLLM, mapped, no_equivalent, way

PROJECT = Path(__file__).resolve().parents[2]
WRITERS = {LLAMA: llama_server, VLLM: vllm, SGLANG: sglang, TRTLLM: trtllm}
OPTIONS = {"layer_skip": {"layers": 1}}  # drafters whose defaults do not build alone


def record(drafter: str) -> ExportRecord:
    """A record of `drafter` at its defaults, with placeholder weights for the drafters that need some."""
    return ExportRecord(
        engine=EngineConfig(drafter=drafter, gamma=3, options=OPTIONS.get(drafter, {})),
        model_name="m",
        target="target",
        draft="draft",
        hardware="-",
        measured_on="cpu",
        context=0,
        confirmed={},
        cost_ratios=None,
        composed_config={},
        eagle3="eagle3",
        dflash_gguf="dflash.gguf",
    )


def kinds_written(server: str, spec) -> list[str]:
    """The server's names for what `spec` (one writer's speculative part) runs."""
    if server == VLLM:
        return [spec["method"]] if spec else []
    if server == TRTLLM:
        return [spec["speculative_config"]["decoding_type"]] if spec else []
    flag = "--spec-type" if server == LLAMA else "--speculative-algorithm"
    return [value for name, value in spec if name == flag]


def test_every_registered_drafter_has_a_row_and_every_row_a_cell_per_server():
    assert list(TABLE) == list(DRAFTERS)
    for drafter, row in TABLE.items():
        assert set(row) == set(SERVERS), drafter


@pytest.mark.parametrize("server", SERVERS)
def test_each_writer_has_a_builder_for_exactly_its_column(server):
    assert set(WRITERS[server].BUILDERS) == set(mapped(server))


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("drafter", list(TABLE))
def test_the_writer_writes_the_kind_the_table_names_or_speculation_off_with_its_reason(server, drafter):
    if server == LLAMA:
        spec, rows = llama_server.speculation(record(drafter).engine, "draft", "eagle3", "dflash.gguf")
    else:
        spec, rows = WRITERS[server].build(record(drafter))
    found = way(drafter, server)
    if found is None:  # speculation off: llama-server says so with --spec-type none, the others write nothing
        assert kinds_written(server, spec) in ([], ["none"])
        [row] = [r for r in rows if r.setting == f"drafter={drafter}"]
        assert row.fit == NONE and row.reason == no_equivalent(drafter, server)
    elif found.kind:
        assert kinds_written(server, spec)[0] in found.kind.split(", ")
    else:
        assert kinds_written(server, spec) == []


def test_docs_servers_shows_the_table_as_python_m_export_prints_it():
    printed = subprocess.run(
        [sys.executable, "-m", "export"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout
    page = (PROJECT / "docs" / "servers.md").read_text()
    start = page.index("<!-- python -m export -->\n") + len("<!-- python -m export -->\n")
    assert page[start : page.index("<!-- end of python -m export -->")] == printed
