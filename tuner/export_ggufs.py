"""The GGUF facts and files a study's llama-server export names, so its run.sh runs as written.

A llama-server study measured GGUF files: the export names them, states the target's quantization
(general.file_type) and the KV types measured. A built-in study measured Hugging Face folders; for the bundled
models (small, under models/ or the tiny cache) the export converts them once into the GGUF cache, with the
pinned converter, so best/llama-server/run.sh starts with no placeholder left. Anyone else's folder keeps its
`<...-gguf-of:PATH>` placeholder and the command that converts it: a silent multi-GB conversion at the end of a
study would surprise, and run.sh stops naming what to convert.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.cache import cache_root
from common.errors import ConfigError
from engine.drafters import resolve_drafter
from engine.engine import EngineConfig
from runners.models import PROJECT_ROOT, resolve_model_path
from serving.eagle3_gguf import cached_eagle3_gguf
from serving.gguf import cached_gguf
from serving.gguf_file import read_gguf
from serving.mtp_gguf import cached_mtp_gguf


def is_bundled(path: str | None) -> bool:
    """A folder of the bundled models (models/) or the tiny random pair's cache."""
    if not path or not Path(path).is_dir():
        return False
    folder = Path(path).resolve()
    return any(folder.is_relative_to(root.resolve()) for root in (PROJECT_ROOT / "models", cache_root("tiny")))


def served_facts(server: Any) -> dict[str, Any]:
    """What a llama-server study measured: the KV types and the target file's quantization (ExportRecord fields)."""
    if server is None:
        return {}
    return {
        "cache_types": (server.cache_type_k, server.cache_type_v),
        "target_quantization": read_gguf(server.target_gguf).file_type,
    }


def bundled_ggufs(engine: EngineConfig, paths: dict[str, str | None], kind: str = "f32") -> dict[str, str]:
    """GGUFs of the bundled folders the winner needs (converted once, cached), by role; {} when it cannot.

    No converter here (python -m serving.llama_install not run) or a folder that is not bundled: that role
    keeps its placeholder.
    """
    needs = resolve_drafter(engine.drafter).needs
    paths = {role: resolve_model_path(path) if path else None for role, path in paths.items()}
    target = paths.get("target")
    if not is_bundled(target):
        return {}
    jobs = {"target": lambda: cached_gguf(target, kind)}
    if needs.draft_model and is_bundled(paths.get("draft")):
        jobs["draft"] = lambda: cached_gguf(paths["draft"], kind)
    if needs.mtp and is_bundled(paths.get("mtp")):
        jobs["mtp"] = lambda: cached_mtp_gguf(target, paths["mtp"], kind)
    if needs.eagle3 and is_bundled(paths.get("eagle3")):
        jobs["eagle3"] = lambda: cached_eagle3_gguf(target, paths["eagle3"], kind)
    made: dict[str, str] = {}
    for role, make in jobs.items():
        try:
            made[role] = str(make())
        # no converter, or a file it refuses: the placeholder stays (any other error is a bug and propagates)
        except (FileNotFoundError, RuntimeError, ConfigError):
            return made
    return made
