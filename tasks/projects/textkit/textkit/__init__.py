"""textkit: wrapping, justification, slugs and other plain-text helpers."""

from .errors import AlignmentError, SlugError, TextkitError, TruncateError, WidthError
from .helpers import dedent, indent, truncate, word_count, word_frequencies, words
from .slug import TRANSLITERATIONS, slugify, transliterate, unique_slug
from .wrapping import align, fill, justify, justify_line, wrap

__all__ = [
    "TRANSLITERATIONS",
    "AlignmentError",
    "SlugError",
    "TextkitError",
    "TruncateError",
    "WidthError",
    "align",
    "dedent",
    "fill",
    "indent",
    "justify",
    "justify_line",
    "slugify",
    "transliterate",
    "truncate",
    "unique_slug",
    "word_count",
    "word_frequencies",
    "words",
    "wrap",
]
