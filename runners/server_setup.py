"""The llama-server settings of a run from its config: the binary found, the weights as GGUF (converted once).

Only `engine.backend=llama-server` needs them; the built-in engine gets None. Problems here are input
problems (no binary, no converter, a GGUF path that is not there) and come back as one ValueError line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.backends import ServerSettings, context_of
from runners.models import Models
from serving.eagle3_gguf import cached_eagle3_gguf
from serving.gguf import cached_gguf
from serving.llama_binary import LlamaServerMissing, find_llama_server
from serving.mtp_gguf import cached_mtp_gguf


def _gguf(explicit: str | None, folder: str | None, kind: str, role: str) -> Path | None:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ValueError(f"server.{role}_gguf={explicit}: no such file")
        return path
    if folder is None:
        return None
    try:
        return cached_gguf(folder, kind)
    except (FileNotFoundError, RuntimeError) as exc:
        raise ValueError(f"cannot convert model.{role} to GGUF: {exc}") from None


# Heads llama-server reads from a GGUF of their own making: (converter of (target, head, kind), what failed).
_HEAD_GGUFS = {
    "mtp": (cached_mtp_gguf, "cannot write model.target + model.mtp as one mimo2 GGUF"),
    "eagle3": (cached_eagle3_gguf, "cannot convert model.eagle3 to a llama-server GGUF"),
}


def _head_gguf(role: str, explicit: str | None, models: Models, kind: str) -> Path | None:
    """server.<role>_gguf as given, else model.<role> converted with the target (cached), else None."""
    if explicit:
        return _gguf(explicit, None, kind, role)
    head = getattr(models, f"{role}_path")
    if head is None:
        return None
    convert, what = _HEAD_GGUFS[role]
    try:
        return convert(models.target_path, head, kind)
    except (FileNotFoundError, RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"{what}: {exc}") from None


def server_settings(
    cfg: Any,
    models: Models,
    log_dir: Path | None = None,
    *,
    draft: bool = True,
    mtp: bool = False,
    eagle3: bool = False,
) -> ServerSettings:
    """ServerSettings for `engine.backend=llama-server` (cfg.server, cfg.run.threads, the loaded models' folders)."""
    server = cfg.server
    try:
        binary = find_llama_server(server.binary)
    except LlamaServerMissing as exc:
        raise ValueError(f"engine.backend=llama-server: {exc}") from None
    if not binary.pinned:
        print(f"warning: {binary.describe()}; spectune's flags target the pinned release")
    return ServerSettings(
        binary=binary,
        target_gguf=_gguf(server.target_gguf, models.target_path, server.gguf_type, "target"),  # type: ignore[arg-type]
        draft_gguf=_gguf(server.draft_gguf, models.draft_path, server.gguf_type, "draft") if draft else None,
        mtp_gguf=_head_gguf("mtp", server.mtp_gguf, models, server.gguf_type) if mtp else None,
        eagle3_gguf=_head_gguf("eagle3", server.eagle3_gguf, models, server.gguf_type) if eagle3 else None,
        # a file the user brings, used as is (nothing to convert): checked whenever it is set
        dflash_gguf=_gguf(server.get("dflash_gguf"), None, server.gguf_type, "dflash"),
        context=context_of(models.target, server.context),
        threads=server.threads or cfg.run.threads,
        log_dir=log_dir,
        start_timeout_s=server.start_timeout_s,
    )
