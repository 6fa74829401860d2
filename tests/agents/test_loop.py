"""The agent loop with scripted models and a real local sandbox: exit statuses, format errors,
the trajectory, what the prompt may contain, and the token-id bookkeeping."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest

from agents.loop import STATUSES, AgentConfig, AgentResult, run_agent
from agents.model import ModelReply
from agents.prompts import FALLBACK_CHAT_TEMPLATE, ChatRenderer
from agents.scripted import ScriptedModel
from engine.tiny import train_tokenizer
from tasks.sandbox import SandboxError
from tasks.sandbox.local import LocalSandbox
from tasks.schema import Instance
from tasks.suites import load_suite
from tasks.swelite.projects import materialize

FIX = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
RUN = "```bash\npython -c 'from calc import add; print(add(2, 3))'\n```"
SUBMIT = "All good.\n```bash\nsubmit\n```"
INSTANCE = Instance(
    instance_id="demo__calc-1",
    repo="calc",
    base_commit="0" * 40,
    problem_statement="add(2, 3) returns -1 but should return 5.",
    patch="diff --git a/calc.py b/calc.py\n+SECRET_GOLD_PATCH_LINE\n",
    test_patch="diff --git a/test_calc.py b/test_calc.py\n+SECRET_TEST_PATCH_LINE\n",
    fail_to_pass=["test_calc.py::test_SECRET_FAIL_TO_PASS"],
    pass_to_pass=["test_calc.py::test_SECRET_PASS_TO_PASS"],
    hints_text="SECRET_HINT",
    bug_patch="diff --git a/calc.py b/calc.py\n+SECRET_BUG_PATCH_LINE\n",
)
SECRETS = ("SECRET_GOLD_PATCH_LINE", "SECRET_TEST_PATCH_LINE", "SECRET_FAIL_TO_PASS", "SECRET_PASS_TO_PASS",
           "SECRET_BUG_PATCH_LINE", "SECRET_HINT")  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(512)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("calc")
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return src


@pytest.fixture
def sandbox(project: Path):
    with LocalSandbox() as sb:
        sb.start(project)
        yield sb


def run(replies, tokenizer, sandbox, tmp_path, renderer=None, **config) -> tuple[AgentResult, dict, ScriptedModel]:
    model = ScriptedModel(replies, tokenizer)
    path = tmp_path / "trajectory.json"
    result = run_agent(INSTANCE, model, sandbox, tokenizer, AgentConfig(**config), path, renderer=renderer)
    assert result.status in STATUSES
    return result, json.loads(path.read_text()), model


def test_submitted_after_command_edit_and_check(tokenizer, sandbox, tmp_path):
    result, traj, model = run(["```bash\ncat calc.py\n```", FIX, RUN, SUBMIT], tokenizer, sandbox, tmp_path)
    assert (result.status, result.steps, result.format_errors) == ("submitted", 4, 0), result.message
    assert "+    return a + b" in result.patch and "-    return a - b" in result.patch
    assert [s["action"]["kind"] for s in traj["steps"]] == ["command", "edit", "command", "submit"]
    assert traj["steps"][0]["observation"].startswith("<returncode>0</returncode>")
    assert "return a - b" in traj["steps"][0]["observation"]
    assert traj["steps"][1]["observation"].startswith("Edited calc.py")
    assert "<output>\n5\n</output>" in traj["steps"][2]["observation"]
    assert traj["status"] == "submitted" and traj["result"]["patch"] == result.patch
    # system, user, then assistant/observation pairs; the submit turn gets no observation
    assert [m["role"] for m in traj["messages"]] == ["system", "user", *["assistant", "user"] * 3, "assistant"]
    assert result.prompt_tokens == sum(len(p) for p in model.prompts)
    assert result.tool_s > 0 and result.model_s >= 0 and result.wall_s >= result.tool_s
    json.dumps(result.to_dict(), allow_nan=False)


def test_step_limit(tokenizer, sandbox, tmp_path):
    result, traj, _ = run(itertools.repeat("```bash\necho hi\n```"), tokenizer, sandbox, tmp_path, max_steps=2)
    assert (result.status, result.steps) == ("step_limit", 2)
    assert len(traj["steps"]) == 2 and traj["status"] == "step_limit"


def test_time_limit_is_checked_between_steps(tokenizer, sandbox, tmp_path):
    replies = itertools.repeat("```bash\nsleep 0.4\n```")
    result, _, _ = run(replies, tokenizer, sandbox, tmp_path, max_wall_s=0.3, command_timeout_s=5)
    assert (result.status, result.steps) == ("time_limit", 1), result.message


def test_context_limit_of_the_config(tokenizer, sandbox, tmp_path):
    messages_len = len(ChatRenderer(tokenizer).first(_opening()))
    limit = messages_len + 64 + 10  # room for the first turn only
    result, traj, model = run([RUN, RUN], tokenizer, sandbox, tmp_path, max_context_tokens=limit, max_new_tokens=64)
    assert (result.status, result.steps) == ("context_exceeded", 1), result.message
    assert str(limit) in result.message
    assert result.max_context_tokens == messages_len + traj["steps"][0]["reply_tokens"]
    assert len(model.prompts[0]) == messages_len


def test_context_limit_of_the_model(tokenizer, sandbox, tmp_path):
    model = ScriptedModel([RUN], tokenizer, context_limit=100)
    result = run_agent(INSTANCE, model, sandbox, tokenizer, AgentConfig(max_new_tokens=16))
    assert (result.status, result.steps, model.prompts) == ("context_exceeded", 0, [])


def test_format_errors_end_the_task_and_each_gets_an_observation(tokenizer, sandbox, tmp_path):
    replies = ["I should look at calc.py.", "```bash\nls\n```\n```bash\ncat calc.py\n```", "Hmm."]
    result, traj, _ = run(replies, tokenizer, sandbox, tmp_path, max_format_errors=3)
    assert (result.status, result.steps, result.format_errors) == ("format_errors", 3, 3)
    first, second = traj["steps"][0]["observation"], traj["steps"][1]["observation"]
    assert first.startswith("Format error: no action found") and "<<<<<<< SEARCH" in first
    assert second.startswith("Format error: 2 actions found")
    assert traj["messages"][3] == {"role": "user", "content": first}, "the model must see the format error"
    assert not any("returncode" in s["observation"] for s in traj["steps"]), "no action may run"


def test_only_consecutive_format_errors_count_towards_the_limit(tokenizer, sandbox, tmp_path):
    replies = ["no action", "```bash\necho ok\n```", "no action", "still none"]
    result, _, _ = run(replies, tokenizer, sandbox, tmp_path, max_format_errors=2)
    assert (result.status, result.steps, result.format_errors) == ("format_errors", 4, 3)


def test_a_reply_cut_at_max_new_tokens_is_told_so(tokenizer, sandbox, tmp_path):
    long = "Let me think about this at length. " * 20 + "\n```bash\nls\n```"
    result, traj, _ = run([long, SUBMIT], tokenizer, sandbox, tmp_path, max_new_tokens=40)
    assert traj["steps"][0]["finish_reason"] == "length" and traj["steps"][0]["reply_tokens"] == 40
    assert "cut off at 40 tokens" in traj["steps"][0]["observation"]
    assert result.status == "submitted"


class _Peeking(ScriptedModel):
    """Reads the trajectory file at each turn, to prove it was written after the previous step."""

    def __init__(self, path: Path, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.path, self.seen = path, []

    def reply(self, prompt_ids, messages, max_new_tokens) -> ModelReply:
        self.seen.append(len(json.loads(self.path.read_text())["steps"]))
        return super().reply(prompt_ids, messages, max_new_tokens)


def test_model_crash_mid_task_leaves_the_trajectory_and_the_diff(tokenizer, sandbox, tmp_path):
    path = tmp_path / "deep" / "trajectory.json"
    model = _Peeking(path, ["```bash\necho new > new.txt\n```", FIX, RuntimeError("model exploded")], tokenizer)
    result = run_agent(INSTANCE, model, sandbox, tokenizer, AgentConfig(), path)
    assert (result.status, result.steps) == ("error", 2)
    assert result.message == "RuntimeError: model exploded"
    assert model.seen == [0, 1, 2], "the trajectory must be saved after every step"
    traj = json.loads(path.read_text())
    assert traj["status"] == "error" and traj["message"] == result.message and len(traj["steps"]) == 2
    assert "new.txt" in result.patch and "return a + b" in result.patch, "the patch is the diff at the end"
    assert not list(path.parent.glob("*.tmp")), "atomic writes leave no temp file"


class _BrokenSandbox:
    """Delegates to a real sandbox but breaks on `run`, like a daemon that went away."""

    def __init__(self, inner: LocalSandbox) -> None:
        self.inner, self.name = inner, "broken"

    def run(self, command, timeout=60.0):
        raise SandboxError("the sandbox daemon went away")

    def diff(self) -> str:
        return self.inner.diff()


def test_sandbox_failure_is_an_error_status(tokenizer, sandbox, tmp_path):
    model = ScriptedModel(["```bash\nls\n```"], tokenizer)
    result = run_agent(INSTANCE, model, _BrokenSandbox(sandbox), tokenizer, AgentConfig(), tmp_path / "t.json")
    assert result.status == "error" and "daemon went away" in result.message
    assert json.loads((tmp_path / "t.json").read_text())["steps"][0]["action"]["kind"] == "command"


def _opening() -> list[dict[str, str]]:
    from agents.prompts import SYSTEM_PROMPT, instance_prompt

    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instance_prompt(INSTANCE)}]


def test_prompt_never_contains_patches_or_deciding_tests(tokenizer, sandbox, tmp_path):
    _, traj, model = run(["```bash\nls\n```", SUBMIT], tokenizer, sandbox, tmp_path)
    seen = tokenizer.decode(model.prompts[-1]) + json.dumps(traj["messages"])
    assert INSTANCE.problem_statement in seen
    for secret in SECRETS:
        assert secret not in seen, f"{secret} leaked into the prompt"


def test_real_swe_lite_instance_prompt_hides_the_patches(tokenizer, tmp_path):
    instance = load_suite("swe-lite", "dev", limit=1)[0]
    workspace = materialize(instance, tmp_path / "ws")
    model = ScriptedModel(["```bash\nls\n```", SUBMIT], tokenizer)
    with LocalSandbox() as sb:
        sb.start(workspace)
        result = run_agent(instance, model, sb, tokenizer, AgentConfig())
    assert result.status == "submitted" and result.patch == ""
    seen = tokenizer.decode(model.prompts[-1])
    assert instance.problem_statement.strip() in seen
    for name in ("patch", "test_patch", "bug_patch"):
        text = getattr(instance, name)
        added = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        assert text and text not in seen
        assert not [ln for ln in added if len(ln) > 12 and ln in seen], f"a line of {name} leaked into the prompt"
    assert not [t for t in instance.fail_to_pass if t in seen]


class _CharModel:
    """Emits each character as its own token(s): valid ids that a re-tokenization would merge."""

    name = "char"

    def __init__(self, replies: list[str], tokenizer, end: bool = True) -> None:
        self.tokenizer, self.replies, self.ends_turn = tokenizer, iter(replies), end
        self.prompts: list[list[int]] = []
        self.tokens: list[list[int]] = []
        self.eot = ChatRenderer(tokenizer).end_of_turn_ids

    def begin(self, instance_id: str) -> None:
        pass

    def reply(self, prompt_ids, messages, max_new_tokens) -> ModelReply:
        self.prompts.append(list(prompt_ids))
        text = next(self.replies)
        tokens = [t for ch in text for t in self.tokenizer.encode(ch, add_special_tokens=False)]
        tokens += self.eot if self.ends_turn else []
        self.tokens.append(tokens)
        return ModelReply(tokens=tokens, text=text, finish_reason="eos" if self.ends_turn else "length")

    def end(self) -> None:
        pass


@pytest.mark.parametrize("fallback", [False, True], ids=["tokenizer-template", "fallback-template"])
@pytest.mark.parametrize("end", [True, False], ids=["reply-ends-turn", "reply-without-end"])
def test_reply_ids_are_appended_exactly(tokenizer, sandbox, tmp_path, fallback, end):
    tok = tokenizer
    if fallback:
        tok = copy.deepcopy(tokenizer)
        tok.chat_template = None
    renderer = ChatRenderer(tok)
    assert renderer.uses_fallback is fallback
    replies = ["Look.\n```bash\necho hello world\n```", FIX, "Done.\n```bash\nsubmit\n```"]
    model = _CharModel(replies, tok, end=end)
    result = run_agent(INSTANCE, model, sandbox, tok, AgentConfig(), tmp_path / "t.json")
    assert result.status == "submitted", result.message
    assert json.loads((tmp_path / "t.json").read_text())["chat_template"] == ("fallback" if fallback else "tokenizer")
    closing = renderer.after_end_ids if end else renderer.end_of_turn_ids + renderer.after_end_ids
    for k in range(len(model.prompts) - 1):
        prev, reply, nxt = model.prompts[k], model.tokens[k], model.prompts[k + 1]
        assert nxt[: len(prev)] == prev, "history must only grow"
        assert nxt[len(prev) : len(prev) + len(reply)] == reply, "reply ids must be kept as generated"
        assert nxt[len(prev) + len(reply) : len(prev) + len(reply) + len(closing)] == closing
    assert model.tokens[0] != tok.encode(replies[0], add_special_tokens=False) + (model.eot if end else [])
    assert result.generated_ids == [t for r in model.tokens for t in r]
    # The id sequence decodes to exactly what the template renders for the whole conversation.
    traj_messages = json.loads((tmp_path / "t.json").read_text())["messages"][:-1]
    expected = renderer.render(traj_messages, add_generation_prompt=True)
    assert tok.decode(model.prompts[-1], clean_up_tokenization_spaces=False) == expected
    if fallback:
        assert renderer.template == FALLBACK_CHAT_TEMPLATE
        assert expected.startswith("<|im_start|>system\n") and expected.endswith("<|im_start|>assistant\n")


def test_long_output_keeps_head_and_tail(tokenizer, sandbox, tmp_path):
    replies = ["```bash\nseq 1 5000\n```", "```bash\nsleep 5\n```", SUBMIT]
    config = {"max_output_lines": 10, "max_output_chars": 10_000, "command_timeout_s": 0.5}
    result, traj, _ = run(replies, tokenizer, sandbox, tmp_path, **config)
    long, slow = traj["steps"][0]["observation"], traj["steps"][1]["observation"]
    assert (
        "<output>\n1\n2\n3\n4\n5\n[... 4990 lines" in long
        and "elided ...]\n4996\n4997\n4998\n4999\n5000\n</output>" in long
    )
    assert slow.startswith("<returncode>timeout</returncode>") and "killed after 0.5 s" in slow
    assert result.status == "submitted"


def test_elide_by_lines_and_characters():
    from agents.prompts import elide

    assert elide("a\nb\nc\n", 100, 3) == "a\nb\nc\n"
    assert elide("1\n2\n3\n4\n5\n6", 100, 2) == "1\n[... 4 lines (8 characters) elided ...]\n6"
    cut = elide("x" * 50 + "y" * 50, 20, 100)
    assert cut == "x" * 10 + "\n[... 80 characters elided ...]\n" + "y" * 10


@pytest.mark.parametrize("bad", [{"max_steps": 0}, {"command_timeout_s": 0}, {"max_context_tokens": -5}])
def test_config_rejects_non_positive_limits(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        AgentConfig(**bad)
