"""export: every drafter's files against the pinned server key sets, and spectune.yaml round trips."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from engine.engine import EngineConfig
from export import ExportRecord, Mapping, keys, llama_server, readme, sglang, spectune_yaml, trtllm, vllm, write_exports
from export.fit import server_fit
from export.record import FITS

FILES = (
    spectune_yaml.FILE,
    llama_server.FILE,
    llama_server.RUN_FILE,
    vllm.FILE,
    sglang.FILE,
    trtllm.FILE,
    readme.FILE,
)
TARGET, DRAFT = "models/spectune-tiny/target", "models/spectune-tiny/draft"
CONFIRMED = {
    "speedup": 1.374,
    "speedup_interval": {"pooled": 1.374, "low": 1.118, "high": 1.612, "confidence": 0.95, "tasks": 8},
    "speedup_repeats": [1.301, 1.412, 1.389],
    "regressions": [{"instance_id": "proj-3"}],
    "diverged_tasks": [],
    "seconds_per_success": {"baseline": 40.2, "candidate": 29.3},
    "acceptance_rate": 0.244,
    "mean_accepted_length": 1.8,
    "split": "test",
    "tasks": 8,
    "repeats": 3,
}
COSTS = {"verify_over_step": 1.93, "draft_over_verify": 0.35}
# A composed config with values YAML loaders disagree on: they must load back as written.
COMPOSED = {
    "hardware": {"name": "cpu", "vram_gib": 16.0, "device": "cpu", "runtime_overhead_gib": 0.0},
    "task": {"name": "swe-lite", "split": "test", "limit": None, "instance_ids": ["a-1", "b-2"], "path": None},
    "model": {"name": "spectune-tiny", "target": TARGET, "draft": DRAFT, "dtype": "float32"},
    "engine": {"drafter": "ngram", "gamma": 4, "options": {"min_match": 2}, "temperature": 0.0, "top_p": 1.0},
    "run": {"name": "study-confirmed", "root": "runs", "repeats": 3, "resume": False, "threads": None},
    "odd": {"sci": "1e5", "word_null": "null", "word_yes": "yes", "num_str": "0012", "empty": "", "tiny": 1e-07},
}

CASES = {
    "none": EngineConfig(drafter="none"),
    "ngram": EngineConfig(drafter="ngram", gamma=5, options={"min_match": 2, "max_match": 6, "max_candidates": 64}),
    "ngram_short_gamma": EngineConfig(drafter="ngram", gamma=1, options={"min_match": 3, "max_match": 4}),
    "suffix_engine": EngineConfig(drafter="suffix", gamma=6, options={"scope": "engine", "match_factor": 2.0}),
    "suffix_session": EngineConfig(drafter="suffix", gamma=3, options={"scope": "session", "min_token_prob": 0.2}),
    "draft_model": EngineConfig(drafter="draft_model", gamma=4),
    "draft_sampled_confidence": EngineConfig(
        drafter="draft_model", gamma=6, gamma_policy="confidence", confidence=0.3, temperature=0.7, top_k=20
    ),
    "heuristic": EngineConfig(drafter="ngram", gamma=2, gamma_policy="heuristic", max_gamma=9),
    "heuristic_draft": EngineConfig(drafter="draft_model", gamma=3, gamma_policy="heuristic", max_gamma=7),
    "lossy_topk": EngineConfig(drafter="ngram", acceptance="topk", options={"k": 3}),
    "lossy_threshold_sampled": EngineConfig(
        drafter="draft_model", acceptance="threshold", temperature=0.8, options={"tau": 0.25}
    ),
}


def make_record(engine: EngineConfig, **changes) -> ExportRecord:
    fields = dict(
        engine=engine,
        model_name="spectune-tiny",
        target=TARGET,
        draft=DRAFT if engine.drafter == "draft_model" else None,
        hardware="rtx4060",
        measured_on="cpu",
        context=4096,
        confirmed=CONFIRMED,
        cost_ratios=COSTS,
        composed_config=COMPOSED,
    )
    fields.update(changes)
    return ExportRecord(**fields)


def flag_lines(path: Path) -> list[tuple[str, str | None]]:
    """(flag, value) of every non-comment line."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition(" ")
            out.append((name, value or None))
    return out


