"""Every `llama-server.args` the exporter can write is accepted by the real, pinned llama-server.

For each exported configuration (the exporter tests' cases plus the drafters exported with speculation
off): write the files, start llama-server with exactly the file's flags on the bundled GGUFs, serve one
request, and check that speculation is really active (drafted tokens > 0) where the file turns it on and
absent where it says `--spec-type none`. Needs the binary (tests/serving/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from engine.drafters import drafter_needs
from engine.engine import EngineConfig
from export import llama_server, write_exports
from serving.llama_server import LlamaServer, free_port
from tests.export.test_export import CASES, make_record
from tests.serving.test_llama_server import MODELS

# A short function repeated: every lookup kind finds something to draft from
REPEATED = (
    "def total(items):\n    result = 0\n    for item in items:\n        result += item.price\n    return result\n"
)
EXPORTED = {
    **CASES,
    "mtp": EngineConfig(drafter="mtp", gamma=2),
    "eagle3": EngineConfig(drafter="eagle3", gamma=3),
    "eagle3_confidence": EngineConfig(drafter="eagle3", gamma=4, gamma_policy="confidence", confidence=0.2),
    "layer_skip": EngineConfig(drafter="layer_skip", gamma=2),
    "mtp+ngram": EngineConfig(drafter="mtp+ngram", gamma=4, options={"ngram.min_match": 2}),
    "eagle3+ngram": EngineConfig(drafter="eagle3+ngram", gamma=3, options={"ngram.min_match": 2}),
    "ngram_cache": EngineConfig(drafter="ngram_cache", gamma=8),
    "ngram_map_k": EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 2, "size_m": 6}),
    "mtp+ngram_map_k": EngineConfig(drafter="mtp+ngram_map_k", gamma=4, options={"ngram_map_k.size_n": 2}),
    "dflash": EngineConfig(drafter="dflash", gamma=3),
    "dspark": EngineConfig(drafter="dspark", gamma=3),
}


def file_args(path) -> list[str]:
    """The flags of an exported args file as command-line words (comment lines dropped)."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            words += line.split(" ", 1)
    return words


@pytest.fixture(scope="module")
def repetitive_prompt():
    """A prompt that repeats itself, so every lookup kind has something to find."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODELS / "target")
    return tokenizer.encode(REPEATED * 4)


@pytest.mark.parametrize("case", sorted(EXPORTED))
def test_the_exported_flags_start_llama_server_with_speculation_as_written(
    case, binary, ggufs, dflash_gguf, repetitive_prompt, tmp_path
):
    engine = EXPORTED[case]
    record = make_record(
        engine,
        target=str(ggufs["target"]),
        draft=str(ggufs["draft"]),
        mtp=str(ggufs["mtp"]),
        eagle3=str(MODELS / "eagle3"),
        eagle3_gguf=str(ggufs["eagle3"]),
        dflash_gguf=str(dflash_gguf),
    )
    write_exports(tmp_path / "best", record)
    args = file_args(tmp_path / "best" / llama_server.FILE)
    # the MTP layer lives in the mimo2 GGUF (mtp alone or combined)
    model = ggufs["mtp"] if drafter_needs(engine.drafter).mtp else ggufs["target"]
    assert args[args.index("-m") + 1] == str(model) and not any(a.startswith("<") for a in args), args
    spec_type = args[args.index("--spec-type") + 1]
    # The file's own flags, last on the command line, so they are what the server runs (its -m and -c included).
    with LlamaServer(binary, model, args, log_path=tmp_path / "server.log") as server:
        reply = server.post("/completion", {"prompt": repetitive_prompt, "n_predict": 48, "return_tokens": True})
        metrics = server.metrics()
    assert len(reply["tokens"]) > 0
    drafted = reply["timings"].get("draft_n", 0)
    if spec_type == "none":
        assert drafted == 0 and engine.drafter in ("none", "layer_skip"), (case, args)
    else:
        assert drafted > 0, f"{case}: llama-server ran {' '.join(args)} but drafted nothing"
        assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] == drafted


def test_per_level_exports_start_llama_server_with_a_slot_per_agent(binary, ggufs, repetitive_prompt, tmp_path):
    """A concurrency study's llama-server export per level: `-np N` slots that all draft where the level's best is
    ON, and none where speculation is off at that load (export/llama_server.level_args)."""
    from concurrent.futures import ThreadPoolExecutor

    best = {1: EngineConfig(drafter="ngram", gamma=3), 2: EngineConfig(drafter="ngram", gamma=2), 3: None}
    record = make_record(best[1], target=str(ggufs["target"]), context=1024)
    for level, args in llama_server.level_args(record, best).items():
        assert args[args.index("-np") + 1] == str(level) and args[args.index("-c") + 1] == str(1024 * level)
        assert ("--kv-unified" in args) == (level > 1)
        log = tmp_path / f"server-{level}.log"
        with LlamaServer(binary, ggufs["target"], args, log_path=log) as server:

            def ask(slot: int, server=server) -> dict:
                body = {"prompt": repetitive_prompt, "n_predict": 32, "id_slot": slot, "return_tokens": True}
                return server.post("/completion", body)

            with ThreadPoolExecutor(max_workers=level) as pool:
                replies = list(pool.map(ask, range(level)))  # every slot at once
        for reply in replies:
            assert len(reply["tokens"]) > 0
            drafted = reply["timings"].get("draft_n", 0)
            assert drafted > 0 if best[level] is not None else drafted == 0, (level, args)


def test_run_sh_starts_the_measured_binary_with_the_exported_flags_and_it_drafts(
    binary, ggufs, repetitive_prompt, tmp_path
):
    """best/llama-server/run.sh as written: the binary named inside, the real GGUF, drafting on; nothing outlives it."""
    record = make_record(EngineConfig(drafter="ngram", gamma=3), target=str(ggufs["target"]))
    record.server_binary = str(binary.path)
    write_exports(tmp_path / "best", record)
    script = tmp_path / "best" / llama_server.RUN_FILE
    assert str(binary.path) in script.read_text()
    port = free_port()
    log = open(tmp_path / "run.log", "w")  # closed below, once the server is gone
    process = subprocess.Popen(
        [str(script), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: killed whole below
    )
    try:
        body = json.dumps({"prompt": repetitive_prompt, "n_predict": 48}).encode()
        reply = None
        deadline = time.monotonic() + 120
        while reply is None and time.monotonic() < deadline and process.poll() is None:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/completion", data=body, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=60) as answer:
                    reply = json.loads(answer.read())
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)  # still loading
        assert reply is not None, (tmp_path / "run.log").read_text()[-2000:]
        assert reply["timings"]["draft_n"] > 0
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        log.close()
