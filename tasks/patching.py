"""Unified diffs: which paths they touch, whether that is safe, and applying them.

Patches come from an agent (untrusted). Every check runs on *parsed* paths: git's C-style quoting
(`"a/con\\164est.py"`) is decoded, and the paths git itself would touch (`git apply --numstat -z`,
git's own parser) are checked too, so a path spelled so that a regex misses it cannot slip through.
A path that is absolute, climbs out with `..`, goes through a symlink, is itself a symlink in the
workspace, or a patch that creates or changes a symlink is refused before git applies it (the mode is
read the way git reads it, `0120000` and `120777` included, and from git's own `--summary`); after
applying, no touched path or folder above it may be a symlink. git refuses most of the same; this is
the second lock. A patch naming more than MAX_PATCH_FILES files is refused (`TooManyFilesError`), so
grading time stays bounded.

Stray symlinks (`drop_symlinks`). An agent's workspace diff holds every symlink it left behind (`ln -s x
y`: a `new file mode 120000` section), and refusing the whole patch for one would refuse a correct fix
next to it. The decision: every section that creates, deletes or changes a symlink is *dropped* (the
links are not graded, and the caller says which it ignored); the rest is graded as it is. Links are
never recreated, so nothing the rest of the patch does can go through one: a hunk that wrote through a
link the patch created now writes a plain file inside the workspace, one that needs the link fails to
apply or fails its tests, and check_patch's checks (modes, paths through existing symlinks, git's own
`beyond a symbolic link` refusal, the post-apply check) still run on what is left.
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
# git's header lines that carry a mode (apply.c: parse_mode_line, strtoul base 8 after the prefix)
_MODE_PREFIXES = ("old mode ", "new mode ", "deleted file mode ", "new file mode ")
_INDEX_MODE = re.compile(r"^index [^ .]*\.\.[^ ]*( .*)$")
# `git apply --summary`: " create mode 120000 y", " delete mode ...", " mode change 100644 => 120000 y"
_SUMMARY_MODES = re.compile(r"^ (?:(?:create|delete) mode (\d+)|mode change (\d+) => (\d+)) ", re.MULTILINE)
TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
# The bundled swe-lite suite's gold patches touch 1 file each (train, dev, test; test_patch at most 4), and
# SWE-bench Lite's are single-file by construction; a correct fix plus its stray files (a repro script, a
# log) stays far below this, while 20,000 small files took ~54 s to grade in docker.
MAX_PATCH_FILES = 1000
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class PatchError(ValueError):
    """A patch that is unsafe, malformed or does not apply."""


class PatchParseError(PatchError):
    """A patch that git cannot parse (so it cannot apply either)."""


class TooManyFilesError(PatchError):
    """A patch that names more than MAX_PATCH_FILES files (graded as `too_many_files`)."""


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


def _lines(text: str) -> list[str]:
    """`text` cut at "\\n" only (as git reads a patch; str.splitlines also cuts at \\r, \\f, ...), ends kept."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _sections(patch: str) -> list[str]:
    """The patch cut before every `diff --git` line: [text before the first, one per file]; joined, the patch."""
    out: list[str] = []
    current: list[str] = []
    for line in _lines(patch):
        if line.startswith("diff --git ") and current:
            out.append("".join(current))
            current = []
        current.append(line)
    if current:
        out.append("".join(current))
    return out


def _mode_value(text: str) -> int | None:
    """A mode as git parses it: C strtoul(text, base 8) truncated to unsigned int (None: no digits)."""
    s = text.lstrip(" \t\n\v\f\r")
    negative = s.startswith("-")
    if s[:1] in ("+", "-"):
        s = s[1:]
    digits = re.match(r"[0-7]*", s).group()
    if not digits:
        return None
    value = int(digits, 8)
    value = 2**64 - 1 if value >= 2**64 else (-value) % 2**64 if negative else value
    return value & 0xFFFFFFFF


def _is_symlink_mode(mode: int | None) -> bool:
    return mode is not None and mode & 0o170000 == 0o120000


def _names_symlink(text: str) -> bool:
    """Whether any line of `text` sets a symlink mode the way git would read it (header or index line)."""
    for line in _lines(text):
        for prefix in _MODE_PREFIXES:
            if line.startswith(prefix) and _is_symlink_mode(_mode_value(line[len(prefix) :])):
                return True
        if (m := _INDEX_MODE.match(line.rstrip("\n"))) and _is_symlink_mode(_mode_value(m.group(1))):
            return True
    return False


