"""Imports run downward only: every package imports only the folders docs/architecture.md's Layout allows it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
FIXTURES = PROJECT / "tasks" / "projects"  # the agent's workload (projects it edits), not spectune's code


def layout() -> list[tuple[str, set[str]]]:
    """(folder, the folders it may import) for each package of the Layout block, lowest floor first."""
    page = (PROJECT / "docs" / "architecture.md").read_text()
    section = page[page.index("## Layout\n") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    floors: list[tuple[str, set[str]]] = []
    for line in block.splitlines():
        if entry := re.match(r"^(\w+)/ ", line):
            floors.append((entry.group(1), set()))
        elif allowed := re.match(r"^\s+imports: (.*)$", line):
            names = allowed.group(1).strip()
            floors[-1][1].update(() if names == "nothing of spectune" else names.split(", "))
    return [(name, allowed) for name, allowed in floors if (PROJECT / name / "__init__.py").exists()]


def imported_packages(package: str, names: set[str], root: Path = PROJECT) -> dict[str, list[str]]:
    """The other spectune packages `package` imports -> where (file:line), every import statement counted."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        if path.is_relative_to(FIXTURES):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in names and top != package:
                    found.setdefault(top, []).append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_layout_lists_every_package_once_with_what_it_may_import():
    packages = {p.name for p in PROJECT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"}
    listed = [name for name, _ in layout()]
    assert sorted(listed) == sorted(packages)
    assert len(set(listed)) == len(listed)


def test_each_package_may_import_only_packages_on_floors_below_it():
    below: set[str] = set()
    for name, allowed in layout():
        assert allowed <= below, f"{name}/ is allowed {sorted(allowed - below)}, listed above it (docs/architecture.md)"
        below.add(name)


def test_no_package_imports_one_it_is_not_allowed():
    floors = layout()
    names = {name for name, _ in floors}
    wrong = {
        f"{name} -> {other}": where
        for name, allowed in floors
        for other, where in imported_packages(name, names).items()
        if other not in allowed
    }
    assert not wrong, f"imports running up or sideways (docs/architecture.md, Layout): {wrong}"


def test_the_reader_sees_imports_hidden_in_functions_and_type_checking_blocks(tmp_path):
    # A negative control: an upward import the check must catch, wherever in the file it stands.
    (tmp_path / "low").mkdir()
    (tmp_path / "low" / "__init__.py").write_text("")
    (tmp_path / "low" / "deep.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import low.other\n"
        "if TYPE_CHECKING:\n    from high.types import T\n"
        "def f():\n    import high.run as r\n    from . import sibling\n    return r\n"
    )
    found = imported_packages("low", {"low", "high"}, tmp_path)
    assert found == {"high": ["low/deep.py:4", "low/deep.py:6"]}
