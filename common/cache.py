"""Where spectune keeps what it builds once and reuses: one root, one subfolder per kind of thing.

$SPECTUNE_CACHE names the root; else $XDG_CACHE_HOME/spectune; else ~/.cache/spectune. Every cache
(llama.cpp builds, GGUF conversions, tiny models, forward plans, the sandbox root filesystem, task
environments) lives below it, so one variable moves them all (the tests point it at a temp folder).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SPECTUNE_CACHE"


def cache_root(kind: str = "") -> Path:
    """spectune's cache folder, or its `kind` subfolder (e.g. "llama.cpp", "gguf", "tiny"); not created here."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        root = Path(explicit).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache").expanduser() / "spectune"
    return root / kind if kind else root
