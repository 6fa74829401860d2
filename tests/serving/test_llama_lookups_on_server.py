"""spectune's ports of llama.cpp's lookups draft what the real llama-server drafts.

For `ngram_cache` and `ngram_map_k`, on a repetitive prompt and on a bundled project's source: the same greedy
stream on both engines, the same drafted and the same accepted tokens (the ports, like the server, draft
nothing in the prompt's forward). Needs the binary (tests/serving/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.engine import Engine, EngineConfig
from engine.loading import load_model
from export import llama_server as exporter
from serving.llama_server import LlamaServer
from tests.serving.test_export_on_server import REPEATED
from tests.serving.test_llama_server import MODELS

SOURCE = Path(__file__).resolve().parents[2] / "tasks" / "projects" / "ttlcache" / "ttlcache" / "cache.py"
NEW = 96
CONFIGS = {
    "ngram_cache": EngineConfig(drafter="ngram_cache", gamma=8),
    "ngram_map_k": EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 2, "size_m": 8}),
    "ngram_map_k_short": EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 1, "size_m": 4}),
}


@pytest.fixture(scope="module")
def prompts():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODELS / "target")
    return {"repeated": tokenizer.encode(REPEATED * 4), "source": tokenizer.encode(SOURCE.read_text())[:700]}


@pytest.fixture(scope="module")
def target():
    return load_model(str(MODELS / "target"), device="cpu", dtype="float32")


@pytest.mark.parametrize("case", sorted(CONFIGS))
@pytest.mark.parametrize("prompt", ["repeated", "source"])
def test_the_port_drafts_and_accepts_what_llama_server_does(case, prompt, binary, ggufs, prompts, target, tmp_path):
    config, ids = CONFIGS[case], prompts[prompt]
    mine = Engine(target, config).generate(ids, NEW)
    flags, _ = exporter.speculation(config, None)
    args = ["-m", str(ggufs["target"]), "-c", "4096", "-np", "1", *exporter.argv(flags)]
    with LlamaServer(binary, ggufs["target"], args, log_path=tmp_path / "server.log") as server:
        reply = server.post("/completion", {"prompt": ids, "n_predict": NEW, "return_tokens": True, "temperature": 0})
    timings = reply["timings"]
    assert reply["tokens"] == mine.tokens
    assert mine.stats.accepted > 0, f"{case} accepted nothing on {prompt}: the comparison would be empty"
    assert timings.get("draft_n_accepted", 0) == mine.stats.accepted
    assert timings.get("draft_n", 0) == mine.stats.drafted