def _git_stat(patch: str) -> tuple[list[str], bool]:
    """git's own parse of `patch` (`git apply --numstat --summary -z`): (paths, whether it sets a symlink).

    PatchParseError if git cannot parse it.
    """
    if not patch.strip():
        return [], False
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
    done = subprocess.run(
        ["git", "apply", "--numstat", "--summary", "-z", "-"],
        input=patch.encode(errors="surrogateescape"),
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
        cwd="/",
    )
    if done.returncode != 0:
        raise PatchParseError(f"patch does not parse: {done.stderr.decode(errors='replace').strip()}")
    # "added\tdeleted\tpath\0", or for a rename "added\tdeleted\t\0old\0new\0"; then the summary,
    # newline-terminated text, after the last NUL
    numstat, _, summary = done.stdout.decode("utf-8", errors="surrogateescape").rpartition("\0")
    fields = numstat.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        head = fields[i]
        if not head:
            i += 1
            continue
        counts = head.split("\t", 2)
        named = [counts[2]] if len(counts) == 3 and counts[2] else [p for p in fields[i + 1 : i + 3] if p]
        i += 1 if len(counts) == 3 and counts[2] else 3
        paths += named
    modes = [int(m, 8) for groups in _SUMMARY_MODES.findall(summary) for m in groups if m]
    return list(dict.fromkeys(paths)), any(_is_symlink_mode(m) for m in modes)


def git_patch_paths(patch: str) -> list[str]:
    """The paths `git apply` itself would touch (its own parser, `--numstat -z`); PatchError if it cannot parse."""
    return _git_stat(patch)[0]


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


def _check_count(paths: list[str], max_files: int | None) -> None:
    if max_files is not None and len(paths) > max_files:
        raise TooManyFilesError(f"the patch names {len(paths)} files, more than {max_files} (MAX_PATCH_FILES)")


def check_patch(patch: str, root: Path | None = None, max_files: int | None = MAX_PATCH_FILES) -> list[str]:
    """Paths of a safe patch (ours and git's parse); PatchError naming the first unsafe path or symlink.

    TooManyFilesError (a PatchError) if it names more than `max_files` paths (None: no limit), counted on
    our own parse first, before git runs. With `root` (the workspace it will be applied to), a path that
    leads out of it through a symlink, or that is a symlink there, is refused too.
    """
    ours = patch_paths(patch)
    _check_count(ours, max_files)
    theirs, git_symlink = _git_stat(patch)
    paths = list(dict.fromkeys([*ours, *theirs]))
    _check_count(paths, max_files)
    if patch.strip() and not paths:
        raise PatchError("patch names no file (is it a unified diff?)")
    if git_symlink or _names_symlink(patch):
        raise PatchError("patch creates or changes a symbolic link")
    for path in paths:
        reason = unsafe_path_reason(path)
        if reason:
            raise PatchError(reason)
        if root is not None:
            target = (root / path).resolve()
            if not target.is_relative_to(root.resolve()):
                raise PatchError(f"path {path!r} leads out of the workspace through a symlink")
            if (root / path).is_symlink():
                raise PatchError(f"path {path!r} is a symbolic link in the workspace")
    return paths


def drop_symlinks(patch: str) -> tuple[str, list[str]]:
    """(`patch` without its symlink sections, the paths those named, in order); see the module docstring.

    A section is one `diff --git` header and what follows it up to the next. A symlink section is one where
    any line sets a symlink mode as git would read it (`new file mode 120000`, `deleted file mode 120000`,
    an old/new mode or an index line naming one; `0120000`, `+120000`, `120777` too). Dropped: every symlink
    section, and every other section naming one of its paths (the other half of a file turned into a link
    or back), so each of those paths stays as it was in the workspace. The sections kept are byte for byte
    the patch's own; what is left must still pass check_patch (which also refuses a path that is a symlink
    in the workspace, or any symlink mode git itself still finds).
    """
    sections = [(s, patch_paths(s) if s.startswith("diff --git ") else []) for s in _sections(patch)]
    links: dict[str, None] = {}
    for section, paths in sections:
        if paths and _names_symlink(section):
            links.update(dict.fromkeys(paths))
    kept = [section for section, paths in sections if not links.keys() & set(paths)]
    return "".join(kept), list(links)


def _symlinks_among(root: Path, paths: list[str]) -> list[str]:
    """Those of `paths`, or a folder above one of them, that are symlinks under `root`."""
    seen: set[str] = set()
    hits: list[str] = []
    for path in paths:
        parts = PurePosixPath(path).parts
        for i in range(1, len(parts) + 1):
            rel = "/".join(parts[:i])
            if rel in seen:
                continue
            seen.add(rel)
            if (root / rel).is_symlink():
                hits.append(rel)
    return hits


def apply_patch(root: Path, patch: str, reverse: bool = False, max_files: int | None = MAX_PATCH_FILES) -> None:
    """Apply a unified diff to the folder `root` (need not be a git repository); PatchError if not.

    check_patch runs first (TooManyFilesError past `max_files`); afterwards no path the patch touched, nor
    a folder above it, may be a symlink (PatchError; the folder is then left as git wrote it).
    """
    if not patch.strip():
        return
    paths = check_patch(patch, root, max_files)
    args = ["git", "apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), "-"]
    # Stop git from discovering a repository *above* root (paths would then be taken relative to it).
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.resolve().parent)}
    data = patch.encode(errors="surrogateescape")
    done = subprocess.run(args, cwd=root, input=data, capture_output=True, timeout=60, check=False, env=env)
    if done.returncode != 0:
        raise PatchError(f"patch does not apply: {done.stderr.decode(errors='replace').strip()}")
    links = _symlinks_among(root, paths)
    if links:
        raise PatchError(f"applying the patch left a symbolic link at {links[0]!r}")
