"""What the report says about where it ran: the GPUs nvidia-smi lists, the host, and the source (git commit where
.git came along, a content fingerprint always)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.gpu_check import REPO
from bench.gpu_check.steps import last_line


def cuda_present() -> bool:
    """A CUDA GPU is here: nvidia-smi lists one, or this interpreter's torch sees one."""
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            if listed.returncode == 0 and "GPU" in listed.stdout:
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def machine_info() -> dict[str, Any]:
    """nvidia-smi's GPUs (name, driver, memory), the host and the driver's python."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "driver_python": f"{sys.executable} {platform.python_version()}",
    }
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
        rows = [[c.strip() for c in line.split(",")] for line in out.stdout.strip().splitlines() if line.strip()]
        info["gpus"] = [dict(zip(("name", "driver", "memory"), row, strict=False)) for row in rows]
        if out.returncode != 0:
            info["nvidia_smi_error"] = last_line(out.stderr) or f"exit code {out.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["gpus"] = []
        info["nvidia_smi_error"] = str(exc)
    return info


FINGERPRINT_DIRS = ("agents", "bench", "conf", "engine", "export", "models", "runners", "serving", "tasks", "training")


def source_fingerprint(root: Path = REPO) -> str:
    """sha256 over the project's source and model files (path and content): the same value here and on the lent
    machine means the same code ran, uncommitted edits included (the copy there may have no .git)."""
    digest = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for top in FINGERPRINT_DIRS:
        files += [p for p in (root / top).rglob("*") if p.is_file()]
    for path in sorted(f for f in files if "__pycache__" not in f.parts and f.suffix != ".pyc" and f.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def source_info(commit: str | None) -> dict[str, Any]:
    """The git commit and uncommitted changes where .git came along, the fingerprint always."""
    info: dict[str, Any] = {"fingerprint": source_fingerprint(), "commit_given": commit}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=30)
        if head.returncode == 0:
            info["git_commit"] = head.stdout.strip()
            info["git_changed_files"] = len(dirty.stdout.splitlines()) if dirty.returncode == 0 else None
        else:
            info["git_commit"] = None
            info["git_note"] = last_line(head.stderr) or "not a git checkout"
    except (OSError, subprocess.TimeoutExpired) as exc:
        info.update(git_commit=None, git_note=f"git unavailable: {exc}")
    return info
