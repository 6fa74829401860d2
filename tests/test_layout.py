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


# ---- no circles between files -------------------------------------------------------------------------------------


# Circles another branch is removing: each entry is one circle's files. Empty this list when that branch lands.
def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of `packages` under `root` (the fixture projects left out)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if path.is_relative_to(FIXTURES):
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path, packages: list[str]) -> dict[str, dict[str, int]]:
    """file -> {project file it imports: the first line that does}, relative paths.

    Every import statement counts, wherever it stands: one inside a function only moves a circle from import time to
    call time (that is how a circle hides), and one in a TYPE_CHECKING block still ties the two files' types.
    `from pkg import name` is an arrow to the module pkg.name when there is one, else to pkg; `import a.b` one to a.b
    (not to the packages above it, which Python runs first but which are no part of the tie).
    """
    modules = module_files(root, packages)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]  # the package it is in
        arrows: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != module:
                    key = modules[target].relative_to(root).as_posix()
                    arrows[key] = min(arrows.get(key, node.lineno), node.lineno)
        graph[path.relative_to(root).as_posix()] = arrows
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The sets of files that reach each other through imports (strongly connected, more than one file; Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, {}):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: set[str] = set()
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(circle: set[str], graph: dict[str, dict[str, int]]) -> str:
    """One circle as the arrows that tie it, `file:line -> file`."""
    ties = [f"{a}:{line} -> {b}" for a in sorted(circle) for b, line in sorted(graph[a].items()) if b in circle]
    return "; ".join(ties)


def test_no_files_import_each_other_in_a_circle():
    packages = [name for name, _ in layout()]
    graph = import_graph(PROJECT, packages)
    found = circles(graph)
    new = [describe(c, graph) for c in found]
    assert not new, "files that import each other (move what both need into a file of its own):\n" + "\n".join(new)


def test_the_circle_check_finds_a_planted_circle_wherever_its_imports_stand(tmp_path):
    # A negative control: a circle of three files (one arrow inside a function, one relative, one through the
    # package's face) beside a one-way chain, which is no circle.
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("import os\nfrom pkg.sub import b\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .c import C\n    return C\n")
    (pkg / "sub" / "c.py").write_text("from pkg import A\nC = A\n")
    (pkg / "low.py").write_text("X = 1\n")
    (pkg / "high.py").write_text("from pkg.low import X\nimport pkg.sub.c\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg/sub/b.py"] == {"pkg/sub/c.py": 2}
    found = circles(graph)
    assert found == [{"pkg/__init__.py", "pkg/a.py", "pkg/sub/b.py", "pkg/sub/c.py"}]
    assert describe(found[0], graph) == (
        "pkg/__init__.py:1 -> pkg/a.py; pkg/a.py:2 -> pkg/sub/b.py; pkg/sub/b.py:2 -> pkg/sub/c.py; "
        "pkg/sub/c.py:1 -> pkg/__init__.py"
    )
