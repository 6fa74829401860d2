"""Apply one SEARCH/REPLACE edit inside a sandbox's workspace, refusing paths that lead outside it.

The edit runs as a small stdlib-only Python script inside the sandbox (the same for the local and
docker sandboxes, and it sees the sandbox's own view of symlinks); the path and texts travel
base64-encoded, so no byte of them is ever interpreted by the shell. Files are read and written
as bytes (undecodable bytes survive), a missing final newline stays missing and CRLF files keep
CRLF. Non-goal: stopping the agent from writing outside through its shell commands -- that is the
sandbox's job; this only keeps the edit action itself inside the workspace.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from agents.actions import Edit
from tasks.sandbox.base import WORKSPACE, Sandbox

MAX_PAYLOAD = 96 * 1024  # base64 bytes; one command-line argument may hold at most 128 KiB on Linux
HINT_LINES = 20  # lines of the file shown when SEARCH does not match
HINT_WIDTH = 200  # characters per hint line

# Runs in the sandbox under any Python 3.6+ (SWE-bench images ship old interpreters): no walrus,
# no f-string `=`, stdlib only. It prints one JSON object; the host turns it into the observation.
_SCRIPT = r"""
import base64, difflib, json, os, sys

def done(**kw):
    sys.stdout.write(json.dumps(kw))
    sys.exit(0)

def closest(work, search, most, width):
    def show(lines):
        return [s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")[:width] for s in lines]
    flines, slines = work.split("\n"), search[:-1].split("\n")  # split("\n"): form feeds are not lines
    n = len(slines)
    want = [s.strip() for s in slines]
    have = [s.strip() for s in flines]
    for i in range(len(flines) - n + 1):
        if have[i] == want[0] and have[i:i + n] == want:
            return {"kind": "whitespace", "start": i + 1, "lines": show(flines[i:i + n])}
    # Else the window around the file line most like the first non-blank SEARCH line.
    k = next((j for j, s in enumerate(want) if s), 0)
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(want[k])
    best, at = 0.0, -1
    for i, line in enumerate(have):
        matcher.set_seq1(line)
        if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best and matcher.ratio() > best:
            best, at = matcher.ratio(), i
    if at < 0 or best < 0.5:
        return None
    start = max(0, at - k)
    return {"kind": "similar", "start": start + 1, "lines": show(flines[start:start + min(n, most)])}

def main():
    req = json.loads(base64.b64decode(sys.argv[1]).decode("utf-8"))
    path, search, replace = req["path"], req["search"], req["replace"]
    root = os.path.realpath(os.getcwd())
    real = os.path.realpath(os.path.join(root, path))
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        done(ok=False, error="outside")
    if os.path.isdir(real):
        done(ok=False, error="isdir")
    if not os.path.exists(real):
        if search:
            done(ok=False, error="missing")
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "xb") as f:
            f.write(replace.encode("utf-8", "surrogateescape"))
        done(ok=True, created=True, start=1, removed=0, added=replace.count("\n"))
    with open(real, "rb") as f:
        text = f.read().decode("utf-8", "surrogateescape")
    if not search and text:
        done(ok=False, error="exists")
    # As written first; in a file with CRLF line ends, SEARCH and REPLACE with CRLF too.
    tries = [(search, replace, "\n")]
    if "\r\n" in text and "\r\n" not in search:
        tries.append((search.replace("\n", "\r\n"), replace.replace("\n", "\r\n"), "\r\n"))
    for search, replace, nl in tries:
        # A last line without its newline still matches a SEARCH line (which always ends in one).
        added_nl = bool(text) and not text.endswith("\n")
        work = text + nl if added_nl else text
        hits = []
        p = work.find(search)
        while p != -1:
            if p == 0 or work[p - 1] == "\n":  # whole lines only
                hits.append(p)
            p = work.find(search, p + 1)
        if hits:
            break
    if len(hits) > 1:
        done(ok=False, error="many", count=len(hits), lines=[work.count("\n", 0, h) + 1 for h in hits[:10]])
    if not hits:
        done(ok=False, error="nomatch", hint=closest(work, search, req["hint_lines"], req["hint_width"]))
    new = work[:hits[0]] + replace + work[hits[0] + len(search):]
    if added_nl and new.endswith(nl):
        new = new[:-len(nl)]
    with open(real, "wb") as f:
        f.write(new.encode("utf-8", "surrogateescape"))
    done(ok=True, created=False, start=work.count("\n", 0, hits[0]) + 1,
         removed=search.count("\n"), added=replace.count("\n"))

try:
    main()
except OSError as exc:
    done(ok=False, error="oserror", detail="%s: %s" % (type(exc).__name__, exc.strerror or exc))
"""


class EditInfraError(RuntimeError):
    """The edit script itself could not run in the sandbox (no python, killed): not the model's fault."""


