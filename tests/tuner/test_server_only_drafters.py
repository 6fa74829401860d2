"""dflash / dspark: drafters only llama-server runs, with a draft GGUF the user brings (server.dflash_gguf).

spectune's engine refuses them with the reason, the built-in backend reports them unsupported, a space leaves
them out on the built-in engine and on llama-server without the GGUF, and the exports write llama.cpp's flags
for llama-server and speculation off, with the reason, for vLLM and SGLang. The real server drafting with such
a GGUF is tested in tests/serving/test_backend.py and test_export_on_server.py.
"""

from __future__ import annotations

import pytest

from engine.drafters import resolve_drafter
from engine.engine import Engine, EngineConfig
from engine.testing import random_model
from export import llama_server, sglang, vllm
from runners.backends import backend_class
from tests.export.test_export import make_record
from tuner.space import load_space

SPACE = {
    "name": "t",
    "drafters": {"ngram": {"gamma": [2]}, "dflash": {"gamma": {"low": 1, "high": 4}}, "dspark": {"gamma": [3]}},
}


@pytest.mark.parametrize("drafter", ["dflash", "dspark", "dflash+ngram"])
def test_the_engine_refuses_a_server_only_drafter_with_the_reason(drafter):
    spec = resolve_drafter(drafter)
    assert spec.needs.server_draft
    with pytest.raises(ValueError, match=r"runs on engine\.backend=llama-server only"):
        Engine(random_model("llama"), EngineConfig(drafter=drafter))
    assert "server.dflash_gguf" in spec.refusal
    assert backend_class("builtin").not_runnable(EngineConfig(drafter=drafter)) == spec.refusal
    assert resolve_drafter("ngram").refusal == "" and backend_class("builtin").not_runnable(EngineConfig()) is None


def test_a_space_offers_them_only_on_llama_server_with_the_draft_gguf():
    builtin = load_space(SPACE, has_draft=False)
    assert set(builtin.drafters) == {"ngram"}
    assert "runs on engine.backend=llama-server only" in builtin.left_out["dflash"]
    bare = load_space(SPACE, has_draft=False, backend="llama-server")
    assert "server.dflash_gguf is null" in bare.left_out["dspark"]
    served = load_space(SPACE, has_draft=False, backend="llama-server", has_server_draft=True)
    assert set(served.drafters) == {"ngram", "dflash", "dspark"}


def test_llama_server_gets_the_kind_the_draft_and_the_length_the_others_speculation_off():
    config = EngineConfig(drafter="dspark", gamma=3, gamma_policy="confidence", confidence=0.3)
    record = make_record(config, dflash_gguf="/models/dflash.gguf")
    flags, rows = llama_server.build(record)
    words = llama_server.argv(flags)
    at = words.index("--spec-type")
    assert words[at : at + 8] == [
        "--spec-type",
        "draft-dspark",
        "--model-draft",
        "/models/dflash.gguf",
        "--spec-draft-n-max",
        "3",
        "--spec-draft-p-min",
        "0.3",
    ]
    assert any("clamps --spec-draft-n-max to the draft's trained block size" in r.reason for r in rows)
    assert llama_server.not_runnable(config) is None
    placeholder = llama_server.argv(llama_server.speculation(EngineConfig(drafter="dflash"), None)[0])
    assert placeholder[placeholder.index("--model-draft") + 1] == "<dflash-gguf: server.dflash_gguf>"
    assert vllm.build(record)[0] == {}
    assert any("Hugging Face" in r.reason for r in vllm.build(record)[1])
    assert not any(name == "--speculative-algorithm" for name, _ in sglang.build(record)[0])