def flag_dict(path: Path) -> dict[str, str | None]:
    pairs = flag_lines(path)
    assert len({n for n, _ in pairs}) == len(pairs), "a flag is repeated"
    return dict(pairs)


@pytest.fixture(params=sorted(CASES))
def exported(request, tmp_path) -> tuple[ExportRecord, Path, list[Path]]:
    """(record, best/ folder, written paths) of one case."""
    record = make_record(CASES[request.param])
    out = tmp_path / "best"
    return record, out, write_exports(out, record)


def test_every_file_is_written(exported):
    _, out, paths = exported
    assert [p.name for p in paths] == list(FILES)
    assert all(p.parent == out and p.is_file() and p.stat().st_size > 0 for p in paths)


def test_run_sh_starts_the_binary_with_exactly_the_files_flags_each_word_intact(tmp_path):
    """A stand-in binary prints the words it got: the args file's flags in order, a path with a space kept whole,
    the extra arguments last; $LLAMA_SERVER picks another binary; a placeholder stops it before anything runs."""
    fake = tmp_path / "bin dir" / "llama-server"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor word in "$@"; do echo "$word"; done\n')
    fake.chmod(0o755)
    target = tmp_path / "my models" / "target q8.gguf"
    record = make_record(EngineConfig(drafter="ngram", gamma=3), target=str(target), server_binary=str(fake))
    out = tmp_path / "best"
    write_exports(out, record)
    script = out / llama_server.RUN_FILE
    assert script.stat().st_mode & 0o111  # executable
    ran = subprocess.run([str(script), "--port", "8080"], capture_output=True, text=True, timeout=30, check=True)
    words = [w for name, value in flag_lines(out / llama_server.FILE) for w in (name, value) if w is not None]
    assert ran.stdout.splitlines() == [*words, "--port", "8080"] and str(target) in words
    other = tmp_path / "other"
    other.write_text('#!/bin/sh\necho other "$1" "$2"\n')
    other.chmod(0o755)
    again = subprocess.run(
        ["sh", str(script)], capture_output=True, text=True, timeout=30, env={"LLAMA_SERVER": str(other)}
    )
    assert again.stdout == f"other -m {target}\n"
    # the bundled folder, not a GGUF: the args file holds a placeholder, and run.sh says what to make first
    write_exports(
        tmp_path / "unconverted", make_record(EngineConfig(drafter="ngram", gamma=3), server_binary=str(fake))
    )
    refused = subprocess.run(
        ["sh", str(tmp_path / "unconverted" / llama_server.RUN_FILE)], capture_output=True, text=True
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("run.sh: llama-server.args still names <target-gguf-of:")


def test_vllm_keys_are_pinned_speculative_config_fields(exported):
    record, out, _ = exported
    config = json.loads((out / vllm.FILE).read_text())
    assert set(config) <= keys.vllm_keys()
    if record.engine.drafter == "none":
        assert config == {}
        return
    assert config["method"] in vllm.METHODS
    length = record.engine.max_gamma if record.engine.gamma_policy == "heuristic" else record.engine.gamma
    assert config["num_speculative_tokens"] == length


def test_sglang_flags_are_pinned_speculative_arguments(exported):
    record, out, _ = exported
    flags = flag_dict(out / sglang.FILE)
    assert set(flags) <= keys.sglang_flags()
    if record.engine.drafter == "none":
        assert flags == {}
        return
    builtins = re.search(r"Builtins: ([A-Z0-9, ]+)\.", keys.sglang_help("--speculative-algorithm")).group(1)
    assert flags["--speculative-algorithm"] in builtins.split(", ")


def test_llama_server_flags_are_known(exported):
    record, out, _ = exported
    flags = flag_dict(out / llama_server.FILE)
    assert set(flags) <= set(llama_server.KNOWN_FLAGS)
    assert all(t in llama_server.SPEC_TYPES for t in flags["--spec-type"].split(","))
    assert flags["-np"] == "1" and flags["-c"] == "4096"
    if record.engine.drafter == "draft_model":  # a draft model alone drafts nothing in current llama.cpp
        assert flags["--spec-type"] == "draft-simple"
        assert flags["--model-draft"] == f"<draft-gguf-of:{DRAFT}>"


def test_readme_has_the_numbers_and_the_caveats(exported):
    _, out, _ = exported
    text = (out / readme.FILE).read_text()
    assert "1.37x" in text and "[1.12, 1.61]" in text and "1.30, 1.41, 1.39" in text
    assert "measured on CPU" in text and "0.296 vs 0.296" in text and "0.244 vs 0.243" in text
    assert "R = verify ÷ single step = 1.93" in text and "C = draft ÷ verify = 0.35" in text
    assert "word-level" in text and "proj-3" in text


def test_spectune_yaml_loads_back_equal(exported):
    record, out, _ = exported
    path = out / spectune_yaml.FILE
    assert yaml.safe_load(path.read_text()) == record.composed_config
    assert OmegaConf.to_container(OmegaConf.load(path)) == record.composed_config


def test_every_row_is_a_known_fit_for_a_known_target(exported):
    record, _, _ = exported
    rows = llama_server.build(record)[1] + vllm.build(record)[1] + sglang.build(record)[1]
    assert {r.fit for r in rows} <= set(FITS)
    assert {r.target for r in rows} == {llama_server.TARGET, vllm.TARGET, sglang.TARGET}


def test_hydra_composes_the_saved_config_with_the_rerun_overrides(tmp_path):
    write_exports(tmp_path, make_record(CASES["ngram"]))
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose(
            spectune_yaml.CONFIG_NAME, overrides=list(spectune_yaml.HYDRA_OVERRIDES), return_hydra_config=True
        )
        assert cfg.hydra.run.dir == "runs/study-confirmed" and cfg.hydra.output_subdir is None
        data = OmegaConf.to_container(cfg)  # the hydra node resolves only inside a running app
    data.pop("hydra")
    assert data == COMPOSED
    header = (tmp_path / spectune_yaml.FILE).read_text().splitlines()[2]
    assert f"--config-path {tmp_path.resolve()} --config-name spectune" in header


def test_ngram_sizes(tmp_path):
    write_exports(tmp_path, make_record(CASES["ngram"]))
    v = json.loads((tmp_path / vllm.FILE).read_text())
    assert v == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 6}
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-type"] == "ngram-simple"
    assert (llama["--spec-ngram-simple-size-n"], llama["--spec-ngram-simple-size-m"]) == ("2", "5")
    assert "--spec-draft-n-max" not in llama  # ngram-simple drafts size-m tokens, it never reads n-max
    s = flag_dict(tmp_path / sglang.FILE)
    assert s["--speculative-algorithm"] == "NGRAM" and s["--speculative-ngram-match-type"] == "BFS"
    assert s["--speculative-num-draft-tokens"] == "6" and s["--speculative-ngram-max-trie-depth"] == "11"


