"""The llama-server backend's own settings: `ServerSettings`, made from a run's config (the binary found, the
weights as GGUF, converted once).

Only `engine.backend=llama-server` needs them (ServerBackend.settings_from); the built-in engine gets None.
Problems here are input problems (no binary, no converter, a GGUF path that is not there) and come back as one
ValueError line.

The files a user brings are used as they are: the target GGUF (model.target=F.gguf or server.target_gguf),
whose own MTP layers serve draft-mtp, and server.draft_gguf / eagle3_gguf / mtp_gguf. OFF and every ON run on
one target file: when MTP is in play that is the file holding the MTP layers (llama.cpp runs them from the
model file itself), for OFF too. Before any server starts, each file is checked against the tokenizer in use
and the target (serving.gguf_checks): another model's file is one line naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from engine.drafters import Needs
from engine.kv import position_limit
from runners.models import Models, ServedModel
from serving.eagle3_gguf import cached_eagle3_gguf
from serving.gguf import cached_gguf
from serving.gguf_checks import check_eagle3_head, check_mtp_layers, check_same_vocabulary, check_tokenizer
from serving.gguf_file import read_gguf
from serving.llama_binary import LlamaBinary, LlamaServerMissing, find_llama_server
from serving.mtp_gguf import cached_mtp_gguf


@dataclass
class ServerSettings:
    """Where the llama-server backend finds its binary and weights, and how it runs them."""

    binary: LlamaBinary  # the located llama-server (serving.llama_binary.find_llama_server)
    target_gguf: Path  # the target's weights as GGUF (serving.gguf)
    draft_gguf: Path | None  # the draft's, for drafter=draft_model
    context: int  # -c: tokens of context the server allocates
    threads: int | None = None  # -t; None: llama.cpp's default
    log_dir: Path | None = None  # server logs go here (one file per server start); None: $TMPDIR
    start_timeout_s: float = 120.0  # how long a server may take to answer /health
    mtp_gguf: Path | None = None  # target + MTP module as one mimo2 GGUF (serving.mtp_gguf), for drafter=mtp
    eagle3_gguf: Path | None = None  # the EAGLE-3 head as GGUF (serving.eagle3_gguf), for drafter=eagle3
    dflash_gguf: Path | None = None  # a DFlash / DSpark draft GGUF the user brings (server.dflash_gguf)
    cache_type_k: str = "f16"  # -ctk: KV cache K type (llama-server's default f16)
    cache_type_v: str = "f16"  # -ctv


def context_of(models_target: Any, requested: int | None) -> int:
    """The server's -c: `requested`, else the target's trained context (4096 when it states none).

    A served target (runners.models.ServedModel) states it without weights: config.json or the GGUF's metadata.
    """
    if requested:
        return int(requested)
    if models_target.model is None:
        return models_target.context_length or 4096
    return position_limit(models_target.model) or 4096


def _gguf(explicit: str | None, folder: str | None, kind: str, role: str) -> Path | None:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"server.{role}_gguf={explicit}: no such file")
        return path
    if folder is None:
        return None
    try:
        return cached_gguf(folder, kind)
    except (FileNotFoundError, RuntimeError) as exc:
        raise ConfigError(f"cannot convert model.{role} to GGUF: {exc}") from None


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
        raise ConfigError(f"{what}: {exc}") from None


def _target_file(server: Any, models: Models) -> str | None:
    """The user's target GGUF: model.target when it is one, else server.target_gguf (both: the same file)."""
    given = server.target_gguf
    own = models.target.gguf if isinstance(models.target, ServedModel) else None
    if own is not None and given and Path(given).expanduser().resolve() != own:
        raise ConfigError(
            f"model.target={own} and server.target_gguf={given} name two files; the target is model.target: "
            "drop server.target_gguf"
        )
    return str(own) if own is not None else given


def _one_target(target: Path, mtp: Path | None, explicit_target: bool) -> Path:
    """The one file OFF and every ON load: the MTP file when MTP is in play (it holds the target's weights)."""
    if mtp is None or mtp.resolve() == target.resolve():
        return target
    if explicit_target:
        raise ConfigError(
            f"server.mtp_gguf={mtp} and the target {target} are two files: OFF would run on one and draft-mtp on "
            "the other. The MTP file holds the target's weights: pass it alone (model=gguf model.target=FILE)"
        )
    return mtp


