"""The scripted expert: a model stand-in that knows an instance's fix and works like a careful agent.

It reads the instance's gold `patch` (the agent never sees it) and writes, turn by turn, a realistic
trajectory in the agent's exact action format: run the issue's snippet, outline and read the code,
one SEARCH/REPLACE edit per hunk, re-run the snippet and the visible tests, submit. It reacts to the
observations it is given (line numbers from the outline, the file text it read, an edit that did not
apply), and its trajectories become the training data of the bundled reference models (DESIGN.md
§8), so every turn is deterministic: phrasing varies with a seed drawn from the instance id, never
with time or chance. A stand-in for tests and data, never a subject of measurement.
"""

from __future__ import annotations

import hashlib
import keyword
import re
import shlex
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from agents.actions import DIVIDER_MARK, REPLACE_MARK, SEARCH_MARK
from agents.model import ModelReply
from agents.prompts import ChatRenderer, TemplateError

IM_END = "<|im_end|>"
TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"
MAX_EDIT_ATTEMPTS = 3  # an edit that does not apply is retried with wider context this many times in all
VIEW_MAX_LINES = 40  # longest stretch of a file the expert reads at once
SHORT_LINE = 50  # a changed line up to this long is quoted whole in the thought

_PY_BLOCK = re.compile(r"```python[ \t]*\n(.*?)\n```", re.S)
_EXPECTED = re.compile(r"I expected:\s*\n\s*```[^\n]*\n(.*?)\n?```", re.S)
_GOT = re.compile(r"Instead I get:\s*\n\s*```[^\n]*\n(.*?)\n?```", re.S)
_FRAME = re.compile(r'^\s*File "(?:/workspace/)?(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Warning))\b")
_OUTLINE = re.compile(r"^(?P<line>\d+):\s*(?:async\s+)?(?:def|class)\s+(?P<name>\w+)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MATCHES = re.compile(r"matches (\d+) places")
_PASSED = re.compile(r"(\d+) passed")
_FAILED = re.compile(r"(\d+) (?:failed|error)")
# String literals are single tokens, so brackets inside them never count as code.
_TOKEN = re.compile(r"""[rbfuRBFU]*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|\w+|==|!=|<=|>=|//|\*\*|->|[-+*/%&|^]=|\S""")
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff."""

    old_start: int  # 1-based line in the old file of the hunk's first old-side line
    lines: tuple[tuple[str, str], ...]  # (tag, text) with tag " " context, "-" removed, "+" added

    @property
    def old(self) -> list[str]:
        """The hunk's old side (context and removed lines)."""
        return [t for tag, t in self.lines if tag != "+"]

    @property
    def changed(self) -> tuple[int, int]:
        """Indices into `lines` of the first and last changed line."""
        idx = [i for i, (tag, _) in enumerate(self.lines) if tag != " "]
        return idx[0], idx[-1]

    def old_line(self, index: int) -> int:
        """Old-file line number of `lines[index]` (for an added line: of the old line after it)."""
        return self.old_start + sum(1 for tag, _ in self.lines[:index] if tag != "+")

    @property
    def delta(self) -> int:
        """How many lines the hunk adds to the file (negative when it removes some)."""
        return sum(1 if tag == "+" else -1 if tag == "-" else 0 for tag, _ in self.lines)


@dataclass(frozen=True)
class FilePatch:
    """The hunks of one file in a unified diff."""

    path: str  # workspace-relative
    hunks: tuple[Hunk, ...]
    created: bool = False  # the old side is /dev/null
    deleted: bool = False  # the new side is /dev/null


def parse_patch(patch: str) -> list[FilePatch]:
    """The files and hunks of a unified (git) diff; hunk bodies are read by their header counts."""
    files: list[FilePatch] = []
    old_path = new_path = ""
    hunks: list[Hunk] = []
    body: list[tuple[str, str]] = []
    start = left_old = left_new = 0

    def close_file() -> None:
        if hunks:
            path = new_path if new_path != "/dev/null" else old_path
            files.append(FilePatch(path, tuple(hunks), old_path == "/dev/null", new_path == "/dev/null"))
            hunks.clear()

    for line in patch.splitlines():
        if left_old > 0 or left_new > 0:
            tag, text = (line[0], line[1:]) if line else (" ", "")  # some tools drop an empty line's space
            if tag == "\\":  # "\\ No newline at end of file"
                continue
            body.append((tag, text))
            left_old -= 0 if tag == "+" else 1
            left_new -= 0 if tag == "-" else 1
            if left_old <= 0 and left_new <= 0:
                if any(tag != " " for tag, _ in body):  # a hunk of context alone changes nothing
                    hunks.append(Hunk(start, tuple(body)))
                body = []
        elif line.startswith("diff --git "):
            close_file()
        elif line.startswith("--- "):
            close_file()
            old_path = _strip_prefix(line[4:])
        elif line.startswith("+++ "):
            new_path = _strip_prefix(line[4:])
        elif m := _HUNK.match(line):
            left_old = int(m.group(2)) if m.group(2) is not None else 1
            left_new = int(m.group(4)) if m.group(4) is not None else 1
            # "-0,0" (a new file): the hunk goes before line 1
            start = int(m.group(1)) if left_old else int(m.group(1)) + 1
    close_file()
    return files


def _strip_prefix(path: str) -> str:
    path = path.split("\t")[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def issue_snippet(problem_statement: str) -> str | None:
    """The first ```python block of the issue, if any."""
    m = _PY_BLOCK.search(problem_statement)
    return m.group(1).strip("\n") + "\n" if m else None


def _block(pattern: re.Pattern[str], text: str) -> list[str] | None:
    m = pattern.search(text)
    return m.group(1).splitlines() if m else None


def _last_exception(text: str) -> str | None:
    """The exception type a traceback in `text` ends with (printed `XError: ...` lines do not count)."""
    _, traceback, tail = text.rpartition("Traceback (most recent call last):")
    found = [m.group("exc") for line in tail.splitlines() if (m := _EXC.match(line.strip()))] if traceback else []
    return found[0].rsplit(".", 1)[-1] if found else None


def _frames(text: str) -> list[tuple[str, int, str]]:
    return [(m["path"], int(m["line"]), m["func"]) for line in text.splitlines() if (m := _FRAME.match(line))]


def _is_subsequence(needle: Sequence[str], hay: Sequence[str]) -> bool:
    it = iter(line.rstrip() for line in hay)
    return all(any(h == n.rstrip() for h in it) for n in needle)


def change_fragments(old: str, new: str) -> tuple[str, str]:
    """How to quote a one-line change: whole lines when short, else the innermost call or subscript.

    `self._data.popitem(lasts=False)` vs `self._data.popitem(last=False)`: the bracket group holding
    the change, with the name it belongs to. A change in a string or outside any bracket: whole lines.
    """
    whole = old.strip(), new.strip()
    if max(len(old.strip()), len(new.strip())) <= SHORT_LINE:
        return whole
    a, b = list(_TOKEN.finditer(old)), list(_TOKEN.finditer(new))
    ta, tb = [m.group() for m in a], [m.group() for m in b]
    pre = 0
    while pre < min(len(ta), len(tb)) and ta[pre] == tb[pre]:
        pre += 1
    post = 0
    while post < min(len(ta), len(tb)) - pre and ta[-1 - post] == tb[-1 - post]:
        post += 1
    head = old[: a[pre].start()] if pre < len(a) else old
    if pre == 0 or head.count('"') % 2 or head.count("'") % 2:
        return whole
    opener, depth = None, 0
    for i in range(pre - 1, -1, -1):  # the innermost bracket still open where the change starts
        if ta[i] in _CLOSE:
            depth += 1
        elif ta[i] in _OPEN:
            if depth == 0:
                opener = i
                break
            depth -= 1
    if opener is None:
        return whole
    close_a, close_b = _matching(ta, opener), _matching(tb, opener)
    # Both closers must sit at the same place in the shared suffix, after the change.
    if close_a is None or close_b is None or len(ta) - close_a != len(tb) - close_b or close_a < len(ta) - post:
        return whole
    first = opener
    if first > 0 and ta[first - 1].isidentifier() and not keyword.iskeyword(ta[first - 1]):
        first -= 1
        while first > 1 and ta[first - 1] == "." and ta[first - 2].isidentifier():  # the whole `obj.attr` chain
            first -= 2
    return old[a[first].start() : a[close_a].end()], new[b[first].start() : b[close_b].end()]


def _matching(tokens: list[str], opener: int) -> int | None:
    """Index of the bracket closing `tokens[opener]`."""
    depth = 0
    for i in range(opener, len(tokens)):
        if tokens[i] in _OPEN:
            depth += 1
        elif tokens[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return None


def _choose(options: Sequence[str], key: str) -> str:
    """One of `options`, fixed by a hash of `key` (stable across runs, machines and Python versions)."""
    digest = hashlib.sha256(key.encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def _heredoc(script: str) -> str:
    """A bash command that feeds `script` to python on stdin, untouched by the shell."""
    tag = "EOF"
    while any(line.strip() == tag for line in script.splitlines()):
        tag += "_"
    return f"python - <<'{tag}'\n{script.rstrip(chr(10))}\n{tag}"


def _edit_failed(observation: str) -> bool:
    """Whether the observation after an edit says it changed nothing (agents/edits.py's wording)."""
    text = observation.strip()
    return text.startswith(("Edit failed", "Edit refused")) or "No change made" in text


# Phrasings per step; one is picked by a hash of (instance id, step), so text varies between instances
# but never between runs. Placeholders: e exception, f function, p path, n/a/b line numbers,
# o/w old and new code, l a code line, i output line, g got, x expected, k count, where location.
PHRASES: dict[str, tuple[str, ...]] = {
    "repro_crash": (
        "Let me reproduce the {e} first with the snippet from the issue.",
        "First I'll run the issue's snippet to see the {e} myself.",
        "I'll start by reproducing the {e} with the reported code.",
    ),
    "repro_value": (
        "Let me run the snippet from the issue to confirm the wrong output.",
        "First I'll reproduce the unexpected result with the issue's snippet.",
        "I'll start by running the reported code to see what it prints.",
    ),
    "outline_frame": (
        "Reproduced: {e}. The traceback goes through `{f}` in `{p}` (line {n}); let me outline that file.",
        "Same {e} here. The last frame in `{p}` is `{f}` at line {n}, so I'll list that file's functions.",
        "I get the {e} too, from `{f}` ({p}, line {n}). Let me see how that file is laid out.",
    ),
    "outline_crash": (
        "Reproduced the {e}. The code behind it is in `{p}`; let me outline that file.",
        "I see the {e} too. Let me list the functions in `{p}`.",
    ),
    "wrong_line": (
        "Reproduced: output line {i} is `{g}` instead of `{x}`.",
        "I get the same result: line {i} prints `{g}` where `{x}` is expected.",
    ),
    "wrong_output": ("Reproduced: the output differs from what the issue expects.",),
    "outline_value": (
        "The logic lives in `{p}`; let me outline it.",
        "Let me list the functions in `{p}`.",
        "I'll look at how `{p}` is organised.",
    ),
    "outline_next": ("The fix also touches `{p}`; let me outline it.", "Next, `{p}`: its functions first."),
    "view_func": (
        "`{f}` is the suspect; let me read lines {a}-{b} of `{p}`.",
        "Let me read `{f}` (lines {a}-{b}).",
        "I'll look at `{f}` around lines {a}-{b}.",
    ),
    "view_lines": ("Let me read lines {a}-{b} of `{p}`.", "I'll look at `{p}`, lines {a}-{b}."),
    "edit_line": (
        "Found it: in {where}, `{o}` should be `{w}`.",
        "That's the bug: {where} has `{o}` where it needs `{w}`.",
        "In {where} the code says `{o}`; it should say `{w}`. Fixing that line.",
    ),
    "edit_early_return": (
        "{where} returns early with `{l}` before doing its work; that line has to go.",
        "There's a premature `{l}` in {where}. Removing it.",
    ),
    "edit_remove": (
        "The `{l}` line in {where} should not be there; I'll remove it.",
        "{where} runs `{l}`, which it must not. Removing that line.",
    ),
    "edit_add": (
        "{where} is missing `{l}`; adding it.",
        "Nothing in {where} does `{l}`, which the code below relies on. Adding it.",
    ),
    "edit_block": (
        "I'll rewrite this part of {where}.",
        "This block of {where} needs changing; here is the corrected version.",
    ),
    "edit_retry_many": (
        "SEARCH matched {k} places. I'll include more surrounding lines so it matches only one.",
        "That block is not unique ({k} matches); widening the context and trying again.",
    ),
    "edit_retry": (
        "The edit did not apply. I'll copy a larger stretch of the lines I read and try again.",
        "That SEARCH block was not accepted; trying again with more context.",
    ),
    "create": ("Add the new file `{p}`.", "`{p}` does not exist yet; create it."),
    "delete": ("`{p}` is no longer needed; remove it.",),
    "rerun": (
        "The edit is in. Let me re-run the reproduction.",
        "Now the snippet again to check the fix.",
        "Re-running the issue's snippet.",
    ),
    "tests_fixed": (
        "The output now matches what the issue expected. Let me run the tests.",
        "That's the expected output. Now the visible test suite.",
        "Fixed: it prints what the issue expects. Running the tests to check nothing else broke.",
    ),
    "tests_clean": ("The snippet runs cleanly now. Let me run the tests.", "No error this time. Now the test suite."),
    "tests_error": ("The snippet still reports an error; let me see what the tests say.",),
    "tests_plain": ("Now the project's tests.", "Let me run the test suite."),
    "submit_green": (
        "All {k} tests pass. Submitting.",
        "{k} passed, nothing broken. I'm done.",
        "The suite is green ({k} passed); submitting the fix.",
    ),
    "submit": ("The fix is in; submitting.", "Submitting the change."),
}


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
        return _choose(PHRASES[key], f"{self.instance.instance_id}:{key}:{step}").format(**fmt)

    def _turns(self) -> Generator[str, str, None]:
        """The trajectory as a coroutine: yields a reply, receives the observation that followed it."""
        issue = self.instance.problem_statement
        snippet = issue_snippet(issue)
        obs = ""
        if snippet:
            exc = _last_exception(issue)
            thought = self._say("repro_crash", "", e=exc) if exc else self._say("repro_value", "")
            obs = yield _command_turn(thought, _heredoc(snippet))
        for fi, fp in enumerate(self.files):
            obs = yield from self._fix_file(fi, fp, obs)
        if snippet:
            obs = yield _command_turn(self._say("rerun", ""), _heredoc(snippet))
            expected = _block(_EXPECTED, issue)
            if expected is not None and _is_subsequence(expected, obs.splitlines()):
                thought = self._say("tests_fixed", "")
            else:
                thought = self._say("tests_error" if _last_exception(obs) else "tests_clean", "")
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
            outline = _parse_outline(obs)
        for hi, hunk in enumerate(fp.hunks):
            # The outline and the hunk count lines of the file as it was; earlier edits moved them.
            step, done = f"{fi}.{hi}", fp.hunks[:hi]
            a, b = _view_range(hunk, outline)
            a, b = a + _shift(done, a), b + _shift(done, b)
            func = _enclosing(outline, hunk.old_line(hunk.changed[0]))
            if func:
                thought = self._say("view_func", step, f=func, a=a, b=b, p=fp.path)
            else:
                thought = self._say("view_lines", step, a=a, b=b, p=fp.path)
            obs = yield _command_turn(thought, f"sed -n '{a},{b}p' {path}")
            shift = _shift(done, hunk.old_start)
            window = _window(obs, hunk, a, b, shift)
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
                if not _edit_failed(obs):
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
        seen_exc = _last_exception(obs)
        frames = [f for f in _frames(obs) if f[0] == path]
        if seen_exc and frames:
            _, line, func = frames[-1]
            return self._say("outline_frame", "", e=seen_exc, f=func, n=line, p=path)
        if seen_exc:
            return self._say("outline_crash", "", e=seen_exc, p=path)
        issue = self.instance.problem_statement
        expected, got = _block(_EXPECTED, issue), _block(_GOT, issue)
        lead = self._say("wrong_output", "")
        if expected and got and _is_subsequence(got, obs.splitlines()):
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


def _parse_outline(obs: str) -> list[tuple[int, str]]:
    """(line, name) of each `def`/`class` line in a `grep -n` observation."""
    return [(int(m["line"]), m["name"]) for line in obs.splitlines() if (m := _OUTLINE.match(line))]


def _enclosing(outline: list[tuple[int, str]], line: int) -> str | None:
    """Name of the last def/class starting at or before `line` (as far as the outline tells)."""
    before = [name for start, name in outline if start <= line]
    return before[-1] if before else None


def _window(obs: str, hunk: Hunk, a: int, b: int, shift: int) -> dict[int, str]:
    """File lines a..b as read from a `sed -n 'a,bp'` observation, keyed by line number.

    The observation is located by the hunk's own old lines (ground truth), so any framing the agent
    loop adds around the output does not matter; when they are not found, only the hunk is known.
    """
    known = {hunk.old_start + shift + i: t for i, t in enumerate(hunk.old)}
    lines = obs.splitlines()
    old = hunk.old
    offset = hunk.old_start + shift - a  # where the hunk starts inside the window
    for k in range(len(lines) - len(old) + 1):
        if lines[k : k + len(old)] == old and k - offset >= 0 and k - offset + (b - a + 1) <= len(lines):
            window = lines[k - offset : k - offset + (b - a + 1)]
            return {a + i: t for i, t in enumerate(window)} | known
    return known


def edit_blocks(hunk: Hunk, shift: int, window: dict[int, str], ctx: int) -> tuple[list[str], list[str], int]:
    """SEARCH and REPLACE lines for `hunk` with up to `ctx` context lines each side, and the ctx used.

    Blank context lines at the edges are dropped; context grows until the SEARCH text occurs once in
    what is known of the file (`window`: line number -> text, which may reach beyond the hunk).
    """
    start = hunk.old_start + shift
    before = [(" ", window[n]) for n in sorted(window) if n < start]
    after = [(" ", window[n]) for n in sorted(window) if n >= start + len(hunk.old)]
    rows = [*before, *hunk.lines, *after]
    first = len(before) + hunk.changed[0]
    last = len(before) + hunk.changed[1]
    known = [window[n] for n in sorted(window)] or hunk.old
    while True:
        lo, hi = max(0, first - ctx), min(len(rows), last + 1 + ctx)
        while lo < first and not rows[lo][1].strip():
            lo += 1
        while hi > last + 1 and not rows[hi - 1][1].strip():
            hi -= 1
        search = [t for tag, t in rows[lo:hi] if tag != "+"]
        replace = [t for tag, t in rows[lo:hi] if tag != "-"]
        if (search and _count(known, search) <= 1) or (first - ctx <= 0 and last + 1 + ctx >= len(rows)):
            return search, replace, ctx
        ctx += 1


def _count(lines: list[str], block: list[str]) -> int:
    n = len(block)
    return sum(1 for i in range(len(lines) - n + 1) if lines[i : i + n] == block)


if __name__ == "__main__":  # `python -m agents.expert swe-lite --split dev`: the CLI lives in agents/expert_cli.py
    from agents.expert_cli import main

    raise SystemExit(main())
