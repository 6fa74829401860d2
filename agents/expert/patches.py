"""The gold patch as the expert reads it, and the edits it makes of it.

`parse_patch` reads a unified (git) diff into files and hunks; `edit_blocks` turns one hunk into the
SEARCH/REPLACE lines of an edit, with just enough context to match once; `change_fragments` picks
what of a one-line change the expert quotes when it explains the edit.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

SHORT_LINE = 50  # a changed line up to this long is quoted whole in the thought

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# String literals are single tokens, so brackets inside them never count as code.
_TOKEN = re.compile(r"""[rbfuRBFU]*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|\w+|==|!=|<=|>=|//|\*\*|->|[-+*/%&|^]=|\S""")
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff."""

    old_start: int  # 1-based line in the old file of the hunk's first old-side line
    lines: tuple[tuple[str, str], ...]  # (tag, text) with tag " " context, "-" removed, "+" added

    @property
    def old(self) -> list[str]:
        """The hunk's old side (context and removed lines)."""
        return [t for tag, t in self.lines if tag != "+"]

    @property
    def changed(self) -> tuple[int, int]:
        """Indices into `lines` of the first and last changed line."""
        idx = [i for i, (tag, _) in enumerate(self.lines) if tag != " "]
        return idx[0], idx[-1]

    def old_line(self, index: int) -> int:
        """Old-file line number of `lines[index]` (for an added line: of the old line after it)."""
        return self.old_start + sum(1 for tag, _ in self.lines[:index] if tag != "+")

    @property
    def delta(self) -> int:
        """How many lines the hunk adds to the file (negative when it removes some)."""
        return sum(1 if tag == "+" else -1 if tag == "-" else 0 for tag, _ in self.lines)


@dataclass(frozen=True)
class FilePatch:
    """The hunks of one file in a unified diff."""

    path: str  # workspace-relative
    hunks: tuple[Hunk, ...]
    created: bool = False  # the old side is /dev/null
    deleted: bool = False  # the new side is /dev/null


def parse_patch(patch: str) -> list[FilePatch]:
    """The files and hunks of a unified (git) diff; hunk bodies are read by their header counts."""
    files: list[FilePatch] = []
    old_path = new_path = ""
    hunks: list[Hunk] = []
    body: list[tuple[str, str]] = []
    start = left_old = left_new = 0

    def close_file() -> None:
        if hunks:
            path = new_path if new_path != "/dev/null" else old_path
            files.append(FilePatch(path, tuple(hunks), old_path == "/dev/null", new_path == "/dev/null"))
            hunks.clear()

    for line in patch.splitlines():
        if left_old > 0 or left_new > 0:
            tag, text = (line[0], line[1:]) if line else (" ", "")  # some tools drop an empty line's space
            if tag == "\\":  # "\\ No newline at end of file"
                continue
            body.append((tag, text))
            left_old -= 0 if tag == "+" else 1
            left_new -= 0 if tag == "-" else 1
            if left_old <= 0 and left_new <= 0:
                if any(tag != " " for tag, _ in body):  # a hunk of context alone changes nothing
                    hunks.append(Hunk(start, tuple(body)))
                body = []
        elif line.startswith("diff --git "):
            close_file()
        elif line.startswith("--- "):
            close_file()
            old_path = _strip_prefix(line[4:])
        elif line.startswith("+++ "):
            new_path = _strip_prefix(line[4:])
        elif m := _HUNK.match(line):
            left_old = int(m.group(2)) if m.group(2) is not None else 1
            left_new = int(m.group(4)) if m.group(4) is not None else 1
            # "-0,0" (a new file): the hunk goes before line 1
            start = int(m.group(1)) if left_old else int(m.group(1)) + 1
    close_file()
    return files


def _strip_prefix(path: str) -> str:
    path = path.split("\t")[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def change_fragments(old: str, new: str) -> tuple[str, str]:
    """How to quote a one-line change: whole lines when short, else the innermost call or subscript.

    `self._data.popitem(lasts=False)` vs `self._data.popitem(last=False)`: the bracket group holding
    the change, with the name it belongs to. A change in a string or outside any bracket: whole lines.
    """
    whole = old.strip(), new.strip()
    if max(len(old.strip()), len(new.strip())) <= SHORT_LINE:
        return whole
    a, b = list(_TOKEN.finditer(old)), list(_TOKEN.finditer(new))
    ta, tb = [m.group() for m in a], [m.group() for m in b]
    pre = 0
    while pre < min(len(ta), len(tb)) and ta[pre] == tb[pre]:
        pre += 1
    post = 0
    while post < min(len(ta), len(tb)) - pre and ta[-1 - post] == tb[-1 - post]:
        post += 1
    head = old[: a[pre].start()] if pre < len(a) else old
    if pre == 0 or head.count('"') % 2 or head.count("'") % 2:
        return whole
    opener, depth = None, 0
    for i in range(pre - 1, -1, -1):  # the innermost bracket still open where the change starts
        if ta[i] in _CLOSE:
            depth += 1
        elif ta[i] in _OPEN:
            if depth == 0:
                opener = i
                break
            depth -= 1
    if opener is None:
        return whole
    close_a, close_b = _matching(ta, opener), _matching(tb, opener)
    # Both closers must sit at the same place in the shared suffix, after the change.
    if close_a is None or close_b is None or len(ta) - close_a != len(tb) - close_b or close_a < len(ta) - post:
        return whole
    first = opener
    if first > 0 and ta[first - 1].isidentifier() and not keyword.iskeyword(ta[first - 1]):
        first -= 1
        while first > 1 and ta[first - 1] == "." and ta[first - 2].isidentifier():  # the whole `obj.attr` chain
            first -= 2
    return old[a[first].start() : a[close_a].end()], new[b[first].start() : b[close_b].end()]


def _matching(tokens: list[str], opener: int) -> int | None:
    """Index of the bracket closing `tokens[opener]`."""
    depth = 0
    for i in range(opener, len(tokens)):
        if tokens[i] in _OPEN:
            depth += 1
        elif tokens[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return None


def edit_blocks(hunk: Hunk, shift: int, window: dict[int, str], ctx: int) -> tuple[list[str], list[str], int]:
    """SEARCH and REPLACE lines for `hunk` with up to `ctx` context lines each side, and the ctx used.

    Blank context lines at the edges are dropped; context grows until the SEARCH text occurs once in
    what is known of the file (`window`: line number -> text, which may reach beyond the hunk).
    """
    start = hunk.old_start + shift
    before = [(" ", window[n]) for n in sorted(window) if n < start]
    after = [(" ", window[n]) for n in sorted(window) if n >= start + len(hunk.old)]
    rows = [*before, *hunk.lines, *after]
    first = len(before) + hunk.changed[0]
    last = len(before) + hunk.changed[1]
    known = [window[n] for n in sorted(window)] or hunk.old
    while True:
        lo, hi = max(0, first - ctx), min(len(rows), last + 1 + ctx)
        while lo < first and not rows[lo][1].strip():
            lo += 1
        while hi > last + 1 and not rows[hi - 1][1].strip():
            hi -= 1
        search = [t for tag, t in rows[lo:hi] if tag != "+"]
        replace = [t for tag, t in rows[lo:hi] if tag != "-"]
        if (search and _count(known, search) <= 1) or (first - ctx <= 0 and last + 1 + ctx >= len(rows)):
            return search, replace, ctx
        ctx += 1


def _count(lines: list[str], block: list[str]) -> int:
    n = len(block)
    return sum(1 for i in range(len(lines) - n + 1) if lines[i : i + n] == block)
