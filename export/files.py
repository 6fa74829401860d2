"""Result files as strict JSON (written atomically with common/files.py's write_atomic).

The lowest floor that writes results owns this; the runner, the tuner and the exporters all use it.
"""

from __future__ import annotations

import json
from typing import Any


def dumps_strict(data: Any) -> str:
    """JSON that any parser accepts: NaN/Infinity raise instead of being written."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
