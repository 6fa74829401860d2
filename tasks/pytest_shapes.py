"""Shapes of pytest code that both the suite builder and the grading oracle recognise in a test's syntax tree."""

from __future__ import annotations

import ast


def pytest_raises_call(node: ast.AST) -> ast.Call | None:
    """The `pytest.raises(...)` call of `with pytest.raises(...) [as x]:` (one item), else None."""
    if not (isinstance(node, ast.With) and len(node.items) == 1):
        return None
    call = node.items[0].context_expr
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "raises"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "pytest"
    ):
        return call
    return None
