"""What a file or a folder holds, as a sha256: two machines' copies of one model are the same model.

A path says where a model is, not what it is: another machine keeps the same GGUF elsewhere, and a retrained model
keeps its old path. Hashing reads every byte (seconds for a multi-GB GGUF), so each file's digest is cached under
spectune's cache by path, size and modification time, and read again only when one of them changes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from common.cache import cache_root
from common.files import write_atomic


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes (cached by path, size and mtime)."""
    info = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{info.st_size}|{info.st_mtime_ns}".encode()).hexdigest()[:32]
    cached = cache_root("digests") / key
    if cached.is_file():
        known = cached.read_text().strip()
        if len(known) == 64:
            return known
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    cached.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(cached, digest)
    return digest


def content_digest(where: str | Path) -> str:
    """sha256 of a file, of a folder (every file under it, by relative name), or of the name itself when it is no
    local path (a model hub id: the hub's own name is all there is to compare)."""
    path = Path(where).expanduser()
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        h = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f"{file.relative_to(path).as_posix()}\0{file_digest(file)}\n".encode())
        return h.hexdigest()
    return hashlib.sha256(f"name:{where}".encode()).hexdigest()
