"""Packaging: spectune installs beside a user's own CUDA torch, and swebench is an optional extra.

pyproject.toml declares a torch floor, never an exact pin; the exact CPU torch lives in
constraints/cpu.txt, which CI (.ci/run) and the README's set-up pass to pip. swebench, needed only
by the swe-bench-lite suite, is the `swebench` extra (the dev extra pulls it in for the tests), and
its absence is a one-line error that names the extra.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tasks import swebench_eval

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = "constraints/cpu.txt"
CPU_TORCH = "2.13.0"
PIP_INSTALL = re.compile(r"pip install (?:--quiet )?-c (\S+) -e '\.\[([a-z,]+)\]'")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    return {(r := Requirement(line)).name.lower(): r for line in lines}


def _readme_setup() -> str:
    """The README's first fenced block: the set-up command a new user types."""
    return re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def test_pyproject_declares_a_torch_floor_not_a_pin():
    torch = _requirements(_project()["dependencies"])["torch"]
    assert all(s.operator in (">=", ">") for s in torch.specifier), f"torch must be a floor, not {torch}"
    assert torch.specifier.contains(CPU_TORCH), "the CPU pin must satisfy the floor"
    assert not torch.specifier.contains("2.5.1"), "transformers 5.x treats torch < 2.6 as unavailable"


def test_constraints_file_pins_the_cpu_torch():
    lines = [line.strip() for line in (ROOT / CONSTRAINTS).read_text().splitlines()]
    pins = _requirements([line for line in lines if line and not line.startswith("#")])
    assert str(pins["torch"].specifier) == f"=={CPU_TORCH}"


def test_ci_and_the_readme_setup_install_with_the_constraints_file():
    ci = PIP_INSTALL.findall((ROOT / ".ci/run").read_text())
    readme = PIP_INSTALL.findall(_readme_setup())
    assert ci == [(CONSTRAINTS, "dev")], ".ci/run must install -c constraints/cpu.txt -e '.[dev]'"
    assert readme == ci, "the README set-up must install what CI installs"
    for text in ((ROOT / ".ci/run").read_text(), _readme_setup()):  # no install of the project without it
        installs = [line for line in text.splitlines() if "pip install" in line and " -e " in line]
        assert installs and all(f"-c {CONSTRAINTS}" in line for line in installs), installs


def test_swebench_is_an_extra_the_dev_extra_includes():
    project = _project()
    assert "swebench" not in _requirements(project["dependencies"])
    assert "docker" in _requirements(project["dependencies"]), "docker stays a normal dependency"
    extras = project["optional-dependencies"]
    assert str(_requirements(extras["swebench"])["swebench"].specifier) == f"=={swebench_eval.SWEBENCH_VERSION}"
    dev = _requirements(extras["dev"])
    assert "swebench" in dev["spectune"].extras, "the tests of swebench_eval need it: dev includes [swebench]"


def test_missing_swebench_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench", None)  # `import swebench` now raises ImportError
    swebench_eval._require_swebench.cache_clear()
    try:
        with pytest.raises(swebench_eval.SwebenchUnavailableError) as info:
            swebench_eval._require_swebench()
    finally:
        monkeypatch.undo()
        swebench_eval._require_swebench.cache_clear()
    message = str(info.value)
    assert "pip install 'spectune[swebench]'" in message and "pip install -e '.[swebench]'" in message
    assert "\n" not in message
