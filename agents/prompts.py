"""What the agent says to the model, and how messages become token ids.

The system prompt states the action format (agents/actions.py parses it); the instance prompt
shows only `Instance.agent_view()` (never a patch or the deciding tests); observations keep the
head and tail of long output. `ChatRenderer` turns messages into ids with the tokenizer's chat
template -- or, for a tokenizer without one, `FALLBACK_CHAT_TEMPLATE` (ChatML:
`<|im_start|>ROLE\\nCONTENT<|im_end|>\\n`, generation header `<|im_start|>assistant\\n`) -- one
message at a time, so the ids of earlier turns are never re-tokenized.
"""

from __future__ import annotations

from typing import Any

from tasks.sandbox.base import WORKSPACE, CommandResult
from tasks.schema import Instance

SYSTEM_PROMPT = f"""\
You are a software engineer fixing an issue in a repository. You work in a shell at {WORKSPACE}, \
the repository root, turn by turn: each turn, write a short thought, then exactly ONE action. \
You will get the result of the action in the next message.

Actions (exactly one per turn):

1. Run a shell command: a ```bash block. Each command runs in a fresh shell at the repository root \
(no state such as `cd` or variables carries over), without network access or interactive input.

```bash
grep -n "def parse" -r .
```

2. Edit a file: the file's path relative to the repository root on its own line, then a \
SEARCH/REPLACE block. SEARCH must copy existing lines exactly (indentation included) and match one \
place in the file; REPLACE holds the new lines. An empty SEARCH with a new path creates that file.

src/module.py
<<<<<<< SEARCH
    return a - b
=======
    return a + b
>>>>>>> REPLACE

3. Finish: when the fix is done and tested, submit the current state of the repository:

```bash
submit
```

Reproduce the problem first, read the relevant code, edit it, re-run your reproduction and the \
tests, then submit. Do not edit or add tests unless asked."""

INSTANCE_TEMPLATE = """\
Repository: {repo} (checked out at {workspace})

<issue>
{problem_statement}
</issue>

Fix the issue by editing the repository's source files, then submit. Remember: one action per turn."""

FORMAT_REMINDER = """\
Format error: {error}.
Each turn must end with exactly ONE action: a ```bash block with one command, or one edit \
(the file path on its own line, then <<<<<<< SEARCH, the exact lines, =======, the new lines, \
>>>>>>> REPLACE), or a ```bash block containing only `submit`."""

FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_SENTINEL = "\x00SPECTUNE-REPLY\x00"  # stands for an assistant reply when locating the turn's closing


def instance_prompt(instance: Instance) -> str:
    """The first user message: the issue text and how to act (nothing but `agent_view()`)."""
    view = instance.agent_view()
    return INSTANCE_TEMPLATE.format(
        repo=view["repo"], workspace=WORKSPACE, problem_statement=view["problem_statement"].strip()
    )


def elide(text: str, max_chars: int, max_lines: int) -> str:
    """`text` with its middle replaced by a marker when it has more than max_lines lines or max_chars chars."""
    end = "\n" if text.endswith("\n") else ""  # a final newline ends the last line; it is not another line
    lines = text[: len(text) - len(end)].split("\n")
    if len(lines) > max_lines:
        head, tail = (max_lines + 1) // 2, max_lines // 2
        cut = lines[head : len(lines) - tail]
        marker = f"[... {len(cut)} lines ({sum(len(c) + 1 for c in cut)} characters) elided ...]"
        text = "\n".join([*lines[:head], marker, *(lines[len(lines) - tail :] if tail else [])]) + end
    if len(text) > max_chars:
        head, tail = (max_chars + 1) // 2, max_chars // 2
        cut_chars = len(text) - head - tail
        text = f"{text[:head]}\n[... {cut_chars} characters elided ...]\n{text[len(text) - tail :] if tail else ''}"
    return text


def command_observation(result: CommandResult, max_chars: int, max_lines: int, timeout_s: float) -> str:
    """The observation of a shell command: its return code and (elided) output."""
    code = "timeout" if result.timed_out else str(result.returncode)
    notes = []
    if result.timed_out:
        notes.append(f"the command was killed after {timeout_s:g} s")
    if result.truncated:
        notes.append("the sandbox kept only the head and tail of a very long output")
    note = f"<note>{'; '.join(notes)}</note>\n" if notes else ""
    output = elide(result.output, max_chars, max_lines)
    if output and not output.endswith("\n"):
        output += "\n"
    return f"<returncode>{code}</returncode>\n{note}<output>\n{output}</output>"


def format_error_observation(error: str, finish_reason: str, max_new_tokens: int) -> str:
    """The observation of a turn that did not hold exactly one action."""
    text = FORMAT_REMINDER.format(error=error.rstrip("."))
    if finish_reason == "length":
        text += f"\nYour reply was cut off at {max_new_tokens} tokens: keep the thought short."
    return text


class TemplateError(ValueError):
    """The chat template cannot be extended one message at a time."""


class ChatRenderer:
    """Renders messages to token ids with a chat template, appending one message at a time."""

    def __init__(self, tokenizer: Any, template: str | None = None) -> None:
        self.tokenizer = tokenizer
        # The tokenizer's own template unless one is forced; the fallback only when it has none.
        own = getattr(tokenizer, "chat_template", None)
        self.uses_fallback = not (template or own)  # True: the tokenizer has no template and none was given
        self.template = template or own or FALLBACK_CHAT_TEMPLATE
        self.end_of_turn_ids, self.after_end_ids = self._closing()

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        """The conversation as text, through the template."""
        return self.tokenizer.apply_chat_template(
            messages, chat_template=self.template, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        """Ids of a rendered piece (special-token text such as <|im_start|> becomes its special id)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _closing(self) -> tuple[list[int], list[int]]:
        """(end-of-turn ids, ids the template puts after them) of an assistant message.

        ChatML closes a reply with "<|im_end|>\\n": a model stops after emitting <|im_end|>, so the
        loop appends only the "\\n" after it; a reply cut short gets both.
        """
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        text = self.render([*probe, {"role": "assistant", "content": _SENTINEL}], add_generation_prompt=False)
        if _SENTINEL not in text:
            raise TemplateError("the chat template does not render an assistant message's content")
        ids = self.encode(text.split(_SENTINEL, 1)[1])
        special = set(self.tokenizer.all_special_ids)
        cut = next((i + 1 for i, t in enumerate(ids) if t in special), len(ids))
        return ids[:cut], ids[cut:]

    def first(self, messages: list[dict[str, str]]) -> list[int]:
        """Ids of the opening messages (system + user) and the assistant generation header."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def close_reply(self, reply_tokens: list[int]) -> list[int]:
        """Ids to append after a reply: the rest of the template's closing (all of it if the reply lacks it)."""
        eot = self.end_of_turn_ids
        if eot and reply_tokens[-len(eot) :] == eot:
            return list(self.after_end_ids)
        return [*eot, *self.after_end_ids]

    def next_message(self, messages: list[dict[str, str]], message: dict[str, str]) -> list[int]:
        """Ids of `message` plus the next generation header, rendered as a delta after `messages`."""
        before = self.render(messages, add_generation_prompt=False)
        after = self.render([*messages, message], add_generation_prompt=True)
        if not after.startswith(before):
            raise TemplateError(
                "the chat template re-renders earlier messages when one is added, so the conversation "
                "cannot grow as one id sequence; pass ChatRenderer(tokenizer, template=...) with a "
                "template that renders each message independently"
            )
        return self.encode(after[len(before) :])
