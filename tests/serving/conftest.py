"""The real llama-server and the bundled models as GGUF, shared by the serving tests.

Needs the pinned binary and converter (`python -m serving.llama_install`): tests that use them skip with
the reason without them, and fail instead when SPECTUNE_REQUIRE_LLAMA=1 says they must be there
(.ci/run builds them once per machine and sets it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from serving.eagle3_gguf import eagle3_gguf
from serving.gguf import converter_dir, export_gguf
from serving.llama_binary import LlamaServerMissing, find_llama_server
from serving.mtp_gguf import export_mtp_gguf
from tests.conftest import built_once

MODELS = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"
REQUIRED = os.environ.get("SPECTUNE_REQUIRE_LLAMA", "") == "1"


@pytest.fixture(scope="session")
def binary():
    """The pinned llama-server (skip, or fail under SPECTUNE_REQUIRE_LLAMA=1, without one)."""
    try:
        found = find_llama_server()
        converter_dir()
    except (LlamaServerMissing, FileNotFoundError) as exc:
        if REQUIRED:
            raise
        pytest.skip(f"no llama-server here: {exc}")
    return found


@pytest.fixture(scope="session")
def ggufs(binary, tmp_path_factory):
    """The bundled target and draft as f32 GGUF files, target + MTP module as one mimo2 GGUF and the bundled
    EAGLE-3 head as its own GGUF (once per session)."""
    names = {"target": "target.gguf", "draft": "draft.gguf", "mtp": "mimo2.gguf", "eagle3": "eagle3.gguf"}

    def convert(root: Path) -> None:
        for name in ("target", "draft"):
            export_gguf(MODELS / name, root / names[name], "f32")
        export_mtp_gguf(MODELS / "target", MODELS / "mtp", root / names["mtp"], "f32")
        eagle3_gguf(MODELS / "eagle3", MODELS / "target", root / names["eagle3"], "f32")

    root = built_once(tmp_path_factory, "gguf", convert)  # once per run: xdist's workers share the files
    return {name: root / file for name, file in names.items()}


@pytest.fixture(scope="session")
def gguf_only(ggufs, tmp_path_factory):
    """The stand-in files, each alone in a folder without any Hugging Face file (a llama.cpp user's case)."""
    import shutil

    folder = tmp_path_factory.mktemp("gguf-only")
    return {name: Path(shutil.copy(path, folder / f"Tiny-{name}-F32.gguf")) for name, path in ggufs.items()}


@pytest.fixture(scope="session")
def dflash_gguf(binary, tmp_path_factory):
    """A random DFlash draft for the bundled target as GGUF (tests/serving/dflash_draft.py), once per session."""
    from tests.serving.dflash_draft import random_dflash_gguf

    folder = built_once(tmp_path_factory, "dflash", lambda root: random_dflash_gguf(MODELS / "target", root))
    return folder / "dflash.gguf"  # random_dflash_gguf's file name


def server_pids(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (a test's own GGUF path): what a test started.

    Under pytest-xdist the GGUF files are shared by the workers, so only servers started from this worker count
    (a server inherits the worker's environment, PYTEST_XDIST_WORKER included, and keeps it when orphaned)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (proc / "stat").read_text().split()[2]
                environ = (proc / "environ").read_bytes().split(b"\0") if worker else []
            except OSError:
                continue
            if worker and f"PYTEST_XDIST_WORKER={worker}".encode() not in environ:
                continue
            if marker in cmdline and "llama-server" in cmdline and state != "Z":
                pids.append(int(proc.name))
    return pids
