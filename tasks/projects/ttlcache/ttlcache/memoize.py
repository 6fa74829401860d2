"""A memoizing decorator backed by :class:`~ttlcache.TTLCache`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from .cache import TTLCache, validate_ttl
from .clock import Clock
from .errors import CacheError, UnhashableKeyError

F = TypeVar("F", bound=Callable[..., Any])


class _KwargsMarker:
    """Separates positional arguments from keyword arguments inside a key."""

    def __repr__(self) -> str:
        return "<kwargs>"


KWARGS_MARK = _KwargsMarker()


def make_key(args: tuple[Any, ...], kwargs: dict[str, Any], *, typed: bool = False) -> tuple[Hashable, ...]:
    """Build a hashable cache key from call arguments.

    Keyword arguments are sorted by name so that their order in the call does
    not matter.  With ``typed`` the argument types become part of the key, so
    ``f(1)`` and ``f(1.0)`` are cached separately.
    """
    key: tuple[Any, ...] = args
    if kwargs:
        key += (KWARGS_MARK, *sorted(kwargs.items()))
    if typed:
        key += tuple(type(arg) for arg in args)
        key += tuple(type(kwargs[name]) for name in sorted(kwargs))
    try:
        hash(key)
    except TypeError as exc:
        raise UnhashableKeyError(f"cannot build a cache key from args={args!r} kwargs={kwargs!r}") from exc
    return key


def memoize(
    cache: TTLCache[Any, Any] | None = None,
    *,
    clock: Clock | None = None,
    maxsize: int = 128,
    ttl: float | None = None,
    typed: bool = False,
    key: Callable[..., Hashable] | None = None,
) -> Callable[[F], F]:
    """Cache the results of a function.

    Pass an existing ``cache`` or a ``clock`` from which a new cache of
    ``maxsize`` entries is built.  Results are stored for ``ttl`` seconds (or
    the cache's default).  ``key`` replaces :func:`make_key` when given and is
    called with the same arguments as the function.

    The wrapper exposes ``cache``, ``cache_clear()`` and ``cache_info()``.
    """
    validate_ttl(ttl)
    if cache is None:
        if clock is None:
            raise CacheError("memoize needs either a cache or a clock to build one")
        cache = TTLCache(maxsize, clock=clock)
    store = cache

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            cache_key = key(*args, **kwargs) if key is not None else make_key(args, kwargs, typed=typed)
            return store.get_or_set(cache_key, lambda: func(*args, **kwargs), ttl=ttl)

        wrapper.cache = store  # type: ignore[attr-defined]
        wrapper.cache_clear = store.clear  # type: ignore[attr-defined]
        wrapper.cache_info = lambda: store.stats  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorator
