"""Split each hidden test into a probe that runs in the sandbox and checks that only the host holds.

`split_module(source, path, names)` turns a test file into a *probe module* and a `TestPlan` per test. Every
top-level statement of a test becomes a step (`with _spectune.step(k):`, tasks/grading/observer.py), and every
assertion a check: the parts of its expression the host can compute itself (literals, module constants, the
standard library: the expected values) stay on the host; the parts that need the code under test (the *leaves*)
become `lambda`s the probe evaluates and reports. `assert f(x) == "1h30m"` becomes
`_spectune.check(3, lambda: f(x))` in the sandbox and `_o[0] == '1h30m'` on the host. A comparison of two
observed values is reported every way (==, !=, <, ..., is, in), so the probe does not show which one the test
wants, nor does it show `not`. `with pytest.raises(E, match=M)` becomes a plain step: the host knows the block
must raise E with M, the probe does not. The host then reads the probe's records in the order the plan says
(`judge`), and a test passes only when every step and check it expects is there, in order, and holds.

What cannot be split is refused per test (`Unprobeable`: the file, line and rule): statements that branch
(`if`, `try`, `while`), loops other than `for` over a literal (unrolled), assertions outside a test's top level,
`pytest` used other than as `with pytest.raises(...)`. The bundled suite is written within these shapes.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from tasks.pytest_shapes import pytest_raises_call

PROBE = "_spectune"  # the name of the probe object in a probe module's namespace
COMPARE_OPS = {
    ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Is: "is",
    ast.In: "in",
}  # fmt: skip
NEGATED = {ast.IsNot: ast.Is, ast.NotIn: ast.In}
SINGLETONS = (None, True, False, Ellipsis)
UNSAFE_BUILTINS = {"open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "globals", "locals", "vars"}


class Unprobeable(ValueError):
    """A test the oracle cannot split into probe and checks; the message names the file, line and rule."""


@dataclass(frozen=True)
class Check:
    """One assertion: its host-side expression over the observed leaves `_o`, and its source for messages."""

    expression: str
    source: str


@dataclass(frozen=True)
class Step:
    """One statement of a test: whether it must raise (the exception names and the pattern) and its source."""

    source: str
    raises: tuple[tuple[str, str], ...] = ()  # (module prefix, class name): any of them; empty: must not raise
    match: str | None = None


@dataclass
class TestPlan:
    """What a test's probe must report, in order: ("check", j) and ("step", k) events."""

    events: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class ModuleSplit:
    """A test file split: the probe source, a plan per test, the checks and steps, and the host's namespace."""

    probe: str
    plans: dict[str, TestPlan]
    checks: dict[int, Check]
    steps: dict[int, Step]
    namespace: dict[str, Any]


