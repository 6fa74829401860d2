"""Unified diffs: which paths they touch, whether that is safe, and applying them to a folder.

Patches come from an agent (untrusted). Every check runs on *parsed* paths: git's C-style quoting
(`"a/con\\164est.py"`) is decoded, and the paths git itself would touch (`git apply --numstat -z`,
git's own parser) are checked too, so a path spelled so that a regex misses it cannot slip through.
A path that is absolute, climbs out with `..`, goes through a symlink, or a patch that creates a
symlink is refused before git applies it; git refuses most of the same, this is the second lock.
Not here: running tests or sandboxes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path, PurePosixPath

_DIFF_GIT = re.compile(r"^diff --git (.+)$")
_FILE_LINE = re.compile(r"^(?:---|\+\+\+) (.+)$")
_RENAME = re.compile(r"^(?:rename|copy) (?:from|to) (.+)$")
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode|old mode|deleted file mode) 120000\s*$")
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
# Files that decide how tests are collected, configured or imported: never part of a fix.
TEST_INFRASTRUCTURE = re.compile(
    r"(^|/)(conftest\.py|pytest\.py|_?pytest/.*|pytest\.ini|\.pytest\.ini|tox\.ini|setup\.cfg"
    r"|sitecustomize\.py|usercustomize\.py|[^/]*\.pth|[^/]*\.pyc|__pycache__/.*)$"
)
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class PatchError(ValueError):
    """A patch that is unsafe, malformed or does not apply."""


class PatchParseError(PatchError):
    """A patch that git cannot parse (so it cannot apply either)."""


def unquote_git_path(text: str) -> str:
    """Decode one path as git writes it: `"a/b\\303\\244.py"` (C-style quoted, octal bytes) or bare."""
    text = text.strip()
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text
    out = bytearray()
    body, i = text[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            out.append(_ESCAPES.get(body[i + 1 : i + 2], ord(body[i + 1 : i + 2] or "\\")))
            i += 2
    return out.decode("utf-8", errors="surrogateescape")


def _split_header(rest: str) -> list[str]:
    """The two paths of a `diff --git A B` line; quoted ones decoded, bare ones split at ` b/`."""
    if rest.startswith('"'):
        end = next((i for i in range(1, len(rest)) if rest[i] == '"' and rest[i - 1] != "\\"), len(rest) - 1)
        return [unquote_git_path(rest[: end + 1]), unquote_git_path(rest[end + 1 :])]
    if rest.endswith('"'):
        start = rest.rfind(' "')
        return [rest[:start], unquote_git_path(rest[start + 1 :])]
    half = (len(rest) - 1) // 2  # `a/X b/X` (no rename): the two halves are the same path
    if rest[half : half + 1] == " " and rest[:half][2:] == rest[half + 1 :][2:]:
        return [rest[:half], rest[half + 1 :]]
    left, sep, right = rest.partition(" b/")
    return [left, "b/" + right] if sep else rest.split(" ", 1)


def _strip_prefix(path: str) -> str:
    """git apply's -p1: drop the first path component (`a/`, `b/`, or anything else)."""
    if path == "/dev/null":
        return ""
    return path.split("/", 1)[1] if "/" in path else path


def patch_paths(patch: str) -> list[str]:
    """Every path a unified diff names (old and new sides, renames included), decoded, in order, unique."""
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        if m := _DIFF_GIT.match(line):
            for p in _split_header(m.group(1)):
                seen[_strip_prefix(p)] = None
        elif m := _FILE_LINE.match(line):
            # `--- a/x y\t2024-...`: a path with a space ends at a tab; a quoted one is decoded
            seen[_strip_prefix(unquote_git_path(m.group(1).split("\t", 1)[0]))] = None
        elif m := _RENAME.match(line):
            seen[unquote_git_path(m.group(1))] = None  # rename/copy paths carry no a/ b/ prefix
    seen.pop("", None)
    return list(seen)


