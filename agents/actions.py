"""Parse one assistant turn into exactly one action: a shell command, an edit, or `submit`.

Accepted forms (everything else in the turn is free prose and is ignored):

- command: a line ```` ```bash ```` (or ```` ```sh ````, ```` ```shell ````) ... a line ```` ``` ````;
  the stripped content is the command. A bash block whose only content is `submit` is `Submit`.
- edit, three layouts of the same block (PATH, then the markers each on a line of their own)::

      PATH                    ```                      PATH
      <<<<<<< SEARCH          PATH                     ```python
      lines to find           <<<<<<< SEARCH           <<<<<<< SEARCH
      =======                 ...                      ...
      new lines               >>>>>>> REPLACE          >>>>>>> REPLACE
      >>>>>>> REPLACE         ```                      ```

  (bare; inside a plain or non-shell fence; path line just above such a fence). The path may be
  wrapped in backticks. The first `=======` line ends SEARCH, so a SEARCH text cannot contain one.

Zero actions, several actions, or a malformed block raise `FormatError` with what went wrong.
Non-goal: checking the path or running anything (agents/edits.py and the loop do that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHELL_LANGS = ("bash", "sh", "shell")
SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER_MARK = "======="
REPLACE_MARK = ">>>>>>> REPLACE"
SUBMIT = "submit"

_FENCE_OPEN = re.compile(r"^\s*```\s*([\w+.-]*)\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")


@dataclass(frozen=True)
class Command:
    """Run `command` with bash in the workspace."""

    command: str  # the stripped content of the bash block

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form for the trajectory."""
        return {"kind": "command", "command": self.command}


@dataclass(frozen=True)
class Submit:
    """The task is done: the workspace diff is the answer."""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form for the trajectory."""
        return {"kind": "submit"}


@dataclass(frozen=True)
class Edit:
    """Replace the one occurrence of `search` in `path` with `replace` (empty search: create the file)."""

    path: str  # as written, relative to the workspace (checked by agents/edits.py)
    search: str  # whole lines, each ending in "\n"; "" for a new file
    replace: str  # whole lines, each ending in "\n"; "" deletes the searched lines

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form for the trajectory."""
        return {"kind": "edit", "path": self.path, "search": self.search, "replace": self.replace}


Action = Command | Submit | Edit


class FormatError(ValueError):
    """The turn does not hold exactly one well-formed action; the message says what is wrong."""


def _is(line: str, marker: str) -> bool:
    return line.rstrip() == marker


def _clean_path(line: str) -> str:
    path = line.strip()
    if len(path) >= 2 and path[0] == path[-1] == "`":
        path = path[1:-1].strip()
    return path


def _parse_edit_block(lines: list[str], i: int, path_line: str | None) -> tuple[Edit, int]:
    """Parse the block whose SEARCH marker is lines[i]; returns the edit and the index after REPLACE."""
    path = _clean_path(path_line) if path_line is not None else ""
    if not path:
        raise FormatError(f"an edit block needs the file path on the line just before `{SEARCH_MARK}`")
    j = i + 1
    search: list[str] = []
    while j < len(lines) and not _is(lines[j], DIVIDER_MARK):
        if _is(lines[j], REPLACE_MARK) or _is(lines[j], SEARCH_MARK):
            raise FormatError(f"the edit of {path} lacks the `{DIVIDER_MARK}` line between SEARCH and REPLACE")
        search.append(lines[j])
        j += 1
    if j == len(lines):
        raise FormatError(f"the edit of {path} lacks the `{DIVIDER_MARK}` line")
    j += 1
    replace: list[str] = []
    while j < len(lines) and not _is(lines[j], REPLACE_MARK):
        if _is(lines[j], SEARCH_MARK):
            raise FormatError(f"the edit of {path} lacks its `{REPLACE_MARK}` line")
        replace.append(lines[j])
        j += 1
    if j == len(lines):
        raise FormatError(f"the edit of {path} lacks its `{REPLACE_MARK}` line")
    edit = Edit(path, "".join(s + "\n" for s in search), "".join(r + "\n" for r in replace))
    return edit, j + 1


def _close_fence(lines: list[str], j: int) -> int:
    """Skip blank lines and an optional closing fence after an edit that sat inside a fence."""
    k = j
    while k < len(lines) and not lines[k].strip():
        k += 1
    return k + 1 if k < len(lines) and _FENCE_CLOSE.match(lines[k]) else j


def find_actions(text: str) -> list[Action]:
    """Every action in `text`, in order (FormatError for a malformed block)."""
    lines = text.split("\n")  # not splitlines(): form feeds and other breaks belong to a line
    actions: list[Action] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_OPEN.match(line)
        if fence and fence.group(1).lower() in SHELL_LANGS:
            j = i + 1
            while j < len(lines) and not _FENCE_CLOSE.match(lines[j]):
                j += 1
            if j == len(lines):
                raise FormatError("the ```bash block is not closed by a line ```")
            body = "\n".join(lines[i + 1 : j]).strip()
            if not body:
                raise FormatError("the ```bash block is empty")
            actions.append(Submit() if body == SUBMIT else Command(body))
            i = j + 1
        elif fence:
            # A non-shell fence: an edit inside it (or right below it) is an action; anything else
            # (quoted output, a code sample) is prose.
            j = i + 1
            while j < len(lines) and not _FENCE_CLOSE.match(lines[j]) and not _is(lines[j], SEARCH_MARK):
                j += 1
            if j < len(lines) and _is(lines[j], SEARCH_MARK):
                path_line = lines[j - 1] if j > i + 1 else (lines[i - 1] if i > 0 else None)
                edit, after = _parse_edit_block(lines, j, path_line)
                actions.append(edit)
                i = _close_fence(lines, after)
            else:
                i = j + 1
        elif _is(line, SEARCH_MARK):
            edit, i = _parse_edit_block(lines, i, lines[i - 1] if i > 0 else None)
            actions.append(edit)
        else:
            i += 1
    return actions


def _describe(action: Action) -> str:
    if isinstance(action, Edit):
        return f"an edit of {action.path}"
    return "a submit block" if isinstance(action, Submit) else "a bash block"


def parse_action(text: str) -> Action:
    """The single action of one turn; FormatError when there are none or several."""
    actions = find_actions(text)
    if not actions:
        raise FormatError("no action found: end the turn with one ```bash block or one SEARCH/REPLACE edit")
    if len(actions) > 1:
        found = ", ".join(_describe(a) for a in actions)
        raise FormatError(f"{len(actions)} actions found ({found}); write exactly one action per turn")
    return actions[0]