class _Splitter:
    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.checks: dict[int, Check] = {}
        self.steps: dict[int, Step] = {}
        self.counter = 0
        self.namespace: dict[str, Any] = {}
        self.imported: dict[str, str] = {}  # name -> the module it was imported from (for exception classes)
        # every name the module binds shadows a builtin of that name (`from pkg import format`)
        self.bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.bound.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                self.bound |= {a.asname or a.name.split(".")[0] for a in node.names}
        self._host_module_names(tree)

    def fail(self, node: ast.AST, why: str) -> Unprobeable:
        return Unprobeable(f"{self.path}:{getattr(node, 'lineno', '?')}: {why}")

    def next_id(self) -> int:
        self.counter += 1
        return self.counter

    # -- what the host can compute -------------------------------------------------------------------------
    def _host_module_names(self, tree: ast.Module) -> None:
        """Module-level names the host may evaluate: standard-library imports and constant assignments."""
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    self.imported[bound] = f"{module}.{alias.name}" if module else alias.name
                top = (module or node.names[0].name).split(".")[0]
                if top in sys.stdlib_module_names and not getattr(node, "level", 0):
                    exec(compile(ast.Module([node], []), self.path, "exec"), self.namespace)
            elif isinstance(node, ast.Assign) and self.host_side(node.value, set()):
                exec(compile(ast.Module([node], []), self.path, "exec"), self.namespace)

    def host_side(self, node: ast.AST, local: set[str]) -> bool:
        """The expression uses only literals, builtins and host names (no code under test, no locals)."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom | ast.Starred):
                return False
            if isinstance(sub, ast.Name):
                if sub.id in local:
                    return False
                if sub.id in self.namespace:
                    continue
                if sub.id in self.bound or not hasattr(builtins, sub.id) or sub.id in UNSAFE_BUILTINS:
                    return False
        return True

    # -- assertions ------------------------------------------------------------------------------------------
    def split_assert(self, node: ast.Assert, local: set[str]) -> ast.stmt:
        leaves: list[ast.expr] = []
        expression = self._split(node.test, local, leaves, node)
        j = self.next_id()
        self.checks[j] = Check(ast.unparse(expression), ast.unparse(node.test))
        call = ast.Call(
            ast.Attribute(ast.Name(PROBE, ast.Load()), "check", ast.Load()),
            [ast.Constant(j), *leaves],
            [],
        )
        return ast.Expr(call)

    def _leaf(self, node: ast.expr, leaves: list[ast.expr], pair: ast.expr | None = None) -> ast.expr:
        lam = lambda e: ast.Lambda(ast.arguments([], [], None, [], [], None, []), e)  # noqa: E731
        leaves.append(ast.Tuple([lam(node), lam(pair)], ast.Load()) if pair is not None else lam(node))
        return ast.Subscript(ast.Name("_o", ast.Load()), ast.Constant(len(leaves) - 1), ast.Load())

    def _split(self, node: ast.expr, local: set[str], leaves: list[ast.expr], where: ast.AST) -> ast.expr:
        """`node` in a truth context, its observed parts replaced by `_o[i]` (appended to `leaves`)."""
        if self.host_side(node, local):
            return node
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ast.UnaryOp(ast.Not(), self._split(node.operand, local, leaves, where))
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(node.op, [self._split(v, local, leaves, where) for v in node.values])
        if isinstance(node, ast.Compare):
            return self._split_compare(node, local, leaves, where)
        # only the truth of it is asked (`assert x`, `not x`, `x and y`): the probe reports bool(x), which for an
        # object of the code's own type the host could not work out from its type alone
        truth = ast.Call(ast.Name("bool", ast.Load()), [node], [])
        return self._leaf(ast.copy_location(truth, node), leaves)

    def _split_compare(self, node: ast.Compare, local: set[str], leaves: list[ast.expr], where: ast.AST) -> ast.expr:
        operands = [node.left, *node.comparators]
        observed = [i for i, o in enumerate(operands) if not self.host_side(o, local)]
        if len(node.ops) == 1 and len(observed) == 2:  # two observed values: every comparison, the host picks
            op = node.ops[0]
            base = NEGATED.get(type(op), type(op))
            got = ast.Subscript(self._leaf(node.left, leaves, node.comparators[0]), ast.Constant(COMPARE_OPS[base]))
            return ast.UnaryOp(ast.Not(), got) if type(op) in NEGATED else got
        if len(observed) != 1:
            raise self.fail(where, "a chained comparison of several observed values")
        i = observed[0]
        if i > 0 and isinstance(node.ops[i - 1], ast.In | ast.NotIn):
            if len(node.ops) != 1:
                raise self.fail(where, "membership in an observed value inside a chained comparison")
            # `C in X`: X may be any object with its own __contains__, so the probe asks it; `not in` stays here
            got = self._leaf(ast.Compare(node.left, [ast.In()], [operands[1]]), leaves)
            return ast.UnaryOp(ast.Not(), got) if isinstance(node.ops[0], ast.NotIn) else got
        for k, op in enumerate(node.ops):
            if isinstance(op, ast.Is | ast.IsNot):
                other = operands[k] if k + 1 == i else operands[k + 1]
                if not (isinstance(other, ast.Constant) and other.value in SINGLETONS):
                    raise self.fail(where, "`is` against something other than None, True or False")
        if isinstance(operands[i], ast.Compare | ast.BoolOp) or (
            isinstance(operands[i], ast.UnaryOp) and isinstance(operands[i].op, ast.Not)
        ):  # `(x == C) is False`: the inner comparison's constant stays here too
            operands[i] = self._split(operands[i], local, leaves, where)
        else:
            operands[i] = self._leaf(operands[i], leaves)
        return ast.Compare(operands[0], node.ops, operands[1:])

    # -- statements ------------------------------------------------------------------------------------------
    def split_test(self, fn: ast.FunctionDef) -> tuple[ast.FunctionDef, TestPlan]:
        if fn.args.args or fn.args.posonlyargs or fn.args.kwonlyargs or fn.args.vararg or fn.args.kwarg:
            raise self.fail(fn, f"{fn.name} takes fixtures or arguments")
        if fn.decorator_list:
            raise self.fail(fn, f"{fn.name} is decorated (parametrize, marks)")
        local = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        local |= {a.arg for n in ast.walk(fn) if isinstance(n, ast.Lambda | ast.FunctionDef) for a in n.args.args}
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring may state expected values: never shipped
        plan = TestPlan()
        out = self._statements(body, local, plan)
        probe = ast.FunctionDef(name=fn.name, args=fn.args, body=out or [ast.Pass()], decorator_list=[])
        return probe, plan

    def _statements(self, body: list[ast.stmt], local: set[str], plan: TestPlan) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.For) and not stmt.orelse and isinstance(stmt.iter, ast.List | ast.Tuple):
                for element in stmt.iter.elts:  # unrolled: every iteration's checks are expected, in order
                    bind = ast.copy_location(ast.Assign([copy.deepcopy(stmt.target)], copy.deepcopy(element)), stmt)
                    out += self._statements([bind, *copy.deepcopy(stmt.body)], local, plan)
                continue
            raises = self._raises(stmt)
            inner: list[ast.stmt]
            checks: list[int] = []
            if raises is not None:
                step, inner = raises, [self._only_raise(s, raises) for s in stmt.body]  # type: ignore[attr-defined]
                self._refuse_nested(inner, stmt)
            elif isinstance(stmt, ast.Assert):
                before = set(self.checks)
                inner = [self.split_assert(stmt, local)]
                checks = sorted(set(self.checks) - before)
                step = Step(ast.unparse(stmt))
            else:
                self._refuse_nested([stmt], stmt)
                inner, step = [stmt], Step(ast.unparse(stmt))
            k = self.next_id()
            self.steps[k] = step
            plan.events += [("check", j) for j in checks] + [("step", k)]
            target = stmt.items[0].optional_vars if raises is not None else None  # type: ignore[attr-defined]
            call = ast.Call(ast.Attribute(ast.Name(PROBE, ast.Load()), "step", ast.Load()), [ast.Constant(k)], [])
            out.append(ast.With([ast.withitem(call, target)], inner))
        return out

    def _only_raise(self, stmt: ast.stmt, step: Step) -> ast.stmt:
        """Inside `pytest.raises`, `assert X` only matters for raising: X is evaluated (exact unless the block
        expects AssertionError itself, which is refused)."""
        if not isinstance(stmt, ast.Assert):
            return stmt
        if any(name == "AssertionError" for _, name in step.raises):
            raise self.fail(stmt, "an assertion inside pytest.raises(AssertionError)")
        return ast.copy_location(ast.Expr(stmt.test), stmt)

    def _refuse_nested(self, body: list[ast.stmt], where: ast.AST) -> None:
        for stmt in body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Assert):
                    raise self.fail(sub, "an assertion inside a block (only a test's top level is checked)")
                if isinstance(sub, ast.If | ast.Try | ast.While | ast.For | ast.AsyncFor | ast.Match) and sub is stmt:
                    raise self.fail(sub, f"a test statement that branches or loops ({type(sub).__name__.lower()})")
                if isinstance(sub, ast.Name) and sub.id == "pytest":
                    raise self.fail(sub, "pytest used other than as `with pytest.raises(...)`")

    def _raises(self, stmt: ast.stmt) -> Step | None:
        """The Step of `with pytest.raises(E, match=M) [as info]:`, or None for any other statement."""
        call = pytest_raises_call(stmt)
        if call is None:
            return None
        if len(call.args) != 1 or any(k.arg != "match" for k in call.keywords):
            raise self.fail(stmt, "pytest.raises takes one exception (or a tuple) and at most match=")
        kinds = call.args[0].elts if isinstance(call.args[0], ast.Tuple) else [call.args[0]]
        names = tuple(self._exception_name(k, stmt) for k in kinds)
        match = None
        for keyword in call.keywords:
            if not self.host_side(keyword.value, set()):
                raise self.fail(stmt, "pytest.raises(match=...) is not a constant")
            match = str(eval(compile(ast.Expression(keyword.value), self.path, "eval"), dict(self.namespace)))
        return Step(ast.unparse(stmt).split("\n", 1)[0], names, match)

    def _exception_name(self, node: ast.expr, where: ast.AST) -> tuple[str, str]:
        """(module prefix, class name) the raised exception's classes must include."""
        if isinstance(node, ast.Name) and hasattr(builtins, node.id) and node.id not in self.imported:
            return ("builtins", node.id)
        if isinstance(node, ast.Name) and node.id in self.imported:
            origin = self.imported[node.id]
            return (origin.split(".")[0], origin.rsplit(".", 1)[-1])
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.imported:
            return (self.imported[node.value.id].split(".")[0], node.attr)
        raise self.fail(where, f"pytest.raises({ast.unparse(node)}): not an imported or builtin exception class")


