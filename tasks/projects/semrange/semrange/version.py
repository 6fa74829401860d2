"""Semantic versions: parsing, precedence and bumping (https://semver.org)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .errors import InvalidVersionError

Identifier = int | str

_IDENTIFIERS = r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*"
_VERSION = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    rf"(?:-(?P<prerelease>{_IDENTIFIERS}))?(?:\+(?P<build>{_IDENTIFIERS}))?$"
)


def parse_prerelease(text: str, source: str) -> tuple[Identifier, ...]:
    """Split a dot-separated pre-release string, turning numeric parts into ints.

    ``source`` is the full string being parsed, used in error messages.
    """
    identifiers: list[Identifier] = []
    for part in text.split("."):
        if part.isdigit():
            if len(part) > 1 and part.startswith("0"):
                raise InvalidVersionError(f"numeric identifier {part!r} has a leading zero in {source!r}")
            identifiers.append(int(part))
        else:
            identifiers.append(part)
    return tuple(identifiers)


def _compare_identifiers(left: Identifier, right: Identifier) -> int:
    if isinstance(left, int) and isinstance(right, int):
        return (left > right) - (left < right)
    if isinstance(left, int):
        return -1
    if isinstance(right, int):
        return 1
    return (left > right) - (left < right)


def compare_prerelease(left: tuple[Identifier, ...], right: tuple[Identifier, ...]) -> int:
    """Compare pre-release tuples; an empty tuple (a release) ranks highest."""
    if not left or not right:
        # An empty tuple is a release, which outranks every pre-release.
        return (not left) - (not right)
    for a, b in zip(left, right, strict=False):
        result = _compare_identifiers(a, b)
        if result:
            return result
    return (len(left) > len(right)) - (len(left) < len(right))


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A semantic version.

    Equality and ordering follow semver precedence, so build metadata is
    ignored: ``1.0.0+a == 1.0.0+b``.
    """

    major: int
    minor: int
    patch: int
    prerelease: tuple[Identifier, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``"1.2.3-rc.1+build.5"``; a leading ``v`` and surrounding spaces are allowed."""
        match = _VERSION.match(text.strip())
        if match is None:
            raise InvalidVersionError(f"invalid version {text!r}")
        prerelease = match.group("prerelease")
        build = match.group("build")
        return cls(
            int(match.group("major")),
            int(match.group("minor")),
            int(match.group("patch")),
            parse_prerelease(prerelease, text) if prerelease else (),
            tuple(build.split(".")) if build else (),
        )

    @property
    def release(self) -> tuple[int, int, int]:
        """``(major, minor, patch)`` without pre-release or build parts."""
        return (self.major, self.minor, self.patch)

    @property
    def is_prerelease(self) -> bool:
        """Whether the version carries pre-release identifiers."""
        return bool(self.prerelease)

    def compare(self, other: Version) -> int:
        """Return -1, 0 or 1 as this version has lower, equal or higher precedence."""
        if self.release < other.release:
            return -1
        if self.release > other.release:
            return 1
        return compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.release, self.prerelease))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(part) for part in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def bump_major(self) -> Version:
        """Next major version; ``2.0.0-rc.1`` becomes ``2.0.0``."""
        if self.prerelease and self.minor == 0 and self.patch == 0:
            return Version(self.major, 0, 0)
        return Version(self.major + 1, 0, 0)

    def bump_minor(self) -> Version:
        """Next minor version; ``1.3.0-rc.1`` becomes ``1.3.0``."""
        if self.prerelease and self.patch == 0:
            return Version(self.major, self.minor, 0)
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self) -> Version:
        """Next patch version; a pre-release becomes its release."""
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)

    def bump_prerelease(self, label: str = "rc") -> Version:
        """Next pre-release with ``label``.

        ``1.2.3`` becomes ``1.2.4-rc.0``, ``1.2.4-rc.0`` becomes ``1.2.4-rc.1``
        and a different label restarts at ``.0`` on the same release.
        """
        if not re.fullmatch(r"[0-9A-Za-z-]+", label) or label.isdigit():
            raise InvalidVersionError(f"invalid pre-release label {label!r}")
        if not self.prerelease:
            return Version(self.major, self.minor, self.patch + 1, (label, 0))
        if self.prerelease[0] != label:
            return Version(self.major, self.minor, self.patch, (label, 0))
        last = self.prerelease[-1]
        if isinstance(last, int):
            return replace(self, prerelease=(*self.prerelease[:-1], last + 1), build=())
        return replace(self, prerelease=(*self.prerelease, 0), build=())


def coerce_version(value: str | Version) -> Version:
    """Return ``value`` as a :class:`Version`, parsing strings."""
    return value if isinstance(value, Version) else Version.parse(value)


def compare(left: str | Version, right: str | Version) -> int:
    """Compare two versions given as strings or :class:`Version` objects."""
    return coerce_version(left).compare(coerce_version(right))


def sort_versions(versions: Iterable[str | Version], *, reverse: bool = False) -> list[Version]:
    """Parse and sort versions by precedence."""
    return sorted((coerce_version(version) for version in versions), reverse=reverse)
