"""What the expert reads: the issue's snippet and expected output, tracebacks, outlines and file views.

Pure functions over text (the issue, or the observation the agent loop returned), so the expert can
react to what it is shown: the frame a traceback ends in, the line numbers of an outline, the lines a
`sed -n` printed, an edit that did not apply.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agents.expert.patches import Hunk

_PY_BLOCK = re.compile(r"```python[ \t]*\n(.*?)\n```", re.S)
EXPECTED = re.compile(r"I expected:\s*\n\s*```[^\n]*\n(.*?)\n?```", re.S)
GOT = re.compile(r"Instead I get:\s*\n\s*```[^\n]*\n(.*?)\n?```", re.S)
_FRAME = re.compile(r'^\s*File "(?:/workspace/)?(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Warning))\b")
_OUTLINE = re.compile(r"^(?P<line>\d+):\s*(?:async\s+)?(?:def|class)\s+(?P<name>\w+)")


def issue_snippet(problem_statement: str) -> str | None:
    """The first ```python block of the issue, if any."""
    m = _PY_BLOCK.search(problem_statement)
    return m.group(1).strip("\n") + "\n" if m else None


def block(pattern: re.Pattern[str], text: str) -> list[str] | None:
    """The lines of the fenced block `pattern` finds in `text` (EXPECTED, GOT), if any."""
    m = pattern.search(text)
    return m.group(1).splitlines() if m else None


def last_exception(text: str) -> str | None:
    """The exception type a traceback in `text` ends with (printed `XError: ...` lines do not count)."""
    _, traceback, tail = text.rpartition("Traceback (most recent call last):")
    found = [m.group("exc") for line in tail.splitlines() if (m := _EXC.match(line.strip()))] if traceback else []
    return found[0].rsplit(".", 1)[-1] if found else None


def traceback_frames(text: str) -> list[tuple[str, int, str]]:
    """(path, line, function) of each frame of the tracebacks in `text`, workspace-relative."""
    return [(m["path"], int(m["line"]), m["func"]) for line in text.splitlines() if (m := _FRAME.match(line))]


def is_subsequence(needle: Sequence[str], hay: Sequence[str]) -> bool:
    """Whether the lines of `needle` occur in `hay` in order (trailing spaces ignored)."""
    it = iter(line.rstrip() for line in hay)
    return all(any(h == n.rstrip() for h in it) for n in needle)


def edit_failed(observation: str) -> bool:
    """Whether the observation after an edit says it changed nothing (agents/edits.py's wording)."""
    text = observation.strip()
    return text.startswith(("Edit failed", "Edit refused")) or "No change made" in text


def parse_outline(obs: str) -> list[tuple[int, str]]:
    """(line, name) of each `def`/`class` line in a `grep -n` observation."""
    return [(int(m["line"]), m["name"]) for line in obs.splitlines() if (m := _OUTLINE.match(line))]


def enclosing(outline: list[tuple[int, str]], line: int) -> str | None:
    """Name of the last def/class starting at or before `line` (as far as the outline tells)."""
    before = [name for start, name in outline if start <= line]
    return before[-1] if before else None


def file_window(obs: str, hunk: Hunk, a: int, b: int, shift: int) -> dict[int, str]:
    """File lines a..b as read from a `sed -n 'a,bp'` observation, keyed by line number.

    The observation is located by the hunk's own old lines (ground truth), so any framing the agent
    loop adds around the output does not matter; when they are not found, only the hunk is known.
    """
    known = {hunk.old_start + shift + i: t for i, t in enumerate(hunk.old)}
    lines = obs.splitlines()
    old = hunk.old
    offset = hunk.old_start + shift - a  # where the hunk starts inside the window
    for k in range(len(lines) - len(old) + 1):
        if lines[k : k + len(old)] == old and k - offset >= 0 and k - offset + (b - a + 1) <= len(lines):
            window = lines[k - offset : k - offset + (b - a + 1)]
            return {a + i: t for i, t in enumerate(window)} | known
    return known
