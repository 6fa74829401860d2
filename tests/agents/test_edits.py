"""SEARCH/REPLACE edits in a real local sandbox: exact bytes, mismatches, and paths leading outside."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from agents.actions import Edit
from agents.edits import apply_edit, check_path
from tasks.sandbox import SandboxError
from tasks.sandbox.local import LocalSandbox

IN_CI = os.environ.get("CI", "").strip().lower() == "true"

MOD = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace source that no edit may touch."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret\n")
    return out


@pytest.fixture
def sandbox(tmp_path: Path, outside: Path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text(MOD)
    (src / "noeol.txt").write_bytes(b"first\nlast")
    (src / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (src / "mixed.txt").write_bytes(b"a\nb\r\nc\n")
    (src / "latin1.txt").write_bytes(b"caf\xe9\nkeep\n")
    os.symlink(outside, src / "escape_dir")
    os.symlink(outside / "secret.txt", src / "escape_file.txt")
    os.symlink("../../outside", src / "pkg" / "rel_escape")
    os.symlink("pkg/mod.py", src / "alias.py")
    with LocalSandbox() as sb:
        sb.start(src)
        yield sb


def read(sb: LocalSandbox, rel: str) -> bytes:
    assert sb.host_path is not None
    return (sb.host_path / rel).read_bytes()


def test_replaces_exactly_the_matched_lines(sandbox):
    res = apply_edit(
        sandbox, Edit("pkg/mod.py", "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n")
    )
    assert res.ok, res.message
    assert read(sandbox, "pkg/mod.py") == MOD.replace("return a - b", "return a + b", 1).encode()
    assert "lines 1-2" in res.message


def test_shell_metacharacters_are_written_literally(sandbox):
    new = "    return f'$(touch pwned)' + \"`id`\" + '\\n' # $HOME ${x} !!\n"
    res = apply_edit(sandbox, Edit("pkg/mod.py", "def sub(a, b):\n    return a - b\n", "def sub(a, b):\n" + new))
    assert res.ok, res.message
    assert read(sandbox, "pkg/mod.py").decode().endswith(new)
    assert not (sandbox.host_path / "pwned").exists()


def test_no_match_changes_nothing_and_shows_the_closest_lines(sandbox):
    res = apply_edit(sandbox, Edit("pkg/mod.py", "def add(x, y):\n    return x - y\n", "pass\n"))
    assert not res.ok
    assert "does not match" in res.message and "No change made" in res.message
    assert "     1 | def add(a, b):" in res.message, res.message
    assert read(sandbox, "pkg/mod.py") == MOD.encode()


def test_whitespace_only_mismatch_is_named(sandbox):
    res = apply_edit(sandbox, Edit("pkg/mod.py", "def sub(a, b):\n  return a - b\n", "x\n"))
    assert not res.ok
    assert "if whitespace is ignored" in res.message and "lines 5-6" in res.message, res.message
    assert "     6 |     return a - b" in res.message
    assert read(sandbox, "pkg/mod.py") == MOD.encode()


def test_several_matches_change_nothing_and_give_the_count(sandbox):
    res = apply_edit(sandbox, Edit("pkg/mod.py", "    return a - b\n", "    return 0\n"))
    assert not res.ok
    assert "matches 2 places" in res.message and "2, 6" in res.message, res.message
    assert read(sandbox, "pkg/mod.py") == MOD.encode()


def test_match_is_by_whole_lines(sandbox):
    # "return a - b" occurs twice as a line ending, but "a - b" alone starts no line
    res = apply_edit(sandbox, Edit("pkg/mod.py", "a - b\n", "a + b\n"))
    assert not res.ok and "does not match" in res.message


def test_empty_search_creates_a_new_file_in_new_folders(sandbox):
    res = apply_edit(sandbox, Edit("new/dir/file.py", "", "x = 1\n"))
    assert res.ok, res.message
    assert read(sandbox, "new/dir/file.py") == b"x = 1\n"
    assert "Created new/dir/file.py (1 line)" in res.message
    refused = apply_edit(sandbox, Edit("pkg/mod.py", "", "x = 1\n"))
    assert not refused.ok and "already exists" in refused.message
    assert read(sandbox, "pkg/mod.py") == MOD.encode()


def test_missing_file_and_directory_are_errors(sandbox):
    missing = apply_edit(sandbox, Edit("pkg/nope.py", "x\n", "y\n"))
    assert not missing.ok and "does not exist" in missing.message
    folder = apply_edit(sandbox, Edit("pkg", "x\n", "y\n"))
    assert not folder.ok and "is a directory" in folder.message


def test_missing_final_newline_and_crlf_and_undecodable_bytes_survive(sandbox):
    assert apply_edit(sandbox, Edit("noeol.txt", "last\n", "LAST\n")).ok
    assert read(sandbox, "noeol.txt") == b"first\nLAST"
    assert apply_edit(sandbox, Edit("crlf.txt", "two\n", "2\n")).ok
    assert read(sandbox, "crlf.txt") == b"one\r\n2\r\n"
    assert apply_edit(sandbox, Edit("mixed.txt", "c\n", "C\n")).ok  # as written first, CRLF only if needed
    assert apply_edit(sandbox, Edit("mixed.txt", "b\n", "B\n")).ok
    assert read(sandbox, "mixed.txt") == b"a\nB\r\nC\n"
    assert apply_edit(sandbox, Edit("latin1.txt", "keep\n", "kept\n")).ok
    assert read(sandbox, "latin1.txt") == b"caf\xe9\nkept\n"


def test_symlink_inside_the_workspace_is_followed(sandbox):
    res = apply_edit(sandbox, Edit("alias.py", "def add(a, b):\n", "def plus(a, b):\n"))
    assert res.ok, res.message
    assert read(sandbox, "pkg/mod.py").startswith(b"def plus(a, b):\n")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "`..`"),
        ("pkg/../../x", "`..`"),
        ("/etc/passwd", "absolute"),
        ("/workspace/pkg/mod.py", "absolute"),
        ("escape_dir/secret.txt", "outside the repository"),
        ("escape_dir/new.txt", "outside the repository"),
        ("escape_file.txt", "outside the repository"),
        ("pkg/rel_escape/secret.txt", "outside the repository"),
    ],
)
def test_paths_leading_outside_are_refused(sandbox, outside, path, reason):
    for search in ("secret\n", ""):
        res = apply_edit(sandbox, Edit(path, search, "owned\n"))
        assert not res.ok and "refused" in res.message and reason in res.message, res.message
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert not (sandbox.host_path.parent / "x").exists()


def test_check_path_hints_the_relative_form():
    assert "'pkg/mod.py'" in check_path("/workspace/pkg/mod.py")
    assert check_path("pkg/./mod.py") is None
    assert check_path("") is not None


def test_same_edits_in_the_docker_sandbox(tmp_path):
    """The edit helper runs inside the sandbox, so docker behaves as local (skipped without a daemon)."""
    from tasks.sandbox.docker import DockerSandbox

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_bytes(MOD.encode() + b"# \xff no newline")
    try:
        box = DockerSandbox()
    except SandboxError as exc:
        if IN_CI:
            pytest.fail(f"CI=true but the docker sandbox is unavailable: {exc}")
        pytest.skip(f"docker sandbox unavailable: {exc}")
    try:
        box.start(src)
        assert box.run("ln -s ../.. pkg/up && ln -s /etc etc_link", timeout=10).ok  # the agent's own symlinks
        assert apply_edit(box, Edit("pkg/mod.py", "def add(a, b):\n", "def plus(a, b):\n")).ok
        assert apply_edit(box, Edit("pkg/new.py", "", "n = 1\n")).ok
        for path in ("pkg/up/etc/hosts", "etc_link/passwd", "../x", "/etc/hosts"):
            res = apply_edit(box, Edit(path, "", "owned\n"))
            assert not res.ok and "refused" in res.message, res.message
        got = base64.b64decode(box.run("base64 -w0 pkg/mod.py", timeout=10).output)
        assert got == MOD.replace("def add", "def plus").encode() + b"# \xff no newline"
        assert "+n = 1" in box.diff()
    finally:
        box.close()
