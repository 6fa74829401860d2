"""Agent-context prompts for `bench engine --prompts swe-lite`: what the model really sees mid-task.

The built-in prompts are generic text; a suite-fitted model such as spectune-tiny has never seen
anything like them, so its acceptance there says little. These prompts are taken from the agent
itself: the scripted expert (agents/expert/) runs a few swe-lite instances through the real agent
loop and local sandbox, and the bench prompt is the exact id sequence the agent fed the model before
the expert's longest reply (the edit, which re-quotes code the conversation already holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.expert import ExpertModel
from agents.model import ModelReply


@dataclass(frozen=True)
class AgentPrompt:
    """One agent-context prompt: the ids fed to the model and the reply the expert gave there."""

    name: str  # instance id and turn
    ids: list[int]
    reply_tokens: int


class _RecordingExpert(ExpertModel):
    """The scripted expert, remembering the prompt ids of every turn."""

    def __init__(self, instance: Any, tokenizer: Any) -> None:
        super().__init__(instance, tokenizer)
        self.turns: list[tuple[list[int], int]] = []  # (prompt ids, reply length)

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        out = super().reply(prompt_ids, messages, max_new_tokens)
        self.turns.append((list(prompt_ids), len(out.tokens)))
        return out


def agent_prompts(tokenizer: Any, split: str = "test", count: int = 4) -> list[AgentPrompt]:
    """`count` swe-lite instances spread over `split`: the prompt before each one's longest expert reply."""
    from agents.expert.runner import run_expert
    from tasks.environment import materializer
    from tasks.sandbox import make_sandbox
    from tasks.suites import load_suite

    experts: list[_RecordingExpert] = []

    def make_model(instance: Any, tok: Any) -> _RecordingExpert:
        experts.append(_RecordingExpert(instance, tok))
        return experts[-1]

    out = []
    instances = load_suite("swe-lite", split, limit=count, subset="spread")
    runs = run_expert(
        instances, tokenizer, materializer("swe-lite"), lambda: make_sandbox("local"), make_model=make_model
    )
    for outcome in runs:
        model = experts[-1]
        if not outcome.resolved or not model.turns:
            raise RuntimeError(
                f"the scripted expert did not resolve {outcome.instance.instance_id}: {outcome.agent.status}"
            )
        turn = max(range(len(model.turns)), key=lambda i: model.turns[i][1])
        ids, reply = model.turns[turn]
        out.append(AgentPrompt(f"{outcome.instance.instance_id}#{turn + 1}", ids, reply))
    return out
