"""The bundled spectune-tiny pair: loads with from_pretrained, tokenizes the swe-lite sources losslessly,
and (greedy, CPU fp32) solves a fixed test instance end to end with identical tokens ON and OFF."""

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agents.loop import AgentConfig
from engine.engine import EngineConfig
from runners.compare import Baseline, Comparison
from runners.models import PROJECT_ROOT, load_models
from runners.workload import Workload
from tasks.environment import make_environment
from tasks.suites import load_suite

BUNDLE = PROJECT_ROOT / "models" / "spectune-tiny"
TARGET, DRAFT = BUNDLE / "target", BUNDLE / "draft"
SMOKE_INSTANCE = 0  # index in the test split; greedy decoding makes the outcome deterministic on CPU fp32

pytestmark = pytest.mark.skipif(not TARGET.is_dir(), reason="models/spectune-tiny is not built in this checkout")


def test_folders_load_with_from_pretrained():
    for folder in (TARGET, DRAFT):
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        assert model.config.max_position_embeddings >= 4096
        assert tokenizer.chat_template
        assert next(model.parameters()).dtype.is_floating_point


def test_tokenizer_round_trips_the_swelite_sources():
    tokenizer = AutoTokenizer.from_pretrained(TARGET, local_files_only=True)
    sources = sorted((PROJECT_ROOT / "tasks" / "projects").rglob("*.py"))
    assert len(sources) > 16
    for path in sources:
        text = Path(path).read_text()
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == text, path


def test_greedy_target_solves_an_instance_with_identical_tokens_under_speculation(tmp_path):
    models = load_models(str(TARGET), str(DRAFT), device="cpu", dtype="float32")
    instance = load_suite("swe-lite", "test")[SMOKE_INSTANCE]
    defaults = AgentConfig()  # the runner's defaults (the agent node's schema)
    agent = AgentConfig(max_steps=defaults.max_steps, max_new_tokens=defaults.max_new_tokens)
    env = make_environment("swe-lite")
    work = Workload(models, [instance], env, agent, warmup=False)
    ngram = Comparison(work, EngineConfig(drafter="ngram"), tmp_path / "ngram")
    [first] = list(ngram)
    assert first.baseline.status == "submitted" and first.baseline.success, first.baseline.message
    assert first.candidate.success and first.first_divergence is None
    draft = Comparison(
        work,
        EngineConfig(drafter="draft_model"),
        tmp_path / "draft",
        baseline=Baseline.from_outcomes([first]),
    )
    [second] = list(draft)
    assert second.candidate.generated_ids == first.baseline.generated_ids
    assert second.candidate.stats.accepted > 0  # the distilled draft is accepted at least sometimes


def test_bench_on_agent_prompts_gives_identical_outputs(capsys):
    """`bench engine --prompts swe-lite` on the bundled pair: real agent contexts, every case the same tokens."""
    import json

    from bench.__main__ import main

    argv = ["engine", "--quick", "--json", "--threads", "1", "--no-progress", "--prompts", "swe-lite"]
    assert main([*argv, "--model", str(TARGET), "--draft", str(DRAFT), "--max-new-tokens", "16"]) == 0
    report = json.loads(capsys.readouterr().out)
    prompts = report["setup"]["prompts"]
    assert report["setup"]["prompt_set"] == "swe-lite" and [p["kind"] for p in prompts] == ["agent", "agent"]
    # Two test instances spread over the split (two projects), each mid-conversation (turn > 1, 150+ tokens).
    projects = {p["name"].split("__")[1].split("-")[0] for p in prompts}
    assert len(projects) == 2 and all(p["tokens"] > 150 and not p["name"].endswith("#1") for p in prompts), prompts
    assert report["identical"] is True, json.dumps(report["identity"], indent=1)


def test_agent_prompts_end_at_the_assistant_header():
    from bench.agent_prompts import agent_prompts

    tokenizer = AutoTokenizer.from_pretrained(TARGET, local_files_only=True)
    header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    [prompt] = agent_prompts(tokenizer, "test", count=1)
    assert prompt.ids[-len(header) :] == header
    assert prompt.reply_tokens > 20  # the longest reply of a trajectory is an edit, not a one-line command
    assert prompt.name.startswith(load_suite("swe-lite", "test")[0].instance_id + "#")


MTP = BUNDLE / "mtp"


def test_bundled_mtp_module_solves_an_instance_with_the_identical_token_stream(tmp_path):
    """model=spectune-tiny's MTP module: loads for its target, drafts accepted tokens, changes no token."""
    models = load_models(str(TARGET), None, device="cpu", dtype="float32", mtp=str(MTP))
    trained = models.mtp.config.trained  # how training.mtp made it (the model card says which data)
    assert trained["train_sequences"] > 0 and set(trained["agreement"]) == {"dev", "test"}
    instance = load_suite("swe-lite", "test")[SMOKE_INSTANCE]
    defaults = AgentConfig()
    agent = AgentConfig(max_steps=defaults.max_steps, max_new_tokens=defaults.max_new_tokens)
    env = make_environment("swe-lite")
    results = {}
    configs = {
        "mtp": EngineConfig(drafter="mtp", gamma=3),
        "mtp+ngram": EngineConfig(drafter="mtp+ngram", gamma=3, options={"ngram": {"min_match": 3}}),
    }
    for drafter, config in configs.items():
        comparison = Comparison(Workload(models, [instance], env, agent, warmup=False), config, tmp_path / drafter)
        [results[drafter]] = list(comparison)
    for drafter, outcome in results.items():
        assert outcome.baseline.success and outcome.candidate.success, drafter
        assert outcome.candidate.generated_ids == outcome.baseline.generated_ids, drafter
        assert outcome.first_divergence is None
    mtp_stats = results["mtp"].candidate.stats
    # The trained head is accepted for 92 of 147 drafted tokens here (63%); a random one next to never.
    assert mtp_stats.drafted / 2 < mtp_stats.accepted < mtp_stats.drafted
    shares = results["mtp+ngram"].candidate.stats.per_drafter
    assert (
        shares["mtp"]["accepted"] > 0
        and sum(s["drafts"] for s in shares.values()) == results["mtp+ngram"].candidate.stats.drafts
    )