# CPython 3.11 keeps the AST converter's recursion depth per interpreter, not per thread: two threads parsing or
# compiling syntax trees at once (several agents graded together) can fail with "SystemError: AST constructor
# recursion depth mismatch" (python/cpython#106905 and the threaded programs that report it; seen here in a
# two-agent study). Every syntax-tree operation here runs under this lock.
_AST_LOCK = threading.Lock()


def split_module(source: str, path: str, names: list[str]) -> ModuleSplit:
    """The probe module for `names` (test functions of the file `path`) and what the host checks of each."""
    with _AST_LOCK:
        try:
            return _split_module(source, path, names)
        except SystemError as exc:  # another thread's ast.parse (traceback's carets, ...) can still collide once
            if "recursion depth mismatch" not in str(exc):
                raise
            return _split_module(source, path, names)


def _split_module(source: str, path: str, names: list[str]) -> ModuleSplit:
    tree = ast.parse(source, filename=path)
    splitter = _Splitter(path, tree)
    plans: dict[str, TestPlan] = {}
    body: list[ast.stmt] = []
    wanted = set(names)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name.startswith("test"):
            if node.name in wanted:
                if not isinstance(node, ast.FunctionDef):
                    raise splitter.fail(node, f"{node.name} is not a plain test function")
                probe, plans[node.name] = splitter.split_test(node)
                body.append(probe)
            continue  # tests not asked for are not shipped
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstrings
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assert):
                raise splitter.fail(sub, "an assertion outside a test function (a helper that checks)")
        body.append(node)
    missing = wanted - set(plans)
    if missing:
        raise Unprobeable(f"{path}: no test function named {sorted(missing)[0]}")
    body = _drop_unused_constants(body)
    probe = ast.unparse(ast.fix_missing_locations(ast.Module(body, [])))
    return ModuleSplit(probe + "\n", plans, splitter.checks, splitter.steps, splitter.namespace)


