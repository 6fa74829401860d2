"""The probe runner: runs inside the sandbox, calls the code under test, reports what it observed. Decides nothing.

Its source is handed to the sandbox's interpreter (`python -P -s -c`) and imports only the standard library.
Arguments: `FILE::FUNCTION` node ids of the probe tests to run, in order. Each probe module (written by the
host from tasks/grading/oracle.py over the workspace's test files) is loaded once, with the object `_spectune`
in its namespace: `_spectune.step(k)` wraps each statement of a test and reports whether it raised, and
`_spectune.check(j, *leaves)` reports the value of every part of an assertion the host cannot evaluate itself.
Records go to fd 3 (the supervisor's report pipe), one JSON line each:

    {"test": id, "begin": true} ... {"test": id, "check": j, "values": [...]} ... {"test": id, "step": k,
    "raised": null | EXC} ... {"test": id, "end": true}      (or {"test": id, "error": EXC} when it cannot run)

A value is a tagged JSON form (`encode`) the host turns back into plain Python values; an exception is its
class's MRO (module, qualname) and its message. Nothing here knows what the right values are: the expected
ones never enter the sandbox, so the code under test can rewrite this runner, its records or its output at
will and still gains nothing without computing the answers the checks want.
"""

import decimal
import fractions
import importlib.util
import json
import os
import sys

REPORT_FD = 3
MAX_TEXT = 16384  # characters of a string or message kept per value (longer: cut, and never equal)
MAX_NODES = 20000  # values inside one observation (a bigger one is reported as cut)
PROFILE = ("eq", "ne", "lt", "le", "gt", "ge", "is", "in")  # a comparison of two observed values, every way


def emit(record):
    """One JSON line to the report pipe (a write error means the supervisor is gone: nothing to tell)."""
    try:
        os.write(REPORT_FD, (json.dumps(record) + "\n").encode())
    except (OSError, TypeError, ValueError):
        pass


def _text(value):
    return value if len(value) <= MAX_TEXT else {"cut": value[:MAX_TEXT], "len": len(value)}


def encode(value, budget=None):
    """A tagged JSON form of `value`: plain data exactly, anything else by its type (and cut when too big)."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        return {"big": True}
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return _text(str(value))
    if isinstance(value, float):
        return {"f": repr(float(value))}
    if isinstance(value, complex):
        return {"c": [repr(value.real), repr(value.imag)]}
    if isinstance(value, bytes | bytearray):
        return {"b": bytes(value[:MAX_TEXT]).hex(), "len": len(value)}
    if isinstance(value, decimal.Decimal):
        return {"dec": str(value)}
    if isinstance(value, fractions.Fraction):
        return {"frac": str(value)}
    if type(value) in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[type(value)]
        return {tag: [encode(v, budget) for v in value]}
    if type(value) is dict:
        return {"d": [[encode(k, budget), encode(v, budget)] for k, v in value.items()]}
    if isinstance(value, type):  # a class as a value (`(1, 2.0, int, float)`): by its name
        return {"type": _classes(value)[0]}
    return {"obj": _classes(type(value))}


def _classes(cls):
    try:
        return [[str(getattr(c, "__module__", "")), str(getattr(c, "__qualname__", c.__name__))] for c in cls.__mro__]
    except Exception:  # a hostile metaclass: still a type, of no known name
        return [["?", "?"]]


def describe(exc):
    """An exception as the host reads it: its classes and message."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    return {"classes": _classes(type(exc)), "message": _text(message)}


class Raised:
    """The object `with _spectune.step(k) as info:` binds: `.value` and `.type` of what the block raised."""

    value = None
    type = None


class Probe:
    """What the probe modules call; reports only what happened."""

    def __init__(self):
        self.test = None

    def step(self, k):
        return _Step(self, k)

    def check(self, j, *leaves):
        values = []
        for leaf in leaves:
            values.append(self._observe_pair(leaf) if isinstance(leaf, tuple) else self._observe(leaf))
        emit({"test": self.test, "check": j, "values": values})

    @staticmethod
    def _observe(leaf):
        try:
            return {"value": encode(leaf())}
        except BaseException as exc:
            return {"raised": describe(exc)}

    @staticmethod
    def _observe_pair(pair):
        """Two values the test compares with each other: every comparison of them (the host picks the one asked)."""
        try:
            left, right = pair[0](), pair[1]()
        except BaseException as exc:
            return {"raised": describe(exc)}
        ops = {
            "eq": lambda: left == right,
            "ne": lambda: left != right,
            "lt": lambda: left < right,
            "le": lambda: left <= right,
            "gt": lambda: left > right,
            "ge": lambda: left >= right,
            "is": lambda: left is right,
            "in": lambda: left in right,
        }
        profile = {}
        for name in PROFILE:
            try:
                profile[name] = bool(ops[name]())
            except BaseException as exc:
                profile[name] = {"raised": describe(exc)}
        return {"profile": profile}


class _Step:
    def __init__(self, probe, k):
        self.probe, self.k, self.info = probe, k, Raised()

    def __enter__(self):
        return self.info

    def __exit__(self, kind, exc, tb):
        if exc is not None:
            self.info.value, self.info.type = exc, kind
        emit({"test": self.probe.test, "step": self.k, "raised": None if exc is None else describe(exc)})
        return True  # the host decides whether this block had to raise; the probe goes on either way


def main(test_ids):
    """Run every probe test in order; records to fd 3."""
    sys.path.append(os.getcwd())
    probe = Probe()
    modules = {}
    for test_id in test_ids:
        path, _, name = test_id.partition("::")
        probe.test = test_id
        try:
            if path not in modules:
                modules[path] = _load(path, probe)
            function = getattr(modules[path], name)
        except BaseException as exc:
            emit({"test": test_id, "error": describe(exc)})
            continue
        emit({"test": test_id, "begin": True})
        try:
            function()
        except BaseException as exc:
            emit({"test": test_id, "error": describe(exc)})
            continue
        emit({"test": test_id, "end": True})


def _load(path, probe):
    name = "spectune_probe." + path[:-3].replace("/", ".")
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.getcwd(), path))
    module = importlib.util.module_from_spec(spec)
    module._spectune = probe
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
