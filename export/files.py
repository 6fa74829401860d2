"""Writing result files: atomically (a temp file renamed into place) and as strict JSON.

The lowest floor that writes results owns these; the runner, the tuner and the exporters all use them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dumps_strict(data: Any) -> str:
    """JSON that any parser accepts: NaN/Infinity raise instead of being written."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
