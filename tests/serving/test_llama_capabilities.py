"""The llama-server capability probe: `--help` parsed into kinds and flags, cached per build, and what uses it.

Fake help texts in llama.cpp's own layout (common_arg::to_string: aliases after commas at column 0, the
description padded to column 40 or on the next line, wrapped at 70 characters), fake binaries (shell
scripts that print a help text and count their runs), the tuner's space and the llama-server backend
given a build without some kinds, and the real pinned binary (skips without it). $SPECTUNE_CACHE points
at tmp_path: no test writes the user's cache.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from engine.engine import EngineConfig
from export.llama_server import KNOWN_FLAGS, SPEC_TYPES
from runners.backends.llama_server import ServerBackend, ServerSettings
from serving.llama_binary import LlamaBinary
from serving.llama_capabilities import cache_path, missing_kinds, parse_help, probe
from tuner.server_kinds import main
from tuner.setup import server_capabilities
from tuner.space import drafter_knobs, load_space, spec_kinds

ALL = ",".join(SPEC_TYPES)
PAD = " " * 40


def _help(spec_entry: str) -> str:
    """A help text in the real layout with `spec_entry` as the --spec-type entry ("" for none)."""
    return "\n".join(
        [
            "----- common params -----",
            "",
            "-h,    --help, --usage                  print usage and exit",
            "-t,    --threads N                      number of CPU threads to use during generation (default: -1)",
            f"{PAD}(env: LLAMA_ARG_THREADS)",
            "-kvo,  --kv-offload, -nkvo, --no-kv-offload",
            f"{PAD}whether to enable KV cache offloading (default: enabled)",
            "",
            "",
            "----- speculative params -----",
            "",
            "--spec-draft-threads, -td, --threads-draft N",
            f"{PAD}number of threads to use during generation (default: same as",
            f"{PAD}--threads)",
            "--spec-draft-n-max N                    number of tokens to draft for speculative decoding (default: 3)",
            "--spec-draft-p-min, --draft-p-min P     minimum speculative decoding probability (greedy) (default: 0.00)",
            "--spec-draft-model, -md, --model-draft FNAME",
            f"{PAD}draft model for speculative decoding (default: unused)",
            *([spec_entry] if spec_entry else []),
            "--spec-ngram-simple-size-n N            ngram size N for ngram-simple speculative decoding,",
            f"{PAD}length of lookup n-gram (default: 12)",
            "--fim-qwen-1.5b-default                 use default Qwen 2.5 Coder 1.5B (note: can download",
            f"{PAD}weights from the internet)",
            "",
        ]
    )


def _spec_entry(kinds: str) -> str:
    """The --spec-type entry as the pinned build prints it: the kinds as the value hint, help on the next lines."""
    return "\n".join(
        [
            f"--spec-type {kinds}",
            f"{PAD}comma-separated list of types of speculative decoding to use (default:",
            f"{PAD}none)",
            PAD,
            f"{PAD}(env: LLAMA_ARG_SPEC_TYPE)",
        ]
    )


FULL = _help(_spec_entry(ALL))
NO_HEADS = _help(_spec_entry(",".join(k for k in SPEC_TYPES if k not in ("draft-eagle3", "draft-mtp"))))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every probe's cache under tmp_path."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake(tmp_path: Path, text: str, name: str = "llama-server", exit_code: int = 0) -> tuple[Path, Path]:
    """An executable that prints `text` (from a file beside it), appends a line to a counter file per run and
    exits with `exit_code` (printing an error line to stderr when nonzero); returns (binary, counter)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "help.txt").write_text(text)
    counter = folder / "runs"
    binary = folder / "llama-server"
    failure = f'echo "load_backend: ok" >&2\necho "error: invalid argument: --help" >&2\nexit {exit_code}\n'
    binary.write_text(
        f'#!/bin/sh\necho run >> "{counter}"\ncat "{folder / "help.txt"}"\n' + (failure if exit_code else "")
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary, counter


def _runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_the_full_help_gives_every_kind_in_order_and_every_flag_alias():
    caps = parse_help(FULL, "llama-server")
    assert caps.spec_types == SPEC_TYPES
    for flag in ("-h", "--help", "--usage", "-kvo", "--no-kv-offload", "-td", "--threads-draft", "--spec-type"):
        assert flag in caps.flags, flag
    assert {"-md", "--model-draft", "--spec-draft-model", "--spec-draft-p-min", "--draft-p-min"} <= caps.flags
    assert "--fim-qwen-1.5b-default" in caps.flags
    assert "----- common params -----" not in caps.flags and "N" not in caps.flags
    # "--threads)" in a wrapped description is not an entry; --threads is, from its own line
    assert "--threads)" not in caps.flags and "--threads" in caps.flags
    assert caps.flags == {
        *("-h", "--help", "--usage", "-t", "--threads", "-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"),
        *("--spec-draft-threads", "-td", "--threads-draft", "--spec-draft-n-max", "--spec-draft-p-min"),
        *("--draft-p-min", "--spec-draft-model", "-md", "--model-draft", "--spec-type"),
        *("--spec-ngram-simple-size-n", "--fim-qwen-1.5b-default"),
    }


def test_a_build_without_the_head_kinds_lists_only_what_it_has():
    caps = parse_help(NO_HEADS, "/opt/old/llama-server")
    assert "draft-eagle3" not in caps.spec_types and "draft-mtp" not in caps.spec_types
    assert caps.spec_types[:2] == ("none", "draft-simple") and len(caps.spec_types) == 9
    assert missing_kinds("draft-eagle3", caps) == ["draft-eagle3"]
    assert missing_kinds("ngram-simple,draft-mtp,draft-eagle3", caps) == ["draft-mtp", "draft-eagle3"]
    assert missing_kinds([("-m", "t.gguf"), ("--spec-type", "draft-mtp"), ("--temp", "0")], caps) == ["draft-mtp"]
    assert missing_kinds(["-m", "t.gguf", "--spec-type", "ngram-simple", "-np", "1"], caps) == []


def test_an_old_build_without_spec_type_is_one_line_naming_the_binary():
    with pytest.raises(ValueError) as err:
        parse_help(_help(""), "/opt/b4000/llama-server")
    message = str(err.value)
    assert "\n" not in message
    assert "/opt/b4000/llama-server" in message and "no --spec-type" in message and "old" in message


def test_kinds_listed_in_a_wrapped_description_or_as_a_bar_list():
    wrapped = "\n".join(
        [
            "--spec-type TYPES                       comma-separated list of the speculative decoding types to use,",
            f"{PAD}one or more of: none, draft-simple, draft-eagle3, draft-mtp,",
            f"{PAD}ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache",
            f"{PAD}(default: ngram-simple,ngram-mod)",
            f"{PAD}(env: LLAMA_ARG_SPEC_TYPE)",
        ]
    )
    caps = parse_help(_help(wrapped))
    assert caps.spec_types == (
        "none",
        "draft-simple",
        "draft-eagle3",
        "draft-mtp",
        "ngram-simple",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-mod",
        "ngram-cache",
    )
    bars = "\n".join(
        [
            "--spec-type [none|ngram-cache|ngram-simple|ngram-map-k|ngram-map-k4v|ngram-mod]",
            f"{PAD}type of speculative decoding to use when no draft model is provided",
            f"{PAD}(default: none)",
        ]
    )
    caps = parse_help(_help(bars))
    assert caps.spec_types == ("none", "ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")


def test_probe_caches_per_build_and_reprobes_a_rebuilt_or_corrupt_one(tmp_path, cache):
    binary, counter = _fake(tmp_path, NO_HEADS)
    first = probe(binary)
    assert _runs(counter) == 1 and "draft-mtp" not in first.spec_types
    assert first.binary == str(binary.resolve())
    file = cache_path(binary)
    assert file.is_file() and cache in file.parents
    assert probe(str(binary)) == first and _runs(counter) == 1  # the cache answered, the binary did not run
    info = binary.stat()
    os.utime(binary, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))  # a rebuild: a new mtime
    assert cache_path(binary) != file
    assert probe(binary) == first and _runs(counter) == 2
    rebuilt = cache_path(binary)
    rebuilt.write_text('{"spec_types": ["none", ')  # a cache file cut short
    assert probe(binary) == first and _runs(counter) == 3
    assert json.loads(rebuilt.read_text())["spec_types"] == list(first.spec_types)  # rewritten whole
    assert probe(binary) == first and _runs(counter) == 3


