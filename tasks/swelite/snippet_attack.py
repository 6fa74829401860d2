"""The "snippet-only" patch: answer exactly the calls an issue shows, stay buggy everywhere else.

A swe-lite issue shows a reproduction: calls into the project and what they should print. A patch that
special-cases those calls (a lookup table from the shown arguments to the shown results, the buggy code
otherwise) fixes nothing, so it must not resolve an instance. `snippet_only_patch` builds that patch
mechanically; `snippet_only_share` grades it on many instances (`python -m tasks.validate` prints the share;
on the bundled suite it is not 0 yet: 7 of 82 dev and 26 of 122 test instances, because an issue's snippet shows
every check some single-test instances have).

How the table is made (deliberately generous to the attacker, so that a 0 is a strong result):
- The issue's snippet is run on the clean project with every call in it routed through a recorder.
  Each direct call into the project's own functions or methods (not constructors: a table cannot make
  `__init__` return something else) is recorded under its arguments as bound to the signature, defaults
  applied, as `repr`; `self`/`cls` is part of the key when its repr says what it holds (`Money('1', 'EUR')`),
  left out when it is the default `<... at 0x...>` (a key holding a memory address never matches).
  Procedures (calls that returned None) are left alone: a table answer would only drop their effect.
- The answer is what the clean project returned or raised for those arguments, rebuilt from its `repr` in
  the function's own module; kept only when that rebuilds an equal value (an exception: same type and
  message). For a printed string this is exactly the issue's "I expected" line; for other values it is
  the value whose printed form the issue shows. A key seen several times (a stateful method) replays its
  answers in order, then repeats the last.
- In the buggy project's source each recorded function is rebound, right after its definition, to a
  wrapper that answers table keys from the table and passes every other call to the buggy code.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tasks.schema import Instance
from tasks.swelite.diffs import file_diff
from tasks.swelite.projects import copy_project, materialize

MARK = "SPECTUNE_SHOWN "
_SNIPPET = re.compile(r"```python\n(.*?)```", re.S)

# Runs in the clean project: routes each call of the snippet through __shown__, which records
# (module, qualname, key) -> outcome for the project's own functions. The key code is shared with the
# wrapper below (same text), so both sides agree on what "the same arguments" means.
_KEY_SRC = """
def _snippet_key(fn, args, kwargs, method):
    import inspect
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    items = list(bound.arguments.items())
    if method:
        try:
            head = repr(items[0][1])
        except Exception:
            head = " at 0x"
        if " at 0x" in head:  # an object without a repr of its own: key on the arguments alone
            items = items[1:]
    return repr(items)
"""

_RECORDER = (
    _KEY_SRC
    + """
import inspect as _inspect
import json as _json
import sys as _sys
_RECORDS = []


def _rebuilds(text, value, module, is_exc):
    try:
        again = eval(text, vars(_sys.modules[module]))
    except Exception:
        return False
    if is_exc:
        return type(again) is type(value) and str(again) == str(value)
    try:
        return type(again) is type(value) and bool(again == value)
    except Exception:
        return False


_DUNDER = {str: "__str__", repr: "__repr__", len: "__len__", bool: "__bool__", hash: "__hash__", abs: "__abs__"}


def _own(fn):
    return (
        _inspect.isfunction(fn)
        and (getattr(fn, "__module__", "") or "").split(".")[0] == PACKAGE
        and "<locals>" not in fn.__qualname__
    )


def __shown__(f, *args, **kwargs):
    try:
        name = _DUNDER.get(f)
    except TypeError:  # an unhashable callable
        name = None
    if name and len(args) == 1 and not kwargs:  # str(x), print(x), len(x): the class's own method answers
        kind = type(args[0])
        if name == "__str__" and not _own(getattr(kind, name, None)):
            name = "__repr__"  # str() falls back to __repr__
        if _own(getattr(kind, name, None)):
            return __shown__(getattr(args[0], name))
    method = _inspect.ismethod(f)
    fn = f.__func__ if method else f
    if not _own(fn):
        return f(*args, **kwargs)
    key = _snippet_key(fn, (f.__self__, *args) if method else args, kwargs, method)
    entry = {"module": fn.__module__, "qualname": fn.__qualname__, "method": method, "key": key}
    try:
        value = f(*args, **kwargs)
    except Exception as exc:
        entry.update(kind="raise", value=repr(exc), ok=_rebuilds(repr(exc), exc, fn.__module__, True))
        _RECORDS.append(entry)
        raise
    entry.update(kind="return", value=repr(value), ok=_rebuilds(repr(value), value, fn.__module__, False))
    _RECORDS.append(entry)
    return value


def __shown_op__(name, reflected, a, b):
    # a <op> b through the operands' own methods (recorded like calls), else Python's operator
    import operator

    for obj, meth, other in ((a, name, b), (b, reflected, a)):
        if meth and getattr(type(obj), meth, None) is not None:
            result = __shown__(getattr(obj, meth), other)
            if result is not NotImplemented:
                return result
    return getattr(operator, name)(a, b)


