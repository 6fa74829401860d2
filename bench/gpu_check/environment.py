"""The venv every check runs in, made by the standard library alone: `pip install -e '.[dev]'` when PyPI answers,
else a venv over the machine's preinstalled packages with the carried wheels on top (fetch_wheels makes those on a
connected machine); and the environment each check gets."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.gpu_check import REPO
from bench.gpu_check.steps import Runner, Step, last_line

DEFAULT_WHEELS = ".cache/gpu-check-wheels"  # .cache/ is git-ignored: the wheels travel only when carried
PYPI_PROBE = "https://pypi.org/simple/pip/"

# Distributions the project imports that the lent machine's image lacks, or has older than pyproject.toml
# allows (transformers 5.17 < 5.20); --fetch-wheels downloads them at this venv's versions, without
# dependencies (the image holds the rest: torch, numpy, pandas, pyarrow, huggingface_hub, tokenizers, ...).
# mlflow stays out: the tuner runs with tracking=none, and mlflow with its server stack would not fit beside the
# repository in the 64 MiB a device call carries.
OFFLINE_WHEELS = (
    "transformers",
    "datasets",
    "dill",
    "multiprocess",
    "optuna",
    "alembic",
    "mako",
    "sqlalchemy",
    "colorlog",
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
)
# Tags of the lent machine's CPython 3.12 on x86-64 (device README: carrying wheels).
WHEEL_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def pypi_reachable(url: str = PYPI_PROBE, timeout: float = 5.0) -> bool:
    """Whether the package index answers within `timeout` (the lent machines reach nothing outside)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def base_site_dirs() -> list[str]:
    """This interpreter's package folders (the machine's preinstalled torch lives in one of them)."""
    return [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]


def setup_environment(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    """Make the venv the checks run in and install the project; return what was done (runner.results has steps)."""
    venv = Path(os.path.abspath(REPO / args.venv))  # not resolve(): a venv's bin/python is a link out of it
    python = venv / "bin" / "python"
    record: dict[str, Any] = {"venv": str(venv)}
    if args.python:
        record.update(mode="given", python=args.python, note=f"no set-up: every check runs under {args.python}")
        return record
    if python.exists() and _imports_torch(python):
        record.update(mode="reused", python=str(python), note=f"{venv} already imports torch: reused as it is")
        return record
    online = pypi_reachable(args.index_probe)
    record["pypi_reachable"] = online
    if online:
        shutil.rmtree(venv, ignore_errors=True)
        made = runner.run(Step("setup", "venv", (sys.executable, "-m", "venv", str(venv)), 60, 0))
        install = (str(python), "-m", "pip", "install", "-q", "-e", ".[dev]")
        if made["status"] == "ok" and runner.run(Step("setup", "pip-install", install, 300, 0))["status"] == "ok":
            record.update(mode="pypi", python=str(python), note="PyPI reachable: pip install -e '.[dev]' (CUDA torch)")
            return record
        record["pypi_failed"] = True
    # Offline: the venv sees the image's packages through a .pth file (addsitedir also runs their own .pth
    # files); pip, run from this interpreter with --python, installs the carried wheels into the venv, whose
    # site-packages come first on sys.path, so they replace the image's older copies.
    shutil.rmtree(venv, ignore_errors=True)
    made = runner.run(Step("setup", "venv", (sys.executable, "-m", "venv", "--without-pip", str(venv)), 60, 0))
    if made["status"] != "ok":
        record.update(mode="offline-failed", python=str(python), note="python3 -m venv failed; nothing can run")
        return record
    site_dirs = base_site_dirs()
    pth = _venv_site(python) / "_gpu_check_base.pth"
    pth.write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs))
    wheels_dir = (REPO / args.wheels).resolve()
    wheels = sorted(str(p) for p in wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []
    pip = (sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps")
    carried = "none carried"
    if wheels:
        step = Step("setup", "carried-wheels", (*pip, "--ignore-installed", "--no-compile", *wheels), 120, 0)
        names = ", ".join(Path(w).name.split("-")[0] for w in wheels)
        carried = names if runner.run(step)["status"] == "ok" else f"installing them failed ({names})"
    # The project itself, editable (setuptools from the image); PYTHONPATH covers it if this fails.
    runner.run(Step("setup", "project", (*pip, "--no-build-isolation", "-e", "."), 60, 0))
    record.update(
        mode="offline",
        python=str(python),
        base_site=site_dirs,
        wheels=[Path(w).name for w in wheels],
        note=f"PyPI unreachable{' after a failed install' if record.get('pypi_failed') else ''}: the venv uses "
        f"the machine's preinstalled torch and packages ({sys.executable}); carried wheels over them: {carried}",
    )
    return record


def _venv_site(python: Path) -> Path:
    lib = python.parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages"))
    return found[0] if found else lib / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _imports_torch(python: Path) -> bool:
    try:
        return subprocess.run([str(python), "-c", "import torch"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def step_env(python: str) -> dict[str, str]:
    """The environment of every check: the venv first on PATH, the repo importable, nothing fetched from the hub."""
    env = dict(os.environ)
    bindir = str(Path(python).parent)
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MPLBACKEND="Agg",
        COLUMNS="240",  # rich wraps at 80 columns without a terminal: the tuner's winner lines stay whole
    )
    if (Path(bindir).parent / "pyvenv.cfg").is_file():
        env["VIRTUAL_ENV"] = str(Path(bindir).parent)
    return env


def fetch_wheels(dest: Path, python_version: str = "3.12") -> int:
    """Download OFFLINE_WHEELS at this environment's versions for the lent machine's python (run where pip works)."""
    from importlib.metadata import PackageNotFoundError, version

    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    failed = []
    for name in OFFLINE_WHEELS:
        try:
            pin = f"{name}=={version(name)}"
        except PackageNotFoundError:
            failed.append(f"{name}: not installed here (install the project first)")
            continue
        download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
        download += ["--python-version", python_version, "--implementation", "cp", *platforms, pin]
        if subprocess.run(download, capture_output=True, text=True).returncode == 0:
            continue
        # Some pure-Python releases exist only as an sdist (antlr4-python3-runtime 4.9.3): build their wheel here.
        build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), pin]
        built = subprocess.run(build, capture_output=True, text=True)
        if built.returncode != 0:
            failed.append(f"{pin}: {last_line(built.stderr)}")
    wheels = sorted(dest.glob("*.whl"))
    tag = "cp" + python_version.replace(".", "")
    impure = [w.name for w in wheels if not w.name.endswith("-none-any.whl") and tag not in w.name]
    size = sum(w.stat().st_size for w in wheels) / 2**20
    for w in wheels:
        print(w.name)
    carried = dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {dest}; name {carried} in the device run's carry")
    for line in failed + [f"{w}: built for another python" for w in impure]:
        print(f"error: {line}", file=sys.stderr)
    return 1 if failed or impure else 0
