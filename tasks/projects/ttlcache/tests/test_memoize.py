import pytest
from ttlcache import (
    KWARGS_MARK,
    CacheError,
    InvalidTTLError,
    ManualClock,
    TTLCache,
    UnhashableKeyError,
    make_key,
    memoize,
)


def test_make_key_positional_only():
    assert make_key((1, "a"), {}) == (1, "a")


def test_make_key_sorts_keyword_arguments():
    key = make_key((1,), {"b": 2, "a": 3})
    assert key == (1, KWARGS_MARK, ("a", 3), ("b", 2))
    assert key == make_key((1,), {"a": 3, "b": 2})
    assert repr(KWARGS_MARK) == "<kwargs>"


def test_make_key_typed_adds_argument_types():
    assert make_key((1, 2.0), {}, typed=True) == (1, 2.0, int, float)
    assert make_key((), {"y": "s", "x": 1}, typed=True) == (KWARGS_MARK, ("x", 1), ("y", "s"), int, str)
    assert make_key((1,), {}, typed=True) != make_key((1.0,), {}, typed=True)


def test_make_key_rejects_unhashable_arguments():
    with pytest.raises(UnhashableKeyError, match=r"\[1, 2\]"):
        make_key(([1, 2],), {})


def test_memoize_caches_results_per_arguments():
    calls = []

    @memoize(clock=ManualClock())
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9
    assert square(3) == 9
    assert square(4) == 16
    assert calls == [3, 4]
    assert square.cache_info().hits == 1
    assert square.cache_info().misses == 2


def test_memoize_caches_none_results():
    calls = []

    @memoize(clock=ManualClock())
    def nothing(x):
        calls.append(x)

    assert nothing(1) is None
    assert nothing(1) is None
    assert calls == [1]


def test_memoize_ttl_expires_results():
    clock = ManualClock()
    calls = []

    @memoize(clock=clock, ttl=10)
    def load(name):
        calls.append(name)
        return len(calls)

    assert load("x") == 1
    clock.advance(5)
    assert load("x") == 1
    clock.advance(5)
    assert load("x") == 2


def test_memoize_with_shared_cache_and_maxsize():
    cache = TTLCache(2, clock=ManualClock())

    @memoize(cache)
    def ident(x):
        return x

    ident(1)
    ident(2)
    ident(3)
    assert ident.cache is cache
    assert cache.keys() == [(2,), (3,)]


def test_memoize_builds_cache_of_requested_size():
    @memoize(clock=ManualClock(), maxsize=7)
    def f(x):
        return x

    assert f.cache.maxsize == 7
    assert memoize(clock=ManualClock())(f).cache.maxsize == 128


def test_memoize_typed_separates_int_and_float():
    @memoize(clock=ManualClock(), typed=True)
    def kind(x):
        return type(x).__name__

    assert kind(1) == "int"
    assert kind(1.0) == "float"


def test_memoize_untyped_shares_equal_arguments():
    @memoize(clock=ManualClock())
    def kind(x):
        return type(x).__name__

    assert kind(1) == "int"
    assert kind(1.0) == "int"


def test_memoize_custom_key_function():
    calls = []

    @memoize(clock=ManualClock(), key=lambda user, **_: user.lower())
    def greet(user, punctuation="!"):
        calls.append(user)
        return f"hi {user}{punctuation}"

    assert greet("Ann") == "hi Ann!"
    assert greet("ANN", punctuation="?") == "hi Ann!"
    assert calls == ["Ann"]
    assert greet.cache.keys() == ["ann"]


def test_memoize_cache_clear_and_wraps_metadata():
    calls = []

    @memoize(clock=ManualClock())
    def compute(x):
        """Doc of compute."""
        calls.append(x)
        return x

    compute(1)
    compute.cache_clear()
    compute(1)
    assert calls == [1, 1]
    assert compute.__name__ == "compute"
    assert compute.__doc__ == "Doc of compute."


def test_memoize_requires_cache_or_clock():
    with pytest.raises(CacheError, match="cache or a clock"):
        memoize()


def test_memoize_rejects_bad_ttl():
    with pytest.raises(InvalidTTLError, match="got -1"):
        memoize(clock=ManualClock(), ttl=-1)


def test_make_key_typed_keyword_types():
    assert make_key(("a",), {"n": 2}, typed=True) == ("a", KWARGS_MARK, ("n", 2), str, int)
    assert make_key((), {"b": 1.5, "a": None}, typed=True) == (KWARGS_MARK, ("a", None), ("b", 1.5), type(None), float)
    assert make_key((), {"k": True}, typed=True) == (KWARGS_MARK, ("k", True), bool)
    assert make_key((), {"k": 1}, typed=True) != make_key((), {"k": 1.0}, typed=True)
