"""Where a result came from: code version, library versions, suite hash, seed, threads, device."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("torch", "transformers", "datasets", "optuna", "mlflow", "hydra-core", "swebench")
ROOT = Path(__file__).resolve().parents[1]


def git_commit(root: Path = ROOT) -> dict[str, Any]:
    """HEAD commit and whether the working tree has uncommitted changes (None outside a git checkout)."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries that shape a measurement."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def suite_hash(suite: str, split: str = "dev", path: str | None = None) -> str | None:
    """Content hash of a swe-lite-format suite (the bundled one, or a probe at `path`); None for hub suites."""
    if suite != "swe-lite":
        return None
    from tasks.suites import swe_lite_root, verify_swe_lite

    return verify_swe_lite(swe_lite_root(path, split))["content_hash"]


def device_description(device: torch.device) -> str:
    """Human-readable device: the GPU name, or the CPU."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {platform.processor() or platform.machine()}"


def provenance(
    suite: str,
    seed: int,
    device: torch.device,
    split: str = "dev",
    path: str | None = None,
    forward: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Everything needed to tell two results apart (`forward`: each model's numeric path, Models.forward_paths)."""
    return {
        "git": git_commit(),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "suite_hash": suite_hash(suite, split, path),
        "seed": seed,
        "threads": torch.get_num_threads(),
        "device": device_description(device),
        "forward": forward,
    }