def __shown_item__(a, key):
    if getattr(type(a), "__getitem__", None) is not None:
        return __shown__(a.__getitem__, key)
    return a[key]


try:
    scope = {"__shown__": __shown__, "__shown_op__": __shown_op__, "__shown_item__": __shown_item__}
    exec(compile(SNIPPET, "<snippet>", "exec"), {**scope, "__name__": "__main__"})
except BaseException:
    pass  # the recorded calls up to the crash are what the issue shows
print(MARK + _json.dumps(_RECORDS))
"""
)

_WRAPPER = (
    "\n\n_snippet_busy = []\n"
    "\n\ndef _snippet_table(fn, method, table):\n"
    '    """Answers the calls an issue shows from a table; every other call goes to the code as it is."""\n'
    "    import functools\n"
    "\n"
    "    inner = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn\n"
    "    served = {}\n"
    "\n"
    "    @functools.wraps(inner)\n"
    "    def wrapper(*args, **kwargs):\n"
    "        if _snippet_busy:  # a repr made while keying another call: no table inside it\n"
    "            return inner(*args, **kwargs)\n"
    "        _snippet_busy.append(True)\n"
    "        try:\n"
    "            key = _snippet_key(inner, args, kwargs, method)\n"
    "        finally:\n"
    "            _snippet_busy.pop()\n"
    "        if key in table:\n"
    "            n = served[key] = served.get(key, -1) + 1\n"
    "            kind, make = table[key][min(n, len(table[key]) - 1)]\n"
    "            if kind == 'raise':\n"
    "                raise make()\n"
    "            return make()\n"
    "        return inner(*args, **kwargs)\n"
    "\n"
    "    if isinstance(fn, classmethod):\n"
    "        return classmethod(wrapper)\n"
    "    if isinstance(fn, staticmethod):\n"
    "        return staticmethod(wrapper)\n"
    "    return wrapper\n"
)


_BINOPS = {
    ast.Add: ("__add__", "__radd__"),
    ast.Sub: ("__sub__", "__rsub__"),
    ast.Mult: ("__mul__", "__rmul__"),
    ast.Div: ("__truediv__", "__rtruediv__"),
    ast.FloorDiv: ("__floordiv__", "__rfloordiv__"),
    ast.Mod: ("__mod__", "__rmod__"),
    ast.BitOr: ("__or__", "__ror__"),
    ast.BitAnd: ("__and__", "__rand__"),
    ast.BitXor: ("__xor__", "__rxor__"),
}
_COMPARES = {
    ast.Eq: ("__eq__", "__eq__"),
    ast.NotEq: ("__ne__", "__ne__"),
    ast.Lt: ("__lt__", "__gt__"),
    ast.LtE: ("__le__", "__ge__"),
    ast.Gt: ("__gt__", "__lt__"),
    ast.GtE: ("__ge__", "__le__"),
}


def _name(text: str) -> ast.Name:
    return ast.Name(text, ast.Load())


class _RouteCalls(ast.NodeTransformer):
    """Routes what the snippet asks of the project through the recorder, inner expressions first:
    f(a, k=b) -> __shown__(f, a, k=b); print(x) -> print(__shown__(str, x)); a * b, a < b, a in b and
    a[k] -> the operands' own methods (__mul__, __lt__, __contains__, __getitem__), as a table can wrap them."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "print":
            node.args = [
                a if isinstance(a, ast.Starred) else ast.Call(_name("__shown__"), [_name("str"), a], [])
                for a in node.args
            ]
            return node
        routed = ast.Call(_name("__shown__"), [node.func, *node.args], node.keywords)
        return ast.copy_location(routed, node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) not in _BINOPS:
            return node
        name, reflected = _BINOPS[type(node.op)]
        args = [ast.Constant(name), ast.Constant(reflected), node.left, node.right]
        return ast.copy_location(ast.Call(_name("__shown_op__"), args, []), node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) != 1:
            return node
        op, left, right = node.ops[0], node.left, node.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)):  # b.__contains__(a)
            call = ast.Call(_name("__shown_op__"), [ast.Constant("__contains__"), ast.Constant(None), right, left], [])
            return ast.copy_location(ast.UnaryOp(ast.Not(), call) if isinstance(op, ast.NotIn) else call, node)
        if type(op) not in _COMPARES:
            return node
        name, reflected = _COMPARES[type(op)]
        args = [ast.Constant(name), ast.Constant(reflected), left, right]
        return ast.copy_location(ast.Call(_name("__shown_op__"), args, []), node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(ast.Call(_name("__shown_item__"), [node.value, node.slice], []), node)


def issue_snippet(instance: Instance) -> str:
    """The reproduction script the issue shows (its first python block); ValueError if it has none."""
    match = _SNIPPET.search(instance.problem_statement)
    if match is None:
        raise ValueError(f"{instance.instance_id}: the issue shows no python snippet")
    return match.group(1)


def package_of(instance: Instance, root: Path) -> str:
    """The project's import package: its top-level folder holding an __init__.py (tests excluded)."""
    names = sorted(p.parent.name for p in root.glob("*/__init__.py") if p.parent.name != "tests")
    if not names:
        raise ValueError(f"{instance.instance_id}: no package in {root}")
    return names[0]


def shown_calls(instance: Instance, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The snippet's direct calls into the project, with what the clean project answered (module docstring)."""
    snippet = issue_snippet(instance)
    tree = _RouteCalls().visit(ast.parse(snippet))
    ast.fix_missing_locations(tree)
    with tempfile.TemporaryDirectory() as tmp:
        clean = copy_project(instance.repo, Path(tmp) / "clean")
        program = (
            f"MARK = {MARK!r}\nPACKAGE = {package_of(instance, clean)!r}\nSNIPPET = {ast.unparse(tree)!r}\n" + _RECORDER
        )
        # Our own clean project and the issue's own snippet: trusted code, run as a plain subprocess.
        out = subprocess.run(
            [sys.executable, "-"], input=program, cwd=clean, capture_output=True, text=True, timeout=timeout
        ).stdout
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"{instance.instance_id}: recording the snippet's calls printed nothing:\n{out[-1000:]}")


def _usable(entry: dict[str, Any]) -> bool:
    """An answer the table can give: rebuilt from its repr, under a key that can match, and not a
    procedure's None (answering `graph.add_edge(...)` with None would only drop its side effect)."""
    if entry["kind"] == "return" and entry["value"] == "None":
        return False
    return bool(entry["ok"]) and entry["key"] is not None and " at 0x" not in entry["key"]


def _definitions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and methods of module-level classes, by qualname."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _insert_point(tree: ast.Module) -> int:
    """0-based line before which the helper goes: after the docstring and `from __future__` imports."""
    line = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str)
        if is_doc or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            line = node.end_lineno or line
        else:
            break
    return line


