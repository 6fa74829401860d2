"""The clean swe-lite projects on disk, their content hashes, and task workspaces built from them.

A task's workspace is the clean project with the instance's `bug_patch` applied and the tests that
decide success removed (`test_patch` reversed), as in SWE-bench where those tests arrive only at
evaluation. `base_commit` is the content hash of the clean project, so a changed project is caught.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from common.errors import ConfigError
from tasks.patching import apply_patch
from tasks.schema import Instance

PROJECTS_DIR = Path(__file__).resolve().parents[1] / "projects"
_SKIP = {"__pycache__", ".pytest_cache", ".git"}


def list_projects() -> list[str]:
    """Names of the bundled projects."""
    return sorted(p.name for p in PROJECTS_DIR.iterdir() if p.is_dir() and p.name not in _SKIP)


def project_dir(name: str) -> Path:
    """Folder of one project; ValueError naming the valid ones if unknown."""
    path = PROJECTS_DIR / name
    if not path.is_dir() or name in _SKIP:
        raise ConfigError(f"unknown swe-lite project {name!r}; available: {list_projects()}")
    return path


def project_files(root: Path) -> list[Path]:
    """Files of a project, relative, sorted; caches and bytecode left out."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not (set(rel.parts) & _SKIP) and path.suffix != ".pyc":
            out.append(rel)
    return out


def content_hash(root: Path) -> str:
    """40-hex digest of the project's file names and bytes (stands in for a git commit sha)."""
    h = hashlib.sha1()
    for rel in project_files(root):
        h.update(rel.as_posix().encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def mutation_site(instance: Instance) -> tuple[str, str, int]:
    """(project, file, line) of the mutated line, read from the bug_patch (splits never share one)."""
    path, old_line, new_line = "", 0, 0
    for line in instance.bug_patch.splitlines():
        if line.startswith("+++ b/"):
            path = line[6:]
        elif line.startswith("@@"):
            old, new = line.split()[1:3]
            old_line, new_line = int(old[1:].split(",")[0]), int(new[1:].split(",")[0])
        elif line.startswith("-") and not line.startswith("---"):
            return instance.repo, path, old_line
        elif line.startswith("+") and not line.startswith("+++"):
            return instance.repo, path, new_line
        elif line.startswith(" "):
            old_line, new_line = old_line + 1, new_line + 1
    raise ValueError(f"{instance.instance_id}: bug_patch has no changed line")


def copy_project(name: str, dest: Path) -> Path:
    """Copy a clean project (no caches) into `dest`."""
    src = project_dir(name)
    for rel in project_files(src):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    return dest


def materialize(instance: Instance, dest: Path) -> Path:
    """Build the agent's starting workspace for a swe-lite instance in `dest`."""
    src = project_dir(instance.repo)
    actual = content_hash(src)
    if actual != instance.base_commit:
        raise ConfigError(
            f"{instance.instance_id}: project {instance.repo!r} changed since the suite was built "
            f"(hash {actual[:12]} != base_commit {instance.base_commit[:12]}); rebuild with "
            "`python -m tasks.build swe-lite`"
        )
    dest.mkdir(parents=True, exist_ok=True)
    copy_project(instance.repo, dest)
    apply_patch(dest, instance.bug_patch)
    apply_patch(dest, instance.test_patch, reverse=True)
    return dest