def test_a_binary_that_fails_is_one_runtime_error_line(tmp_path):
    binary, counter = _fake(tmp_path, "", exit_code=3)
    with pytest.raises(RuntimeError) as err:
        probe(binary)
    message = str(err.value)
    assert "\n" not in message and str(binary.resolve()) in message
    assert "exit code 3" in message and message.endswith("error: invalid argument: --help")
    assert _runs(counter) == 1 and not cache_path(binary).exists()
    with pytest.raises(RuntimeError, match="no such file"):
        probe(tmp_path / "nothing-here")


def test_an_old_build_probed_is_the_parse_error(tmp_path):
    binary, _ = _fake(tmp_path, _help(""))
    with pytest.raises(ValueError, match=r"no --spec-type"):
        probe(binary)


DRAFTERS = {
    "ngram": {"gamma": {"low": 1, "high": 4}},
    "suffix": {"gamma": {"low": 2, "high": 8}, "scope": ["session", "engine"]},
    "mtp": {"gamma": {"low": 1, "high": 4}},
    "eagle3": {"gamma": {"low": 1, "high": 4}},
}


def _server_space(kinds, binary="/opt/mine/llama-server"):
    return load_space(
        {"drafters": DRAFTERS},
        has_draft=True,
        has_mtp=True,
        has_eagle3=True,
        backend="llama-server",
        server_kinds=None if kinds is None else frozenset(kinds),
        server_binary=binary,
    )


