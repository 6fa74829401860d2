"""Patches without a fix that fight the grader, and correct fixes with company, in both sandboxes.

Every attack class a tester found, written here as our own payloads (appended to the package's `__init__.py`,
which every probe imports): none may resolve, because the expected values never enter the sandbox. Every
correct fix that carries something else (a new test, a helper, a scratch script, words a text scan disliked,
configuration files, stray bytecode) must resolve, with what was left out named in the message. Limits end
with the status that says which. Every sandbox run is bounded by a timeout.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from tasks.evaluation import evaluate
from tasks.patching import apply_patch
from tasks.suites import load_suite
from tasks.swelite.projects import materialize
from tests.conftest import SANDBOX_KINDS, sandbox_factory_or_skip

# Forge "right" records: every observation True or the argument echoed, no step raises (rebinding what the runner
# in __main__ calls, which the tested process can reach).
REBIND_MAIN = """
import __main__ as _m
def _check(self, j, *leaves):
    _m.emit({"test": self.test, "check": j, "values": [{"value": True} for _ in leaves]})
_m.Probe.check = _check
_m._Step.__exit__ = lambda self, *exc: (_m.emit({"test": self.probe.test, "step": self.k, "raised": None}), True)[1]
"""
ATTACKS = {
    "runner helpers rebound in __main__": REBIND_MAIN,
    "rebinding laundered through a frozen-looking file name": f"""
exec(compile({REBIND_MAIN!r}, "<frozen importlib._bootstrap>", "exec"))
""",
    "records written straight to the report pipe, then exit 0": """
import os as _os, sys as _sys, json as _j, re as _re
for _t in _sys.argv[1:]:
    _path, _, _name = _t.partition("::")
    _src = open(_path).read().split("def " + _name + "(", 1)[1].split("\\ndef ", 1)[0]
    _os.write(3, (_j.dumps({"test": _t, "begin": True}) + "\\n").encode())
    for _kind, _n in _re.findall(r"_spectune\\.(step|check)\\((\\d+)", _src):
        _rec = {"test": _t, _kind: int(_n)}
        _rec.update({"values": [{"value": 0}]} if _kind == "check" else {"raised": None})
        _os.write(3, (_j.dumps(_rec) + "\\n").encode())
    _os.write(3, (_j.dumps({"test": _t, "end": True}) + "\\n").encode())
_os._exit(0)
""",
    "report pipe rerouted and records rewritten on their way": """
import os as _os, json as _j
_real = _os.dup(3)
_r, _w = _os.pipe()
_os.dup2(_w, 3)
_orig_write = _os.write
def _write(fd, data):
    if fd == 3:
        rec = _j.loads(data)
        if "values" in rec:
            rec["values"] = [{"value": True}] * len(rec["values"])
        rec.pop("raised", None) if "step" in rec else None
        rec.setdefault("raised", None) if "step" in rec else None
        return _orig_write(_real, (_j.dumps(rec) + "\\n").encode())
    return _orig_write(fd, data)
_os.write = _write
""",
    "look-alike probe modules from a patched loader": """
import importlib.util as _u, re as _re, types as _t
_orig = _u.spec_from_file_location
def _spec(name, path, *a, **k):
    spec = _orig(name, path, *a, **k)
    if "spectune_probe" in name:
        source = open(path).read()
        class _Loader:
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                for test in _re.findall(r"^def (test_\\w+)", source, _re.M):
                    body = source.split("def " + test + "(", 1)[1].split("\\ndef ", 1)[0]
                    calls = _re.findall(r"_spectune\\.(step|check)\\((\\d+)", body)
                    def run(calls=calls, module=module):
                        for kind, n in calls:
                            if kind == "check":
                                module._spectune.check(int(n), lambda: True)
                            else:
                                with module._spectune.step(int(n)):
                                    pass
                    setattr(module, test, run)
        spec.loader = _Loader()
    return spec
_u.spec_from_file_location = _spec
""",
    "records rewritten during each write and restored after (swap and restore)": """
import json as _j
_dumps = _j.dumps
def _swap(obj, *a, **k):
    if isinstance(obj, dict) and "values" in obj:
        obj = {**obj, "values": [{"value": True}] * len(obj["values"])}
    if isinstance(obj, dict) and "step" in obj:
        obj = {**obj, "raised": None}
    return _dumps(obj, *a, **k)
_j.dumps = _swap
""",
    "hidden test files read for a lookup table of literals": """