def test_ngram_size_m_never_below_size_n(tmp_path):
    write_exports(tmp_path, make_record(CASES["ngram_short_gamma"]))
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert (llama["--spec-ngram-simple-size-n"], llama["--spec-ngram-simple-size-m"]) == ("3", "3")
    assert "size-m raised to size-n=3" in (tmp_path / llama_server.FILE).read_text()


def test_suffix_scope_engine_keeps_cross_request_memory(tmp_path):
    write_exports(tmp_path, make_record(CASES["suffix_engine"]))
    v = json.loads((tmp_path / vllm.FILE).read_text())
    assert v["method"] == "suffix" and v["num_speculative_tokens"] == 6
    assert v["suffix_decoding_max_spec_factor"] == 2.0 and v["suffix_decoding_min_token_prob"] == 0.1
    assert v["suffix_decoding_max_tree_depth"] == 16 + 6 and v["suffix_decoding_max_cached_requests"] == 10000
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-type"] == "ngram-mod" and llama["--spec-ngram-mod-n-max"] == "6"
    assert llama["--spec-ngram-mod-n-match"] == "2"
    assert flag_dict(tmp_path / sglang.FILE)["--speculative-ngram-match-type"] == "PROB"


def test_suffix_scope_session_turns_the_global_tree_off(tmp_path):
    write_exports(tmp_path, make_record(CASES["suffix_session"]))
    v = json.loads((tmp_path / vllm.FILE).read_text())
    assert v["suffix_decoding_max_cached_requests"] == 0 and v["suffix_decoding_min_token_prob"] == 0.2
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-type"] == "ngram-map-k4v"
    assert (llama["--spec-ngram-map-k4v-size-n"], llama["--spec-ngram-map-k4v-size-m"]) == ("2", "3")
    text = (tmp_path / readme.FILE).read_text()
    assert "| suffix.scope=session | SGLang | approximately |" in text


