"""Resolve `model.*` config values to loaded models, building the tiny random pair on first use.

`tiny` stands for a random-init target (and a smaller draft sharing its tokenizer) written by
`engine.tiny` into a cache folder, so every command works on a fresh clone with no model hub.
Anything else is a local folder or a cached hub id, loaded by `engine.loading.load_model`.

A backend that decodes in another process (llama-server) gets no weights here at all (`weights=False`):
the target is a `ServedModel`, its tokenizer and the facts the run needs (end ids, trained context). A
GGUF file is such a target: its tokenizer the one the file names (serving.gguf_tokenizer: an embedded
Hugging Face one, else llama.cpp's own), its facts the file's metadata (serving.gguf_file), so a llama.cpp
user needs nothing besides the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from common.build_once import build_once
from common.cache import cache_root
from common.errors import ConfigError
from engine.drafters import Needs
from engine.eagle3 import Eagle3Module, load_eagle3
from engine.loading import LoadedModel, ModelFileError, load_model, local_folder
from engine.mtp import MtpModule, load_mtp
from engine.tiny import make_tiny_model
from serving.gguf_file import is_gguf, read_gguf
from serving.gguf_tokenizer import gguf_tokenizer
from serving.llama_binary import find_llama_server

TINY = "tiny"
# Shapes of the tiny pair: the target is the benchmark's 4x256 model, the draft a 1x128 model.
TINY_TARGET = {"layers": 4, "hidden": 256, "seed": 0}
TINY_DRAFT = {"layers": 1, "hidden": 128, "seed": 1}


PROJECT_ROOT = Path(__file__).resolve().parents[1]


def resolve_model_path(name: str) -> str:
    """A relative path that is not there from the working directory but is in the project (models/...)."""
    path = Path(name).expanduser()
    if not path.is_absolute() and not path.exists() and (PROJECT_ROOT / path).exists():
        return str(PROJECT_ROOT / path)
    return name


def tiny_paths() -> tuple[Path, Path]:
    """(target, draft) folders of the tiny random pair, built if missing."""
    root = cache_root("tiny")
    target = build_once(root / "target", lambda d: make_tiny_model(d, **TINY_TARGET))
    draft = build_once(root / "draft", lambda d: make_tiny_model(d, tokenizer_from=target, **TINY_DRAFT))
    return target, draft


@dataclass(eq=False)
class ServedModel:
    """A target that a server decodes: its tokenizer and facts, no weights in this process."""

    tokenizer: Any  # the Hugging Face tokenizer of a folder, or a GGUF's own (serving.server_tokenizer)
    path: str  # the folder or the GGUF file
    eos_token_ids: set[int]  # every id that ends a generation
    context_length: int | None  # the context the model was trained for (max_position_embeddings, GGUF metadata)
    gguf: Path | None = None  # the GGUF file when the target is one
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where this process computes: nothing
    model: None = None  # no weights: every consumer of `model` checks for a served target first
    dtype: None = None

    def describe_path(self) -> str:
        """What decodes it, for provenance."""
        return f"served (no weights in this process): {self.path}"


def _end_ids(folder: Path, tokenizer: Any) -> set[int]:
    """eos ids from config.json, generation_config.json and the tokenizer (engine.loading's rule, without weights)."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        file = folder / name
        if file.is_file():
            config = json.loads(file.read_text())
            value = config.get("eos_token_id", (config.get("text_config") or {}).get("eos_token_id"))
            ids |= {value} if isinstance(value, int) else {int(v) for v in value or ()}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _trained_context(folder: Path) -> int | None:
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    value = text.get("max_position_embeddings") or text.get("n_positions")
    return int(value) if value else None


def load_served(target: str, *, server_binary: str | None = None, log_dir: Path | None = None) -> ServedModel:
    """The target of a served run without its weights: a GGUF file (its own tokenizer) or a model folder's tokenizer."""
    if is_gguf(target):
        info = read_gguf(target)  # GgufError (a ValueError) names the file
        tokenizer = gguf_tokenizer(info.path, find_llama_server(server_binary), log_dir=log_dir)
        return ServedModel(tokenizer, str(info.path), set(info.end_ids), info.context_length or None, info.path)
    folder = local_folder(target)
    if folder is None:
        raise ConfigError(
            f"model.target={target!r}: a served run needs a GGUF file or a local model folder, not a hub id"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # tokenizers raises plain Exceptions for files it cannot parse
        raise ModelFileError(f"cannot load the tokenizer in {folder}: {exc}") from exc
    return ServedModel(tokenizer, str(folder), _end_ids(folder, tokenizer), _trained_context(folder))


@dataclass
class Models:
    """The loaded target and (optional) draft, shared by the OFF and ON engines and across trials."""

    target: LoadedModel | ServedModel  # ServedModel: a server decodes it (load_models(weights=False))
    draft: LoadedModel | None
    target_path: str
    draft_path: str | None
    mtp: MtpModule | None = None  # MTP weights bound to the target (model.mtp), for drafters that need them
    mtp_path: str | None = None
    eagle3: Eagle3Module | None = None  # an EAGLE-3 head bound to the target (model.eagle3), for drafter eagle3
    eagle3_path: str | None = None

    def forward_paths(self) -> dict[str, str | None]:
        """The numeric path each model runs on and why (provenance), e.g. "onednn float32 (auto: ...)"."""
        if isinstance(self.target, ServedModel):
            return {"target": self.target.describe_path(), "draft": None}
        return {
            "target": self.target.forward.choice.describe(),
            "draft": self.draft.forward.choice.describe() if self.draft is not None else None,
        }


def load_models(
    target: str,
    draft: str | None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    forward: str = "auto",
    mtp: str | None = None,
    eagle3: str | None = None,
    weights: bool = True,
    server_binary: str | None = None,
    log_dir: Path | None = None,
) -> Models:
    """Load the configured models (and MTP / EAGLE-3 heads for the target); `tiny` builds the random pair.

    `weights=False` (a backend that decodes in another process): no weights are loaded, only the target's
    tokenizer and facts (`load_served`; `server_binary` answers a GGUF's tokenizer); the other paths are kept
    for the server's own files.
    """
    hf_logging.disable_progress_bar()  # per-shard bars would drown the run's own progress output
    target_path, draft_path = target, draft
    if TINY in (target, draft):
        tiny_target, tiny_draft = tiny_paths()
        target_path = str(tiny_target) if target == TINY else target
        draft_path = str(tiny_draft) if draft == TINY else draft
    target_path = resolve_model_path(target_path)
    draft_path = resolve_model_path(draft_path) if draft_path else None
    if not weights:
        served = load_served(target_path, server_binary=server_binary, log_dir=log_dir)
        mtp_path = resolve_model_path(mtp) if mtp else None
        eagle3_path = resolve_model_path(eagle3) if eagle3 else None
        return Models(served, None, served.path, draft_path, None, mtp_path, None, eagle3_path)
    loaded_target = load_model(target_path, device=device, dtype=dtype, forward=forward)
    loaded_draft = load_model(draft_path, device=device, dtype=dtype, forward=forward) if draft_path else None
    mtp_path = resolve_model_path(mtp) if mtp else None
    loaded_mtp = load_mtp(mtp_path, loaded_target.model) if mtp_path else None
    eagle3_path = resolve_model_path(eagle3) if eagle3 else None
    loaded_eagle3 = load_eagle3(eagle3_path, loaded_target.model) if eagle3_path else None
    return Models(
        loaded_target, loaded_draft, target_path, draft_path, loaded_mtp, mtp_path, loaded_eagle3, eagle3_path
    )


def load_for(
    model: Any,
    needs: Needs,
    *,
    device: str,
    weights: bool = True,
    server_binary: str | None = None,
    log_dir: Path | None = None,
    draft: str | None = None,
) -> Models:
    """The `model` node's target and the heads a drafter with `needs` uses (model.draft, model.mtp, model.eagle3).

    A head the drafter does not use is not loaded. `draft`: a draft model to load even when `needs` asks for
    none (the runner loads the configured pair, so its provenance names the draft's numeric path).
    """
    return load_models(
        model.target,
        model.draft if needs.draft_model else draft,
        device=device,
        dtype=model.dtype,
        forward=model.forward,
        mtp=model.get("mtp") if needs.mtp else None,
        eagle3=model.get("eagle3") if needs.eagle3 else None,
        weights=weights,
        server_binary=server_binary,
        log_dir=log_dir,
    )
