import pytest
from textkit import AlignmentError, WidthError, align, fill, justify, justify_line, wrap


def test_wrap_packs_words_greedily():
    assert wrap("the quick brown fox jumps over the lazy dog", 15) == [
        "the quick brown",
        "fox jumps over",
        "the lazy dog",
    ]


def test_wrap_collapses_whitespace_and_handles_empty_text():
    assert wrap("  alpha \n\t beta   ", 20) == ["alpha beta"]
    assert wrap("   ", 10) == []


def test_wrap_word_exactly_filling_width_stays_on_line():
    assert wrap("abcd efgh", 9) == ["abcd efgh"]
    assert wrap("abcd efghi", 9) == ["abcd", "efghi"]


def test_wrap_breaks_long_words_into_chunks():
    assert wrap("ab abcdefghijk cd", 4) == ["ab", "abcd", "efgh", "ijk", "cd"]


def test_wrap_keeps_long_words_whole_when_breaking_disabled():
    assert wrap("ab abcdefghijk cd", 4, break_long_words=False) == ["ab", "abcdefghijk", "cd"]


def test_wrap_applies_initial_and_subsequent_indent():
    lines = wrap("one two three four five", 10, initial_indent="* ", subsequent_indent="  ")
    assert lines == ["* one two", "  three", "  four", "  five"]


def test_wrap_long_word_uses_indent_room_on_each_line():
    assert wrap("abcdefgh", 5, initial_indent=">>", subsequent_indent="-") == [">>abc", "-defg", "-h"]


def test_wrap_default_width_is_seventy():
    lines = wrap("a " * 40)
    assert [len(line) for line in lines] == [69, 9]


def test_wrap_accepts_single_character_of_room():
    assert wrap("ab", 1) == ["a", "b"]
    assert wrap("ab c", 3, initial_indent="  ") == ["  a", "b c"]


def test_wrap_rejects_non_positive_width():
    with pytest.raises(WidthError, match="got 0"):
        wrap("text", 0)


def test_wrap_rejects_indent_as_wide_as_line():
    with pytest.raises(WidthError, match="'    '"):
        wrap("text", 4, subsequent_indent="    ")


def test_fill_joins_lines_and_passes_options():
    assert fill("aa bb cc dd", 5) == "aa bb\ncc dd"
    assert fill("aa bb cc", 6, initial_indent="> ", subsequent_indent="| ") == "> aa\n| bb\n| cc"
    assert fill("xxxxxxx", 3, break_long_words=False) == "xxxxxxx"
    assert fill("xxxxxxx", 3) == "xxx\nxxx\nx"
    assert [len(line) for line in fill("b " * 40).split("\n")] == [69, 9]


def test_justify_line_spreads_extra_spaces_left_first():
    assert justify_line(["a", "b", "c"], 8) == "a   b  c"
    assert justify_line(["ab", "cd"], 6) == "ab  cd"
    assert justify_line(["ab", "cd"], 5) == "ab cd"


def test_justify_line_single_word_and_empty():
    assert justify_line(["word"], 7) == "word   "
    assert justify_line([], 3) == "   "


def test_justify_line_rejects_words_that_do_not_fit():
    with pytest.raises(WidthError, match="need 7 characters"):
        justify_line(["abc", "def"], 6)


def test_justify_leaves_last_line_ragged():
    assert justify("the quick brown fox jumps over it", 12) == [
        "the    quick",
        "brown    fox",
        "jumps   over",
        "it",
    ]
    assert justify("", 10) == []


def test_justify_default_width():
    lines = justify("word " * 20)
    assert len(lines[0]) == 70
    assert lines[0].startswith("word  word word")
    assert lines[1] == "word word word word word word"


def test_align_left_right_and_center():
    assert align("ab", 6) == "ab    "
    assert align("ab", 6, "right") == "    ab"
    assert align("ab", 7, "center") == "  ab   "


def test_align_returns_long_lines_unchanged():
    assert align("abcdef", 4, "right") == "abcdef"
    assert align("abcd", 4, "center") == "abcd"


def test_align_rejects_unknown_mode():
    with pytest.raises(AlignmentError, match="'justify'"):
        align("x", 3, "justify")


def test_wrap_rejects_indents_that_fill_the_line():
    with pytest.raises(WidthError, match="indent '  ' leaves no room in a line of width 2"):
        wrap("some words", 2, subsequent_indent="  ")
    with pytest.raises(WidthError, match="indent '   ' leaves no room in a line of width 3"):
        wrap("abc", 3, initial_indent="   ")
    with pytest.raises(WidthError, match="indent '      ' leaves no room in a line of width 5"):
        wrap("abc def", 5, subsequent_indent="      ")


def test_align_other_widths():
    assert align("xyz", 5) == "xyz  "
    assert align("xyz", 5, "right") == "  xyz"
    assert align("xyz", 8, "center") == "  xyz   "
    assert align("a", 4, "center") == " a  "
    assert align("hello", 9, "center") == "  hello  "