def test_draft_model(tmp_path):
    write_exports(tmp_path, make_record(CASES["draft_model"]))
    v = json.loads((tmp_path / vllm.FILE).read_text())
    assert v == {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 4}
    s = flag_dict(tmp_path / sglang.FILE)
    assert s["--speculative-algorithm"] == "STANDALONE" and s["--speculative-draft-model-path"] == DRAFT
    assert (s["--speculative-num-steps"], s["--speculative-eagle-topk"], s["--speculative-num-draft-tokens"]) == (
        "4",
        "1",
        "5",
    )
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-draft-n-max"] == "4" and "--spec-draft-p-min" not in llama
    assert "--spec-draft-sampling" not in llama  # greedy: llama.cpp's default greedy draft is spectune's


def test_confidence_policy_and_sampled_draft(tmp_path):
    write_exports(tmp_path, make_record(CASES["draft_sampled_confidence"]))
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-draft-p-min"] == "0.3" and llama["--spec-draft-sampling"] == "probabilistic"
    assert (llama["--temp"], llama["--top-k"], llama["--min-p"]) == ("0.7", "20", "0")
    rows = vllm.build(make_record(CASES["draft_sampled_confidence"]))[1]
    assert any(r.setting.startswith("gamma_policy=confidence") and r.fit == "none" for r in rows)


@pytest.mark.parametrize("case", ["heuristic", "heuristic_draft"])
def test_heuristic_policy_exports_its_ceiling(tmp_path, case):
    record = make_record(CASES[case])
    write_exports(tmp_path, record)
    assert json.loads((tmp_path / vllm.FILE).read_text())["num_speculative_tokens"] == record.engine.max_gamma
    llama = flag_dict(tmp_path / llama_server.FILE)
    knob = "--spec-draft-n-max" if record.engine.drafter == "draft_model" else "--spec-ngram-simple-size-m"
    assert llama[knob] == str(record.engine.max_gamma)
    assert "| gamma_policy=heuristic (gamma=" in (tmp_path / readme.FILE).read_text()


def test_lossy_acceptance_has_no_llama_or_vllm_equivalent(tmp_path):
    record = make_record(CASES["lossy_topk"])
    write_exports(tmp_path, record)
    text = (tmp_path / readme.FILE).read_text()
    for target in (llama_server.TARGET, vllm.TARGET, sglang.TARGET):
        assert f"| acceptance=topk | {target} | not at all |" in text
    assert "# none: acceptance=topk" in (tmp_path / llama_server.FILE).read_text()


def test_threshold_acceptance_maps_to_sglang_when_sampling(tmp_path):
    write_exports(tmp_path, make_record(CASES["lossy_threshold_sampled"]))
    assert flag_dict(tmp_path / sglang.FILE)["--speculative-accept-threshold-single"] == "0.25"
    text = (tmp_path / readme.FILE).read_text()
    assert "| acceptance=threshold (tau=0.25) | SGLang | approximately |" in text


def test_no_speculation_still_writes_every_file(tmp_path):
    write_exports(tmp_path, make_record(CASES["none"]))
    assert flag_dict(tmp_path / llama_server.FILE)["--spec-type"] == "none"
    assert "no speculative flags" in (tmp_path / sglang.FILE).read_text()
    assert f"`vllm serve {TARGET} --max-model-len 4096 --max-num-seqs 1`" in (tmp_path / readme.FILE).read_text()


def test_readme_without_confirmation_or_costs_measured_on_cuda(tmp_path):
    record = make_record(CASES["ngram"], confirmed={}, cost_ratios=None, measured_on="cuda", context=0)
    write_exports(tmp_path, record)
    text = (tmp_path / readme.FILE).read_text()
    assert "Not confirmed" in text and "no cost ratios" in text
    assert "measured on CUDA" in text and "measured on CPU" not in text
    assert "-c" not in flag_dict(tmp_path / llama_server.FILE)


