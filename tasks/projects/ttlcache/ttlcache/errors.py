"""Exception types raised by ttlcache."""


class CacheError(Exception):
    """Base class for every error raised by ttlcache."""


class InvalidSizeError(CacheError, ValueError):
    """Raised when a cache is created with a size below one."""


class InvalidTTLError(CacheError, ValueError):
    """Raised when a time-to-live is zero or negative."""


class CacheKeyError(CacheError, KeyError):
    """Raised when a key is absent from the cache or has expired."""


class UnhashableKeyError(CacheError, TypeError):
    """Raised by :func:`ttlcache.make_key` when arguments cannot be hashed."""


class ClockError(CacheError, ValueError):
    """Raised when a manual clock would move backwards."""
