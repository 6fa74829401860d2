"""export: TensorRT-LLM's extra-llm-api-options.yaml against the pinned llm_args.py classes, and its table column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.engine import EngineConfig
from export import keys, trtllm, write_exports
from export.fit import FOLDERS, server_fit
from export.record import APPROXIMATE, EXACT, NONE
from export.table import TABLE, TRTLLM, no_equivalent, way
from tests.export.test_export import CASES, make_record

WINNERS = {
    "ngram": EngineConfig(drafter="ngram", gamma=5, options={"min_match": 2, "max_match": 6}),
    "draft_model": EngineConfig(drafter="draft_model", gamma=4),
    "eagle3": EngineConfig(drafter="eagle3", gamma=3),
}


def written(folder: Path) -> dict:
    """The YAML TensorRT-LLM reads (comment lines are YAML comments)."""
    return yaml.safe_load((folder / trtllm.FILE).read_text())


def assert_pinned(options: dict) -> dict:
    """The speculative_config section, after checking every key is a field of the class its decoding_type names."""
    assert set(options) == {trtllm.SECTION}
    spec = options[trtllm.SECTION]
    cls = trtllm.CLASSES[spec["decoding_type"]]
    assert set(spec) <= keys.trtllm_keys(cls), set(spec) - keys.trtllm_keys(cls)
    # the decoding_type written is the Literal default that class declares in the pinned source
    assert keys.trtllm_field(cls, "decoding_type")[1] == f"Field(default='{spec['decoding_type']}')"
    assert isinstance(spec["max_draft_len"], int) and spec["max_draft_len"] > 0
    return spec


def head_folder(tmp_path: Path, layer_ids: list[int]) -> Path:
    """An EAGLE-3 head folder with only the config.json the exporters read."""
    folder = tmp_path / "head"
    folder.mkdir()
    config = {"eagle_aux_hidden_state_layer_ids": layer_ids, "vocab_size": 100, "draft_vocab_size": 100}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_pinned_set_has_the_classes_the_writer_names():
    assert set(trtllm.CLASSES.values()) <= set(keys.trtllm_classes())
    assert {"MTPDecodingConfig", "EagleDecodingConfig", "DecodingBaseConfig"} <= set(keys.trtllm_classes())
    assert "eagle3_one_model" in keys.trtllm_keys("Eagle3DecodingConfig")  # inherited from EagleDecodingConfig
    assert "speculative_model_dir" in keys.trtllm_keys("DraftTargetDecodingConfig")  # validation alias
    assert "_allow_greedy_draft_tokens" not in keys.trtllm_keys("DecodingBaseConfig")  # private attribute


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_case_writes_parseable_yaml_with_only_pinned_keys(case, tmp_path):
    write_exports(tmp_path, make_record(CASES[case]))
    options = written(tmp_path)
    assert isinstance(options, dict)
    if options:
        assert_pinned(options)


@pytest.mark.parametrize("drafter", sorted(WINNERS))
def test_three_winners_export_their_decoding_type(drafter, tmp_path):
    engine = WINNERS[drafter]
    head = head_folder(tmp_path, [2, 8, 13])
    write_exports(tmp_path / "best", make_record(engine, eagle3=str(head)))
    spec = assert_pinned(written(tmp_path / "best"))
    assert spec["decoding_type"] == way(drafter, TRTLLM).kind
    assert spec["max_draft_len"] == engine.gamma
    if drafter == "ngram":
        assert spec["max_matching_ngram_size"] == 6 and spec["is_public_pool"] is False
    elif drafter == "draft_model":
        assert spec["speculative_model"] == make_record(engine).draft
    else:
        assert spec["speculative_model"] == str(head)
        assert spec["eagle3_layers_to_capture"] == [1, 7, 12]  # spectune's ids - 1 (trtllm.py's docstring)
    assert server_fit(engine, TRTLLM).runnable


def test_an_eagle3_head_reading_the_embeddings_runs_without_speculation(tmp_path):
    head = head_folder(tmp_path, [0, 4, 8])
    options, rows = trtllm.build(make_record(WINNERS["eagle3"], eagle3=str(head)))
    assert options == {}
    [row] = [r for r in rows if r.setting == "drafter=eagle3"]
    assert row.fit == NONE and "layer id 0" in row.reason


def test_speculation_off_writes_no_speculative_config_and_says_so(tmp_path):
    write_exports(tmp_path, make_record(EngineConfig(drafter="none")))
    text = (tmp_path / trtllm.FILE).read_text()
    assert yaml.safe_load(text) == {}
    assert f"# no {trtllm.SECTION}: TensorRT-LLM runs without speculation" in text
    assert f"--extra_llm_api_options {trtllm.FILE}" in text and "--max_batch_size 1" in text


@pytest.mark.parametrize("drafter", ["mtp", "layer_skip", "ngram_cache", "dflash"])
def test_a_drafter_without_an_equivalent_is_exported_off_with_its_reason(drafter, tmp_path):
    options = {"layer_skip": {"layers": 1}}.get(drafter, {})
    record = make_record(EngineConfig(drafter=drafter, options=options), mtp="mtp", dflash_gguf="d.gguf")
    write_exports(tmp_path, record)
    text = (tmp_path / trtllm.FILE).read_text()
    assert yaml.safe_load(text) == {}
    assert f"# none: drafter={drafter}: {no_equivalent(drafter, TRTLLM)}" in text
    assert not server_fit(record.engine, TRTLLM).runnable


def test_the_column_is_complete_every_drafter_a_way_or_a_reason():
    for drafter, row in TABLE.items():
        cell = row[TRTLLM]
        if isinstance(cell, str):
            assert "speculation off" in cell and len(cell) > 40, drafter
        else:
            assert cell.kind == "" or cell.kind in trtllm.CLASSES, drafter
    assert set(trtllm.BUILDERS) == {d for d in TABLE if way(d, TRTLLM) is not None}


def test_lossy_acceptance_and_sampling_rows():
    lossy = {r.setting: r.fit for r in trtllm.build(make_record(CASES["lossy_topk"]))[1]}
    assert lossy["acceptance=topk"] == NONE
    sampled = {r.setting: r.fit for r in trtllm.build(make_record(CASES["draft_sampled_confidence"]))[1]}
    assert sampled["acceptance=exact"] == APPROXIMATE
    assert sampled["gamma_policy=confidence (confidence=0.3)"] == NONE
    greedy = {r.setting: r.fit for r in trtllm.build(make_record(CASES["draft_model"]))[1]}
    assert greedy["acceptance=exact"] == EXACT and greedy["gamma=4"] == EXACT


def test_concurrency_and_context_go_on_the_command():
    record = make_record(CASES["ngram"], concurrency=4)
    assert trtllm.command(record) == (
        f"trtllm-serve {record.target} --max_seq_len 4096 --max_batch_size 4 --extra_llm_api_options {trtllm.FILE}"
    )
    assert FOLDERS[TRTLLM] == "trtllm"
