"""The least-recently-used cache with per-entry expiry."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .clock import Clock
from .errors import CacheKeyError, InvalidSizeError, InvalidTTLError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Any = object()


@dataclass
class CacheStats:
    """Counters describing how a cache has been used."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0

    @property
    def lookups(self) -> int:
        """Total number of counted lookups (hits plus misses)."""
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups that were hits, or 0.0 before any lookup."""
        if not self.lookups:
            return 0.0
        return self.hits / self.lookups


@dataclass
class _Entry(Generic[V]):
    value: V
    expires_at: float | None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def validate_ttl(ttl: float | None) -> None:
    """Raise :class:`InvalidTTLError` unless ``ttl`` is ``None`` or positive."""
    if ttl is not None and ttl <= 0:
        raise InvalidTTLError(f"ttl must be a positive number of seconds or None, got {ttl}")


class TTLCache(Generic[K, V]):
    """A mapping-like cache bounded by ``maxsize`` whose entries may expire.

    Entries are kept in least-recently-used order: reading or writing a key
    makes it the most recent.  When a new key does not fit, expired entries are
    purged first and then the least recently used entries are evicted.

    ``clock`` is a callable returning the current time in seconds (for example
    ``time.monotonic`` or a :class:`~ttlcache.ManualClock`).  An entry written
    with a ``ttl`` expires once the clock reaches ``write time + ttl``; without
    one it uses ``default_ttl``, and ``None`` means it never expires.
    """

    def __init__(
        self,
        maxsize: int,
        *,
        clock: Clock,
        default_ttl: float | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        if maxsize < 1:
            raise InvalidSizeError(f"maxsize must be at least 1, got {maxsize}")
        validate_ttl(default_ttl)
        self._maxsize = maxsize
        self._clock = clock
        self._default_ttl = default_ttl
        self._on_evict = on_evict
        self._data: OrderedDict[K, _Entry[V]] = OrderedDict()
        self.stats = CacheStats()

    @property
    def maxsize(self) -> int:
        """The largest number of entries the cache holds."""
        return self._maxsize

    @property
    def default_ttl(self) -> float | None:
        """The time-to-live used when :meth:`set` gets no ``ttl``."""
        return self._default_ttl

    def _live_entry(self, key: K) -> _Entry[V] | None:
        """Return the entry for ``key``, removing it first if it has expired."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry.expired(self._clock()):
            del self._data[key]
            self.stats.expirations += 1
            return None
        return entry

    def get(self, key: K, default: Any = None) -> Any:
        """Return the value for ``key`` or ``default``; a hit makes the key most recent."""
        entry = self._live_entry(key)
        if entry is None:
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self._data.move_to_end(key)
        return entry.value

    def peek(self, key: K, default: Any = None) -> Any:
        """Return the value for ``key`` without touching recency or hit statistics."""
        entry = self._live_entry(key)
        return default if entry is None else entry.value

    def set(self, key: K, value: V, ttl: float | None = None) -> None:
        """Store ``value`` under ``key``, expiring after ``ttl`` seconds (or the default)."""
        validate_ttl(ttl)
        lifetime = self._default_ttl if ttl is None else ttl
        expires_at = None if lifetime is None else self._clock() + lifetime
        if key in self._data:
            self._data.move_to_end(key)
        else:
            self._make_room()
        self._data[key] = _Entry(value, expires_at)

    def _make_room(self) -> None:
        if len(self._data) < self._maxsize:
            return
        self.purge()
        while len(self._data) >= self._maxsize:
            key, entry = self._data.popitem(last=False)
            self.stats.evictions += 1
            if self._on_evict is not None:
                self._on_evict(key, entry.value)

    def get_or_set(self, key: K, factory: Callable[[], V], ttl: float | None = None) -> V:
        """Return the cached value for ``key``, computing and storing it with ``factory`` on a miss."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = factory()
            self.set(key, value, ttl)
        return value

    def delete(self, key: K) -> bool:
        """Remove ``key``; return whether a live entry was removed."""
        if self._live_entry(key) is None:
            return False
        del self._data[key]
        return True

    def ttl(self, key: K) -> float | None:
        """Seconds until ``key`` expires, or ``None`` if it never does."""
        entry = self._live_entry(key)
        if entry is None:
            raise CacheKeyError(f"key {key!r} is not in the cache")
        if entry.expires_at is None:
            return None
        return entry.expires_at - self._clock()

    def purge(self) -> int:
        """Drop every expired entry and return how many were removed."""
        now = self._clock()
        expired = [key for key, entry in self._data.items() if entry.expired(now)]
        for key in expired:
            del self._data[key]
        self.stats.expirations += len(expired)
        return len(expired)

    def clear(self) -> None:
        """Remove every entry; statistics are kept."""
        self._data.clear()

    def reset_stats(self) -> None:
        """Set every statistics counter back to zero."""
        self.stats = CacheStats()

    def keys(self) -> list[K]:
        """Keys of live entries from least to most recently used."""
        now = self._clock()
        return [key for key, entry in self._data.items() if not entry.expired(now)]

    def items(self) -> list[tuple[K, V]]:
        """``(key, value)`` pairs of live entries from least to most recently used."""
        now = self._clock()
        return [(key, entry.value) for key, entry in self._data.items() if not entry.expired(now)]

    def __getitem__(self, key: K) -> V:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise CacheKeyError(f"key {key!r} is not in the cache")
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self.set(key, value)

    def __delitem__(self, key: K) -> None:
        if not self.delete(key):
            raise CacheKeyError(f"key {key!r} is not in the cache")

    def __contains__(self, key: object) -> bool:
        return self._live_entry(key) is not None  # type: ignore[arg-type]

    def __len__(self) -> int:
        now = self._clock()
        return sum(1 for entry in self._data.values() if not entry.expired(now))

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"TTLCache(maxsize={self._maxsize}, size={len(self)}, default_ttl={self._default_ttl})"