def _drop_unused_constants(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module constants and imported names no probe code reads are not shipped: an `EXPECTED = ...` or an
    exception class only the host's checks use would tell the code what the tests want."""
    used = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    keep = []
    for stmt in body:
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in used for t in stmt.targets):
            continue
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            names = [a for a in stmt.names if (a.asname or a.name.split(".")[0]) in used or a.name == "*"]
            if not names:
                continue
            stmt = copy.copy(stmt)
            stmt.names = names
        keep.append(stmt)
    return keep


class LeafRaised(Exception):
    """A leaf the check needs raised in the sandbox: the assertion fails, as it would have."""


class Observed:
    """The `_o` of a check's host expression: the decoded leaf values, raising LeafRaised for one that raised."""

    def __init__(self, values: list[dict]) -> None:
        self.values = values

    def __getitem__(self, i: int) -> Any:
        item = self.values[i]
        if "raised" in item:
            raise LeafRaised(exception_text(item["raised"]))
        if "profile" in item:
            return Profile(item["profile"])
        return decode(item["value"])


class Profile:
    """Every comparison of two observed values; one that raised raises LeafRaised when the check reads it."""

    def __init__(self, profile: dict) -> None:
        self.profile = profile

    def __getitem__(self, op: str) -> bool:
        got = self.profile[op]
        if isinstance(got, dict):
            raise LeafRaised(exception_text(got.get("raised", {})))
        return bool(got)


class Opaque:
    """An object of the code under test's own type: equal to nothing the host holds (`object`'s own ==).

    So `assert obj == "text"` fails and `assert obj != "text"` holds here whatever the object's `__eq__` says:
    the constant never travels to the sandbox to ask it. Strict for the first (a gold patch that needs it fails
    the suite's validation and the test is rewritten); the second can only pass a check of that one shape.
    """

    def __init__(self, classes: list) -> None:
        self.classes = classes

    def __repr__(self) -> str:
        return f"<{self.classes[0][0]}.{self.classes[0][1]} object>" if self.classes else "<object>"


