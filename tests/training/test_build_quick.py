"""`python -m training.build --quick` end to end: loadable folders, a lossless tokenizer, a resumable build."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from engine.loading import check_same_tokenizer, load_model
from engine.tiny import IM_END
from tasks.swelite.projects import list_projects, project_dir, project_files
from training import build


def test_folders_load_with_from_pretrained_and_the_engine(quick_build: tuple[Path, Path]) -> None:
    out, _ = quick_build
    for name in ("target", "draft"):
        folder = out / name
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.dtype == torch.float32
        assert model.config.max_position_embeddings >= 4096
        tokenizer = AutoTokenizer.from_pretrained(folder)
        eos = GenerationConfig.from_pretrained(folder).eos_token_id
        assert sorted(eos) == sorted([tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id])
        assert (folder / "model.safetensors").is_file()
    target, draft = load_model(str(out / "target"), device="cpu"), load_model(str(out / "draft"), device="cpu")
    check_same_tokenizer(target, draft)  # raises if the draft's ids meant something else
    assert sum(p.numel() for p in draft.model.parameters()) < sum(p.numel() for p in target.model.parameters())


def test_tokenizer_round_trips_the_swe_lite_sources(quick_build: tuple[Path, Path]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(quick_build[0] / "target")
    for name in list_projects():
        root = project_dir(name)
        for rel in project_files(root):
            text = (root / rel).read_text(encoding="utf-8")
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == text, rel


def test_build_records_its_measurements_and_a_rerun_skips_finished_stages(quick_build: tuple[Path, Path]) -> None:
    out, work = quick_build
    info = json.loads((work / "build_info.json").read_text())
    assert info["data"]["sequences"] == 2 and info["trajectories"]["unresolved"] == []
    assert info["target"]["steps"] > 0 and info["draft"]["steps"] > 0
    assert set(info["fidelity"]) == {"dev", "test"}
    before = (out / "target" / "model.safetensors").read_bytes()
    assert build.main(["--quick", "--out", str(out), "--work", str(work), "--stage", "target"]) == 0
    assert (out / "target" / "model.safetensors").read_bytes() == before
    assert "target: done before, skipped" in (work / "build.log").read_text()