def git_patch_paths(patch: str) -> list[str]:
    """The paths `git apply` itself would touch (its own parser, `--numstat -z`); PatchError if it cannot parse."""
    if not patch.strip():
        return []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
    done = subprocess.run(
        ["git", "apply", "--numstat", "-z", "-"],
        input=patch.encode(errors="surrogateescape"),
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
        cwd="/",
    )
    if done.returncode != 0:
        raise PatchParseError(f"patch does not parse: {done.stderr.decode(errors='replace').strip()}")
    # "added\tdeleted\tpath\0", or for a rename "added\tdeleted\t\0old\0new\0"
    fields = done.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    out: list[str] = []
    i = 0
    while i < len(fields):
        head = fields[i]
        if not head:
            i += 1
            continue
        path = head.split("\t", 2)[2] if head.count("\t") >= 2 else ""
        if path:
            out.append(path)
            i += 1
        else:
            out += [p for p in fields[i + 1 : i + 3] if p]
            i += 3
    return list(dict.fromkeys(out))


def unsafe_path_reason(path: str) -> str | None:
    """Why a patch path is not allowed (absolute, `..`, empty), or None if it is fine."""
    if not path or path.startswith("/") or path.startswith("~") or "\\" in path:
        return f"path {path!r} is absolute or not a plain relative path"
    if any(ord(c) < 32 for c in path):
        return f"path {path!r} contains control characters"
    parts = PurePosixPath(path).parts
    if ".." in parts:
        return f"path {path!r} climbs out of the workspace"
    if parts and parts[0] == ".git":
        return f"path {path!r} touches git metadata"
    return None


def check_patch(patch: str, root: Path | None = None) -> list[str]:
    """Paths of a safe patch (ours and git's parse); PatchError naming the first unsafe path or symlink."""
    paths = list(dict.fromkeys([*patch_paths(patch), *git_patch_paths(patch)]))
    if patch.strip() and not paths:
        raise PatchError("patch names no file (is it a unified diff?)")
    if any(_SYMLINK_MODE.match(line) for line in patch.splitlines()):
        raise PatchError("patch creates or changes a symbolic link")
    for path in paths:
        reason = unsafe_path_reason(path)
        if reason:
            raise PatchError(reason)
        if root is not None:
            target = (root / path).resolve()
            if not target.is_relative_to(root.resolve()):
                raise PatchError(f"path {path!r} leads out of the workspace through a symlink")
    return paths


def touched_tests(paths: list[str]) -> list[str]:
    """The paths among `paths` that are test files (tests/, test_*.py, *_test.py, conftest.py)."""
    return [p for p in paths if TEST_FILE.search(p)]


def touched_test_infrastructure(paths: list[str], before: Path, after: Path) -> list[str]:
    """Paths that configure or replace the test runner: TEST_INFRASTRUCTURE, or a changed `[tool.pytest*]` table.

    `before` and `after` are the workspace without and with the patch (for pyproject.toml, whose
    other tables are an ordinary part of a project).
    """
    hits = [p for p in paths if TEST_INFRASTRUCTURE.search(p)]
    for p in paths:
        if PurePosixPath(p).name == "pyproject.toml" and _pytest_tables(before / p) != _pytest_tables(after / p):
            hits.append(p)
    return hits


def _pytest_tables(path: Path) -> object:
    """The `tool.pytest*` tables of a pyproject.toml (None if absent; the raw text if it does not parse)."""
    import tomllib

    if not path.is_file():
        return None
    try:
        tool = tomllib.loads(path.read_text(errors="replace")).get("tool", {})
    except tomllib.TOMLDecodeError:
        return path.read_bytes()  # unparseable: compared by bytes, so any edit counts
    return {k: v for k, v in tool.items() if k.startswith("pytest")} if isinstance(tool, dict) else tool


def apply_patch(root: Path, patch: str, reverse: bool = False) -> None:
    """Apply a unified diff to the folder `root` (need not be a git repository); PatchError if not."""
    if not patch.strip():
        return
    check_patch(patch, root)
    args = ["git", "apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), "-"]
    # Stop git from discovering a repository *above* root (paths would then be taken relative to it).
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.resolve().parent)}
    data = patch.encode(errors="surrogateescape")
    done = subprocess.run(args, cwd=root, input=data, capture_output=True, timeout=60, check=False, env=env)
    if done.returncode != 0:
        raise PatchError(f"patch does not apply: {done.stderr.decode(errors='replace').strip()}")
