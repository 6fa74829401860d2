"""Deterministic AST mutations that turn correct code into realistic bugs.

Each operator finds sites in a module's syntax tree and edits only the characters of the site
(an operator token, a name, a constant, one line), so the bug's diff -- and the gold patch, its
exact revert -- stays one or two lines, as a human's bug would. Which mutations make real tasks
is decided later, by running the tests (`tasks.build`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

FAMILIES = (
    "misspelled_identifier",
    "wrong_attribute",
    "wrong_keyword",
    "arith_swap",
    "comparison_flip",
    "off_by_one",
    "negation_dropped",
    "swapped_arguments",
    "wrong_variable",
    "removed_statement",
    "early_return",
)


@dataclass(frozen=True)
class Mutation:
    """Replace source[start:end] (character offsets) with `replacement`."""

    family: str
    path: str  # file, relative to the project root
    line: int  # 1-based line of the site
    start: int
    end: int
    original: str
    replacement: str
    note: str  # what changed, for logs (never shown to the agent)

    @property
    def site(self) -> tuple[str, int]:
        """(file, line): mutations of one site always land in the same split."""
        return (self.path, self.line)

    def apply(self, source: str) -> str:
        """The mutated source."""
        assert source[self.start : self.end] == self.original, "source changed under the mutation"
        return source[: self.start] + self.replacement + source[self.end :]


class _Locator:
    """Converts ast (line, UTF-8 byte column) positions to character offsets."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col_bytes].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def line_span(self, node: ast.stmt) -> tuple[int, int]:
        """Whole lines of a statement, newline included."""
        return self.starts[node.lineno - 1], self.starts[node.end_lineno]


_ARITH = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "//"),
    ast.FloorDiv: ("//", "*"),
    ast.Div: ("/", "*"),
    ast.Mod: ("%", "//"),
}
_COMPARE = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}


def _misspell(name: str) -> str:
    """A typo a person makes: two adjacent letters swapped (or a letter doubled if that is a no-op)."""
    core = name.lstrip("_")
    lead = name[: len(name) - len(core)]
    for i in range(len(core) - 2, 0, -1):
        if core[i] != core[i + 1] and core[i].isalpha() and core[i + 1].isalpha():
            return lead + core[:i] + core[i + 1] + core[i] + core[i + 2 :]
    return lead + core + core[-1]


def _wrong_attr(name: str) -> str:
    """A plausible wrong member name: singular/plural confusion, else a typo."""
    if len(name) > 3 and name.endswith("s") and not name.endswith("ss"):
        return name[:-1]
    if name.isidentifier() and not name.startswith("__") and name[-1].isalpha():
        return name + "s"
    return _misspell(name)


