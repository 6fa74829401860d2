"""Version ranges in the npm style: ``^1.2.0``, ``~1.4``, ``>=1.0 <2.0``, ``1.x``, ``a || b``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from .errors import InvalidRangeError, InvalidVersionError
from .version import Identifier, Version, coerce_version, parse_prerelease

T = TypeVar("T", str, Version)

_OPERATORS = ("<", "<=", ">", ">=", "=")
_WILD = r"0|[1-9]\d*|[xX*]"
_PARTIAL = re.compile(
    rf"^v?(?P<major>{_WILD})(?:\.(?P<minor>{_WILD}))?(?:\.(?P<patch>{_WILD}))?"
    r"(?:-(?P<prerelease>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_PREFIXES = ("~>", "<=", ">=", "^", "~", "<", ">", "=")
_HYPHEN = re.compile(r"^(?P<low>\S+)\s+-\s+(?P<high>\S+)$")


@dataclass(frozen=True)
class Comparator:
    """A single ``operator version`` test such as ``>=1.2.0``."""

    operator: str
    version: Version

    def __post_init__(self) -> None:
        if self.operator not in _OPERATORS:
            raise InvalidRangeError(f"unknown operator {self.operator!r}")

    def test(self, version: Version) -> bool:
        """Whether ``version`` passes this comparison."""
        result = version.compare(self.version)
        if self.operator == "<":
            return result < 0
        if self.operator == "<=":
            return result <= 0
        if self.operator == ">":
            return result > 0
        if self.operator == ">=":
            return result >= 0
        return result == 0

    def __str__(self) -> str:
        return f"{self.operator}{self.version}"


class _Partial(NamedTuple):
    major: int | None
    minor: int | None
    patch: int | None
    prerelease: tuple[Identifier, ...]

    def floor(self) -> Version:
        return Version(self.major or 0, self.minor or 0, self.patch or 0, self.prerelease)

    def next_wildcard_step(self) -> Version:
        """Smallest version above every version the wildcard part matches."""
        floor = self.floor()
        if self.minor is None:
            return Version(floor.major + 1, 0, 0)
        return Version(floor.major, floor.minor + 1, 0)


def _parse_partial(text: str, source: str) -> _Partial:
    match = _PARTIAL.match(text)
    if match is None:
        raise InvalidRangeError(f"invalid version {text!r} in range {source!r}")
    numbers: list[int | None] = []
    for name in ("major", "minor", "patch"):
        value = match.group(name)
        if value is None or value in "xX*" or (numbers and numbers[-1] is None):
            numbers.append(None)
        else:
            numbers.append(int(value))
    prerelease_text = match.group("prerelease")
    if prerelease_text and numbers[2] is None:
        raise InvalidRangeError(f"pre-release needs a full version in range {source!r}")
    try:
        prerelease = parse_prerelease(prerelease_text, source) if prerelease_text else ()
    except InvalidVersionError as exc:
        raise InvalidRangeError(str(exc)) from None
    return _Partial(numbers[0], numbers[1], numbers[2], prerelease)


def _primitive(operator: str, partial: _Partial) -> list[Comparator]:
    if partial.major is None:
        if operator in ("<", ">"):
            return [Comparator("<", Version(0, 0, 0))]
        return []
    if partial.patch is not None:
        return [Comparator(operator, partial.floor())]
    floor, ceiling = partial.floor(), partial.next_wildcard_step()
    if operator == "=":
        return [Comparator(">=", floor), Comparator("<", ceiling)]
    if operator == ">=":
        return [Comparator(">=", floor)]
    if operator == ">":
        return [Comparator(">=", ceiling)]
    if operator == "<":
        return [Comparator("<", floor)]
    return [Comparator("<", ceiling)]


def _caret(partial: _Partial) -> list[Comparator]:
    major, minor, patch = partial.major, partial.minor, partial.patch
    if major is None:
        return []
    if major > 0 or minor is None:
        ceiling = Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        ceiling = Version(0, minor + 1, 0)
    else:
        ceiling = Version(0, 0, patch + 1)
    return [Comparator(">=", partial.floor()), Comparator("<", ceiling)]


def _tilde(partial: _Partial) -> list[Comparator]:
    if partial.major is None:
        return []
    if partial.minor is None:
        ceiling = Version(partial.major + 1, 0, 0)
    else:
        ceiling = Version(partial.major, partial.minor + 1, 0)
    return [Comparator(">=", partial.floor()), Comparator("<", ceiling)]


def _hyphen(low: _Partial, high: _Partial) -> list[Comparator]:
    comparators: list[Comparator] = []
    if low.major is not None:
        comparators.append(Comparator(">=", low.floor()))
    if high.major is not None:
        if high.patch is not None:
            comparators.append(Comparator("<=", high.floor()))
        else:
            comparators.append(Comparator("<", high.next_wildcard_step()))
    return comparators


def _parse_comparator_set(text: str, source: str) -> list[Comparator]:
    text = re.sub(r"(<=|>=|<|>|=|\^|~>?)\s+", r"\1", text.strip())
    hyphen = _HYPHEN.match(text)
    if hyphen:
        return _hyphen(_parse_partial(hyphen["low"], source), _parse_partial(hyphen["high"], source))
    comparators: list[Comparator] = []
    for token in text.split():
        operator = next((prefix for prefix in _PREFIXES if token.startswith(prefix)), "")
        partial = _parse_partial(token[len(operator) :], source)
        if operator == "^":
            comparators.extend(_caret(partial))
        elif operator in ("~", "~>"):
            comparators.extend(_tilde(partial))
        else:
            comparators.extend(_primitive(operator or "=", partial))
    return comparators


class Range:
    """A set of alternatives (joined by ``||``), each a list of comparators that must all pass.

    Pre-release versions only match when some comparator of the same
    alternative has a pre-release on the same ``major.minor.patch``, unless
    ``include_prerelease`` is true.
    """

    def __init__(self, text: str, *, include_prerelease: bool = False) -> None:
        self.text = text
        self.include_prerelease = include_prerelease
        parts = text.split("||")
        if len(parts) > 1 and any(not part.strip() for part in parts):
            raise InvalidRangeError(f"empty alternative in range {text!r}")
        self.alternatives = [_parse_comparator_set(part, text) for part in parts]

    def _prerelease_allowed(self, version: Version, comparators: list[Comparator]) -> bool:
        if not version.prerelease or self.include_prerelease:
            return True
        return any(c.version.prerelease and c.version.release == version.release for c in comparators)

    def test(self, version: str | Version) -> bool:
        """Whether ``version`` satisfies the range."""
        candidate = coerce_version(version)
        for comparators in self.alternatives:
            if all(c.test(candidate) for c in comparators) and self._prerelease_allowed(candidate, comparators):
                return True
        return False

    def __contains__(self, version: object) -> bool:
        return isinstance(version, (str, Version)) and self.test(version)

    def __str__(self) -> str:
        return " || ".join(" ".join(str(c) for c in group) or "*" for group in self.alternatives)

    def __repr__(self) -> str:
        return f"Range({self.text!r})"


def _coerce_range(value: str | Range) -> Range:
    return value if isinstance(value, Range) else Range(value)


def satisfies(version: str | Version, range_: str | Range) -> bool:
    """Whether ``version`` is inside ``range_``."""
    return _coerce_range(range_).test(version)


def max_satisfying(versions: Iterable[T], range_: str | Range) -> T | None:
    """The highest of ``versions`` inside ``range_``, returned as given, or ``None``."""
    target = _coerce_range(range_)
    best: T | None = None
    best_version: Version | None = None
    for item in versions:
        version = coerce_version(item)
        if target.test(version) and (best_version is None or version > best_version):
            best, best_version = item, version
    return best


def min_satisfying(versions: Iterable[T], range_: str | Range) -> T | None:
    """The lowest of ``versions`` inside ``range_``, returned as given, or ``None``."""
    target = _coerce_range(range_)
    best: T | None = None
    best_version: Version | None = None
    for item in versions:
        version = coerce_version(item)
        if target.test(version) and (best_version is None or version < best_version):
            best, best_version = item, version
    return best
