"""Content digests: what a model file or folder holds, wherever it lies, cached until the file changes."""

from __future__ import annotations

import hashlib
import os

from common.digest import content_digest, file_digest


def test_two_copies_in_other_places_have_one_digest_and_a_change_shows(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    a, b = tmp_path / "machine-a" / "model", tmp_path / "machine-b" / "elsewhere"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / "config.json").write_text('{"layers": 2}')
        (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    assert content_digest(a) == content_digest(b)
    assert file_digest(a / "config.json") == hashlib.sha256(b'{"layers": 2}').hexdigest()
    (b / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 63 + b"\x01" * 256)
    assert content_digest(a) != content_digest(b)
    (b / "sub" / "weights.bin").rename(b / "sub" / "other.bin")  # same bytes under another name: another model
    (b / "sub" / "other.bin").write_bytes(bytes(range(256)) * 64)
    assert content_digest(a) != content_digest(b)


def test_the_cache_is_keyed_by_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 100)
    first = file_digest(f)
    assert list((tmp_path / "cache" / "digests").iterdir())  # remembered
    stat = f.stat()
    f.write_bytes(b"GGUF" + b"\1" * 100)  # same size; a new mtime
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert file_digest(f) != first


def test_a_hub_id_is_its_own_name():
    assert content_digest("Qwen/Qwen2.5-7B-Instruct") == content_digest("Qwen/Qwen2.5-7B-Instruct")
    assert content_digest("Qwen/Qwen2.5-7B-Instruct") != content_digest("Qwen/Qwen2.5-0.5B-Instruct")
