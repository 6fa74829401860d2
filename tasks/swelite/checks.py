"""Which checks an issue shows, and which failing checks it keeps hidden (swe-lite v2).

An issue's reproduction is cut from one failing test. In v1 it was the whole test, so a patch that
answers exactly the snippet's calls (a lookup table) could pass every instance whose only failing
checks were the shown ones. In v2 the snippet shows only some failing checks, and an instance is kept
only when the hidden tests hold at least as many *other* failing checks as the issue shows, each one
exercising inputs the snippet never shows:

    len(unseen) >= len(shown) >= 1
    unseen = failing checks not shown whose calls are not all in the snippet

A check's "calls" are the source text of every call in it and in the statements it depends on (the
last assignment of each name it reads, and calls made on those names before it, transitively): two
checks with the same calls ask the same question, whatever they assert about the answer.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tasks.swelite.check_runner import is_check

RULE = "unseen >= shown >= 1: hidden failing checks with calls the issue never shows, at least as many as it shows"


@dataclass(frozen=True)
class Check:
    """One check of one test: its position among the test's statements and the calls it exercises."""

    test: str  # node id, file::name
    number: int  # index among the test's checks (as check_runner reports them)
    statement: int  # index in the test function's body
    calls: frozenset[str]


def _calls(node: ast.AST) -> set[str]:
    """Source text of every call under `node` except pytest.raises itself (the check, not an input)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "raises" and isinstance(f.value, ast.Name):
                continue
            out.add(ast.unparse(n))
    return out


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stored(stmt: ast.stmt) -> set[str]:
    """Names a setup statement defines or changes: assigned names, and the receiver of a method call."""
    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        names.add(stmt.name)
    if isinstance(stmt, ast.Expr):  # cache.set("a", 1) changes `cache`
        for n in ast.walk(stmt.value):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                base = n.func.value
                while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
                    base = base.func if isinstance(base, ast.Call) else base.value
                if isinstance(base, ast.Name):
                    names.add(base.id)
    return names


def function_of(module_source: str, name: str) -> ast.FunctionDef:
    """The module-level test function `name`; ValueError if absent."""
    for node in ast.parse(module_source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ValueError(f"test {name!r} not found")


def dependencies(body: list[ast.stmt], index: int) -> list[int]:
    """Indices of the setup statements before body[index] that it depends on, transitively."""
    needed = _loaded(body[index])
    deps: list[int] = []
    for j in range(index - 1, -1, -1):
        stmt = body[j]
        if is_check(stmt):
            continue
        if _stored(stmt) & needed:
            deps.append(j)
            needed |= _loaded(stmt)
    return sorted(deps)


def checks_of(test_id: str, module_source: str) -> list[Check]:
    """The checks of one test, in order, with the calls each one exercises."""
    body = function_of(module_source, test_id.split("::", 1)[1]).body
    out = []
    for i, stmt in enumerate(body):
        if is_check(stmt):
            calls = _calls(stmt)
            for j in dependencies(body, i):
                calls |= _calls(body[j])
            out.append(Check(test_id, len(out), i, frozenset(calls)))
    return out


def snippet_statements(body: list[ast.stmt], shown: list[int]) -> list[int]:
    """Statement indices of a snippet showing the checks at `shown` (body indices): every setup step up
    to the last shown check (the state it builds may matter), the shown checks, and no other check."""
    last = max(shown)
    return [i for i in range(last + 1) if i in shown or not is_check(body[i])]


def snippet_calls(body: list[ast.stmt], statements: list[int]) -> frozenset[str]:
    """Every call the snippet made of `statements` shows."""
    out: set[str] = set()
    for i in statements:
        out |= _calls(body[i])
    return frozenset(out)


def unseen(failing: list[Check], shown: list[Check], shown_calls: frozenset[str]) -> list[Check]:
    """The failing checks not shown that exercise at least one call the snippet does not show."""
    return [c for c in failing if c not in shown and not c.calls <= shown_calls]


def choose_shown(failing: list[Check], body: list[ast.stmt]) -> tuple[list[Check], list[int]] | None:
    """The checks to show from the first test of `failing` (all from one test): the first half of its
    failing checks, else only the first, whichever keeps len(unseen) >= len(shown); with the snippet's
    statement indices. None when neither does (the instance would give its hidden checks away)."""
    first = [c for c in failing if c.test == failing[0].test]
    for k in dict.fromkeys((max(1, len(first) // 2), 1)):
        shown = first[:k]
        statements = snippet_statements(body, [c.statement for c in shown])
        if len(unseen(failing, shown, snippet_calls(body, statements))) >= len(shown):
            return shown, statements
    return None
