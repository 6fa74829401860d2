"""The llama.cpp user's road end to end: a study on GGUF files only, on the real llama-server.

The target file carries MTP layers (the bundled stand-in written as mimo2), nothing else is on disk: the study
offers draft-mtp from the file's own layers, measures OFF and every ON on that one file, sizes the context with
the GGUF memory model, and exports a run.sh that names the file and the binary it measured, with no placeholder.
"""

from __future__ import annotations

import json

from tests.serving.conftest import server_pids
from tests.tuner.conftest import tune_config
from tuner.search import execute


def test_a_study_on_gguf_files_only_tunes_the_files_own_mtp_heads(binary, gguf_only, tmp_path, monkeypatch):
    import runners.models

    def no_weights(*args, **kwargs):
        raise AssertionError("a llama-server study loaded torch weights")

    monkeypatch.setattr(runners.models, "load_model", no_weights)
    target = gguf_only["mtp"]
    cfg = tune_config(
        tmp_path,
        "engine.backend=llama-server",
        "space=llama-server",
        "model=gguf",
        f"model.target={target}",
        "tuner.trials=2",
        "server.cache_type_k=q8_0",  # a quantized KV cache, as a user short of memory runs
        "server.cache_type_v=q8_0",
        drafters={"mtp": {"gamma": [2, 3]}},
    )
    summary = execute(cfg)
    root = tmp_path / "runs" / "t"
    rows = [json.loads(line) for line in (root / "trials.jsonl").read_text().splitlines()]
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3
    for row in rows[1:]:
        attrs = row["user_attrs"]
        assert attrs["engine"]["drafter"] == "mtp" and attrs["acceptance_rate"] > 0
        assert attrs["diverged_tasks"] == [] and attrs["regressions"] == []
        # the GGUF memory model sized the context: the stand-in's trained 4096 fits the 8 GiB ceiling
        assert attrs["largest_context"] >= 4096 and attrs["memory_estimate_bytes"] < 100 * 2**20
    run_sh = (root / "best" / "llama-server" / "run.sh").read_text()
    args = (root / "best" / "llama-server" / "llama-server.args").read_text()
    flags = [line for line in args.splitlines() if not line.startswith("#")]
    assert str(binary.path) in run_sh and f"-m {target}" in flags and {"-ctk q8_0", "-ctv q8_0"} <= set(flags)
    assert not any("<" in line for line in flags), "a placeholder is left where the file exists"
    assert summary["winners"]["llama-server"]["trial"] is not None
    if binary.backend == "cpu":  # a CPU build of llama-server measured it: the export says so
        assert "measured on CPU" in (root / "best" / "llama-server" / "README.md").read_text()
    assert server_pids(str(target)) == [], "a llama-server outlived the study"
