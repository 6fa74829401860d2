"""run_episode: the one materialise -> sandbox -> agent -> evaluate path, on a real swe-lite task."""

from __future__ import annotations

import pytest

from agents.episode import run_episode
from agents.loop import AgentConfig
from agents.scripted import ScriptedModel
from engine.tiny import train_tokenizer
from tasks.environment import make_environment
from tasks.suites import load_suite

SUBMIT = "```bash\nsubmit\n```"


@pytest.fixture(scope="module")
def setup():
    instance = load_suite("swe-lite", "dev", 1, None, None, "first")[0]
    return instance, make_environment("swe-lite"), train_tokenizer(512)


def test_a_submitted_fix_is_graded_and_resolves(setup, tmp_path):
    instance, environment, tokenizer = setup
    fix = f"```bash\ngit apply <<'EOF'\n{instance.patch}EOF\n```"
    model = ScriptedModel([fix, SUBMIT], tokenizer)
    episode = run_episode(instance, model, environment, tokenizer, AgentConfig(max_steps=4), tmp_path / "t.json")
    assert episode.agent.status == "submitted" and episode.resolved, episode.evaluation
    assert (tmp_path / "t.json").is_file()


def test_an_unsubmitted_episode_is_graded_only_when_asked(setup):
    instance, environment, tokenizer = setup
    stuck = ["```bash\nls\n```"] * 2
    episode = run_episode(instance, ScriptedModel(stuck, tokenizer), environment, tokenizer, AgentConfig(max_steps=2))
    assert episode.agent.status == "step_limit" and episode.evaluation is None and not episode.resolved
    graded = run_episode(
        instance, ScriptedModel(stuck, tokenizer), environment, tokenizer, AgentConfig(max_steps=2),
        grade_unsubmitted=True,
    )  # fmt: skip
    assert graded.evaluation is not None and graded.evaluation.status == "unresolved" and not graded.resolved