def test_readme_takes_a_plain_interval_pair(tmp_path):
    confirmed = {**CONFIRMED, "speedup_interval": [1.05, 1.5], "regressions": 0, "speedup_repeats": [None, 1.2]}
    write_exports(tmp_path, make_record(CASES["ngram"], confirmed=confirmed))
    text = (tmp_path / readme.FILE).read_text()
    assert "interval [1.05, 1.50]" in text and "n/a, 1.20" in text


def test_mapping_rejects_an_unknown_fit():
    with pytest.raises(ValueError, match="fit must be one of"):
        Mapping("gamma=4", "vLLM", "roughly", "")


def test_pinned_key_file_is_the_recorded_copy():
    digest = hashlib.sha256(keys.KEYS_FILE.read_bytes()).hexdigest()
    assert digest in (keys.KEYS_FILE.parent / "README.md").read_text()
    assert {"num_speculative_tokens", "prompt_lookup_min", "suffix_decoding_max_cached_requests"} <= keys.vllm_keys()
    assert "--speculative-boundary-reduction" not in keys.sglang_flags()  # no_cli: not a command-line flag


@pytest.mark.parametrize("drafter", ["mtp", "layer_skip"])
def test_drafters_without_a_server_equivalent_say_why_and_export_speculation_off(tmp_path, drafter):
    options = {"layers": 1} if drafter == "layer_skip" else {}
    write_exports(tmp_path, make_record(EngineConfig(drafter=drafter, gamma=3, options=options)))
    assert json.loads((tmp_path / vllm.FILE).read_text()) == {}
    assert "--speculative-algorithm" not in flag_dict(tmp_path / sglang.FILE)
    text = (tmp_path / readme.FILE).read_text()
    if drafter == "mtp":  # the specific reason, not a generic line: where each server keeps its MTP layers
        assert "num_nextn_predict_layers" in text and "NEXTN loads the target's own nextn layer" in text
    else:
        assert flag_dict(tmp_path / llama_server.FILE)["--spec-type"] == "none"
        assert "no early-exit self-speculation" in text


def test_mtp_exports_draft_mtp_on_the_mimo2_gguf_that_holds_the_module(tmp_path):
    engine = EngineConfig(drafter="mtp", gamma=3, gamma_policy="confidence", confidence=0.3)
    write_exports(tmp_path / "folder", make_record(engine, mtp="models/spectune-tiny/mtp"))
    flags = flag_dict(tmp_path / "folder" / llama_server.FILE)
    assert flags["--spec-type"] == "draft-mtp" and flags["--spec-draft-n-max"] == "3"
    assert flags["--spec-draft-p-min"] == "0.3"
    assert flags["-m"] == f"<mimo2-gguf-of:{TARGET}+models/spectune-tiny/mtp>"
    assert "python -m serving.mtp_gguf" in (tmp_path / "folder" / llama_server.FILE).read_text()
    write_exports(tmp_path / "gguf", make_record(engine, mtp="/x/mimo2.gguf"))
    assert flag_dict(tmp_path / "gguf" / llama_server.FILE)["-m"] == "/x/mimo2.gguf"
    assert "zero hidden state" in (tmp_path / "gguf" / readme.FILE).read_text()


def test_a_combination_exports_its_lookup_part_and_says_the_rest_is_left_out(tmp_path):
    engine = EngineConfig(drafter="mtp+ngram", gamma=4, options={"ngram.min_match": 3, "ngram.max_match": 5})
    write_exports(tmp_path, make_record(engine, mtp="/x/mimo2.gguf"))
    flags = flag_dict(tmp_path / llama_server.FILE)  # llama-server runs all of it: first-wins, lookup first
    assert flags["--spec-type"] == "ngram-simple,draft-mtp" and flags["--spec-ngram-simple-size-n"] == "3"
    assert flags["--spec-draft-n-max"] == "4" and flags["-m"] == "/x/mimo2.gguf"
    assert server_fit(engine, "llama-server").runnable and not server_fit(engine, "vLLM").runnable
    extend = EngineConfig(drafter="mtp+ngram", gamma=4, options={"policy": "extend", "ngram.min_match": 3})
    assert dict(llama_server.build(make_record(extend))[0])["--spec-type"] == "ngram-simple"  # the lookup alone
    assert "not with policy=extend" in llama_server.not_runnable(extend)
    config = json.loads((tmp_path / vllm.FILE).read_text())
    assert config["method"] == "ngram" and config["prompt_lookup_min"] == 3 and config["prompt_lookup_max"] == 5
    assert flag_dict(tmp_path / sglang.FILE)["--speculative-algorithm"] == "NGRAM"
    assert "only the ngram part is exported (mtp:" in (tmp_path / readme.FILE).read_text()


