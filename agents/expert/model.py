"""The scripted expert: a model stand-in that knows an instance's fix and works like a careful agent.

It reads the instance's gold `patch` (the agent never sees it) and writes, turn by turn, a realistic
trajectory in the agent's exact action format: run the issue's snippet, outline and read the code,
one SEARCH/REPLACE edit per hunk, re-run the snippet and the visible tests, submit. It reacts to the
observations it is given (line numbers from the outline, the file text it read, an edit that did not
apply), and its trajectories become the training data of the bundled reference models (DESIGN.md
§8), so every turn is deterministic: phrasing varies with a seed drawn from the instance id, never
with time or chance. A stand-in for tests and data, never a subject of measurement.

This module owns the model (`ExpertModel`: the turns, as a coroutine fed the observations) and the format
of its replies; it reads the patch with patches.py, the observations with observations.py and takes
its wording from phrases.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Generator, Sequence
from typing import Any

from agents.actions import DIVIDER_MARK, REPLACE_MARK, SEARCH_MARK
from agents.expert.observations import (
    EXPECTED,
    GOT,
    block,
    edit_failed,
    enclosing,
    file_window,
    is_subsequence,
    issue_snippet,
    last_exception,
    parse_outline,
    traceback_frames,
)
from agents.expert.patches import FilePatch, Hunk, change_fragments, edit_blocks, parse_patch
from agents.expert.phrases import PHRASES, choose
from agents.model import ModelReply
from agents.prompts import ChatRenderer, TemplateError

IM_END = "<|im_end|>"
TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"
MAX_EDIT_ATTEMPTS = 3  # an edit that does not apply is retried with wider context this many times in all
VIEW_MAX_LINES = 40  # longest stretch of a file the expert reads at once

_MATCHES = re.compile(r"matches (\d+) places")
_PASSED = re.compile(r"(\d+) passed")
_FAILED = re.compile(r"(\d+) (?:failed|error)")


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Ids that end a reply: the chat template's end of turn, else `<|im_end|>`, else eos."""
    try:
        ids = ChatRenderer(tokenizer).end_of_turn_ids
    except (TemplateError, ValueError, RuntimeError):  # no usable template: fall back to the tokens themselves
        ids = []
    if ids:
        return list(ids)
    im_end = tokenizer.get_vocab().get(IM_END)
    return [im_end] if im_end is not None else [tokenizer.eos_token_id]


