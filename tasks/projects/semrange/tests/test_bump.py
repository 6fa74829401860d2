import pytest
from semrange import InvalidVersionError, Version


def bump(text, part, *args):
    return str(getattr(Version.parse(text), f"bump_{part}")(*args))


def test_bump_patch_of_release():
    assert bump("1.2.3", "patch") == "1.2.4"


def test_bump_patch_of_prerelease_drops_prerelease():
    assert bump("1.2.3-rc.2", "patch") == "1.2.3"


def test_bump_minor_resets_patch():
    assert bump("1.2.3", "minor") == "1.3.0"
    assert bump("1.2.3-rc.1", "minor") == "1.3.0"


def test_bump_minor_of_minor_prerelease_releases_it():
    assert bump("1.3.0-beta", "minor") == "1.3.0"


def test_bump_major_resets_minor_and_patch():
    assert bump("1.2.3", "major") == "2.0.0"
    assert bump("1.0.0", "major") == "2.0.0"
    assert bump("1.2.0-rc", "major") == "2.0.0"
    assert bump("1.0.3-rc", "major") == "2.0.0"


def test_bump_major_of_major_prerelease_releases_it():
    assert bump("2.0.0-rc.1", "major") == "2.0.0"


def test_bumps_drop_build_metadata():
    assert bump("1.2.3+build.9", "patch") == "1.2.4"
    assert bump("1.2.3-rc.1+build.9", "prerelease") == "1.2.3-rc.2"


def test_bump_prerelease_of_release_starts_next_patch():
    assert bump("1.2.3", "prerelease") == "1.2.4-rc.0"
    assert bump("1.2.3", "prerelease", "alpha") == "1.2.4-alpha.0"


def test_bump_prerelease_increments_trailing_number():
    assert bump("1.2.4-rc.0", "prerelease") == "1.2.4-rc.1"
    assert bump("1.2.4-rc.1.9", "prerelease") == "1.2.4-rc.1.10"


def test_bump_prerelease_appends_number_when_missing():
    assert bump("1.2.4-rc", "prerelease") == "1.2.4-rc.0"


def test_bump_prerelease_with_new_label_restarts():
    assert bump("1.2.4-alpha.3", "prerelease", "beta") == "1.2.4-beta.0"


def test_bump_prerelease_rejects_bad_label():
    with pytest.raises(InvalidVersionError, match=r"'rc\.1'"):
        Version(1, 0, 0).bump_prerelease("rc.1")
    with pytest.raises(InvalidVersionError, match="'42'"):
        Version(1, 0, 0).bump_prerelease("42")
