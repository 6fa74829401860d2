import pytest
from semrange import InvalidVersionError, Version, coerce_version, compare, compare_prerelease, sort_versions


def test_parse_plain_version():
    version = Version.parse("1.2.3")
    assert (version.major, version.minor, version.patch) == (1, 2, 3)
    assert version.prerelease == ()
    assert version.build == ()
    assert not version.is_prerelease


def test_parse_prerelease_and_build():
    version = Version.parse("1.2.3-rc.1+build.5")
    assert version.prerelease == ("rc", 1)
    assert version.build == ("build", "5")
    assert version.is_prerelease
    assert version.release == (1, 2, 3)


def test_parse_allows_v_prefix_and_surrounding_space():
    assert Version.parse(" v10.0.20 ") == Version(10, 0, 20)


def test_parse_build_without_prerelease_keeps_digits_as_text():
    version = Version.parse("0.0.1+007")
    assert version.prerelease == ()
    assert version.build == ("007",)


def test_parse_rejects_malformed_versions():
    for text in ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3+", "a.b.c", "1.2.3-rc..1"]:
        with pytest.raises(InvalidVersionError, match="invalid version"):
            Version.parse(text)


def test_parse_rejects_leading_zero_in_numeric_prerelease():
    with pytest.raises(InvalidVersionError, match=r"'01'.*'1\.0\.0-rc\.01'"):
        Version.parse("1.0.0-rc.01")
    assert Version.parse("1.0.0-rc.0").prerelease == ("rc", 0)
    assert Version.parse("1.0.0-0a").prerelease == ("0a",)


def test_str_round_trips():
    for text in ["1.2.3", "1.2.3-alpha.1", "1.2.3+exp.sha.5114f85", "1.0.0-x-y.7+z"]:
        assert str(Version.parse(text)) == text


def test_release_ordering_by_numbers_not_text():
    assert Version.parse("1.10.0") > Version.parse("1.9.0")
    assert Version.parse("2.0.0") > Version.parse("1.99.99")
    assert Version.parse("1.0.10") > Version.parse("1.0.9")


def test_prerelease_is_lower_than_release():
    assert Version.parse("1.0.0-rc.1") < Version.parse("1.0.0")
    assert Version.parse("1.0.0") > Version.parse("1.0.0-rc.1")
    assert Version.parse("1.0.0-rc.1") > Version.parse("0.9.9")


def test_semver_spec_precedence_example():
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    shuffled = [ordered[i] for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    assert [str(v) for v in sort_versions(shuffled)] == ordered
    assert [str(v) for v in sort_versions(shuffled, reverse=True)] == ordered[::-1]


def test_compare_prerelease_identifier_rules():
    assert compare_prerelease(("alpha", 1), ("alpha", "beta")) == -1
    assert compare_prerelease(("beta",), ("alpha", 1)) == 1
    assert compare_prerelease((2,), (11,)) == -1
    assert compare_prerelease(("a", "b"), ("a",)) == 1
    assert compare_prerelease(("a",), ("a", "b")) == -1
    assert compare_prerelease((), ("rc",)) == 1
    assert compare_prerelease(("rc",), ()) == -1
    assert compare_prerelease(("rc", 1), ("rc", 1)) == 0
    assert compare_prerelease((), ()) == 0


def test_compare_prerelease_numeric_below_alphanumeric():
    assert compare_prerelease((1,), ("alpha",)) == -1
    assert compare_prerelease(("alpha",), (1,)) == 1


def test_compare_prerelease_equal_numbers_defer_to_next_identifier():
    assert compare_prerelease((1, "a"), (1, "b")) == -1
    assert compare_prerelease((1, "b"), (1, "a")) == 1


def test_build_metadata_is_ignored_for_equality_and_hash():
    a = Version.parse("1.0.0+a")
    b = Version.parse("1.0.0+b")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, Version.parse("1.0.0-rc")}) == 2


def test_versions_are_immutable():
    version = Version(1, 2, 3)
    with pytest.raises(AttributeError):
        version.major = 2
    assert version.major == 1


def test_compare_same_release_uses_prerelease():
    assert Version.parse("1.2.3-rc.1").compare(Version.parse("1.2.3-rc.2")) == -1
    assert Version.parse("1.2.3").compare(Version.parse("1.2.3-rc.2")) == 1
    assert Version.parse("1.2.3").compare(Version.parse("1.2.3+b")) == 0


def test_equality_with_other_types():
    assert Version(1, 0, 0) != "1.0.0"
    with pytest.raises(TypeError):
        _ = Version(1, 0, 0) < "2.0.0"


def test_compare_function_accepts_strings_and_versions():
    assert compare("1.2.3", "1.2.4") == -1
    assert compare(Version(2, 0, 0), "1.9.9") == 1
    assert compare("1.2.3+x", Version(1, 2, 3)) == 0
    assert compare("1.3.0", "1.2.9") == 1


def test_coerce_version_passes_versions_through():
    version = Version(1, 2, 3)
    assert coerce_version(version) is version
    assert coerce_version("3.2.1") == Version(3, 2, 1)


def test_str_keeps_build_metadata():
    assert str(Version.parse("2.0.0+build.1")) == "2.0.0+build.1"
    assert str(Version.parse("0.1.0+a")) == "0.1.0+a"
    assert str(Version.parse("1.0.0-rc.1+001")) == "1.0.0-rc.1+001"
