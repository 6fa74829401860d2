"""write_exports: every file of best/ from one ExportRecord."""

from __future__ import annotations

from pathlib import Path

from export import llama_server, readme, sglang, spectune_yaml, trtllm, vllm
from export.record import ExportRecord, Mapping

SERVER_WRITERS = (llama_server, vllm, sglang, trtllm)  # each writes its files and returns them with its Mapping rows


def write_exports(out_dir: Path, record: ExportRecord) -> list[Path]:
    """Write spectune.yaml, the four server exports and README.md into out_dir; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [spectune_yaml.write(out_dir, record)]
    rows: list[Mapping] = []
    for writer in SERVER_WRITERS:
        written, more = writer.write(out_dir, record)
        paths += written
        rows += more
    paths.append(readme.write(out_dir, record, rows))
    return paths