class ExpertModel:
    """`AgentModel` that replays a knowledgeable, deterministic fix of one instance."""

    def __init__(self, instance: Any, tokenizer: Any, name: str = "scripted-expert") -> None:
        """Script for `instance` (an `Instance` with its gold `patch`); replies encoded with `tokenizer`."""
        self.name = name
        self.instance = instance
        self.tokenizer = tokenizer
        self.files = parse_patch(instance.patch)
        if not self.files:
            raise ValueError(f"{instance.instance_id}: the patch has no hunks to replay")
        self.end_ids = end_of_turn_ids(tokenizer)
        self._script: Generator[str, str, None] | None = None
        self._started = False

    def begin(self, instance_id: str) -> None:
        """Start the script over (it serves one instance only)."""
        if instance_id != self.instance.instance_id:
            raise ValueError(f"this expert scripts {self.instance.instance_id}, not {instance_id}")
        self._script = self._turns()
        self._started = False

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The next turn; reads the latest observation (the last user message) from `messages`."""
        if self._script is None:
            self.begin(self.instance.instance_id)
        assert self._script is not None
        try:
            if self._started:
                observation = messages[-1]["content"] if messages and messages[-1].get("role") == "user" else ""
                text = self._script.send(observation)
            else:
                self._started = True
                text = next(self._script)
        except StopIteration:  # asked again after submitting: submit again
            text = self._submit_text("")
        body = list(self.tokenizer.encode(text, add_special_tokens=False))
        tokens, finish = [*body, *self.end_ids], "eos"
        if len(tokens) > max_new_tokens:  # cut off by the token budget, as a model would be
            tokens, body, finish = tokens[:max_new_tokens], body[:max_new_tokens], "length"
        # The text is what the ids decode to, so the conversation's text and ids always agree.
        decoded = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return ModelReply(tokens, decoded, finish)

    def end(self) -> None:
        """Drop the script state."""
        self._script = None

    def _say(self, key: str, step: str, **fmt: Any) -> str:
        """One phrasing of `key`, chosen by the instance id and the step (not by the call order)."""
        return choose(PHRASES[key], f"{self.instance.instance_id}:{key}:{step}").format(**fmt)

    def _turns(self) -> Generator[str, str, None]:
        """The trajectory as a coroutine: yields a reply, receives the observation that followed it."""
        issue = self.instance.problem_statement
        snippet = issue_snippet(issue)
        obs = ""
        if snippet:
            exc = last_exception(issue)
            thought = self._say("repro_crash", "", e=exc) if exc else self._say("repro_value", "")
            obs = yield _command_turn(thought, _heredoc(snippet))
        for fi, fp in enumerate(self.files):
            obs = yield from self._fix_file(fi, fp, obs)
        if snippet:
            obs = yield _command_turn(self._say("rerun", ""), _heredoc(snippet))
            expected = block(EXPECTED, issue)
            if expected is not None and is_subsequence(expected, obs.splitlines()):
                thought = self._say("tests_fixed", "")
            else:
                thought = self._say("tests_error" if last_exception(obs) else "tests_clean", "")
        else:
            thought = self._say("tests_plain", "")
        obs = yield _command_turn(thought, TEST_COMMAND)
        yield self._submit_text(obs)

    def _fix_file(self, fi: int, fp: FilePatch, obs: str) -> Generator[str, str, str]:
        """Turns that apply one file's part of the fix; returns the last observation."""
        path = shlex.quote(fp.path)
        if fp.created:
            new = [t for h in fp.hunks for tag, t in h.lines if tag == "+"]
            return (yield _edit_turn(self._say("create", fp.path, p=fp.path), fp.path, [], new))
        if fp.deleted:
            return (yield _command_turn(self._say("delete", fp.path, p=fp.path), f"git rm -q {path}"))
        outline: list[tuple[int, str]] = []
        if fp.path.endswith(".py"):
            obs = yield _command_turn(self._outline_thought(fp.path, obs, fi), f"grep -n 'def \\|class ' {path}")
            outline = parse_outline(obs)
        for hi, hunk in enumerate(fp.hunks):
            # The outline and the hunk count lines of the file as it was; earlier edits moved them.
            step, done = f"{fi}.{hi}", fp.hunks[:hi]
            a, b = _view_range(hunk, outline)
            a, b = a + _shift(done, a), b + _shift(done, b)
            func = enclosing(outline, hunk.old_line(hunk.changed[0]))
            if func:
                thought = self._say("view_func", step, f=func, a=a, b=b, p=fp.path)
            else:
                thought = self._say("view_lines", step, a=a, b=b, p=fp.path)
            obs = yield _command_turn(thought, f"sed -n '{a},{b}p' {path}")
            shift = _shift(done, hunk.old_start)
            window = file_window(obs, hunk, a, b, shift)
            ctx = 1
            for attempt in range(MAX_EDIT_ATTEMPTS):
                search, replace, ctx = edit_blocks(hunk, shift, window, ctx)
                if attempt == 0:
                    thought = self._edit_thought(hunk, f"`{func}`" if func else f"`{fp.path}`", step)
                elif many := _MATCHES.search(obs):
                    thought = self._say("edit_retry_many", f"{step}.{attempt}", k=many.group(1))
                else:
                    thought = self._say("edit_retry", f"{step}.{attempt}")
                obs = yield _edit_turn(thought, fp.path, search, replace)
                if not edit_failed(obs):
                    break
                ctx += 2
        return obs

    def _submit_text(self, obs: str) -> str:
        passed, failed = _PASSED.search(obs), _FAILED.search(obs)
        if passed and not failed:
            thought = self._say("submit_green", "", k=passed.group(1))
        else:
            thought = self._say("submit", "")
        return _command_turn(thought, "submit")

    def _outline_thought(self, path: str, obs: str, index: int) -> str:
        """What the previous observation showed, and why `path` is next."""
        if index > 0:
            return self._say("outline_next", path, p=path)
        seen_exc = last_exception(obs)
        frames = [f for f in traceback_frames(obs) if f[0] == path]
        if seen_exc and frames:
            _, line, func = frames[-1]
            return self._say("outline_frame", "", e=seen_exc, f=func, n=line, p=path)
        if seen_exc:
            return self._say("outline_crash", "", e=seen_exc, p=path)
        issue = self.instance.problem_statement
        expected, got = block(EXPECTED, issue), block(GOT, issue)
        lead = self._say("wrong_output", "")
        if expected and got and is_subsequence(got, obs.splitlines()):
            diff = [(i, x, g) for i, (x, g) in enumerate(zip(expected, got, strict=False)) if x != g]
            if diff:
                i, x, g = diff[0]
                lead = self._say("wrong_line", "", i=i + 1, g=_short(g), x=_short(x))
        return f"{lead} {self._say('outline_value', '', p=path)}"

    def _edit_thought(self, hunk: Hunk, where: str, step: str) -> str:
        """Say what is wrong in `where` and how the edit fixes it."""
        removed = [t for tag, t in hunk.lines if tag == "-"]
        added = [t for tag, t in hunk.lines if tag == "+"]
        if len(removed) == 1 and len(added) == 1:
            old, new = change_fragments(removed[0], added[0])
            return self._say("edit_line", step, where=where, o=old, w=new)
        if removed and not added:
            line = removed[0].strip()
            key = "edit_early_return" if line.startswith("return") and len(removed) == 1 else "edit_remove"
            return self._say(key, step, where=where, l=line)
        if added and not removed:
            return self._say("edit_add", step, where=where, l=added[0].strip())
        return self._say("edit_block", step, where=where)