class Cut(str):
    """A string cut in the sandbox: its start, never equal to a whole string."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


def decode(value: Any) -> Any:
    """The plain Python value of the probe's tagged form (tasks/grading/observer.py `encode`)."""
    from decimal import Decimal
    from fractions import Fraction

    if value is None or isinstance(value, bool | int | str):
        return value
    if not isinstance(value, dict) or len(value) < 1:
        return Opaque([])
    tag = next(iter(value))
    body = value[tag]
    if tag == "f":
        return float(body)
    if tag == "c":
        return complex(float(body[0]), float(body[1]))
    if tag == "b":
        return bytes.fromhex(body) if value.get("len") == len(body) // 2 else Opaque([["builtins", "bytes"]])
    if tag == "dec":
        return Decimal(body)
    if tag == "frac":
        return Fraction(body)
    if tag == "cut":
        return Cut(body)
    items = {"l": list, "t": tuple, "s": set, "fs": frozenset}
    if tag in items:
        try:
            return items[tag](decode(v) for v in body)
        except TypeError:  # an unhashable member of a set: not a value the host can hold
            return Opaque([["builtins", items[tag].__name__]])
    if tag == "d":
        try:
            return {decode(k): decode(v) for k, v in body}
        except TypeError:
            return Opaque([["builtins", "dict"]])
    if tag == "obj":
        return Opaque(body)
    if tag == "type":  # a builtin class is itself; another is known by name only
        module, name = body
        found = getattr(builtins, name, None) if module == "builtins" else None
        return found if isinstance(found, type) else Opaque([["builtins", "type"]])
    return Opaque([])


def exception_text(raised: dict) -> str:
    """`module.Class: message` of an exception the probe reported."""
    classes = raised.get("classes") or [["?", "?"]]
    module, name = classes[0]
    prefix = "" if module == "builtins" else f"{module}."
    return f"{prefix}{name}: {str(raised.get('message', ''))[:300]}"


def raised_as_expected(step: Step, raised: dict | None) -> str | None:
    """None when the step raised what it must (or nothing, when it must not); else what went wrong."""
    if not step.raises:
        return None if raised is None else f"raised {exception_text(raised)}"
    if raised is None:
        return f"did not raise {' or '.join(name for _, name in step.raises)}"
    classes = [tuple(c) for c in raised.get("classes") or []]
    if not any(
        name == n and (m == prefix or m.startswith(prefix + ".")) for prefix, name in step.raises for m, n in classes
    ):
        return f"raised {exception_text(raised)}, not {' or '.join(name for _, name in step.raises)}"
    message = raised.get("message")
    if step.match is not None and not (isinstance(message, str) and re.search(step.match, message)):
        return f"raised {exception_text(raised)}, whose message does not match {step.match!r}"
    return None


def judge(split: ModuleSplit, name: str, records: list[dict]) -> tuple[str, str]:
    """(passed | failed | error, why) for the test `name` from its records, in the order its plan expects."""
    if any("error" in r for r in records):
        error = next(r["error"] for r in records if "error" in r)
        return "error", f"the test could not run: {exception_text(error) if isinstance(error, dict) else error}"
    events = [r for r in records if "check" in r or "step" in r]
    plan = split.plans[name].events
    for i, (kind, number) in enumerate(plan):
        if i >= len(events) or events[i].get(kind) != number:
            return "error", f"the probe stopped reporting before `{_source(split, kind, number)}`"
        record = events[i]
        if kind == "check":
            check = split.checks[number]
            try:
                values = record.get("values")
                if not isinstance(values, list) or not all(isinstance(v, dict) for v in values):
                    return "error", f"unreadable observation for `{check.source}`"
                namespace = {**split.namespace, "_o": Observed(values)}
                held = bool(eval(check.expression, namespace))
            except LeafRaised as exc:
                return "failed", f"assert {check.source}: raised {exc}"
            except Exception as exc:
                return "failed", f"assert {check.source}: {type(exc).__name__} on the host: {exc}"
            if not held:
                return "failed", f"assert {check.source}"
        else:
            problem = raised_as_expected(split.steps[number], record.get("raised"))
            if problem is not None:
                return "failed", f"`{split.steps[number].source}` {problem}"
    if not any(r.get("end") for r in records):
        return "error", "the probe did not finish the test"
    return "passed", ""


def _source(split: ModuleSplit, kind: str, number: int) -> str:
    return split.checks[number].source if kind == "check" else split.steps[number].source
