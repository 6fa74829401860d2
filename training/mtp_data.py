"""Data for training draft heads: the target's own agent trajectories, rendered and run through the frozen target once.

By default the trajectories are the target's own (plain greedy decoding through the real agent loop,
sandbox and evaluation: `python -m runners.eval_model`, run as a subprocess into the work folder, so
an interrupted run resumes and nothing it starts outlives it): what the target itself says, so the
module learns to imitate it. A sequence is rendered exactly as the agent loop fed it, and the frozen
target gives, for every position, the hidden states the head reads (the trunk output, the last decoder
layer's before the final norm, for MTP; three layers' inputs for EAGLE-3) and its own greedy next token:
the labels (self-distillation). The cache is written once per split and
reused while the target and the trajectories are the same.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import ConfigError
from common.files import atomic_path
from engine.forward import tap_hooks
from engine.heads import fingerprint, target_config, weights_probe
from engine.llama import TRUNK, resolve_taps
from training.sequences import Sequence, from_trajectory

PROJECT = Path(__file__).resolve().parent.parent


@dataclass
class Cached:
    """One split's sequences with the frozen target's outputs."""

    sequences: list[Sequence]
    hidden: list[torch.Tensor]  # per sequence [T, k h]: the tapped states at each position (float32, CPU)
    labels: list[torch.Tensor]  # per sequence [T]: the target's greedy next token after each position


def target_trajectories(
    target: str, split: str, work: Path, limit: int | None, log: Callable[[str], None] = print
) -> Path:
    """Run the target (greedy, the real agent loop) on a swe-lite split into work/; returns the trajectories folder."""
    name = f"trajectories-{split}" + (f"-limit{limit}" if limit else "")
    command = [
        sys.executable,
        "-m",
        "runners.eval_model",
        "task=swe-lite",
        f"task.split={split}",
        "model=local",
        f"model.name={Path(target).name}",
        f"model.target={Path(target).resolve()}",
        "model.draft=null",
        "model.dtype=float32",
        f"run.root={work.resolve()}",
        f"run.name={name}",
        "run.resume=true",
        "run.progress=false",
        "tracking.enabled=false",
    ]
    if limit:
        command.append(f"task.limit={limit}")
    folder = work / name
    if (folder / "eval.json").is_file() and not json.loads((folder / "eval.json").read_text()).get("partial"):
        log(f"trajectories {split}: cached in {folder}")
    else:
        log(f"trajectories {split}: running the target on swe-lite/{split} (resumable) -> {folder}")
        subprocess.run(command, cwd=PROJECT, check=True)
    return folder / "trajectories"


def load_trajectories(folder: Path) -> list[dict]:
    """Every agent-loop trajectory JSON under `folder` (sorted by path); a broken file names itself."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no trajectories folder {folder}")
    out = []
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not JSON ({exc})") from None
        if isinstance(data, dict) and "messages" in data:
            out.append(data)
    if not out:
        raise ConfigError(f"{folder}: no agent trajectories (JSON files with 'messages')")
    return out


def _key(model: torch.nn.Module, sequences: list[Sequence], taps: tuple[int, ...]) -> str:
    digest = hashlib.sha256(fingerprint(target_config(model)).encode())
    if taps != (TRUNK,):  # the trunk-only key stays what it was, so existing MTP caches stay valid
        digest.update(repr(taps).encode())
    digest.update(repr(weights_probe(model)).encode())
    for s in sequences:
        digest.update(bytes(str(s.ids), "ascii"))
    return digest.hexdigest()[:16]


@torch.inference_mode()
def run_target(
    model: torch.nn.Module, ids: list[int], taps: tuple[int, ...] = (TRUNK,)
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tapped states [T, k h], greedy next tokens [T]) of the frozen target over one sequence (default: the trunk)."""
    layers = int(model.config.get_text_config(decoder=True).num_hidden_layers)
    handles, caught = tap_hooks(model, resolve_taps(taps, layers))
    try:
        device = next(model.parameters()).device
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0]
    finally:
        for handle in handles:
            handle.remove()
    return torch.cat([c[0][0] for c in caught], dim=-1).float().cpu(), logits.argmax(-1).cpu()


def cache_split(
    model: torch.nn.Module,
    tokenizer,
    trajectories: list[dict],
    path: Path,
    log: Callable[[str], None] = print,
    taps: tuple[int, ...] = (TRUNK,),
) -> Cached:
    """Render, run the frozen target once and keep the result in `path` (reused while target, data and taps match)."""
    sequences = [from_trajectory(t, tokenizer) for t in trajectories]
    key = _key(model, sequences, taps)
    if path.is_file():
        state = torch.load(path, weights_only=False)
        if state.get("key") == key:
            return Cached(sequences, state["hidden"], state["labels"])
        log(f"{path}: written for another target or data; recomputing")
    hidden, labels = [], []
    for i, s in enumerate(sequences):
        h, y = run_target(model, s.ids, taps)
        hidden.append(h)
        labels.append(y)
        if (i + 1) % 50 == 0:
            log(f"  target states: {i + 1}/{len(sequences)} sequences")
    with atomic_path(path) as tmp:
        torch.save({"key": key, "hidden": hidden, "labels": labels}, tmp)
    return Cached(sequences, hidden, labels)
