"""Issue texts a user could have written: a reproduction, what they expected, what they got.

The reproduction is a failing test turned into a script (assertions become prints, expected
exceptions become try/except), run on the clean project for "expected" and on the buggy one for
"got"; since swe-lite v2 it keeps only some of the test's statements (tasks/swelite/checks.py picks
them), so the hidden tests check more than the issue shows. For a crash, "got" is the traceback a
user would paste. The fix is never described.
"""

from __future__ import annotations

import ast
import hashlib
import re
import textwrap

from tasks.pytest_shapes import pytest_raises_call

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt))\b")


class _AssertToPrint(ast.NodeTransformer):
    """assert x == y -> print(x); assert cond -> print(cond); pytest.raises -> try/except/else."""

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        shown = (
            test.left
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            else test
        )
        return ast.copy_location(ast.Expr(ast.Call(ast.Name("print", ast.Load()), [shown], [])), node)

    def visit_With(self, node: ast.With) -> ast.stmt:
        self.generic_visit(node)
        item = pytest_raises_call(node)
        if item is None or not item.args:
            return node
        report = ast.parse('print(f"{type(exc).__name__}: {exc}")').body[0]
        no_error = ast.parse('print("no exception raised")').body[0]
        handler = ast.ExceptHandler(type=item.args[0], name="exc", body=[report])
        return ast.copy_location(ast.Try(body=node.body, handlers=[handler], orelse=[no_error], finalbody=[]), node)


def repro_script(test_module: str, test_name: str, statements: list[int] | None = None) -> str:
    """A standalone script reproducing one test: its module's imports (pytest dropped) and body.

    `statements` (indices into the test's body) keeps only those statements: an issue that shows
    part of a test (swe-lite v2 shows some of its failing checks and keeps the rest hidden).
    """
    tree = ast.parse(test_module)
    imports = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        and not any(a.name == "pytest" for a in n.names)
        and not (isinstance(n, ast.ImportFrom) and n.module in ("pytest", "__future__"))
    ]
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == test_name), None)
    if fn is None:
        raise ValueError(f"test {test_name!r} not found")
    if fn.args.args:
        raise ValueError(f"test {test_name!r} takes fixtures; cannot turn it into a script")
    kept = fn.body if statements is None else [fn.body[i] for i in statements]
    body = [_AssertToPrint().visit(stmt) for stmt in kept]
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    used = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    kept_imports = []
    for imp in imports:  # a user's snippet imports what it uses, not the whole test module's list
        names = [a for a in imp.names if (a.asname or a.name).split(".")[0] in used]
        if names:
            imp.names = names
            kept_imports.append(imp)
    module = ast.Module(body=[*kept_imports, *body], type_ignores=[])
    ast.fix_missing_locations(module)
    return ast.unparse(module) + "\n"


_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")


def stable_addresses(output: str) -> str:
    """`output` with memory addresses (`<object at 0x7f...>`) renumbered in order of appearance.

    Addresses change from run to run; renumbered, a rebuilt suite is byte-identical, and an object
    printed twice still shows one address.
    """
    seen: dict[str, str] = {}
    return _ADDRESS.sub(lambda m: seen.setdefault(m[0], f"0x7f00000{len(seen) + 1:02d}000"), output)


def innermost_frame(output: str) -> tuple[str, int, str] | None:
    """(file, line, exception type) of the innermost traceback frame in `output`, if it crashed."""
    frame: tuple[str, int] | None = None
    for line in output.splitlines():
        m = _FRAME.match(line)
        if m:
            frame = (m["path"], int(m["line"]))
            continue
        e = _EXC.match(line)
        if e and frame is not None:
            return frame[0], frame[1], e["exc"]
    return None


_TITLES_CRASH = (
    "{exc} when calling {func}()",
    "{func}() crashes with {exc}",
    "Unexpected {exc} from {func}()",
)
_TITLES_VALUE = (
    "{func}() returns a wrong result",
    "Wrong output from {func}()",
    "{func}() gives an unexpected value",
)
_INTROS = (
    "I ran into this while using `{repo}`. Running the snippet below:",
    "Minimal reproduction with `{repo}`:",
    "The following code does not behave as documented in `{repo}`:",
)
_CLOSINGS = (
    "",
    "This worked as I expected in my head at least; could you take a look?",
    "Am I missing something, or is this a bug?",
)


def _pick(options: tuple[str, ...], key: str, salt: str) -> str:
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return options[digest[0] % len(options)]


def called_function(script: str, package: str) -> str:
    """The first function from `package` the script calls (for the title), else 'the library'."""
    tree = ast.parse(script)
    imported = {
        a.asname or a.name
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == package
        for a in n.names
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name and name != "print" and (name in imported or isinstance(f, ast.Attribute)):
                return name
    return "the library"


def compose_issue(key: str, repo: str, package: str, script: str, expected: str, got: str, crashed: bool) -> str:
    """The issue text: title, reproduction, expected vs actual (a traceback for crashes)."""
    func = called_function(script, package)
    exc = innermost_frame(got)[2] if crashed and innermost_frame(got) else "an error"
    title = _pick(_TITLES_CRASH if crashed else _TITLES_VALUE, key, "title").format(func=func, exc=exc)
    intro = _pick(_INTROS, key, "intro").format(repo=repo)
    closing = _pick(_CLOSINGS, key, "closing")
    got_label = "Instead it fails with:" if crashed else "Instead I get:"
    parts = [
        title,
        "",
        intro,
        "",
        "```python\n" + script.rstrip("\n") + "\n```",
        "",
        "I expected:",
        "",
        "```\n" + expected.rstrip("\n") + "\n```",
        "",
        got_label,
        "",
        "```\n" + textwrap.dedent(got).rstrip("\n") + "\n```",
    ]
    if closing:
        parts += ["", closing]
    return "\n".join(parts) + "\n"
