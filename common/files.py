"""Files written whole or not at all: a temp file beside the target, renamed into place.

A reader (another run, a resumed one, a user's editor) never sees half a file, and a crash mid-write
leaves the previous version. The temp name carries the process id, so concurrent writers never share one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temp path beside `path` to write; it replaces `path` when the block ends, and is removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` via a temp file and rename, so an interrupted run never leaves half a file."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
