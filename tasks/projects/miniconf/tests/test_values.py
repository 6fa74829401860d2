import pytest
from miniconf import ConfigError, ConfigParseError, format_value, parse_value


def test_integers():
    assert parse_value("42") == 42
    assert parse_value("-7") == -7
    assert parse_value("+3") == 3
    assert parse_value("1_000_000") == 1_000_000
    assert parse_value("0") == 0


def test_hex_integers():
    assert parse_value("0xff") == 255
    assert parse_value("0xDEAD_BEEF") == 0xDEADBEEF


def test_floats():
    assert parse_value("2.5") == 2.5
    assert parse_value("-0.125") == -0.125
    assert parse_value("1e3") == 1000.0
    assert parse_value("6.02E+23") == 6.02e23
    assert parse_value("1_000.5") == 1000.5
    assert isinstance(parse_value("1e3"), float)


def test_malformed_numbers_are_rejected():
    with pytest.raises(ConfigParseError, match="invalid value '012'"):
        parse_value("012")
    with pytest.raises(ConfigParseError, match="invalid value '1__0'"):
        parse_value("1__0")
    with pytest.raises(ConfigParseError, match=r"invalid value '1\.'"):
        parse_value("1.")


def test_booleans_are_lowercase_only():
    assert parse_value("true") is True
    assert parse_value("false") is False
    with pytest.raises(ConfigParseError, match="invalid value 'True'"):
        parse_value("True")


def test_errors_default_to_line_one():
    with pytest.raises(ConfigParseError, match=r"^line 1: invalid value 'yes'") as info:
        parse_value("yes")
    assert info.value.lineno == 1


def test_unquoted_words_are_rejected_with_hint():
    with pytest.raises(ConfigParseError, match=r"line 4: invalid value 'hello' \(strings must be quoted\)"):
        parse_value("hello", 4)


def test_basic_string_escapes():
    assert parse_value(r'"a\tb\nc"') == "a\tb\nc"
    assert parse_value(r'"say \"hi\" \\ bye"') == 'say "hi" \\ bye'
    assert parse_value(r'"\r"') == "\r"
    assert parse_value(r'"caf\u00e9"') == "café"


def test_bad_escapes_are_rejected():
    with pytest.raises(ConfigParseError, match=r"invalid escape sequence '\\q'"):
        parse_value(r'"a\qb"')
    with pytest.raises(ConfigParseError, match=r"invalid unicode escape '\\u12G4'"):
        parse_value(r'"\u12G4"')


def test_literal_strings_keep_backslashes():
    assert parse_value(r"'C:\temp\new'") == r"C:\temp\new"
    assert parse_value("''") == ""


def test_unterminated_strings_are_rejected():
    with pytest.raises(ConfigParseError, match="line 2: unterminated string"):
        parse_value('"abc', 2)
    with pytest.raises(ConfigParseError, match="unterminated string"):
        parse_value("'abc")


def test_hash_inside_string_is_not_a_comment():
    assert parse_value('"a # b"  # real comment') == "a # b"
    assert parse_value("'x#y'#c") == "x#y"


def test_trailing_text_is_rejected():
    with pytest.raises(ConfigParseError, match="unexpected text '2' after value"):
        parse_value("1 2")
    with pytest.raises(ConfigParseError, match="unexpected text 'x' after value"):
        parse_value('"a"x')


def test_missing_value_is_rejected():
    with pytest.raises(ConfigParseError, match="missing value"):
        parse_value("   ")
    with pytest.raises(ConfigParseError, match="missing value"):
        parse_value("  # nothing")


def test_arrays():
    assert parse_value("[1, 2, 3]") == [1, 2, 3]
    assert parse_value("[ 'a' , \"b\" , true , 1.5 ]") == ["a", "b", True, 1.5]
    assert parse_value("[]") == []
    assert parse_value("[1, 2,]") == [1, 2]
    assert parse_value("[1,2,3]") == [1, 2, 3]
    assert parse_value('["]", ","]') == ["]", ","]


def test_nested_arrays_are_rejected():
    with pytest.raises(ConfigParseError, match="nested arrays are not supported"):
        parse_value("[1, [2]]")


def test_malformed_arrays_are_rejected():
    with pytest.raises(ConfigParseError, match="unterminated array"):
        parse_value("[1, 2")
    with pytest.raises(ConfigParseError, match="expected ',' or ']' in array, found '3]'"):
        parse_value("[1 3]")
    with pytest.raises(ConfigParseError, match="expected a value at ',]'"):
        parse_value("[,]")


def test_format_scalars():
    assert format_value(True) == "true"
    assert format_value(False) == "false"
    assert format_value(-12) == "-12"
    assert format_value(0.5) == "0.5"
    assert format_value(1e20) == "1e+20"


def test_format_strings_escape_specials():
    assert format_value('a "b"\n') == r'"a \"b\"\n"'
    assert format_value("back\\slash\t") == r'"back\\slash\t"'
    assert format_value("bell\x07\x7f") == r'"bell\u0007\u007f"'


def test_format_arrays():
    assert format_value([1, "x", False]) == '[1, "x", false]'
    assert format_value(("a",)) == '["a"]'


def test_format_rejects_unsupported_values():
    with pytest.raises(ConfigError, match="cannot write non-finite float inf"):
        format_value(float("inf"))
    with pytest.raises(ConfigError, match=r"cannot write nested array \[2\]"):
        format_value([1, [2]])
    with pytest.raises(ConfigError, match="cannot write value of type NoneType: None"):
        format_value(None)


def test_format_then_parse_round_trip():
    for value in ["tab\there", 'quote"s', "uni\x01", -0.0, 123456789, [1.5, "a,b"], True]:
        assert parse_value(format_value(value)) == value


def test_literal_strings_with_comments_and_hashes():
    assert parse_value(r"'a\b'") == "a\\b"
    assert parse_value("'x'  # note") == "x"
    assert parse_value("'#'") == "#"
    assert parse_value('"#" # c') == "#"
    assert parse_value("'a # b' # c") == "a # b"
    assert parse_value("'q' ") == "q"
