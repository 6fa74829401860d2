"""The lowest floor's shared facts: one cache root, files written whole or not at all, folders built once, the
user's errors told from bugs."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.build_once import build_once
from common.cache import cache_root
from common.errors import ConfigError, UnsupportedConfig
from common.files import atomic_path, write_atomic


def test_the_cache_root_is_spectune_cache_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "mine"
    assert cache_root("gguf") == tmp_path / "mine" / "gguf"
    monkeypatch.delenv("SPECTUNE_CACHE")
    assert cache_root("llama.cpp") == tmp_path / "xdg" / "spectune" / "llama.cpp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root("tiny") == tmp_path / "home" / ".cache" / "spectune" / "tiny"
    assert not (tmp_path / "home").exists()  # a path, not a folder made on the way


def test_every_cache_of_spectune_moves_with_one_variable(monkeypatch, tmp_path):
    from bench.engine import cache_dir
    from engine.forward_plan import cache_file
    from serving.gguf_cache import cache_file as gguf_file
    from serving.llama_binary import build_dir
    from tasks.sandbox.task_python import task_python_root

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECTUNE_FORWARD_PLANS", raising=False)
    monkeypatch.delenv("SPECTUNE_TASK_PYTHON_DIR", raising=False)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for path in (cache_dir(), cache_file(), gguf_file("m", [model], "f32"), build_dir(), task_python_root()):
        assert path.is_relative_to(tmp_path), path


def test_an_atomic_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "deep" / "out.json"
    write_atomic(path, "first\n")
    write_atomic(path, "second ü\n")
    assert path.read_text(encoding="utf-8") == "second ü\n"
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]  # no temp file left behind


def test_a_write_that_fails_keeps_the_previous_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_text("previous")
    with pytest.raises(RuntimeError, match="killed mid-write"), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def _model(folder: Path, calls: list[Path]) -> None:
    calls.append(folder)
    folder.mkdir(exist_ok=True)
    (folder / "weights.bin").write_bytes(b"w")
    (folder / "config.json").write_text("{}")


def test_a_folder_is_built_once_and_then_reused(tmp_path):
    calls: list[Path] = []
    out = build_once(tmp_path / "tiny" / "target", lambda d: _model(d, calls))
    again = build_once(tmp_path / "tiny" / "target", lambda d: _model(d, calls))
    assert out == again == tmp_path / "tiny" / "target" and len(calls) == 1
    assert calls[0] != out  # built aside, then renamed into place
    assert (out / "weights.bin").read_bytes() == b"w"
    assert [p.name for p in out.parent.iterdir()] == ["target"]


def test_a_failed_build_leaves_nothing_and_a_lost_race_keeps_the_winner(tmp_path):
    def crash(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"h")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_once(tmp_path / "m", crash)
    assert list(tmp_path.iterdir()) == []

    def race(folder: Path) -> None:  # another process finishes the same folder while this one builds
        _model(tmp_path / "m", [])
        (tmp_path / "m" / "weights.bin").write_bytes(b"theirs")
        _model(folder, [])

    out = build_once(tmp_path / "m", race)
    assert (out / "weights.bin").read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_the_users_errors_are_value_errors_and_unsupported_is_one_of_them():
    # Code and tests that catch ValueError keep catching both; a plain ValueError is not the user's.
    assert issubclass(UnsupportedConfig, ConfigError) and issubclass(ConfigError, ValueError)
    assert not isinstance(ValueError("a bug"), ConfigError)
