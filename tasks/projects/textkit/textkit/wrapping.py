"""Line wrapping, filling and justification."""

from __future__ import annotations

from .errors import AlignmentError, WidthError

_ALIGNMENTS = ("left", "right", "center")


def _check_room(width: int, indent: str) -> int:
    """Return how many characters of text fit after ``indent`` on a line of ``width``."""
    if width <= 0:
        raise WidthError(f"width must be positive, got {width}")
    room = width - len(indent)
    if room <= 0:
        raise WidthError(f"indent {indent!r} leaves no room in a line of width {width}")
    return room


def wrap(
    text: str,
    width: int = 70,
    *,
    initial_indent: str = "",
    subsequent_indent: str = "",
    break_long_words: bool = True,
) -> list[str]:
    """Split ``text`` into lines no longer than ``width`` characters.

    Words are separated by any run of whitespace.  The first line starts with
    ``initial_indent`` and every following line with ``subsequent_indent``;
    indents count towards the width.  A word longer than the available room is
    cut into pieces when ``break_long_words`` is true, otherwise it is placed
    alone on an over-long line.
    """
    first_room = _check_room(width, initial_indent)
    later_room = _check_room(width, subsequent_indent)
    lines: list[str] = []

    def room() -> int:
        return later_room if lines else first_room

    def emit(content: str) -> None:
        lines.append((subsequent_indent if lines else initial_indent) + content)

    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if len(candidate) <= room():
            line = candidate
            continue
        if line:
            emit(line)
        if break_long_words:
            while len(word) > room():
                cut = room()
                emit(word[:cut])
                word = word[cut:]
        line = word

    if line:
        emit(line)
    return lines


def fill(
    text: str,
    width: int = 70,
    *,
    initial_indent: str = "",
    subsequent_indent: str = "",
    break_long_words: bool = True,
) -> str:
    """Wrap ``text`` like :func:`wrap` and join the lines with newlines."""
    lines = wrap(
        text,
        width,
        initial_indent=initial_indent,
        subsequent_indent=subsequent_indent,
        break_long_words=break_long_words,
    )
    return "\n".join(lines)


def justify_line(words: list[str], width: int) -> str:
    """Spread ``words`` over exactly ``width`` characters.

    Extra spaces are distributed between the words, leftmost gaps first.  A
    single word is left-aligned and padded on the right.
    """
    if not words:
        return " " * width
    letters = sum(len(word) for word in words)
    minimum = letters + len(words) - 1
    if minimum > width:
        raise WidthError(f"words {words!r} need {minimum} characters, more than width {width}")
    if len(words) == 1:
        return words[0].ljust(width)
    gaps = len(words) - 1
    base, extra = divmod(width - letters, gaps)
    parts: list[str] = []
    for index, word in enumerate(words[:-1]):
        parts.append(word)
        parts.append(" " * (base + (1 if index < extra else 0)))
    parts.append(words[-1])
    return "".join(parts)


def justify(text: str, width: int = 70) -> list[str]:
    """Wrap ``text`` and justify every line except the last to ``width``."""
    lines = wrap(text, width)
    if not lines:
        return []
    justified = [justify_line(line.split(), width) for line in lines[:-1]]
    justified.append(lines[-1])
    return justified


def align(line: str, width: int, how: str = "left") -> str:
    """Pad ``line`` with spaces to ``width`` using ``how`` ("left", "right" or "center").

    Lines already at least ``width`` long are returned unchanged.  When
    centering leaves an odd number of spaces, the extra one goes to the right.
    """
    if how not in _ALIGNMENTS:
        raise AlignmentError(f"unknown alignment {how!r}; expected one of {', '.join(_ALIGNMENTS)}")
    spare = width - len(line)
    if how == "left":
        return line + " " * spare
    if how == "right":
        return " " * spare + line
    left = spare // 2
    return " " * left + line + " " * (spare - left)
