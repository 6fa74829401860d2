"""Training sequences are exactly what the agent loop feeds the model, and the mask is exactly the replies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from agents.expert import ExpertModel
from agents.loop import run_agent
from agents.model import ModelReply
from tasks.sandbox import make_sandbox
from tasks.suites import load_suite
from tasks.swelite.projects import materialize
from training import trajectories
from training.sequences import from_trajectory


class RecordingExpert(ExpertModel):
    """The expert, keeping every prompt it was given and every reply's tokens."""

    def __init__(self, instance: Any, tokenizer: Any) -> None:
        super().__init__(instance, tokenizer)
        self.calls: list[tuple[list[int], list[int]]] = []

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """Reply as the expert does and record (prompt ids, reply tokens)."""
        reply = super().reply(prompt_ids, messages, max_new_tokens)
        self.calls.append((list(prompt_ids), list(reply.tokens)))
        return reply


def test_sequences_equal_the_ids_run_agent_feeds(quick_build: tuple[Path, Path], tmp_path: Path) -> None:
    _, work = quick_build
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    for data in trajectories.load(work, ("dev", "test")):
        instance = load_suite("swe-lite", split=data["split"], instance_ids=[data["instance_id"]])[0]
        model = RecordingExpert(instance, tokenizer)
        sandbox = make_sandbox("local")
        try:
            sandbox.start(materialize(instance, tmp_path / instance.instance_id))
            result = run_agent(instance, model, sandbox, tokenizer, trajectories.AGENT_CONFIG)
        finally:
            sandbox.close()
        assert result.status == "submitted"
        sequence = from_trajectory(data, tokenizer)  # rendered offline from the cached trajectory's messages
        assert len(sequence.turns) == len(model.calls)
        for (prompt, reply), (start, end) in zip(model.calls, sequence.turns, strict=True):
            assert sequence.ids[: len(prompt)] == prompt
            assert (start, end) == (len(prompt), len(prompt) + len(reply))
            assert sequence.ids[start:end] == reply
        assert sum(sequence.mask) == len(result.generated_ids)


def test_mask_covers_exactly_the_assistant_replies_and_their_end_of_turn(quick_build: tuple[Path, Path]) -> None:
    _, work = quick_build
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for data in trajectories.load(work, ("dev", "test")):
        sequence = from_trajectory(data, tokenizer)
        replies = [m["content"] for m in data["messages"] if m["role"] == "assistant"]
        spans = [i for a, b in sequence.turns for i in range(a, b)]
        assert [i for i, m in enumerate(sequence.mask) if m] == spans
        for (a, b), text in zip(sequence.turns, replies, strict=True):
            assert sequence.ids[b - 1] == im_end
            assert tokenizer.decode(sequence.ids[a : b - 1], clean_up_tokenization_spaces=False) == text
        # Every token outside the replies is prompt: it decodes to the rest of the ChatML conversation.
        text = tokenizer.decode(sequence.ids, clean_up_tokenization_spaces=False)
        assert text.startswith("<|im_start|>system\n") and text.count("<|im_start|>assistant\n") == len(replies)
