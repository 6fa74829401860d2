"""ttlcache: an LRU cache with per-entry expiry and an injectable clock."""

from .cache import CacheStats, TTLCache, validate_ttl
from .clock import Clock, ManualClock
from .errors import CacheError, CacheKeyError, ClockError, InvalidSizeError, InvalidTTLError, UnhashableKeyError
from .memoize import KWARGS_MARK, make_key, memoize

__all__ = [
    "KWARGS_MARK",
    "CacheError",
    "CacheKeyError",
    "CacheStats",
    "Clock",
    "ClockError",
    "InvalidSizeError",
    "InvalidTTLError",
    "ManualClock",
    "TTLCache",
    "UnhashableKeyError",
    "make_key",
    "memoize",
    "validate_ttl",
]