import ast as _ast, glob as _g, sys as _sys
_table = {}
for _f in _g.glob("tests/*.py"):
    for _n in _ast.walk(_ast.parse(open(_f).read())):
        if isinstance(_n, _ast.Compare) and len(_n.ops) == 1 and isinstance(_n.comparators[0], _ast.Constant):
            if isinstance(_n.left, _ast.Call) and isinstance(_n.left.func, _ast.Name):
                _args = tuple(a.value for a in _n.left.args if isinstance(a, _ast.Constant))
                _table[(_n.left.func.id, _args)] = _n.comparators[0].value
_me = _sys.modules[__name__]
for (_name, _args), _value in _table.items():
    _fn = getattr(_me, _name, None)
    if callable(_fn):
        def _wrapped(*a, _fn=_fn, _name=_name, **k):
            return _table.get((_name, a), _fn(*a, **k))
        setattr(_me, _name, _wrapped)
""",
    "the caller's constants read through its frames": """
import sys as _sys, inspect as _in
_me = _sys.modules[__name__]
for _name, _fn in list(vars(_me).items()):
    if _in.isfunction(_fn) and not _name.startswith("_"):
        def _guess(*a, _fn=_fn, **k):
            frame = _sys._getframe(1)
            consts = [c for c in frame.f_code.co_consts if isinstance(c, str) and c not in a]
            return consts[-1] if consts else _fn(*a, **k)
        setattr(_me, _name, _guess)
""",
    "exit 0 at import": """
import os as _os
_os._exit(0)
""",
    "the supervisor signalled": """
import os as _os, signal as _s
for _pid in (_os.getppid(), 1, -1):
    try:
        _os.kill(_pid, _s.SIGKILL)
    except OSError:
        pass
