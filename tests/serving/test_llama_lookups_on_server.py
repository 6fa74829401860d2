"""spectune's ports of llama.cpp's lookups draft what the real llama-server drafts.

For `ngram_cache` and `ngram_map_k`, on an agent's context before its edit (the reply copies code the
conversation shows) and on a bundled project's source: the same greedy
stream on both engines, the same drafted and the same accepted tokens (the ports, like the server, draft
nothing in the prompt's forward). Needs the binary (tests/serving/conftest.py).

Both engines compute fp32 logits in a different order, so where the target's best two tokens are nearly tied
the two greedy streams may part for a reason that is no drafter's: each prompt is compared up to the first
such near-tie of plain greedy decoding (`TIE`), which must leave enough tokens for the lookups to draft.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.agent_prompts import agent_prompts
from engine.engine import Engine, EngineConfig
from engine.loading import LoadedModel, load_model
from export import llama_server as exporter
from serving.llama_server import LlamaServer
from tests.serving.test_llama_server import MODELS

SOURCE = Path(__file__).resolve().parents[2] / "tasks" / "projects" / "ttlcache" / "ttlcache" / "cache.py"
NEW = 96
TIE = 0.02  # logit gap between the best two tokens under which fp32 differences between engines may flip greedy
MIN_NEW = 12  # a comparison shorter than this would say little
CONFIGS = {
    "ngram_cache": EngineConfig(drafter="ngram_cache", gamma=8),
    "ngram_map_k": EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 2, "size_m": 8}),
    "ngram_map_k_short": EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 1, "size_m": 4}),
}


@pytest.fixture(scope="module")
def prompts():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODELS / "target")
    [agent] = agent_prompts(tokenizer, "test", count=1)
    return {"agent": agent.ids, "source": tokenizer.encode(SOURCE.read_text())[:700]}


@pytest.fixture(scope="module")
def target():
    return load_model(str(MODELS / "target"), device="cpu", dtype="float32")


def untied_length(target: LoadedModel, ids: list[int], new: int) -> int:
    """How many greedy tokens of `ids`' continuation (at most `new`) come before the first near-tie."""
    seq = list(ids)
    with torch.no_grad():
        for i in range(new):
            top = torch.topk(target.model(torch.tensor([seq])).logits[0, -1].float(), 2)
            if float(top.values[0] - top.values[1]) < TIE:
                return i
            seq.append(int(top.indices[0]))
    return new


@pytest.fixture(scope="module")
def lengths(prompts, target):
    return {name: untied_length(target, ids, NEW) for name, ids in prompts.items()}


@pytest.mark.parametrize("case", sorted(CONFIGS))
@pytest.mark.parametrize("prompt", ["agent", "source"])
def test_the_port_drafts_and_accepts_what_llama_server_does(
    case, prompt, binary, ggufs, prompts, lengths, target, tmp_path
):
    config, ids = CONFIGS[case], prompts[prompt]
    new = lengths[prompt]
    assert new >= MIN_NEW, f"plain greedy on {prompt} nears a tie after {new} tokens: choose another prompt"
    mine = Engine(target, config).generate(ids, new)
    flags, _ = exporter.speculation(config, None)
    args = ["-m", str(ggufs["target"]), "-c", "4096", "-np", "1", *exporter.argv(flags)]
    with LlamaServer(binary, ggufs["target"], args, log_path=tmp_path / "server.log") as server:
        reply = server.post("/completion", {"prompt": ids, "n_predict": new, "return_tokens": True, "temperature": 0})
    timings = reply["timings"]
    assert reply["tokens"] == mine.tokens
    assert mine.stats.accepted > 0, f"{case} accepted nothing on {prompt}: the comparison would be empty"
    assert timings.get("draft_n_accepted", 0) == mine.stats.accepted
    assert timings.get("draft_n", 0) == mine.stats.drafted
