import pytest
from textkit import TruncateError, dedent, indent, truncate, word_count, word_frequencies, words


def test_truncate_leaves_short_text_alone():
    assert truncate("short", 5) == "short"


def test_truncate_cuts_and_appends_ellipsis():
    assert truncate("Hello world", 8) == "Hello w…"
    assert truncate("Hello world", 8, "...") == "Hello..."


def test_truncate_strips_trailing_space_before_ellipsis():
    assert truncate("Hello world", 7) == "Hello…"


def test_truncate_whole_words_moves_back_to_space():
    assert truncate("The quick brown fox", 16, whole_words=True) == "The quick brown…"
    assert truncate("The quick brown fox", 14, whole_words=True) == "The quick…"
    assert truncate("a bcdefgh", 6, whole_words=True) == "a…"


def test_truncate_whole_words_keeps_first_word_cut_when_no_space():
    assert truncate("Supercalifragilistic", 6, whole_words=True) == "Super…"
    assert truncate(" abcdefg", 5, whole_words=True) == " abc…"


def test_truncate_to_exactly_the_ellipsis_length():
    assert truncate("abcdef", 3, "...") == "..."


def test_truncate_rejects_length_shorter_than_ellipsis():
    with pytest.raises(TruncateError, match=r"'\.\.\.'"):
        truncate("abcdef", 2, "...")


def test_dedent_removes_common_prefix_and_empties_blank_lines():
    text = "    def f():\n        return 1\n   \n    pass"
    assert dedent(text) == "def f():\n    return 1\n\npass"


def test_dedent_with_mixed_prefixes_uses_shared_part_only():
    assert dedent("\t  a\n\t b") == " a\nb"
    assert dedent("  a\nb") == "  a\nb"
    assert dedent("\t x\n\t\ty") == " x\n\ty"


def test_dedent_compares_whitespace_only():
    assert dedent("  ab\n  ac") == "ab\nac"


def test_dedent_first_line_can_have_the_shortest_prefix():
    assert dedent("  a\n    b\n    c") == "a\n  b\n  c"


def test_dedent_all_blank_lines():
    assert dedent("  \n\t") == "\n"


def test_indent_skips_blank_lines_by_default():
    assert indent("a\n\n  b\n  ", "> ") == "> a\n\n>   b\n  "


def test_indent_can_prefix_blank_lines():
    assert indent("a\n\nb", "# ", skip_blank=False) == "# a\n# \n# b"


def test_words_keep_inner_apostrophes_and_hyphens():
    assert words("It's a well-known fact -- isn't it?") == ["It's", "a", "well-known", "fact", "isn't", "it"]


def test_word_count_counts_words_only():
    assert word_count("one, two;  three... 4") == 4
    assert word_count("  ") == 0


def test_word_frequencies_orders_by_count_then_word():
    text = "b a B c a b"
    assert word_frequencies(text) == [("b", 3), ("a", 2), ("c", 1)]


def test_word_frequencies_case_sensitive():
    assert word_frequencies("b a B c a b", ignore_case=False) == [("a", 2), ("b", 2), ("B", 1), ("c", 1)]


def test_indent_leaves_blank_and_space_only_lines():
    assert indent("x\n \ny", "# ") == "# x\n \n# y"
    assert indent("\none\n\ntwo", "  ") == "\n  one\n\n  two"
    assert indent("a\n\nb", "> ", skip_blank=False) == "> a\n> \n> b"
