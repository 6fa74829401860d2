import pytest
from ttlcache import CacheKeyError, InvalidTTLError, ManualClock, TTLCache


def test_entry_expires_exactly_at_ttl():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=10)
    clock.advance(9.99)
    assert cache.get("a") == 1
    clock.advance(0.01)
    assert cache.get("a") is None


def test_default_ttl_applies_when_none_given():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock, default_ttl=5)
    cache.set("a", 1)
    cache.set("b", 2, ttl=20)
    clock.advance(6)
    assert "a" not in cache
    assert "b" in cache
    assert cache.default_ttl == 5


def test_entries_without_ttl_never_expire():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache["a"] = 1
    clock.advance(1e9)
    assert cache["a"] == 1
    assert cache.ttl("a") is None


def test_ttl_reports_remaining_seconds():
    clock = ManualClock(100)
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=30)
    clock.advance(12)
    assert cache.ttl("a") == 18


def test_ttl_of_missing_key_raises():
    cache = TTLCache(4, clock=ManualClock())
    with pytest.raises(CacheKeyError, match="'zz'"):
        cache.ttl("zz")


def test_rewriting_a_key_restarts_its_ttl():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=5)
    clock.advance(4)
    cache.set("a", 2, ttl=5)
    clock.advance(4)
    assert cache.get("a") == 2


def test_expired_lookup_counts_miss_and_expiration():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=1)
    clock.advance(1)
    assert cache.get("a", "gone") == "gone"
    assert cache.stats.misses == 1
    assert cache.stats.hits == 0
    assert cache.stats.expirations == 1
    assert cache.purge() == 0
    assert cache.get("a") is None
    assert cache.stats.expirations == 1


def test_len_and_keys_ignore_expired_entries():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("short", 1, ttl=1)
    cache.set("long", 2, ttl=10)
    cache.set("forever", 3)
    clock.advance(2)
    assert len(cache) == 2
    assert cache.keys() == ["long", "forever"]
    assert cache.items() == [("long", 2), ("forever", 3)]


def test_purge_removes_only_expired_entries():
    clock = ManualClock()
    cache = TTLCache(5, clock=clock)
    cache.set("a", 1, ttl=1)
    cache.set("b", 2, ttl=2)
    cache.set("c", 3, ttl=3)
    clock.advance(2)
    assert cache.purge() == 2
    assert cache.stats.expirations == 2
    assert cache.keys() == ["c"]
    assert cache.purge() == 0


def test_delete_of_expired_key_returns_false():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=1)
    clock.advance(5)
    assert cache.delete("a") is False
    assert cache.stats.expirations == 1


def test_peek_drops_expired_entry():
    clock = ManualClock()
    cache = TTLCache(4, clock=clock)
    cache.set("a", 1, ttl=1)
    clock.advance(1)
    assert cache.peek("a", "none") == "none"
    assert cache.stats.expirations == 1


def test_non_positive_ttl_is_rejected():
    cache = TTLCache(4, clock=ManualClock())
    with pytest.raises(InvalidTTLError, match="got 0"):
        cache.set("a", 1, ttl=0)
    with pytest.raises(InvalidTTLError, match="got -3"):
        TTLCache(4, clock=ManualClock(), default_ttl=-3)
    assert "a" not in cache


def test_default_ttl_property():
    clock = ManualClock()
    assert TTLCache(4, clock=clock, default_ttl=10).default_ttl == 10
    assert TTLCache(2, clock=clock, default_ttl=3).default_ttl == 3
    assert TTLCache(2, clock=clock).default_ttl is None
