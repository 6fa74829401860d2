"""The patch checks the evaluation runs before grading: stray symlinks, unsafe paths, the file-count limit.

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
    apply_patch,
    check_patch,
    drop_symlinks,
    patch_paths,
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
        problems = {
            "symlinks dropped": dropped or kept != inst.patch,
            "files over the limit": len(paths) > MAX_PATCH_FILES // 100,  # a margin of 100x at least
            "names another file": sorted(paths) != sorted(patch_paths(inst.patch)),
        }
        bad = [why for why, hit in problems.items() if hit]
        return f"{inst.instance_id}: {bad}" if bad else None

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(one, range(len(instances))) if f]
    assert len(instances) > 50
    assert failures == []
