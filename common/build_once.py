"""Build a folder once: aside under a temp name, then renamed, so a crash or a parallel run never leaves half of it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

DONE_MARK = "config.json"  # the file whose presence says a model folder was built


def build_once(folder: Path, build: Callable[[Path], object], done: str = DONE_MARK) -> Path:
    """`folder`, built by `build(tmp)` into a temp sibling and renamed, unless `folder/done` is already there."""
    if (folder / done).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        build(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first: keep theirs
            if not (folder / done).exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
