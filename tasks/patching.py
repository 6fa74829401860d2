"""Unified diffs: which paths they touch, whether that is safe, and applying them to a folder.

Patches come from an agent (untrusted): a path that is absolute, climbs out with `..`, or goes
through a symlink is refused before git sees it; git itself refuses the same, this is the second
lock. Not here: running tests or sandboxes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path, PurePosixPath

_DIFF_GIT = re.compile(r"^diff --git (\S+) (\S+)$")
_FILE_LINE = re.compile(r"^(?:---|\+\+\+) (\S+)")
_RENAME = re.compile(r"^(?:rename|copy) (?:from|to) (.+)$")
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")


class PatchError(ValueError):
    """A patch that is unsafe, malformed or does not apply."""


def _strip_prefix(path: str) -> str:
    if path == "/dev/null":
        return ""
    return path[2:] if path[:2] in ("a/", "b/") else path


def patch_paths(patch: str) -> list[str]:
    """Every path a unified diff names (old and new sides, renames included), in order, unique."""
    seen: dict[str, None] = {}
    for line in patch.splitlines():
        m = _DIFF_GIT.match(line)
        if m:
            for p in m.groups():
                seen[_strip_prefix(p)] = None
            continue
        m = _FILE_LINE.match(line) or _RENAME.match(line)
        if m:
            seen[_strip_prefix(m.group(1).strip())] = None
    seen.pop("", None)
    return list(seen)


def unsafe_path_reason(path: str) -> str | None:
    """Why a patch path is not allowed (absolute, `..`, empty), or None if it is fine."""
    if not path or path.startswith("/") or path.startswith("~") or "\\" in path:
        return f"path {path!r} is absolute or not a plain relative path"
    parts = PurePosixPath(path).parts
    if ".." in parts:
        return f"path {path!r} climbs out of the workspace"
    if parts and parts[0] == ".git":
        return f"path {path!r} touches git metadata"
    return None


def check_patch(patch: str, root: Path | None = None) -> list[str]:
    """Paths of a safe patch; PatchError naming the first unsafe path (or a symlink out of `root`)."""
    paths = patch_paths(patch)
    if patch.strip() and not paths:
        raise PatchError("patch names no file (is it a unified diff?)")
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


def apply_patch(root: Path, patch: str, reverse: bool = False) -> None:
    """Apply a unified diff to the folder `root` (need not be a git repository); PatchError if not."""
    if not patch.strip():
        return
    check_patch(patch, root)
    args = ["git", "apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), "-"]
    # Stop git from discovering a repository *above* root (paths would then be taken relative to it).
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.resolve().parent)}
    done = subprocess.run(args, cwd=root, input=patch.encode(), capture_output=True, timeout=60, check=False, env=env)
    if done.returncode != 0:
        raise PatchError(f"patch does not apply: {done.stderr.decode(errors='replace').strip()}")