def wrap_source(source: str, entries: list[dict[str, Any]]) -> str:
    """`source` (one module) with each function in `entries` rebound to a table of its recorded answers."""
    tree = ast.parse(source)
    defs = _definitions(tree)
    tables: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    method: dict[str, bool] = {}
    for e in entries:
        if e["qualname"] in defs:
            tables[e["qualname"]][e["key"]].append(f"({e['kind']!r}, lambda: {e['value']})")
            method[e["qualname"]] = e["method"]
    if not tables:
        return source
    lines = source.splitlines(keepends=True)
    inserts: dict[int, list[str]] = defaultdict(list)  # after this many lines, these texts
    for qualname, table in tables.items():
        node = defs[qualname]
        indent = " " * node.col_offset
        body = ", ".join(f"{key!r}: [{', '.join(answers)}]" for key, answers in table.items())
        inserts[node.end_lineno or 0].append(
            f"{indent}{node.name} = _snippet_table({node.name}, {method[qualname]}, {{{body}}})\n"
        )
    at = _insert_point(tree)
    inserts[at].insert(0, "\n\n" + _KEY_SRC.strip("\n") + "\n" + _WRAPPER + "\n\n")
    out = []
    for i in range(len(lines) + 1):
        out += inserts.get(i, [])
        if i < len(lines):
            out.append(lines[i] if lines[i].endswith("\n") or i + 1 < len(lines) else lines[i] + "\n")
    return "".join(out)


def snippet_only_patch(instance: Instance) -> str:
    """The mechanical snippet-only patch of an instance, as a diff on its buggy workspace ('' if nothing to wrap)."""
    entries = [e for e in shown_calls(instance) if _usable(e)]
    by_module: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_module[e["module"]].append(e)
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = materialize(instance, Path(tmp) / "ws")
        for module in sorted(by_module):
            rel = module.replace(".", "/") + ".py"
            if not (ws / rel).is_file():
                rel = module.replace(".", "/") + "/__init__.py"
            if not (ws / rel).is_file():
                continue
            buggy = (ws / rel).read_text()
            parts.append(file_diff(rel, buggy, wrap_source(buggy, by_module[module])))
    return "".join(parts)


def snippet_only_share(instances: Iterable[Instance], evaluate_fn: Callable[[Instance, str], Any]) -> tuple[int, int]:
    """(resolved, total) of the snippet-only patch over `instances`, graded by `evaluate_fn(instance, patch)`.

    The caller passes e.g. `lambda inst, patch: tasks.evaluation.evaluate(inst, patch, materialize, factory)`;
    a result counts as passed when its `.resolved` is true.
    """
    passed = total = 0
    for inst in instances:
        total += 1
        if bool(evaluate_fn(inst, snippet_only_patch(inst)).resolved):
            passed += 1
    return passed, total
