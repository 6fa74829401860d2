"""What the expert says: the phrasings of each step, and the stable choice among them.

Text varies between instances but never between runs: a phrasing is picked by a hash of the instance
id and the step, never by time, chance or call order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def choose(options: Sequence[str], key: str) -> str:
    """One of `options`, fixed by a hash of `key` (stable across runs, machines and Python versions)."""
    digest = hashlib.sha256(key.encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


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
