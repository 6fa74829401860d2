#!/usr/bin/env bash
# spectune's GPU checks in one command, from a bare copy of the repo on a CUDA machine:
#
#   bash bench/gpu_check.sh OUT_DIR [options of python -m bench.gpu_check]
#   bash bench/gpu_check.sh --dry-run            # list the commands; needs no GPU
#   bash bench/gpu_check.sh OUT_DIR --parts llama --budget-s 900   # llama.cpp built with CUDA, draft-mtp on it
#   bash bench/gpu_check.sh --fetch-wheels .cache/gpu-check-wheels   # here, before a run on an offline machine
#
# The driver needs only the standard library, so the machine's own python3 (or $PYTHON) starts it before
# anything is installed; it then makes .venv and installs the project itself (bench/gpu_check/ says how).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
if [[ $# -ge 1 && "$1" != -* ]]; then
    out="$1"
    shift
    set -- --out "$out" "$@"
fi
PYTHONUNBUFFERED=1 exec "$python" -m bench.gpu_check "$@"