class _Finder:
    """Walks one module and yields every candidate mutation, in source order per family."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.src = source
        self.loc = _Locator(source)
        self.tree = ast.parse(source)
        self.defined = {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(self.tree) if isinstance(a, ast.arg)
        }
        for node in ast.walk(self.tree):  # parents, for context checks
            for child in ast.iter_child_nodes(node):
                child._parent = node  # type: ignore[attr-defined]

    def _mk(self, family: str, node: ast.AST, start: int, end: int, replacement: str, note: str) -> Mutation:
        return Mutation(family, self.path, node.lineno, start, end, self.src[start:end], replacement, note)

    def _token_in_gap(self, family, node, left: ast.AST, right: ast.AST, old: str, new: str):
        """Replace operator text `old` found between two operand nodes."""
        gap_start, gap_end = self.loc.span(left)[1], self.loc.span(right)[0]
        gap = self.src[gap_start:gap_end]
        idx = gap.find(old)
        if idx < 0 or "#" in gap:
            return None
        s = gap_start + idx
        return self._mk(family, node, s, s + len(old), new, f"{old} -> {new}")

    # --- families -------------------------------------------------------------------------
    def arith_swap(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
                if any(
                    isinstance(x, (ast.JoinedStr, ast.Constant)) and isinstance(getattr(x, "value", 0), str)
                    for x in (node.left, node.right)
                ):
                    continue  # string building, not arithmetic
                old, new = _ARITH[type(node.op)]
                m = self._token_in_gap("arith_swap", node, node.left, node.right, old, new)
                if m:
                    yield m
            elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH:
                old, new = _ARITH[type(node.op)]
                m = self._token_in_gap("arith_swap", node, node.target, node.value, old + "=", new + "=")
                if m:
                    yield m

    def comparison_flip(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
                old, new = _COMPARE[type(node.ops[0])]
                m = self._token_in_gap("comparison_flip", node, node.left, node.comparators[0], old, new)
                if m and (old not in ("in", "is") or self.src[m.start - 1].isspace()):
                    yield m

    def off_by_one(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Constant)
                and type(node.value) is int
                and abs(node.value) <= 1000
                and not isinstance(getattr(node, "_parent", None), (ast.arguments, ast.keyword))
            ):
                parent = getattr(node, "_parent", None)
                if isinstance(parent, (ast.Slice, ast.Subscript, ast.Compare, ast.BinOp, ast.Call)):
                    s, e = self.loc.span(node)
                    new = node.value - 1 if node.value > 1 else node.value + 1
                    yield self._mk("off_by_one", node, s, e, str(new), f"{node.value} -> {new}")

    def negation_dropped(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                s = self.loc.span(node)[0]
                e = self.loc.span(node.operand)[0]
                prefix = self.src[s:e]
                if prefix.startswith("not") and "#" not in prefix:
                    yield self._mk("negation_dropped", node, s, e, prefix[3:].lstrip(), "not dropped")

    def swapped_arguments(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Call)
                and len(node.args) >= 2
                and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            ):
                a0, a1 = node.args[0], node.args[1]
                s0, e0 = self.loc.span(a0)
                s1, e1 = self.loc.span(a1)
                t0, t1 = self.src[s0:e0], self.src[s1:e1]
                if t0 != t1 and "\n" not in self.src[s0:e1]:
                    yield self._mk("swapped_arguments", node, s0, e1, t1 + self.src[e0:s1] + t0, f"{t0} <-> {t1}")

    def _functions(self) -> Iterator[ast.FunctionDef]:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node

    @staticmethod
    def _locals(fn: ast.FunctionDef) -> list[str]:
        names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs) if a.arg != "self"]
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                names.append(node.id)
        return names

    def wrong_variable(self) -> Iterator[Mutation]:
        for fn in self._functions():
            local = self._locals(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in local:
                    others = [n for n in local if n != node.id and n != "_"]
                    if others:
                        # The nearest other local by position in the function: what a slip of the mind picks.
                        i = local.index(node.id)
                        other = min(others, key=lambda n: (abs(local.index(n) - i), local.index(n)))
                        s, e = self.loc.span(node)
                        yield self._mk("wrong_variable", node, s, e, other, f"{node.id} -> {other}")

    def misspelled_identifier(self) -> Iterator[Mutation]:
        for fn in self._functions():
            local = self._locals(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in local:
                    new = _misspell(node.id)
                    if new not in self.defined:
                        s, e = self.loc.span(node)
                        yield self._mk("misspelled_identifier", node, s, e, new, f"{node.id} -> {new}")

    def wrong_attribute(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and not node.attr.startswith("__"):
                e = self.loc.span(node)[1]
                s = e - len(node.attr)
                if self.src[s:e] == node.attr:
                    new = _wrong_attr(node.attr)
                    yield self._mk("wrong_attribute", node, s, e, new, f".{node.attr} -> .{new}")

    def wrong_keyword(self) -> Iterator[Mutation]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg is None:
                        continue
                    s = self.loc.offset(kw.lineno, kw.col_offset)
                    if self.src[s : s + len(kw.arg)] == kw.arg:
                        new = _wrong_attr(kw.arg)
                        yield self._mk("wrong_keyword", kw, s, s + len(kw.arg), new, f"{kw.arg}= -> {new}=")

    def _blocks(self) -> Iterator[list[ast.stmt]]:
        for node in ast.walk(self.tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield block

    def removed_statement(self) -> Iterator[Mutation]:
        for block in self._blocks():
            if len(block) < 2:
                continue
            for stmt in block:
                is_doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and not is_doc:
                    s, e = self.loc.line_span(stmt)
                    # Only statements alone on their lines (no `a = 1; b = 2`, no `if x: a = 1`).
                    if self.src[s:e].strip() == self.src[slice(*self.loc.span(stmt))].strip():
                        yield self._mk("removed_statement", stmt, s, e, "", "statement removed")

    def early_return(self) -> Iterator[Mutation]:
        for fn in self._functions():
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) < 3 or not isinstance(body[-1], ast.Return) or body[-1].value is None:
                continue
            ret = body[-1]
            before = body[-2]
            s = self.loc.line_span(before)[0]
            indent = self.loc.lines[before.lineno - 1][: before.col_offset]
            text = self.src[slice(*self.loc.span(ret))]
            if "\n" in text:
                continue
            m = Mutation(
                "early_return",
                self.path,
                before.lineno,
                s,
                s,
                "",
                f"{indent}{text}\n",
                "return moved before the last statement",
            )
            yield m


def find_mutations(path: str, source: str) -> list[Mutation]:
    """All candidate mutations of one module, grouped by family in FAMILIES order."""
    finder = _Finder(path, source)
    out: list[Mutation] = []
    for family in FAMILIES:
        method: Callable[[], Iterator[Mutation]] = getattr(finder, family)
        found = sorted(method(), key=lambda m: (m.start, m.end, m.replacement))
        seen: set[tuple[int, int, str]] = set()
        for m in found:
            key = (m.start, m.end, m.replacement)
            if key not in seen and m.original != m.replacement:
                seen.add(key)
                out.append(m)
    return out
