"""Resolve `model.*` config values to loaded models, building the tiny random pair on first use.

`tiny` stands for a random-init target (and a smaller draft sharing its tokenizer) written by
`engine.tiny` into a cache folder, so every command works on a fresh clone with no model hub.
Anything else is a local folder or a cached hub id, loaded by `engine.loading.load_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers.utils import logging as hf_logging

from common.build_once import build_once
from common.cache import cache_root
from engine.eagle3 import Eagle3Module, load_eagle3
from engine.loading import LoadedModel, load_model
from engine.mtp import MtpModule, load_mtp
from engine.tiny import make_tiny_model

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


@dataclass
class Models:
    """The loaded target and (optional) draft, shared by the OFF and ON engines and across trials."""

    target: LoadedModel
    draft: LoadedModel | None
    target_path: str
    draft_path: str | None
    mtp: MtpModule | None = None  # MTP weights bound to the target (model.mtp), for drafters that need them
    mtp_path: str | None = None
    eagle3: Eagle3Module | None = None  # an EAGLE-3 head bound to the target (model.eagle3), for drafter eagle3
    eagle3_path: str | None = None

    def forward_paths(self) -> dict[str, str | None]:
        """The numeric path each model runs on and why (provenance), e.g. "onednn float32 (auto: ...)"."""
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
) -> Models:
    """Load the configured models (and MTP / EAGLE-3 heads for the target); `tiny` builds the random pair."""
    hf_logging.disable_progress_bar()  # per-shard bars would drown the run's own progress output
    target_path, draft_path = target, draft
    if TINY in (target, draft):
        tiny_target, tiny_draft = tiny_paths()
        target_path = str(tiny_target) if target == TINY else target
        draft_path = str(tiny_draft) if draft == TINY else draft
    target_path = resolve_model_path(target_path)
    draft_path = resolve_model_path(draft_path) if draft_path else None
    loaded_target = load_model(target_path, device=device, dtype=dtype, forward=forward)
    loaded_draft = load_model(draft_path, device=device, dtype=dtype, forward=forward) if draft_path else None
    mtp_path = resolve_model_path(mtp) if mtp else None
    loaded_mtp = load_mtp(mtp_path, loaded_target.model) if mtp_path else None
    eagle3_path = resolve_model_path(eagle3) if eagle3 else None
    loaded_eagle3 = load_eagle3(eagle3_path, loaded_target.model) if eagle3_path else None
    return Models(
        loaded_target, loaded_draft, target_path, draft_path, loaded_mtp, mtp_path, loaded_eagle3, eagle3_path
    )
