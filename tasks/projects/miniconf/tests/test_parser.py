import pytest
from miniconf import ConfigParseError, DuplicateKeyError, loads


def test_root_keys_and_sections():
    config = loads('name = "demo"\n[server]\nport = 8080\n')
    assert config.to_dict() == {"name": "demo", "server": {"port": 8080}}


def test_comments_and_blank_lines_are_ignored():
    text = "# comment\n; ini comment\n\n[a]  # trailing\nx = 1 # note\n   \n"
    assert loads(text).to_dict() == {"a": {"x": 1}}


def test_empty_text_gives_empty_config():
    assert loads("").to_dict() == {}


def test_dotted_section_names_nest():
    config = loads("[server.http]\ntimeout = 2.5\n[server]\nhost = 'h'\n")
    assert config.to_dict() == {"server": {"http": {"timeout": 2.5}, "host": "h"}}


def test_section_header_allows_spaces_around_dots():
    assert loads("[ a . b ]\nx = 1").to_dict() == {"a": {"b": {"x": 1}}}


def test_empty_section_is_kept():
    assert loads("[empty]\n[other]\nx = true").to_dict() == {"empty": {}, "other": {"x": True}}


def test_keys_with_dashes_and_digits():
    assert loads("max-size_2 = 3").to_dict() == {"max-size_2": 3}


def test_value_may_contain_equals_sign():
    assert loads('expr = "a=b"').get("expr") == "a=b"


def test_duplicate_key_reports_both_lines():
    with pytest.raises(DuplicateKeyError) as info:
        loads("[s]\nx = 1\ny = 2\nx = 3\n")
    assert info.value.lineno == 4
    assert info.value.first_lineno == 2
    assert str(info.value) == "line 4: duplicate key 's.x' (first defined on line 2)"


def test_same_key_in_different_sections_is_fine():
    assert loads("[a]\nx = 1\n[b]\nx = 2").to_dict() == {"a": {"x": 1}, "b": {"x": 2}}


def test_duplicate_section_is_rejected():
    with pytest.raises(DuplicateKeyError, match=r"line 3: duplicate section \[a\.b\] \(first defined on line 1\)"):
        loads("[a.b]\nx = 1\n[a.b]\n")


def test_duplicate_key_error_is_a_parse_error():
    with pytest.raises(ConfigParseError):
        loads("x = 1\nx = 1")


def test_section_over_a_value_is_rejected():
    with pytest.raises(ConfigParseError, match="line 2: 'a' is a value, not a section"):
        loads("a = 1\n[a.b]\n")


def test_nested_section_over_a_value_names_the_value():
    with pytest.raises(ConfigParseError, match=r"line 3: 'x\.y' is a value, not a section"):
        loads("[x]\ny = 1\n[x.y.z]\n")


def test_key_over_a_section_is_rejected():
    with pytest.raises(ConfigParseError, match=r"line 4: key 'a\.b' is already a section"):
        loads("[a.b]\nx = 1\n[a]\nb = 2\n")


def test_invalid_section_header_is_rejected():
    with pytest.raises(ConfigParseError, match=r"line 1: invalid section header '\[a b\]'"):
        loads("[a b]")
    with pytest.raises(ConfigParseError, match="invalid section header"):
        loads("[a.]")


def test_line_without_equals_is_rejected():
    with pytest.raises(ConfigParseError, match="line 2: expected 'key = value', got 'oops'"):
        loads("x = 1\noops\n")


def test_invalid_key_is_rejected():
    with pytest.raises(ConfigParseError, match="line 1: invalid key 'my key'"):
        loads("my key = 1")
    with pytest.raises(ConfigParseError, match="invalid key ''"):
        loads("= 1")


def test_value_errors_carry_the_line_number():
    with pytest.raises(ConfigParseError, match="line 3: unterminated string") as info:
        loads("[a]\nx = 1\ny = 'oops\n")
    assert info.value.lineno == 3
