"""The patch checks the evaluation runs before grading: what a patch really wrote (added_lines), binary hunks on
source files, `.gitattributes` and pyproject.toml as test infrastructure, stray symlinks, the file-count limit.

Every patch is a real `git diff --cached --binary` made in a temporary repository (as the sandboxes make the
agent's final diff), except where a hostile hand-written patch is the point. No sandbox runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tasks.patching as patching
from tasks.patching import (
    MAX_PATCH_FILES,
    PatchError,
    TooManyFilesError,
    added_lines,
    apply_patch,
    binary_sources,
    check_patch,
    drop_symlinks,
    patch_paths,
    touched_test_infrastructure,
)
from tasks.suites import load_suite
from tasks.swelite.projects import project_dir

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-c", "core.quotePath=true"]
Files = dict[str, "str | bytes | None"]


def write(root: Path, files: Files) -> None:
    """Write `files` under `root` (str: text, bytes: as is, None: delete)."""
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def make_diff(tmp_path: Path, base: Files, change: Files, links: dict[str, str] | None = None, text=False):
    """(the agent's diff from `base` to `base` + `change` + symlinks `links`, a plain folder holding `base`)."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    write(repo, base)
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base", "--allow-empty"], cwd=repo, check=True)
    write(repo, change)
    for rel, target in (links or {}).items():
        os.symlink(target, repo / rel)
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    flags = ["--no-renames", "--binary", *(["--text"] if text else [])]
    diff = subprocess.run([*GIT, "diff", "--cached", *flags], cwd=repo, check=True, capture_output=True).stdout
    before = tmp_path / "before"
    before.mkdir()
    write(before, base)
    return diff.decode("utf-8", errors="surrogateescape"), before


def applied(tmp_path: Path, before: Path, patch: str) -> Path:
    """A copy of `before` with `patch` applied."""
    after = tmp_path / "after"
    shutil.copytree(before, after, symlinks=True)
    apply_patch(after, patch)
    return after


def plus_lines(patch: str) -> list[str]:
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]


# --- added_lines: what the patch wrote, read from the files ---------------------------------------------------


def test_added_lines_of_a_plain_edit(tmp_path):
    base = {"pkg/a.py": "a = 1\nb = 2\nc = 3\n"}
    patch, before = make_diff(tmp_path, base, {"pkg/a.py": "a = 1\nb = 20\nc = 3\nd = 4\na = 1\n"})
    after = applied(tmp_path, before, patch)
    paths = check_patch(patch)
    # a real line diff: `a = 1` is added a second time even though the file had it
    assert added_lines(before, after, paths) == {"pkg/a.py": ["b = 20", "d = 4", "a = 1"]}
    assert added_lines(before, after, paths)["pkg/a.py"] == plus_lines(patch)


def test_added_lines_reads_a_git_binary_patch_of_a_python_file(tmp_path):
    """`.gitattributes` with `*.py binary`: the diff is base85, its `+` lines say nothing; the file says it all."""
    base = {".gitattributes": "*.py binary\n", "pkg/a.py": "def f():\n    return 1\n"}
    evil = "import subprocess\n\n\ndef f():\n    subprocess.run(['id'])\n    return 1\n"
    patch, before = make_diff(tmp_path, base, {"pkg/a.py": evil})
    assert "GIT binary patch" in patch
    assert not any("subprocess" in line for line in plus_lines(patch))
    after = applied(tmp_path, before, patch)
    lines = added_lines(before, after, check_patch(patch))["pkg/a.py"]
    assert "import subprocess" in lines
    assert "    subprocess.run(['id'])" in lines
    assert binary_sources(patch, after, check_patch(patch), before) == ["pkg/a.py"]


def test_added_lines_of_new_deleted_and_quoted_files(tmp_path):
    base = {"pkg/old.py": "x = 1\n", "pkg/keep.py": "y = 2\n"}
    change = {"pkg/old.py": None, "pkg/new.py": "import os\nz = 3\n", "pkg/\u00e4 b.py": "w = 4\n"}
    patch, before = make_diff(tmp_path, base, change)
    assert '"a/pkg/\\303\\244 b.py"' in patch  # git quotes the path
    after = applied(tmp_path, before, patch)
    assert added_lines(before, after, check_patch(patch)) == {
        "pkg/new.py": ["import os", "z = 3"],
        "pkg/old.py": [],
        "pkg/\u00e4 b.py": ["w = 4"],
    }


def test_added_lines_reads_a_declared_source_encoding_and_python_line_ends(tmp_path):
    """Python runs `# coding: utf-7` source, where `+AG8Acw-` is `os`; and a lone \\r ends a line."""
    source = b"# coding: utf-7\n+AG8Acw-.system('id')\n"
    assert source.decode("utf-7").splitlines()[1] == "os.system('id')"
    patch, before = make_diff(tmp_path, {"pkg/a.py": "x = 1\n"}, {"pkg/u.py": source, "pkg/a.py": "x = 1\ry = 2\n"})
    after = applied(tmp_path, before, patch)
    lines = added_lines(before, after, check_patch(patch))
    assert "os.system('id')" in lines["pkg/u.py"]
    assert "+AG8Acw-.system('id')" in lines["pkg/u.py"]
    assert lines["pkg/a.py"] == ["x = 1", "y = 2"]


def test_added_lines_leaves_out_binary_files_and_reads_a_binary_file_turned_text_whole(tmp_path):
    base = {"data/blob": b"\x00\x01\x02line\n", "img.png": b"\x89PNG\x00\x00"}
    patch, before = make_diff(tmp_path, base, {"data/blob": "import os\n", "img.png": b"\x89PNG\x00\x01"})
    after = applied(tmp_path, before, patch)
    assert added_lines(before, after, check_patch(patch)) == {"data/blob": ["import os"]}


# --- binary hunks on text and source files ---------------------------------------------------------------------


def test_binary_hunk_on_a_source_file_is_named_on_a_real_binary_file_not(tmp_path):
    base = {".gitattributes": "*.py binary\nnotes binary\n", "pkg/a.py": "x = 1\n", "notes": "hello\n"}
    change = {"pkg/a.py": "x = 2\n", "notes": "hello again\n", "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"}
    patch, before = make_diff(tmp_path, base, change)
    assert patch.count("GIT binary patch") == 3
    after = applied(tmp_path, before, patch)
    paths = check_patch(patch)
    # .py by its suffix, `notes` because it holds text (no NUL bytes); the PNG is binary and may be
    assert binary_sources(patch, after, paths, before) == ["notes", "pkg/a.py"]
    assert binary_sources(patch, after) == ["notes", "pkg/a.py"]


def test_only_a_real_binary_file_passes(tmp_path):
    patch, before = make_diff(tmp_path, {"img.png": b"\x89PNG\x00\x00"}, {"img.png": b"\x89PNG\x00\x01\x02"})
    assert "GIT binary patch" in patch
    after = applied(tmp_path, before, patch)
    assert binary_sources(patch, after, check_patch(patch), before) == []


def test_binary_sources_also_names_a_source_file_with_nul_bytes_written_as_text(tmp_path):
    patch, before = make_diff(tmp_path, {"pkg/a.py": "x = 1\n"}, {"pkg/a.py": "x = 1\n\x00y = 2\n"}, text=True)
    assert "GIT binary patch" not in patch
    after = applied(tmp_path, before, patch)
    paths = check_patch(patch)
    assert "pkg/a.py" not in added_lines(before, after, paths)  # binary: not read as text ...
    assert binary_sources(patch, after, paths, before) == ["pkg/a.py"]  # ... so named here


def test_binary_sources_leaves_deleted_files_and_binary_turned_text_files_with_before(tmp_path):
    base = {".gitattributes": "*.py binary\n", "pkg/gone.py": "x = 1\n", "data/blob": b"\x00\x01"}
    patch, before = make_diff(tmp_path, base, {"pkg/gone.py": None, "data/blob": "now text\n"})
    after = applied(tmp_path, before, patch)
    paths = check_patch(patch)
    assert binary_sources(patch, after, paths, before) == []  # nothing written to gone.py; blob read whole
    assert binary_sources(patch, after, paths) == ["data/blob"]  # without `before`: text written as binary


# --- test infrastructure ---------------------------------------------------------------------------------------


def test_gitattributes_and_gitconfig_are_test_infrastructure(tmp_path):
    patch, before = make_diff(tmp_path, {"pkg/a.py": "x = 1\n"}, {".gitattributes": "*.py binary\n"})
    after = applied(tmp_path, before, patch)
    assert touched_test_infrastructure(check_patch(patch), before, after) == [".gitattributes"]
    paths = ["pkg/.gitattributes", ".gitconfig", "pkg/a.py"]
    assert touched_test_infrastructure(paths, before, after) == ["pkg/.gitattributes", ".gitconfig"]


