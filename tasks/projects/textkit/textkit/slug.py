"""Slug generation with a small transliteration table."""

from __future__ import annotations

import re
from collections.abc import Collection

from .errors import SlugError

TRANSLITERATIONS: dict[str, str] = {
    "à": "a", "á": "a", "â": "a", "ã": "a", "ä": "a", "å": "a",
    "æ": "ae", "ç": "c", "ð": "d",
    "è": "e", "é": "e", "ê": "e", "ë": "e",
    "ì": "i", "í": "i", "î": "i", "ï": "i",
    "ł": "l", "ñ": "n",
    "ò": "o", "ó": "o", "ô": "o", "õ": "o", "ö": "o", "ø": "o", "œ": "oe",
    "ß": "ss", "þ": "th",
    "ù": "u", "ú": "u", "û": "u", "ü": "u",
    "ý": "y", "ÿ": "y",
}  # fmt: skip

_WORD = re.compile(r"[a-z0-9]+")
_APOSTROPHES = str.maketrans("", "", "'’")


def transliterate(text: str) -> str:
    """Replace accented letters from :data:`TRANSLITERATIONS` with ASCII.

    Case is preserved: an upper-case letter becomes a capitalized replacement
    (``"Æ"`` gives ``"Ae"``).  Characters outside the table are kept as-is.
    """
    out: list[str] = []
    for char in text:
        lower = char.lower()
        replacement = TRANSLITERATIONS.get(lower)
        if replacement is None:
            out.append(char)
        elif char != lower:
            out.append(replacement.capitalize())
        else:
            out.append(replacement)
    return "".join(out)


def slugify(text: str, separator: str = "-", max_length: int | None = None) -> str:
    """Turn ``text`` into a lowercase ASCII slug.

    Letters are transliterated, apostrophes dropped and every other run of
    non-alphanumeric characters becomes ``separator``.  With ``max_length`` the
    slug is cut at a word boundary; a single first word that is too long is cut
    mid-word.
    """
    if not separator or any(char.isalnum() for char in separator):
        raise SlugError(f"separator must be non-empty and non-alphanumeric, got {separator!r}")
    if max_length is not None and max_length < 1:
        raise SlugError(f"max_length must be at least 1, got {max_length}")

    ascii_text = transliterate(text).lower().translate(_APOSTROPHES)
    words = _WORD.findall(ascii_text)
    if max_length is None:
        return separator.join(words)

    slug = ""
    for word in words:
        candidate = f"{slug}{separator}{word}" if slug else word
        if len(candidate) > max_length:
            break
        slug = candidate
    if not slug and words:
        return words[0][:max_length]
    return slug


def unique_slug(text: str, taken: Collection[str], separator: str = "-") -> str:
    """Return a slug for ``text`` that is not in ``taken``.

    A numeric suffix starting at 2 is appended until the slug is free.
    """
    base = slugify(text, separator)
    if not base:
        raise SlugError(f"text {text!r} produces an empty slug")
    if base not in taken:
        return base
    counter = 2
    while f"{base}{separator}{counter}" in taken:
        counter += 1
    return f"{base}{separator}{counter}"