def test_the_space_leaves_out_a_drafter_whose_kind_the_binary_lacks():
    space = _server_space([k for k in SPEC_TYPES if k != "draft-eagle3"])
    assert sorted(space.drafters) == ["mtp", "ngram", "suffix"]
    reason = space.left_out["eagle3"]
    assert reason.startswith("this llama-server (/opt/mine/llama-server) has no --spec-type draft-eagle3 (it offers: ")
    assert "draft-mtp" in reason and "ngram-simple" in reason and "draft-eagle3 (" not in reason.split("offers")[1]
    assert space.drafters["ngram"] == _server_space(None).drafters["ngram"]  # the kept ones keep their knobs


def test_without_server_kinds_nothing_changes():
    plain = load_space({"drafters": DRAFTERS}, has_draft=True, has_mtp=True, has_eagle3=True, backend="llama-server")
    assert _server_space(None) == plain and not plain.left_out


def test_suffix_stays_while_one_of_its_scopes_has_a_kind():
    no_mod = _server_space(["none", "ngram-simple", "ngram-map-k4v"])
    assert "suffix" in no_mod.drafters and "ngram" in no_mod.drafters
    assert sorted(no_mod.left_out) == ["eagle3", "mtp"]
    neither = _server_space(["none", "ngram-simple"])
    assert "has no --spec-type ngram-map-k4v, ngram-mod (it offers: ngram-simple)" in neither.left_out["suffix"]
    only_session = load_space(
        {"drafters": {"suffix": {"scope": ["session"]}, "ngram": {}}},
        has_draft=False,
        backend="llama-server",
        server_kinds=frozenset({"none", "ngram-simple", "ngram-mod"}),
    )
    # the default scope (engine) would have a kind here, but the space allows only session
    assert "has no --spec-type ngram-map-k4v" in only_session.left_out["suffix"]
    assert spec_kinds("suffix", {}) == ["ngram-mod"]
    assert spec_kinds("suffix", drafter_knobs("suffix", {"scope": ["session", "engine"]})) == [
        "ngram-map-k4v",
        "ngram-mod",
    ]
    assert spec_kinds("mtp", drafter_knobs("mtp", {"gamma": {"low": 1, "high": 4}})) == ["draft-mtp"]


def test_a_space_with_nothing_the_binary_runs_fails_naming_why():
    with pytest.raises(ValueError, match=r"offers no drafter.*has no --spec-type draft-eagle3"):
        load_space(
            {"drafters": {"eagle3": {}}},
            has_draft=False,
            has_eagle3=True,
            backend="llama-server",
            server_kinds=frozenset({"none", "ngram-simple"}),
        )


def test_the_backend_refuses_a_kind_its_binary_lacks(tmp_path):
    binary, _ = _fake(tmp_path, NO_HEADS)
    found = LlamaBinary(binary, "explicit", "version: fake", None)
    settings = ServerSettings(found, tmp_path / "t.gguf", None, context=64, eagle3_gguf=tmp_path / "h.gguf")
    with pytest.raises(ValueError) as err:
        ServerBackend(EngineConfig(backend="llama-server", drafter="eagle3"), settings, frozenset())
    message = str(err.value)
    assert message.startswith("llama-server cannot run this configuration: drafter=eagle3: this llama-server (")
    assert "has no --spec-type draft-eagle3" in message and "\n" not in message
    backend = ServerBackend(EngineConfig(backend="llama-server", drafter="ngram"), settings, frozenset())
    assert backend.spec_type == "ngram-simple" and backend.server is None  # built, nothing started


def test_the_tuner_probes_the_binary_of_a_llama_server_study(tmp_path, capsys):
    binary, _ = _fake(tmp_path, NO_HEADS)
    cfg = OmegaConf.create({"server": {"binary": str(binary)}})
    caps = server_capabilities(cfg, "llama-server")
    assert caps is not None and "draft-mtp" not in caps.spec_types
    line = capsys.readouterr().out.strip()
    assert line == f"llama-server {binary.resolve()}: --spec-type kinds {', '.join(caps.spec_types)}"
    assert server_capabilities(cfg, "builtin") is None
    missing = OmegaConf.create({"server": {"binary": "/no/such/llama-server"}})
    with pytest.raises(ValueError, match=r"^engine.backend=llama-server: server.binary=/no/such/llama-server"):
        server_capabilities(missing, "llama-server")


def test_the_command_lists_each_drafters_kind_offered_or_left_out(tmp_path, capsys):
    binary, _ = _fake(tmp_path, NO_HEADS)
    assert main(["--binary", str(binary), "--space", "llama-server"]) == 0
    out = capsys.readouterr().out
    assert f"--spec-type kinds: {', '.join(parse_help(NO_HEADS).spec_types)}" in out
    assert "  ngram -> ngram-simple: offered" in out and "  suffix -> ngram-map-k4v | ngram-mod: offered" in out
    assert "  mtp -> draft-mtp: left out: this llama-server (" in out
    assert "  eagle3 -> draft-eagle3: left out: this llama-server (" in out


def test_the_pinned_binary_has_every_kind_and_every_exported_flag(binary):
    caps = probe(binary)
    assert caps.spec_types == SPEC_TYPES
    assert set(KNOWN_FLAGS) <= caps.flags
    assert {"-md", "--spec-draft-p-min", "--spec-type"} <= caps.flags
