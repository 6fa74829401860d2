"""Where spectune keeps the GGUF files it makes: one name per source, type and pinned release.

The leaf both makers read: serving/gguf.py (the converter's files) and serving/quantize.py (llama-quantize's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from common.cache import cache_root
from serving.llama_binary import PINNED

# What spectune adds to the converter's output; a new value converts cached files again. 2: a tokenizer llama.cpp
# cannot reproduce is embedded as tokenizer.huggingface.json (read by runners.models for a GGUF-only target).
FORMAT = 2


def cache_file(name: str, folders: Sequence[str | Path], kind: str) -> Path:
    """Where a GGUF made from `folders` is kept: keyed by their paths and every file's name, size and
    modification time (an edited model is converted again), the type and the pinned release. An entry that is
    a file (a GGUF to quantize, serving/quantize.py) counts as itself."""
    digest = hashlib.sha256(f"{kind}|{PINNED}|{FORMAT}".encode())
    for folder in (Path(f).resolve() for f in folders):
        files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        for path in files:
            info = path.stat()
            digest.update(f"|{path}:{info.st_size}:{info.st_mtime_ns}".encode())
    return cache_root("gguf") / f"{name}-{digest.hexdigest()[:16]}-{kind}.gguf"
