"""A real llama-server on the bundled models: lifecycle, token-id requests, speculation active, nothing left running.

The binary and the GGUF files come from tests/serving/conftest.py (skip without a binary, fail under
SPECTUNE_REQUIRE_LLAMA=1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.llama_server import LlamaServer, LlamaServerError

MODELS = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny"


@pytest.fixture(scope="module")
def prompt_ids():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODELS / "target")
    return tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fi")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _greedy(server: LlamaServer, ids: list[int], n: int) -> dict:
    body = {"prompt": ids, "n_predict": n, "temperature": 0.0, "top_k": 1, "return_tokens": True, "cache_prompt": True}
    return server.post("/completion", body)


def test_serves_token_ids_greedily_like_spectunes_engine_and_stops_cleanly(binary, ggufs, prompt_ids, tmp_path):
    from engine.engine import Engine, EngineConfig
    from engine.loading import load_model

    with LlamaServer(binary, ggufs["target"], ["-t", "1"], log_path=tmp_path / "server.log") as server:
        reply = _greedy(server, prompt_ids, 24)
        pid = server.process.pid
        assert reply["timings"]["prompt_n"] == len(prompt_ids)
    assert not _alive(pid)
    target = load_model(str(MODELS / "target"), device="cpu", dtype="float32")
    ours = Engine(target, EngineConfig(drafter="none")).generate(prompt_ids, 24, stop_tokens=frozenset()).tokens
    assert reply["tokens"] == ours[: len(reply["tokens"])] and len(reply["tokens"]) > 0


@pytest.mark.parametrize(
    "args",
    [
        ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "8"],
        ["--spec-type", "draft-simple", "--spec-draft-n-max", "4"],
    ],
)
def test_speculation_drafts_when_asked(binary, ggufs, prompt_ids, args, tmp_path):
    if "draft-simple" in args:
        args = [*args, "-md", str(ggufs["draft"])]
    with LlamaServer(binary, ggufs["target"], args, log_path=tmp_path / "server.log") as server:
        repeated = prompt_ids * 3  # something to look up
        reply = _greedy(server, repeated, 48)
    assert reply["timings"].get("draft_n", 0) > 0, reply["timings"]


def test_a_refused_flag_is_one_clear_error_naming_it(binary, ggufs, tmp_path):
    with pytest.raises(LlamaServerError) as err:
        LlamaServer(binary, ggufs["target"], ["--spec-type", "no-such-kind"], log_path=tmp_path / "s.log").start()
    assert "no-such-kind" in str(err.value) or "spec-type" in str(err.value)


def test_a_killed_parent_leaves_no_server_behind(binary, ggufs, tmp_path):
    log = tmp_path / "k.log"
    script = (
        "import sys, time\n"
        "from serving.llama_binary import find_llama_server\n"
        "from serving.llama_server import LlamaServer\n"
        f"s = LlamaServer(find_llama_server(), {str(ggufs['target'])!r}, log_path={str(log)!r}).start()\n"
        "print(s.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=MODELS.parents[1])
    try:
        pid = int(parent.stdout.readline())
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
    finally:
        parent.kill()
