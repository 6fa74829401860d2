import pytest
from ttlcache import CacheKeyError, InvalidSizeError, ManualClock, TTLCache


def make_cache(maxsize=3, **options):
    return TTLCache(maxsize, clock=ManualClock(), **options)


def test_set_and_get_round_trip():
    cache = make_cache()
    cache.set("a", 1)
    cache["b"] = 2
    assert cache.get("a") == 1
    assert cache["b"] == 2


def test_get_missing_returns_default():
    cache = make_cache()
    assert cache.get("nope") is None
    assert cache.get("nope", 42) == 42


def test_getitem_missing_raises_with_key_in_message():
    cache = make_cache()
    with pytest.raises(CacheKeyError, match="'ghost'"):
        cache["ghost"]


def test_set_existing_key_replaces_value_without_growing():
    cache = make_cache()
    cache["a"] = 1
    cache["a"] = 2
    assert cache["a"] == 2
    assert len(cache) == 1


def test_contains_and_len():
    cache = make_cache()
    cache["a"] = 1
    cache["b"] = None
    assert "a" in cache
    assert "b" in cache
    assert "c" not in cache
    assert len(cache) == 2


def test_delete_reports_whether_key_existed():
    cache = make_cache()
    cache["a"] = 1
    assert cache.delete("a") is True
    assert cache.delete("a") is False
    assert "a" not in cache


def test_delitem_missing_raises():
    cache = make_cache()
    cache["a"] = 1
    del cache["a"]
    with pytest.raises(CacheKeyError, match="'a'"):
        del cache["a"]


def test_peek_does_not_count_statistics():
    cache = make_cache()
    cache["a"] = 1
    assert cache.peek("a") == 1
    assert cache.peek("b", "dflt") == "dflt"
    assert cache.stats.hits == 0
    assert cache.stats.misses == 0


def test_get_or_set_calls_factory_only_on_miss():
    cache = make_cache()
    calls = []

    def factory():
        calls.append(1)
        return "made"

    assert cache.get_or_set("k", factory) == "made"
    assert cache.get_or_set("k", factory) == "made"
    assert calls == [1]


def test_clear_removes_entries_but_keeps_stats():
    cache = make_cache()
    cache["a"] = 1
    cache.get("a")
    cache.clear()
    assert len(cache) == 0
    assert cache.keys() == []
    assert cache.stats.hits == 1


def test_iteration_and_items_follow_recency():
    cache = make_cache()
    cache["a"] = 1
    cache["b"] = 2
    cache.get("a")
    assert list(cache) == ["b", "a"]
    assert cache.items() == [("b", 2), ("a", 1)]


def test_invalid_maxsize_is_rejected():
    with pytest.raises(InvalidSizeError, match="got 0"):
        make_cache(0)
    assert make_cache(1).maxsize == 1


def test_repr_shows_size_and_settings():
    cache = make_cache(5, default_ttl=2.5)
    cache["x"] = 1
    assert repr(cache) == "TTLCache(maxsize=5, size=1, default_ttl=2.5)"
