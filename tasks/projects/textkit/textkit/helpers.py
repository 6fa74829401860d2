"""Small helpers: truncation, indentation and word statistics."""

from __future__ import annotations

import re

from .errors import TruncateError

_WORD = re.compile(r"\w+(?:['’-]\w+)*")


def truncate(text: str, max_length: int, ellipsis: str = "…", *, whole_words: bool = False) -> str:
    """Shorten ``text`` to at most ``max_length`` characters, ending with ``ellipsis``.

    Text that already fits is returned unchanged.  With ``whole_words`` the cut
    moves back to the previous space so that no word is split, unless the
    first word alone is too long.
    """
    if max_length < len(ellipsis):
        raise TruncateError(f"max_length {max_length} is shorter than the ellipsis {ellipsis!r}")
    if len(text) <= max_length:
        return text
    cut = max_length - len(ellipsis)
    head = text[:cut]
    if whole_words and not text[cut].isspace():
        space = head.rfind(" ")
        if space > 0:
            head = head[:space]
    return head.rstrip() + ellipsis


def _leading_whitespace(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def dedent(text: str) -> str:
    """Remove the whitespace prefix shared by every non-blank line.

    Blank lines (empty or whitespace only) do not take part and are emptied.
    """
    lines = text.split("\n")
    prefixes = [_leading_whitespace(line) for line in lines if line.strip()]
    if not prefixes:
        return "\n".join("" for _ in lines)
    common = prefixes[0]
    for prefix in prefixes[1:]:
        size = 0
        while size < min(len(common), len(prefix)) and common[size] == prefix[size]:
            size += 1
        common = common[:size]
    return "\n".join(line[len(common) :] if line.strip() else "" for line in lines)


def indent(text: str, prefix: str, *, skip_blank: bool = True) -> str:
    """Add ``prefix`` to the start of each line of ``text``.

    Whitespace-only lines are left alone unless ``skip_blank`` is false.
    """
    lines = text.split("\n")
    return "\n".join(line if skip_blank and not line.strip() else prefix + line for line in lines)


def words(text: str) -> list[str]:
    """Return the words of ``text``; apostrophes and hyphens inside a word are kept."""
    return _WORD.findall(text)


def word_count(text: str) -> int:
    """Count the words in ``text`` as defined by :func:`words`."""
    return len(words(text))


def word_frequencies(text: str, *, ignore_case: bool = True) -> list[tuple[str, int]]:
    """Return ``(word, count)`` pairs, most frequent first, ties in alphabetical order."""
    counts: dict[str, int] = {}
    for word in words(text):
        key = word.lower() if ignore_case else word
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
