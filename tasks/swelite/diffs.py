"""Git-style unified diffs between file versions, and removal of held-out test functions.

Patches are produced here (bug_patch, gold patch, test_patch) with `a/` and `b/` prefixes so that
`git apply` and SWE-bench tooling take them unchanged.
"""

from __future__ import annotations

import ast
import difflib
import re


def file_diff(path: str, old: str, new: str) -> str:
    """Unified diff of one file (3 lines of context), in `git diff` form; '' when equal."""
    if old == new:
        return ""
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
            n=3,
        )
    )
    fixed = [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines]
    return f"diff --git a/{path} b/{path}\n" + "".join(fixed)


def remove_functions(source: str, names: set[str]) -> str:
    """`source` without the module-level functions in `names` (decorators included).

    Blank lines left behind are collapsed to the two that PEP 8 puts between functions, so the
    held-out file looks hand-written and the test_patch that restores it stays minimal.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.update(range(first - 1, node.end_lineno))
            found.add(node.name)
    missing = names - found
    if missing:
        raise ValueError(f"test function(s) {sorted(missing)} not found at module level")
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    kept = re.sub(r"\n{4,}", "\n\n\n", kept)
    return kept.rstrip("\n") + "\n"
