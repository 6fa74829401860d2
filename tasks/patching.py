"""Unified diffs: which paths they touch, whether that is safe, what they really wrote, and applying them.

Patches come from an agent (untrusted). Every check runs on *parsed* paths: git's C-style quoting
(`"a/con\\164est.py"`) is decoded, and the paths git itself would touch (`git apply --numstat -z`,
git's own parser) are checked too, so a path spelled so that a regex misses it cannot slip through.
A path that is absolute, climbs out with `..`, goes through a symlink, is itself a symlink in the
workspace, or a patch that creates or changes a symlink is refused before git applies it (the mode is
read the way git reads it, `0120000` and `120777` included, and from git's own `--summary`); after
applying, no touched path or folder above it may be a symlink. git refuses most of the same; this is
the second lock. A patch naming more than MAX_PATCH_FILES files is refused (`TooManyFilesError`), so
grading time stays bounded.

What a patch wrote is read from the files, not from the patch text (`added_lines`): a diff can say the
same thing as a git binary patch (base85), under a quoted path, or through `.gitattributes`, so text
checks run on the post-apply contents. A binary section on a text or source file (`binary_sources`) is
reported so the caller can refuse it.

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

import io
import os
import re
import stat
import subprocess
import tempfile
import tokenize
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
# Files that decide how tests are collected, configured or imported, or how git diffs the workspace
# (`.gitattributes` can turn any file into a binary patch): never part of a fix.
TEST_INFRASTRUCTURE = re.compile(
    r"(^|/)(conftest\.py|pytest\.py|_?pytest/.*|pytest\.ini|\.pytest\.ini|tox\.ini|setup\.cfg"
    r"|sitecustomize\.py|usercustomize\.py|[^/]*\.pth|[^/]*\.pyc|__pycache__/.*|\.gitattributes|\.gitconfig)$"
)
# Source and text files: a binary section on one of these is refused whatever it holds (`binary_sources`).
TEXT_SUFFIXES = frozenset(".py .pyi .pyw .pyx .pxd .pth .cfg .toml .ini .txt .md .rst .json .yaml .yml .sh".split())
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


def _is_binary_section(section: str) -> bool:
    """Whether a section carries a binary patch: `GIT binary patch`, or `Binary files ... differ` (git's own
    `--numstat` view, used next to this, catches any other spelling git accepts)."""
    for line in _lines(section):
        text = line.rstrip("\n")
        if text == "GIT binary patch" or (text.startswith(("Binary files ", "Files ")) and text.endswith(" differ")):
            return True
    return False


def _git_stat(patch: str) -> tuple[list[str], list[str], bool]:
    """git's own parse of `patch` (`git apply --numstat --summary -z`): (paths, binary paths, sets a symlink).

    PatchParseError if git cannot parse it.
    """
    if not patch.strip():
        return [], [], False
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
    # "added\tdeleted\tpath\0", or for a rename "added\tdeleted\t\0old\0new\0" ("-\t-" for a binary
    # file); then the summary, newline-terminated text, after the last NUL
    numstat, _, summary = done.stdout.decode("utf-8", errors="surrogateescape").rpartition("\0")
    fields = numstat.split("\0")
    paths: list[str] = []
    binary: list[str] = []
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
        if counts[:2] == ["-", "-"]:
            binary += named
    modes = [int(m, 8) for groups in _SUMMARY_MODES.findall(summary) for m in groups if m]
    return list(dict.fromkeys(paths)), list(dict.fromkeys(binary)), any(_is_symlink_mode(m) for m in modes)


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
    theirs, _, git_symlink = _git_stat(patch)
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


def _read_file(root: Path, rel: str) -> bytes | None:
    """Bytes of the regular file `root/rel` (never through a symlink); None if absent or not a regular file."""
    path = root / rel
    try:
        if not path.resolve().is_relative_to(root.resolve()) or not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        return path.read_bytes()
    except (OSError, RuntimeError, ValueError):
        return None


def _encodings(data: bytes) -> list[str]:
    """How to read `data`: UTF-8 and, if it declares another encoding the way Python source does (PEP 263,
    `# coding: utf-7`), that one too: Python would run it so."""
    try:
        declared = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        b"".decode(declared)
    except (SyntaxError, LookupError, UnicodeError):
        return ["utf-8"]
    return ["utf-8"] if declared in ("utf-8", "utf-8-sig") else ["utf-8", declared]


def _decode(data: bytes, encoding: str) -> str:
    if encoding == "utf-8":  # undecodable bytes kept (as surrogates), a BOM dropped
        return data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    return data.decode(encoding, errors="replace")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="surrogatepass")


_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _diff_added(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """For each (old, new) text, the lines of `new` a line diff marks as added: one `git diff --no-index`
    (git's own diff, in C, with its cost limits) over numbered files, so file names play no part."""
    out: list[list[str]] = [[] for _ in pairs]
    todo = [i for i, (old, new) in enumerate(pairs) if old != new]
    if not todo:
        return out
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
    with tempfile.TemporaryDirectory(prefix="added-lines-") as tmp:
        for side in ("old", "new"):
            (Path(tmp) / side).mkdir()
        for i in todo:
            (Path(tmp) / "old" / str(i)).write_bytes(_utf8(pairs[i][0]))
            (Path(tmp) / "new" / str(i)).write_bytes(_utf8(pairs[i][1]))
        flags = ["--text", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames"]
        done = subprocess.run(
            ["git", "diff", "--no-index", *flags, "old", "new"],
            cwd=tmp,
            capture_output=True,
            timeout=300,
            check=False,
            env=env,
        )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"git diff --no-index failed: {done.stderr.decode(errors='replace').strip()}")
    current, old_left, new_left = -1, 0, 0
    for line in done.stdout.split(b"\n"):
        if old_left or new_left:  # inside a hunk (-U0: only - and + lines, and "\ No newline")
            if line.startswith(b"-"):
                old_left -= 1
            elif line.startswith(b"+"):
                new_left -= 1
                out[current] += line[1:].decode("utf-8", errors="surrogateescape").splitlines() or [""]
        elif line.startswith(b"diff --git "):
            current = int(line.rsplit(b"/", 1)[1])
        elif m := _HUNK.match(line):
            old_left, new_left = int(m.group(1) or 1), int(m.group(2) or 1)
    return out


def added_lines(before: Path, after: Path, paths: list[str]) -> dict[str, list[str]]:
    """For each text file among `paths`: the lines of `after/path` that a line diff against `before/path` adds.

    `before` and `after` are the workspace without and with the patch; `paths` what check_patch returned.
    The contents are compared (git's own line diff of the two files), not the patch text, so a git binary
    patch, a quoted path or a `.gitattributes` trick shows what it wrote. A new file: all its lines; a
    deleted one: `[]`. Decoded as UTF-8 (undecodable bytes kept as surrogates, a BOM dropped) and, for a
    file that declares another encoding the way Python source does (PEP 263, `# coding: utf-7`), read in
    that encoding too (its added lines appended, those not already there). Lines are cut as Python reads
    them (`\\r` too). Left out (no key): paths that are, after the patch, neither a regular file nor gone
    (a folder, a symlink), and files with NUL bytes (binary: binary_sources names those that are source
    files). A `before` file with NUL bytes counts as empty.
    """
    out: dict[str, list[str]] = {}
    jobs: list[tuple[str, str, str]] = []
    for path in paths:
        new = _read_file(after, path)
        if new is None:
            if not os.path.lexists(after / path):
                out[path] = []  # deleted (or only the old side of a rename)
            continue
        if b"\0" in new:
            continue
        old = _read_file(before, path) or b""
        old = b"" if b"\0" in old else old
        out[path] = []
        jobs += [(path, _decode(old, encoding), _decode(new, encoding)) for encoding in _encodings(new)]
    read: set[str] = set()
    for (path, _, _), lines in zip(jobs, _diff_added([(old, new) for _, old, new in jobs]), strict=True):
        if path in read:  # the declared encoding's reading: only the lines the UTF-8 one does not have
            have = set(out[path])
            lines = [line for line in lines if line not in have]
        read.add(path)
        out[path] += lines
    return out


def _is_text_suffix(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in TEXT_SUFFIXES


def binary_sources(patch: str, after: Path, paths: list[str] | None = None, before: Path | None = None) -> list[str]:
    """Source or text files the patch wrote as binary, or that hold NUL bytes: the caller refuses (`unsafe_patch`).

    `after` is the workspace with the patch applied; `paths` the changed paths (default: the patch's own);
    `before`, if given, the workspace without it. A path is named when it still exists after the patch and
    - it has a binary section (`GIT binary patch`, `Binary files ... differ`, or binary in git's own
      `--numstat`) and either a TEXT_SUFFIXES suffix, or is a non-empty file without NUL bytes (with
      `before`: unless it had NUL bytes before, a binary file turned text, which added_lines reads whole); or
    - it has a TEXT_SUFFIXES suffix and holds NUL bytes, however it was written (added_lines skips it).
    A deleted file is never named: nothing was written.
    """
    binary: dict[str, None] = {}
    for section in _sections(patch):
        if _is_binary_section(section):
            binary.update(dict.fromkeys(patch_paths(section)))
    try:
        binary.update(dict.fromkeys(_git_stat(patch)[1]))
    except PatchParseError:
        pass
    hits: dict[str, None] = {}
    for path in binary:
        data = _read_file(after, path)
        if data is None:
            continue
        old = _read_file(before, path) if before is not None else None
        text_now = bool(data) and b"\0" not in data and not (old is not None and b"\0" in old)
        if _is_text_suffix(path) or text_now:
            hits[path] = None
    for path in paths if paths is not None else [*patch_paths(patch), *binary]:
        if _is_text_suffix(path) and b"\0" in (_read_file(after, path) or b""):
            hits[path] = None
    return list(hits)


def touched_tests(paths: list[str]) -> list[str]:
    """The paths among `paths` that are test files (tests/, test_*.py, *_test.py, conftest.py)."""
    return [p for p in paths if TEST_FILE.search(p)]


def touched_test_infrastructure(paths: list[str], before: Path, after: Path) -> list[str]:
    """Paths that configure or replace the test runner: TEST_INFRASTRUCTURE, or a changed `[tool.pytest*]` table.

    `before` and `after` are the workspace without and with the patch (for pyproject.toml, whose
    other tables are an ordinary part of a project: a new one without pytest tables is not counted, one
    whose pytest tables appear, change or go, or that does not parse, is).
    """
    hits = [p for p in paths if TEST_INFRASTRUCTURE.search(p)]
    for p in paths:
        if PurePosixPath(p).name == "pyproject.toml" and _pytest_tables(before / p) != _pytest_tables(after / p):
            hits.append(p)
    return hits


def _pytest_tables(path: Path) -> object:
    """The `tool.pytest*` tables of a pyproject.toml (`{}` if there is no file or none; the raw bytes if it
    does not parse, so any edit of an unparseable one counts)."""
    import tomllib

    if not path.is_file():
        return {}
    try:
        tool = tomllib.loads(path.read_text(errors="replace")).get("tool", {})
    except tomllib.TOMLDecodeError:
        return path.read_bytes()
    return {k: v for k, v in tool.items() if k.startswith("pytest")} if isinstance(tool, dict) else tool


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