def test_llama_cpp_own_lookups_export_to_llama_server_only(tmp_path):
    """ngram_cache and ngram_map_k are ports of llama.cpp's kinds: llama-server runs them, vLLM and SGLang do not."""
    write_exports(tmp_path, make_record(EngineConfig(drafter="ngram_cache", gamma=8)))
    assert flag_dict(tmp_path / llama_server.FILE)["--spec-type"] == "ngram-cache"
    assert json.loads((tmp_path / vllm.FILE).read_text()) == {} and flag_dict(tmp_path / sglang.FILE) == {}
    text = (tmp_path / readme.FILE).read_text()
    assert "ngram-cache (frequency-thresholded 1..4-gram counts) has no vLLM method" in text
    rows = llama_server.build(make_record(EngineConfig(drafter="ngram_cache", gamma=8)))[1]
    assert any(r.setting.startswith("gamma=8") and r.fit == "exact" for r in rows)
    short = llama_server.build(make_record(EngineConfig(drafter="ngram_cache", gamma=3)))[1]
    assert any(r.fit == "approximate" and "always drafts up to 8" in r.reason for r in short)

    config = EngineConfig(drafter="ngram_map_k", gamma=16, options={"size_n": 2, "size_m": 6})
    write_exports(tmp_path, make_record(config))
    llama = flag_dict(tmp_path / llama_server.FILE)
    assert llama["--spec-type"] == "ngram-map-k"
    assert (llama["--spec-ngram-map-k-size-n"], llama["--spec-ngram-map-k-size-m"]) == ("2", "6")
    assert json.loads((tmp_path / vllm.FILE).read_text()) == {}
    cut = llama_server.build(make_record(EngineConfig(drafter="ngram_map_k", gamma=4, options={"size_m": 6})))[1]
    assert any(r.fit == "approximate" and "cuts them to gamma" in r.reason for r in cut)


def test_a_llama_cpp_lookup_with_a_model_first_wins_is_one_kind_list():
    config = EngineConfig(drafter="mtp+ngram_map_k", gamma=4, options={"ngram_map_k.size_n": 1})
    flags, _ = llama_server.speculation(config, None)
    assert dict(flags)["--spec-type"] == "ngram-map-k,draft-mtp" and dict(flags)["--spec-ngram-map-k-size-n"] == "1"
    assert llama_server.not_runnable(config) is None
    extend = EngineConfig(drafter="mtp+ngram_cache", gamma=4, options={"policy": "extend"})
    assert "only the ngram_cache part is exported" in llama_server.not_runnable(extend)


def test_the_kv_types_and_the_files_quantization_measured_are_what_llama_server_gets():
    engine = EngineConfig(drafter="ngram", gamma=4)
    default = llama_server.build(make_record(engine, target="/m/Qwen3.5-4B-Q4_K_M.gguf"))
    assert "-ctk" not in dict(default[0]) and any(r.setting == "kv cache f16" for r in default[1])
    record = make_record(
        engine, target="/m/Qwen3.5-4B-Q4_K_M.gguf", cache_types=("q8_0", "q4_0"), target_quantization="Q4_K_M"
    )
    flags, rows = llama_server.build(record)
    assert (dict(flags)["-ctk"], dict(flags)["-ctv"], dict(flags)["-m"]) == ("q8_0", "q4_0", record.target)
    [model] = [r for r in rows if r.setting == "model=spectune-tiny"]
    assert "Qwen3.5-4B-Q4_K_M.gguf: Q4_K_M (general.file_type)" in model.reason and "unquantized" not in model.reason
    assert any(r.setting == "kv cache K=q8_0 V=q4_0" for r in rows)
    made = make_record(engine, gguf_files={"target": "/cache/target-f32.gguf"})  # a bundled folder converted
    assert dict(llama_server.build(made)[0])["-m"] == "/cache/target-f32.gguf"