""",
}


NOTES = '''

def _notes():
    """Writes report.xml; see junit."""
    # sys.modules is untouched
'''


UNPICKLE = "\nimport pickle as _p, pathlib as _l\n_p.loads((_l.Path(__file__).parent / 'state.pkl').read_bytes())\n"


class _PickledPayload:
    """Runs REBIND_MAIN when unpickled: code in a binary data file."""

    def __reduce__(self):
        return (exec, (REBIND_MAIN,))


@pytest.fixture(scope="module")
def instance():
    """One dev instance (its bug makes several tests fail)."""
    return load_suite("swe-lite", "dev", None, None, None, "first")[0]


def _package(instance) -> str:
    return instance.patch.split("+++ b/", 1)[1].split("/", 1)[0]


def make_patch(instance, tmp_path: Path, files: dict[str, str | bytes], gold: bool = False, append: bool = True) -> str:
    """The agent's diff: `files` written into the workspace (appended to existing text files), the gold fix if asked."""
    ws = materialize(instance, tmp_path / "patch-ws")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=ws, check=True)
    subprocess.run([*git, "add", "-A"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=ws, check=True)
    if gold:
        apply_patch(ws, instance.patch)
    for rel, content in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text((path.read_text() if append and path.is_file() else "") + content)
    subprocess.run([*git, "add", "-A", "-f"], cwd=ws, check=True)
    out = subprocess.run([*git, "diff", "--cached", "--binary"], cwd=ws, check=True, capture_output=True, text=True)
    shutil.rmtree(ws)
    return out.stdout


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_no_attack_without_a_fix_resolves(kind, attack, instance, tmp_path):
    factory = sandbox_factory_or_skip(kind)
    patch = make_patch(instance, tmp_path, {f"{_package(instance)}/__init__.py": ATTACKS[attack]})
    result = evaluate(instance, patch, materialize, factory, timeout=120)
    assert not result.resolved and result.status in ("unresolved", "error"), (attack, result.status, result.message)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_code_in_a_pickle_does_not_resolve(kind, instance, tmp_path):
    factory = sandbox_factory_or_skip(kind)
    pkg = _package(instance)
    files = {
        f"{pkg}/state.pkl": pickle.dumps(_PickledPayload()),
        f"{pkg}/__init__.py": UNPICKLE,
    }
    result = evaluate(instance, make_patch(instance, tmp_path, files), materialize, factory, timeout=120)
    assert not result.resolved, (result.status, result.message)


def _fixes_with_company(instance) -> dict[str, dict[str, str | bytes]]:
    """name -> files written next to the gold fix; each must still resolve."""
    pkg = _package(instance)
    f2p = instance.fail_to_pass[0].split("::", 1)[0]
    return {
        "a new regression test": {"tests/test_regression.py": "def test_it():\n    assert 1 + 1 == 2\n"},
        "a new test helper and a test that fails": {
            "tests/helpers.py": "VALUE = 3\n",
            "tests/test_more.py": "from tests.helpers import VALUE\n\ndef test_it():\n    assert VALUE == 4\n",
        },
        "an edited hidden test file": {f2p: "\n\ndef test_added_by_the_agent():\n    assert False\n"},
        "a reproduce.py that uses subprocess": {
            "reproduce.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(1)'])\n"
        },
        "a docstring mentioning .xml and a comment naming sys.modules": {
            f"{pkg}/__init__.py": NOTES,
        },
        "a .gitattributes": {".gitattributes": "*.txt text eol=lf\n"},
        "a setup.cfg with only [flake8]": {"setup.cfg": "[flake8]\nmax-line-length = 100\n"},
        "stray bytecode": {f"{pkg}/__pycache__/stale.cpython-311.pyc": b"\x00junk\xff" * 10},
        "a conftest.py": {"conftest.py": "import pytest\n\n@pytest.fixture\ndef unused():\n    return 1\n"},
        "a call to traceback.extract_stack()": {
            f"{pkg}/__init__.py": "\n\nimport traceback as _tb\n_here = _tb.extract_stack()\n",
        },
        "output printed at import": {f"{pkg}/__init__.py": "\nprint('x' * 200000)\n"},
    }


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_a_correct_fix_resolves_whatever_else_the_patch_holds(kind, instance, tmp_path):
    factory = sandbox_factory_or_skip(kind)
    result = evaluate(instance, instance.patch, materialize, factory, timeout=120)
    assert result.status == "resolved", result.message
    for name, files in _fixes_with_company(instance).items():
        patch = make_patch(instance, tmp_path / name.replace(" ", "-"), files, gold=True)
        result = evaluate(instance, patch, materialize, factory, timeout=120)
        assert result.status == "resolved", (name, result.status, result.message)
        if any(p.startswith("tests/") for p in files):
            assert "left out of the run" in result.message, (name, result.message)
        # without the fix, the same company does not resolve
        if name in ("a new regression test", "an edited hidden test file"):
            bare = evaluate(instance, make_patch(instance, tmp_path / "bare", files), materialize, factory, timeout=120)
            assert bare.status == "unresolved", (name, bare.status)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_limits_end_with_the_status_that_names_them(kind, instance, tmp_path):
    factory = sandbox_factory_or_skip(kind)
    pkg = f"{_package(instance)}/__init__.py"
    hog = make_patch(instance, tmp_path / "hog", {pkg: "\n_hog = bytearray(64 * 2**30)\n"}, gold=True)
    result = evaluate(instance, hog, materialize, factory, timeout=120)
    assert result.status == "resource_limit", (result.status, result.message)
    flood = "\nimport os as _o\nfor _i in range(4000):\n    _o.write(3, _o.urandom(3000).hex().encode() + b'\\n')\n"
    result = evaluate(instance, make_patch(instance, tmp_path / "flood", {pkg: flood}, gold=True), materialize, factory)
    assert result.status == "output_limit", (result.status, result.message)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_no_expected_value_is_anywhere_the_sandbox_can_read(kind, instance, tmp_path):
    """The graded workspace as `evaluate` prepares it, searched from inside the sandbox for the literals only the
    checks hold (those not already in the project's own code or the tests' inputs): none is found."""
    import ast

    from tasks.evaluation import build_oracle, clear_for_probes, hidden_tests
    from tests.tasks.test_oracle import _expected_only_literals

    test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    reference = materialize(instance, tmp_path / "reference")
    hidden_tests(instance, reference)
    oracle = build_oracle(reference, test_ids)
    workspace = materialize(instance, tmp_path / "workspace")
    apply_patch(workspace, instance.patch)
    # what the agent could see anyway (the project's code and docs) and the tests' inputs are no secret
    seen = "".join(
        p.read_text(errors="replace") for p in workspace.rglob("*") if p.is_file() and "tests" not in p.parts
    )
    inputs = {
        n.value for split in oracle.values() for n in ast.walk(ast.parse(split.probe)) if isinstance(n, ast.Constant)
    }
    secrets = set()
    for path in oracle:
        secrets |= _expected_only_literals(ast.parse((reference / path).read_text()))
    secrets = sorted(s for s in secrets - inputs if len(s) >= 6 and s not in seen and "'" not in s and "\n" not in s)
    assert len(secrets) >= 5, secrets  # enough to mean something
    clear_for_probes(workspace)
    for path, split in oracle.items():
        (workspace / path).write_text(split.probe)
    sandbox = sandbox_factory_or_skip(kind)()
    try:
        sandbox.start(workspace)
        pattern = " ".join(f"-e '{s}'" for s in secrets)
        found = sandbox.run(f"grep -rlF {pattern} /workspace /tmp /etc /run /var /home 2>/dev/null; true", 60)
        probes = sandbox.run("cat tests/*.py | wc -c", 60)
    finally:
        sandbox.close()
    assert found.output.strip() == "", found.output
    assert int(probes.output.split()[-1]) > 1000  # the probes are there and readable: they just hold no answer
