"""Run tests check by check: every assertion (or `pytest.raises` block) of a test, each on its own.

pytest stops a test at its first failing assertion, so it cannot say how many of a test's checks a bug
breaks. This module runs each statement of a test function separately (setup statements in order,
their errors swallowed) and reports, per check, whether it passed. Its source is shipped as a script
into the build sandbox (it imports nothing from `tasks`), and `tasks.swelite.checks` imports it for
the one rule both sides must share: which statements are checks.
"""

from __future__ import annotations

import ast
import json

MARK = "SPECTUNE_CHECKS "  # prefix of the one output line that carries the result


def is_check(stmt: ast.stmt) -> bool:
    """A check: an assert, a `with pytest.raises(...)` block, or a compound statement holding an assert."""
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "raises"
        for item in stmt.items
    ):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False  # a helper defined in the test; asserts inside it run only when it is called
    return isinstance(stmt, ast.stmt) and any(isinstance(n, ast.Assert) for n in ast.walk(stmt))


def run(wanted: dict[str, list[str]]) -> dict[str, list[bool]]:
    """{node id: [passed, ...] per check in source order} for the tests `wanted` ({file: [test names]})."""
    result: dict[str, list[bool]] = {}
    for path, names in wanted.items():
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        module_ns: dict = {"__name__": "spectune_checks"}
        top = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))]
        for stmt in top:  # one by one: a module-level name the bug breaks fails only the checks that use it
            try:
                exec(compile(ast.Module([stmt], []), path, "exec"), module_ns)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
        for fn in tree.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name in names):
                continue
            ns = dict(module_ns)  # the test's locals live in a copy, as each test gets its own frame
            outcomes = []
            for stmt in fn.body:
                try:
                    exec(compile(ast.Module([stmt], []), path, "exec"), ns)
                    ok = True
                except KeyboardInterrupt:
                    raise
                except BaseException:  # pytest.raises fails with a BaseException (pytest's Failed); SystemExit too
                    ok = False  # a failing check, or a setup step the bug breaks: later checks show it
                if is_check(stmt):
                    outcomes.append(ok)
            result[f"{path}::{fn.name}"] = outcomes
    return result


def script(wanted: dict[str, list[str]]) -> str:
    """This module as a standalone script that prints MARK + the JSON result of run(wanted)."""
    with open(__file__) as fh:
        source = fh.read()
    return f"{source}\nprint(MARK + json.dumps(run({json.dumps(wanted)})))\n"


def parse(output: str) -> dict[str, list[bool]] | None:
    """The result printed by `script`, or None when the run did not get that far."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return None
