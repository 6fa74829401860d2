"""Fixed prompts of the engine benchmark: half copy-heavy (the answer re-quotes the prompt), half free.

Encoded raw with the model's tokenizer (no chat template), so the same text gives the same ids to
spectune and transformers. Lookup drafters (ngram, suffix, prompt lookup) only pay on the copy-heavy ones.
"""

from __future__ import annotations

from dataclasses import dataclass

_FUNCTION = '''def merge_intervals(items, gap=0):
    """Merge overlapping [start, end] intervals; `gap` joins intervals closer than it."""
    if not items:
        return []
    ordered = sorted(items, key=lambda pair: (pair[0], pair[1]))
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1] + gap:
            last[1] = max(last[1], end)
            continue
        merged.append([start, end])
    result = []
    for start, end in merged:
        if end < start:
            raise ValueError(f"bad interval: {start} > {end}")
        result.append((start, end))
    total = sum(end - start for start, end in result)
    if total < 0:
        raise ValueError("negative total length")
    return result
'''

_JSON = """{
  "name": "spectune",
  "version": "0.1.0",
  "engine": {"drafter": "ngram", "gamma": 4, "options": {"min_match": 1, "max_match": 2}},
  "suite": {"tasks": ["fix-parser", "add-test", "rename-field"], "timeout_s": 600, "retries": 2},
  "models": [
    {"id": "target", "path": "/models/target", "dtype": "float32", "device": "cpu"},
    {"id": "draft", "path": "/models/draft", "dtype": "float32", "device": "cpu"}
  ],
  "tags": ["benchmark", "speculative", "greedy"]
}"""

_LOG = '''============================= test session starts ==============================
collected 12 items

tests/test_parser.py::test_empty PASSED                                  [  8%]
tests/test_parser.py::test_single_line PASSED                            [ 16%]
tests/test_parser.py::test_quoted_field FAILED                           [ 25%]
tests/test_parser.py::test_escaped_quote FAILED                          [ 33%]
tests/test_parser.py::test_trailing_comma PASSED                         [ 41%]

=================================== FAILURES ===================================
_______________________________ test_quoted_field ______________________________
    def test_quoted_field():
>       assert parse_line('a,"b,c",d') == ["a", "b,c", "d"]
E       AssertionError: assert ['a', '"b', 'c"', 'd'] == ['a', 'b,c', 'd']
_______________________________ test_escaped_quote _____________________________
    def test_escaped_quote():
>       assert parse_line('"say ""hi"""') == ['say "hi"']
E       AssertionError: assert ['"say ""hi"""'] == ['say "hi"']
========================= 2 failed, 10 passed in 0.42s ========================='''


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt."""

    name: str
    kind: str  # "copy" (the answer re-quotes the prompt) or "free"
    text: str


PROMPTS: tuple[Prompt, ...] = (
    Prompt(
        "edit_code",
        "copy",
        "Edit this code: rename `items` to `intervals` and keep everything else exactly the same.\n\n"
        f"```python\n{_FUNCTION}```\n",
    ),
    Prompt("story", "free", "Write a story about a lighthouse keeper who finds a message in a bottle."),
    Prompt("repeat_json", "copy", f"Repeat this JSON exactly:\n{_JSON}\n"),
    Prompt(
        "explain",
        "free",
        "Explain how a hash map resolves collisions, and when open addressing beats separate chaining.",
    ),
    Prompt("quote_log", "copy", f"Quote the two failing tests of this log verbatim, with their errors:\n{_LOG}\n"),
    Prompt("free_plan", "free", "Describe a plan to make a slow test suite fast without losing coverage."),
)

# --quick: one prompt of each kind.
QUICK_PROMPTS: tuple[Prompt, ...] = (PROMPTS[0], PROMPTS[1])
