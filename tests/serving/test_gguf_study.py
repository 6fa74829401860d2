"""The llama.cpp user's road end to end: a study on GGUF files only, on the real llama-server.

The target file carries MTP layers (the bundled stand-in written as mimo2), nothing else is on disk: the study
offers draft-mtp from the file's own layers, measures OFF and every ON on that one file, sizes the context with
the GGUF memory model, and exports a run.sh that names the file and the binary it measured, with no placeholder.
"""

from __future__ import annotations

import json

import pytest

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


def test_a_study_chooses_the_file_and_kv_type_and_measures_other_numbers_live(binary, gguf_only, tmp_path):
    """tuner.targets / tuner.cache_types: a trial on another file or KV type runs ON there, live, against OFF on
    the reference file; its memory figures are its own file's."""
    from serving.quantize import cached_quantized

    q8 = cached_quantized(gguf_only["mtp"], "q8_0")
    cfg = tune_config(
        tmp_path,
        "engine.backend=llama-server",
        "space=llama-server",
        "model=gguf",
        f"model.target={gguf_only['mtp']}",
        "tuner.trials=4",
        f"tuner.targets=[{q8}]",
        "tuner.cache_types=[q8_0]",
        drafters={"mtp": {"gamma": [2]}},
    )
    execute(cfg)
    rows = [json.loads(line) for line in (tmp_path / "runs" / "t" / "trials.jsonl").read_text().splitlines()]
    candidates = [r for r in rows[1:] if r["state"] in ("COMPLETE", "PRUNED")]
    assert candidates and all({"server.target", "server.cache_type"} <= set(r["params"]) for r in candidates)
    reference = (str(gguf_only["mtp"].resolve()), "f16")
    changed = [r for r in candidates if (r["params"]["server.target"], r["params"]["server.cache_type"]) != reference]
    assert changed, "the seeded sampler tried no other file or KV type: raise tuner.trials"
    for row in candidates:
        attrs = row["user_attrs"]
        assert attrs["measure"] == ("live" if row in changed else "replay"), row["params"]
        assert attrs["acceptance_rate"] > 0 and attrs["regressions"] == []
    by_file = {r["params"]["server.target"]: r["user_attrs"]["memory_estimate_bytes"] for r in candidates}
    if len(by_file) == 2:  # the Q8_0 file's weights are a quarter of the F32 file's
        assert by_file[str(q8)] < by_file[reference[0]]
    # the export of a trial that chose another file and KV type names them (the one its server ran)
    import optuna

    from tuner.finish import export_record
    from tuner.setup import prepare

    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 'runs' / 't' / 'study.db'}")
    [trial] = [t for t in study.trials if t.number == changed[0]["number"]]
    record = export_record(prepare(cfg), trial, None)
    chosen = trial.params["server.target"]
    assert (record.target, record.mtp, record.cache_types) == (chosen, chosen, (trial.params["server.cache_type"],) * 2)
    assert record.target_quantization == ("Q8_0" if chosen == str(q8) else "F32")
    assert record.reference == f"{gguf_only['mtp'].name}, KV f16"  # the export says what OFF ran on
    rerun = record.composed_config  # spectune.yaml's runner config: ON on the chosen pair, OFF on the reference
    assert rerun["model"]["target"] == chosen and rerun["server"]["reference_gguf"] == reference[0]
    assert trial.user_attrs["changes_numbers"] is True
    with pytest.raises(ValueError, match=r"tuner\.cache_types: 'q9' is not allowed"):
        execute(
            tune_config(
                tmp_path,
                "engine.backend=llama-server",
                "model=gguf",
                f"model.target={q8}",
                "tuner.cache_types=[q9]",
                "study.name=bad",
            )
        )