def _check_files(settings: ServerSettings, models: Models, mtp_wanted: bool) -> None:
    """Each file against the tokenizer in use and the target, before anything starts (serving.gguf_checks)."""
    target = read_gguf(settings.target_gguf)
    if not (isinstance(models.target, ServedModel) and models.target.gguf is not None):
        check_tokenizer(target, models.target.tokenizer, "the target GGUF")  # the file's own tokenizer is the file
    if mtp_wanted and settings.mtp_gguf is not None:
        check_mtp_layers(read_gguf(settings.mtp_gguf), "server.mtp_gguf")
    if settings.draft_gguf is not None:
        check_same_vocabulary(target, read_gguf(settings.draft_gguf), "server.draft_gguf")
    if settings.eagle3_gguf is not None:
        check_eagle3_head(target, read_gguf(settings.eagle3_gguf), "server.eagle3_gguf")


def server_settings(cfg: Any, models: Models, log_dir: Path | None, needs: Needs) -> ServerSettings:
    """ServerSettings for `engine.backend=llama-server` (cfg.server, cfg.run.threads, the loaded models' folders).

    Only the files drafters with `needs` use are found or converted: the draft's GGUF, the MTP file, the
    EAGLE-3 head's GGUF (a DFlash draft the user brings is checked whenever it is set).
    """
    server = cfg.server
    try:
        binary = find_llama_server(server.binary)
    except LlamaServerMissing as exc:
        raise ConfigError(f"engine.backend=llama-server: {exc}") from None
    if not binary.pinned:
        print(f"warning: {binary.describe()}; spectune's flags target the pinned release")
    if binary.backend == "cpu" and cfg.hardware.device != "cpu":
        print(
            f"note: llama-server {binary.path} is a CPU build: its timings are this CPU's, not {cfg.hardware.name}'s "
            "(on the GPU machine: python -m serving.llama_install --cuda on)"
        )
    given = _target_file(server, models)
    target = _gguf(given, None if given else models.target_path, server.gguf_type, "target")
    assert target is not None  # a target file is given, or the folder is converted
    mtp_file = None
    if needs.mtp:
        native = server.mtp_gguf is None and read_gguf(target).nextn_layers > 0
        mtp_file = target if native else _head_gguf("mtp", server.mtp_gguf, models, server.gguf_type)
    settings = ServerSettings(
        binary=binary,
        target_gguf=_one_target(target, mtp_file, explicit_target=bool(given)),
        draft_gguf=_gguf(server.draft_gguf, models.draft_path, server.gguf_type, "draft")
        if needs.draft_model
        else None,
        mtp_gguf=mtp_file,
        eagle3_gguf=_head_gguf("eagle3", server.eagle3_gguf, models, server.gguf_type) if needs.eagle3 else None,
        # a file the user brings, used as is (nothing to convert): checked whenever it is set
        dflash_gguf=_gguf(server.get("dflash_gguf"), None, server.gguf_type, "dflash"),
        context=context_of(models.target, server.context),
        cache_type_k=server.get("cache_type_k", "f16"),
        cache_type_v=server.get("cache_type_v", "f16"),
        threads=server.threads or cfg.run.threads,
        log_dir=log_dir,
        start_timeout_s=server.start_timeout_s,
    )
    _check_files(settings, models, needs.mtp)
    return settings


def reference_settings(cfg: Any, settings: ServerSettings | None) -> ServerSettings | None:
    """OFF's settings when server.reference_* names other weights or KV types than ON runs, else None.

    The reference file must speak the target's vocabulary (one line otherwise); it runs with no draft, head or
    MTP file: OFF drafts nothing.
    """
    server = cfg.get("server")
    if settings is None or server is None:
        return None
    file, k, v = (server.get(f"reference_{key}") for key in ("gguf", "cache_type_k", "cache_type_v"))
    if not (file or k or v):
        return None
    target = Path(file).expanduser().resolve() if file else settings.target_gguf
    if file:
        check_same_vocabulary(read_gguf(settings.target_gguf), read_gguf(target), "server.reference_gguf")
    return replace(
        settings,
        target_gguf=target,
        mtp_gguf=None,
        cache_type_k=k or settings.cache_type_k,
        cache_type_v=v or settings.cache_type_v,
    )