@pytest.mark.parametrize(
    ("base", "change", "counts"),
    [
        ({}, {"pyproject.toml": '[project]\nname = "x"\n'}, False),
        ({}, {"pyproject.toml": '[project]\nname = "x"\n\n[tool.ruff]\nline-length = 99\n'}, False),
        ({"pyproject.toml": '[project]\nname = "x"\n'}, {"pyproject.toml": '[project]\nname = "y"\n'}, False),
        ({"pyproject.toml": '[project]\nname = "x"\n'}, {"pyproject.toml": None}, False),
        ({}, {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p evil"\n'}, True),
        ({}, {"sub/pyproject.toml": "[tool.pytest]\nx = 1\n"}, True),
        ({"pyproject.toml": "[tool.pytest.ini_options]\nx = 1\n"}, {"pyproject.toml": None}, True),
        (
            {"pyproject.toml": "[tool.pytest.ini_options]\nx = 1\n"},
            {"pyproject.toml": "[tool.pytest.ini_options]\n"},
            True,
        ),
        ({}, {"pyproject.toml": "this is [not toml\n"}, True),
    ],
)
def test_pyproject_counts_only_when_its_pytest_tables_change(tmp_path, base, change, counts):
    patch, before = make_diff(tmp_path, {"pkg/a.py": "x = 1\n", **base}, change)
    after = applied(tmp_path, before, patch)
    paths = check_patch(patch)
    assert touched_test_infrastructure(paths, before, after) == (paths if counts else [])


# --- stray symlinks --------------------------------------------------------------------------------------------


def test_drop_symlinks_keeps_the_fix_applicable_and_names_the_links(tmp_path):
    base = {"pkg/a.py": "def f():\n    return 1\n", "pkg/old_link_target.py": "y = 1\n"}
    fix = {"pkg/a.py": "def f():\n    return 2\n"}
    patch, before = make_diff(tmp_path, base, fix, links={"etc_link": "/etc", "pkg/alias.py": "a.py"})
    assert patch.count("new file mode 120000") == 2
    with pytest.raises(PatchError, match="symbolic link"):
        check_patch(patch)
    kept, dropped = drop_symlinks(patch)
    assert dropped == ["etc_link", "pkg/alias.py"]
    assert "120000" not in kept and "diff --git a/pkg/a.py b/pkg/a.py" in kept
    assert check_patch(kept, before) == ["pkg/a.py"]
    after = applied(tmp_path, before, kept)
    assert (after / "pkg/a.py").read_text() == fix["pkg/a.py"]
    assert not any(p.is_symlink() for p in after.rglob("*"))
    assert drop_symlinks(kept) == (kept, [])  # nothing left to drop: the patch comes back as it was


def test_a_deleted_or_retyped_symlink_is_dropped_too(tmp_path):
    repo_base = {"pkg/a.py": "x = 1\n", "pkg/b.py": "y = 1\n"}
    make_diff(tmp_path, repo_base, {}, links={"lnk": "pkg/a.py", "pkg/c.py": "b.py"})
    # a later diff from that state: delete `lnk`, turn pkg/c.py into a regular file
    repo = tmp_path / "repo"
    subprocess.run([*GIT, "commit", "-qm", "links"], cwd=repo, check=True)
    (repo / "lnk").unlink()
    (repo / "pkg/c.py").unlink()
    (repo / "pkg/c.py").write_text("z = 1\n")
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    later = subprocess.run([*GIT, "diff", "--cached", "--binary"], cwd=repo, check=True, capture_output=True, text=True)
    kept, dropped = drop_symlinks(later.stdout)
    assert dropped == ["lnk", "pkg/c.py"]
    assert kept == ""  # the new regular pkg/c.py goes with its link: the path stays as it was
    patch, before = make_diff(tmp_path / "3", {"pkg/a.py": "x = 1\n"}, {"pkg/a.py": None, "pkg/b.py": "y\n"})
    os.symlink("b.py", tmp_path / "3/repo/pkg/a.py")
    subprocess.run([*GIT, "add", "-A"], cwd=tmp_path / "3/repo", check=True)
    patch = subprocess.run([*GIT, "diff", "--cached", "HEAD"], cwd=tmp_path / "3/repo", capture_output=True, text=True)
    kept, dropped = drop_symlinks(patch.stdout)
    assert dropped == ["pkg/a.py"]  # a file turned into a link: both halves dropped, the file stays
    after = applied(tmp_path / "3", before, kept)
    assert (after / "pkg/a.py").read_text() == "x = 1\n" and (after / "pkg/b.py").read_text() == "y\n"


def test_a_symlink_the_patch_writes_through_is_dropped_and_nothing_leaves_the_workspace(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg/a.py").write_text("x = 1\n")
    hostile = (
        "diff --git a/out b/out\nnew file mode 120000\n--- /dev/null\n+++ b/out\n@@ -0,0 +1 @@\n"
        f"+{outside}\n\\ No newline at end of file\n"
        "diff --git a/out/evil.py b/out/evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/out/evil.py\n"
        "@@ -0,0 +1 @@\n+x = 1\n"
        "diff --git a/lnk b/lnk\nnew file mode 120000\n--- /dev/null\n+++ b/lnk\n@@ -0,0 +1 @@\n"
        "+pkg\n\\ No newline at end of file\n"
        "diff --git a/lnk/a.py b/lnk/a.py\n--- a/lnk/a.py\n+++ b/lnk/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    )
    with pytest.raises(PatchError, match="symbolic link"):
        check_patch(hostile, ws)
    kept, dropped = drop_symlinks(hostile)
    assert dropped == ["out", "lnk"]
    # the hunk that needed `lnk` cannot apply without it ...
    with pytest.raises(PatchError):
        apply_patch(ws, kept)
    assert (ws / "pkg/a.py").read_text() == "x = 1\n"
    # ... and the one that wrote through `out` writes a plain file in the workspace
    only_out = drop_symlinks(hostile.split("diff --git a/lnk b/lnk")[0])[0]
    apply_patch(ws, only_out)
    assert (ws / "out/evil.py").read_text() == "x = 1\n" and not (ws / "out").is_symlink()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    "mode_line",
    [
        "new file mode 120000",
        "new file mode 0120000",
        "new file mode 120777",
        "new file mode +120000",
        "new file mode   120000",
        "new file mode 100644\nindex 0000000..1de5659 120000",
    ],
)
def test_every_spelling_of_a_symlink_mode_is_refused_and_dropped(tmp_path, mode_line):
    link = (
        f"diff --git a/y b/y\n{mode_line}\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
    )
    fix = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    with pytest.raises(PatchError, match="symbolic link"):
        check_patch(link + fix)
    kept, dropped = drop_symlinks(link + fix)
    assert (kept, dropped) == (fix, ["y"])


def test_a_patch_that_retargets_an_existing_symlink_without_modes_is_refused(tmp_path):
    (tmp_path / "target").write_text("hi")
    (tmp_path / "y").symlink_to("target")
    patch = "diff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-target\n\\ No newline at end of file\n+/etc\n"
    assert drop_symlinks(patch) == (patch, [])  # nothing in the text says symlink ...
    with pytest.raises(PatchError, match="symbolic link"):
        check_patch(patch, tmp_path)  # ... the workspace does
    assert os.readlink(tmp_path / "y") == "target"


# --- file-count limit ------------------------------------------------------------------------------------------


def new_files(n: int) -> str:
    return "".join(
        f"diff --git a/f/{i}.txt b/f/{i}.txt\nnew file mode 100644\n--- /dev/null\n+++ b/f/{i}.txt\n@@ -0,0 +1 @@\n+x\n"
        for i in range(n)
    )


def test_the_file_count_limit(tmp_path, monkeypatch):
    assert len(check_patch(new_files(3), max_files=3)) == 3
    with pytest.raises(TooManyFilesError, match="4 files, more than 3"):
        check_patch(new_files(4), max_files=3)
    assert issubclass(TooManyFilesError, PatchError)
    with pytest.raises(TooManyFilesError):
        apply_patch(tmp_path, new_files(4), max_files=3)
    assert not (tmp_path / "f").exists()
    assert len(check_patch(new_files(MAX_PATCH_FILES))) == MAX_PATCH_FILES
    assert len(check_patch(new_files(MAX_PATCH_FILES + 1), max_files=None)) == MAX_PATCH_FILES + 1

    # counted on our own parse, before git is asked
    def no_git(*args, **kwargs):
        raise AssertionError("git ran")

    monkeypatch.setattr(patching.subprocess, "run", no_git)
    with pytest.raises(TooManyFilesError, match=f"more than {MAX_PATCH_FILES}"):
        check_patch(new_files(MAX_PATCH_FILES + 1))


# --- the bundled suite's gold patches pass every new check -----------------------------------------------------


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_every_gold_patch_of_the_bundled_suite_passes_the_new_checks(tmp_path, split):
    instances = load_suite("swe-lite", split, None, None, None, "first")

    def one(n: int) -> str | None:
        inst = instances[n]
        before, after = tmp_path / f"{n}-before", tmp_path / f"{n}-after"
        for rel in {*patch_paths(inst.bug_patch), *patch_paths(inst.patch)}:
            (before / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(project_dir(inst.repo) / rel, before / rel)
        apply_patch(before, inst.bug_patch)
        kept, dropped = drop_symlinks(inst.patch)
        paths = check_patch(inst.patch, before)
        shutil.copytree(before, after)
        apply_patch(after, inst.patch)
        lines = added_lines(before, after, paths)
        problems = {
            "symlinks dropped": dropped or kept != inst.patch,
            "files over the limit": len(paths) > MAX_PATCH_FILES // 100,  # a margin of 100x at least
            "binary source hunk": binary_sources(inst.patch, after, paths, before),
            "test infrastructure": touched_test_infrastructure(paths, before, after),
            "added lines differ from the patch's": [x for v in lines.values() for x in v] != plus_lines(inst.patch),
            "not read as text": not lines or sorted(lines) != sorted(paths),  # (a fix may only delete lines)
        }
        bad = [why for why, hit in problems.items() if hit]
        return f"{inst.instance_id}: {bad}" if bad else None

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(one, range(len(instances))) if f]
    assert len(instances) > 50
    assert failures == []
