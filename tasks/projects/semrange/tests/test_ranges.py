import pytest
from semrange import Comparator, InvalidRangeError, Range, Version


def normalized(text):
    return str(Range(text))


def test_caret_ranges_for_major_versions():
    assert normalized("^1.2.3") == ">=1.2.3 <2.0.0"
    assert normalized("^1.2") == ">=1.2.0 <2.0.0"
    assert normalized("^1") == ">=1.0.0 <2.0.0"


def test_caret_ranges_below_one():
    assert normalized("^0.2.3") == ">=0.2.3 <0.3.0"
    assert normalized("^0.1.3") == ">=0.1.3 <0.2.0"
    assert normalized("^0.0.3") == ">=0.0.3 <0.0.4"
    assert normalized("^0.0") == ">=0.0.0 <0.1.0"
    assert normalized("^0.x") == ">=0.0.0 <1.0.0"


def test_caret_with_prerelease_floor():
    assert normalized("^1.2.3-beta.2") == ">=1.2.3-beta.2 <2.0.0"


def test_tilde_ranges():
    assert normalized("~1.2.3") == ">=1.2.3 <1.3.0"
    assert normalized("~1.2") == ">=1.2.0 <1.3.0"
    assert normalized("~1") == ">=1.0.0 <2.0.0"
    assert normalized("~>0.4.1") == ">=0.4.1 <0.5.0"


def test_x_ranges_and_bare_partials():
    assert normalized("1.x") == ">=1.0.0 <2.0.0"
    assert normalized("1.2.X") == ">=1.2.0 <1.3.0"
    assert normalized("1.2") == ">=1.2.0 <1.3.0"
    assert normalized("1.*.3") == ">=1.0.0 <2.0.0"


def test_wildcards_match_everything():
    assert normalized("*") == "*"
    assert normalized("") == "*"
    assert normalized("x") == "*"
    assert normalized("^*") == "*"
    assert normalized("~x") == "*"


def test_primitive_operators_with_full_versions():
    assert normalized(">=1.0.0 <2.0.0") == ">=1.0.0 <2.0.0"
    assert normalized(">1.2.3 <=1.4.0") == ">1.2.3 <=1.4.0"
    assert normalized("=1.2.3") == "=1.2.3"
    assert normalized("v1.2.3") == "=1.2.3"


def test_primitive_operators_with_partial_versions():
    assert normalized(">=1.2") == ">=1.2.0"
    assert normalized(">1.2") == ">=1.3.0"
    assert normalized(">1") == ">=2.0.0"
    assert normalized("<1.2") == "<1.2.0"
    assert normalized("<=1.2") == "<1.3.0"
    assert normalized("=1") == ">=1.0.0 <2.0.0"


def test_operator_may_be_followed_by_spaces():
    assert normalized(">= 1.0 < 2.0") == ">=1.0.0 <2.0.0"
    assert normalized("^ 1.2") == ">=1.2.0 <2.0.0"


def test_strict_comparison_with_star_matches_nothing():
    assert normalized(">*") == "<0.0.0"
    assert not Range("<*").test("0.0.0")
    assert normalized(">=*") == "*"


def test_hyphen_ranges():
    assert normalized("1.2.3 - 2.3.4") == ">=1.2.3 <=2.3.4"
    assert normalized("1.2 - 2.3") == ">=1.2.0 <2.4.0"
    assert normalized("1 - 2") == ">=1.0.0 <3.0.0"
    assert normalized("* - 2.0.0") == "<=2.0.0"
    assert normalized("1.0.0 - *") == ">=1.0.0"


def test_alternatives_are_joined():
    assert normalized("1.x || >=2.5.0 || 5.0.0 - 7.2.3") == ">=1.0.0 <2.0.0 || >=2.5.0 || >=5.0.0 <=7.2.3"


def test_empty_alternative_is_rejected():
    with pytest.raises(InvalidRangeError, match=r"empty alternative in range '1\.x \|\| '"):
        Range("1.x || ")


def test_invalid_range_text_is_rejected():
    with pytest.raises(InvalidRangeError, match="invalid version 'abc' in range '>=abc'"):
        Range(">=abc")
    with pytest.raises(InvalidRangeError, match="invalid version '' in range '>='"):
        Range(">=")


def test_prerelease_requires_full_version_in_range():
    with pytest.raises(InvalidRangeError, match="pre-release needs a full version"):
        Range("1.2-rc.1")
    with pytest.raises(InvalidRangeError, match="leading zero"):
        Range(">=1.2.3-rc.01")


def test_comparator_operators():
    version = Version(1, 2, 3)
    assert Comparator("<", Version(1, 2, 4)).test(version)
    assert not Comparator("<", version).test(version)
    assert Comparator("<=", version).test(version)
    assert not Comparator("<=", Version(1, 2, 2)).test(version)
    assert Comparator(">", Version(1, 2, 2)).test(version)
    assert not Comparator(">", version).test(version)
    assert Comparator(">=", version).test(version)
    assert not Comparator(">=", Version(1, 2, 4)).test(version)
    assert Comparator("=", version).test(Version.parse("1.2.3+meta"))
    assert not Comparator("=", version).test(Version(1, 2, 4))


def test_comparators_are_hashable_values():
    first = Comparator(">=", Version(1, 0, 0))
    second = Comparator(">=", Version.parse("1.0.0"))
    assert first == second
    assert len({first, second}) == 1
    assert str(first) == ">=1.0.0"


def test_comparator_rejects_unknown_operator():
    with pytest.raises(InvalidRangeError, match="'=>'"):
        Comparator("=>", Version(1, 0, 0))


def test_range_repr_and_contains():
    assert repr(Range("^1.0")) == "Range('^1.0')"
    assert "1.4.0" in Range("^1.0")
    assert Version(2, 0, 0) not in Range("^1.0")
    assert 1 not in Range("*")