@dataclass
class EditResult:
    """What one edit did, as the observation the model reads."""

    ok: bool  # the file was changed or created
    message: str  # the observation text
    details: dict[str, Any] = field(default_factory=dict)  # the script's raw answer (for the trajectory)


def check_path(path: str) -> str | None:
    """Why `path` may not be edited without looking at the filesystem, or None when it may."""
    if not path or "\0" in path or "\n" in path:
        return "the file path is empty or contains a NUL or newline character"
    if path.startswith("/"):
        hint = f" (write {path[len(WORKSPACE) + 1 :]!r})" if path.startswith(WORKSPACE + "/") else ""
        return f"absolute paths are not allowed; give the path relative to the repository root{hint}"
    if ".." in PurePosixPath(path).parts:
        return "paths may not contain `..`: edits stay inside the repository"
    return None


def _numbered(start: int, lines: list[str]) -> str:
    return "\n".join(f"{start + i:6d} | {line}" for i, line in enumerate(lines))


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _span(start: int, n: int) -> str:
    return f"line {start}" if n == 1 else f"lines {start}-{start + n - 1}"


def _describe(edit: Edit, ans: dict[str, Any]) -> str:
    """The observation for the script's answer `ans`."""
    path = edit.path
    if ans.get("ok"):
        if ans.get("created"):
            return f"Created {path} ({_lines(ans['added'])})."
        if edit.search == edit.replace:
            return f"No change: SEARCH and REPLACE are identical ({path} left as it is)."
        start, removed, added = ans["start"], ans["removed"], ans["added"]
        now = f"now {_span(start, added)}" if added else "deleted"
        return f"Edited {path}: replaced {_span(start, removed)} with {_lines(added)} ({now})."
    error = ans.get("error")
    if error == "outside":
        return f"Edit refused: {path} resolves outside the repository (through a symlink). No change made."
    if error == "isdir":
        return f"Edit failed: {path} is a directory. No change made."
    if error == "missing":
        return (
            f"Edit failed: {path} does not exist. Check the path (e.g. with `ls` or `find`); "
            "to create a new file, leave SEARCH empty. No change made."
        )
    if error == "exists":
        return (
            f"Edit failed: SEARCH is empty but {path} already exists and is not empty; copy the exact "
            "lines to change into SEARCH. No change made."
        )
    if error == "many":
        where = ", ".join(str(n) for n in ans["lines"])
        return (
            f"Edit failed: SEARCH matches {ans['count']} places in {path} (starting at lines {where}); "
            "include more surrounding lines so that it matches exactly one. No change made."
        )
    if error == "nomatch":
        text = f"Edit failed: SEARCH does not match any lines of {path} exactly. No change made."
        hint = ans.get("hint")
        if hint and hint["kind"] == "whitespace":
            return (
                f"{text}\nIt matches {_span(hint['start'], len(hint['lines']))} if whitespace is ignored; "
                f"copy them exactly, indentation included:\n{_numbered(hint['start'], hint['lines'])}"
            )
        if hint:
            return f"{text}\nThe closest lines in the file are:\n{_numbered(hint['start'], hint['lines'])}"
        return f"{text}\nLook at the file's current content (e.g. `grep -n` or `sed -n 'A,Bp'`) and copy lines exactly."
    return f"Edit failed: {ans.get('detail') or error}. No change made."


def apply_edit(sandbox: Sandbox, edit: Edit, timeout: float = 60.0) -> EditResult:
    """Apply `edit` in the sandbox's workspace; refusals and mismatches come back as a failed result."""
    why = check_path(edit.path)
    if why is not None:
        return EditResult(False, f"Edit refused: {why}. No change made.", {"ok": False, "error": "path"})
    request = json.dumps(
        {
            "path": edit.path,
            "search": edit.search,
            "replace": edit.replace,
            "hint_lines": HINT_LINES,
            "hint_width": HINT_WIDTH,
        }
    )
    payload = base64.b64encode(request.encode("utf-8", "surrogateescape")).decode("ascii")
    if len(payload) > MAX_PAYLOAD:
        return EditResult(
            False,
            "Edit refused: the edit block is too large; split it into smaller edits. No change made.",
            {"ok": False, "error": "size"},
        )
    # -I: ignore PYTHON* variables and the user's site-packages, so nothing in the workspace runs.
    command = f'"$(command -v python3 || command -v python)" -I -c {shlex.quote(_SCRIPT)} {payload}'
    result = sandbox.run(command, timeout=timeout)
    try:
        answer = json.loads(result.output.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        answer = None
    if not isinstance(answer, dict) or result.timed_out:
        raise EditInfraError(
            f"the edit helper did not run in the sandbox (returncode {result.returncode}, "
            f"timed out: {result.timed_out}): {result.output[-500:]!r}"
        )
    return EditResult(bool(answer.get("ok")), _describe(edit, answer), answer)
