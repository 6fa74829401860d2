import pytest
from semrange import InvalidVersionError, Range, Version, max_satisfying, min_satisfying, satisfies


def test_caret_boundaries():
    assert satisfies("1.2.3", "^1.2.3")
    assert satisfies("1.9.9", "^1.2.3")
    assert not satisfies("1.2.2", "^1.2.3")
    assert satisfies("2.0.0", "^1.2.3") is False


def test_caret_zero_minor_is_minor_locked():
    assert satisfies("0.2.9", "^0.2.3")
    assert not satisfies("0.3.0", "^0.2.3")


def test_tilde_boundaries():
    assert satisfies("1.4.7", "~1.4")
    assert not satisfies("1.5.0", "~1.4")
    assert not satisfies("1.3.9", "~1.4")


def test_explicit_and_range():
    assert satisfies("1.5.0", ">=1.0 <2.0")
    assert satisfies("1.0.0", ">=1.0 <2.0")
    assert not satisfies("2.0.0", ">=1.0 <2.0")
    assert not satisfies("0.9.0", ">=1.0 <2.0")


def test_x_range_membership():
    assert satisfies("1.0.0", "1.x")
    assert satisfies("1.99.0", "1.x")
    assert not satisfies("2.0.0", "1.x")


def test_alternatives_match_any_branch():
    assert satisfies("1.2.0", "1.x || >=3.0.0")
    assert satisfies("3.1.0", "1.x || >=3.0.0")
    assert satisfies("2.5.0", "1.x || >=3.0.0") is False


def test_hyphen_range_is_inclusive():
    assert satisfies("2.3.4", "1.2.3 - 2.3.4")
    assert not satisfies("2.3.5", "1.2.3 - 2.3.4")
    assert satisfies("1.2.3", "1.2.3 - 2.3.4")


def test_prerelease_excluded_unless_range_mentions_same_release():
    assert not satisfies("1.3.0-beta", "^1.2.0")
    assert satisfies("1.2.3-beta.4", "^1.2.3-beta.2")
    assert not satisfies("1.2.3-beta.1", "^1.2.3-beta.2")
    assert not satisfies("1.2.4-beta.4", "^1.2.3-beta.2")
    assert satisfies("1.2.4", "^1.2.3-beta.2")


def test_prerelease_allowed_by_comparator_in_same_alternative_only():
    assert not satisfies("1.2.4-rc.1", "<1.2.4-alpha || >=1.0.0")
    assert satisfies("1.2.4-rc.1", ">=1.2.4-alpha || >=1.0.0")
    assert satisfies("1.2.3-rc.1", ">=1.0.0 <1.2.3-rc.5")


def test_include_prerelease_option():
    assert Range("^1.2.0", include_prerelease=True).test("1.3.0-beta")
    assert not Range("^1.2.0", include_prerelease=True).test("1.2.0-beta")
    assert satisfies("1.3.0-beta", Range("^1.2.0", include_prerelease=True))


def test_satisfies_accepts_version_objects():
    assert satisfies(Version(1, 2, 3), Range("~1.2"))


def test_satisfies_rejects_invalid_version():
    with pytest.raises(InvalidVersionError, match=r"'1\.2'"):
        satisfies("1.2", "*")


def test_max_satisfying_picks_highest_in_range():
    versions = ["1.2.3", "1.2.4", "1.3.0", "2.0.0", "1.4.0-rc.1"]
    assert max_satisfying(versions, "^1.2.0") == "1.3.0"
    assert max_satisfying(versions, "~1.2.0") == "1.2.4"


def test_max_satisfying_returns_none_without_match():
    assert max_satisfying(["1.0.0", "1.1.0"], ">=2") is None
    assert max_satisfying([], "*") is None


def test_max_satisfying_returns_items_as_given_and_first_of_equals():
    versions = [Version.parse("1.0.0+a"), Version.parse("1.0.0+b"), Version.parse("0.5.0")]
    best = max_satisfying(versions, "<2")
    assert best is versions[0]
    assert max_satisfying(["v1.0.0", "1.0.1"], "1.0.0") == "v1.0.0"


def test_min_satisfying_picks_lowest_in_range():
    versions = ["2.1.0", "1.2.4", "1.2.3", "0.9.0"]
    assert min_satisfying(versions, "^1.2.0 || ^2.0.0") == "1.2.3"
    assert min_satisfying(versions, ">=2.0.0") == "2.1.0"
    assert min_satisfying(versions, ">=3.0.0") is None


def test_min_satisfying_keeps_first_of_equal_versions():
    assert min_satisfying(["1.0.0+b", "1.0.0+a"], "*") == "1.0.0+b"