def _command_turn(thought: str, command: str) -> str:
    return f"{thought}\n\n```bash\n{command}\n```"


def _edit_turn(thought: str, path: str, search: list[str], replace: list[str]) -> str:
    return "\n".join([thought, "", path, SEARCH_MARK, *search, DIVIDER_MARK, *replace, REPLACE_MARK])


def _heredoc(script: str) -> str:
    """A bash command that feeds `script` to python on stdin, untouched by the shell."""
    tag = "EOF"
    while any(line.strip() == tag for line in script.splitlines()):
        tag += "_"
    return f"python - <<'{tag}'\n{script.rstrip(chr(10))}\n{tag}"


def _shift(applied: Sequence[Hunk], line: int) -> int:
    """How far the edits of `applied` hunks (earlier in the same file) moved the old file's `line`."""
    return sum(h.delta for h in applied if h.old_start + len(h.old) <= line)


def _view_range(hunk: Hunk, outline: list[tuple[int, str]]) -> tuple[int, int]:
    """Lines to read around a hunk (old-file numbers): its enclosing def up to the next one, capped."""
    first, last = (hunk.old_line(i) for i in hunk.changed)
    start = hunk.old_start
    end = start + len(hunk.old) - 1
    defs = [line for line, _ in outline if line <= first]
    a = defs[-1] if defs and first - defs[-1] < VIEW_MAX_LINES - 8 else max(1, first - 8)
    after = [line for line, _ in outline if line > last]
    b = after[0] - 1 if after else last + 8
    b = min(max(b, end), a + VIEW_MAX_LINES - 1)
    return min(a, start), max(b, end)


def _short(text: str, limit: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
