from ttlcache import CacheStats, ManualClock, TTLCache


def test_least_recently_set_key_is_evicted_first():
    cache = TTLCache(2, clock=ManualClock())
    cache["a"] = 1
    cache["b"] = 2
    cache["c"] = 3
    assert cache.keys() == ["b", "c"]
    assert cache.stats.evictions == 1


def test_reading_a_key_protects_it_from_eviction():
    cache = TTLCache(2, clock=ManualClock())
    cache["a"] = 1
    cache["b"] = 2
    cache.get("a")
    cache["c"] = 3
    assert cache.keys() == ["a", "c"]


def test_overwriting_a_key_makes_it_most_recent():
    cache = TTLCache(2, clock=ManualClock())
    cache["a"] = 1
    cache["b"] = 2
    cache["a"] = 10
    cache["c"] = 3
    assert cache.items() == [("a", 10), ("c", 3)]
    assert cache.stats.evictions == 1


def test_overwriting_in_a_full_cache_does_not_evict():
    cache = TTLCache(2, clock=ManualClock())
    cache["a"] = 1
    cache["b"] = 2
    cache["b"] = 3
    assert cache.keys() == ["a", "b"]
    assert cache.stats.evictions == 0


def test_expired_entries_are_purged_before_evicting_live_ones():
    clock = ManualClock()
    cache = TTLCache(2, clock=clock)
    cache.set("old", 1)
    cache.set("brief", 2, ttl=1)
    clock.advance(1)
    cache.set("new", 3)
    assert cache.keys() == ["old", "new"]
    assert cache.stats.evictions == 0
    assert cache.stats.expirations == 1


def test_inserting_into_non_full_cache_leaves_expired_entries_alone():
    clock = ManualClock()
    cache = TTLCache(3, clock=clock)
    cache.set("brief", 1, ttl=1)
    clock.advance(1)
    cache.set("new", 2)
    assert cache.stats.expirations == 0
    assert len(cache) == 1


def test_on_evict_callback_receives_evicted_pairs_in_order():
    evicted = []
    cache = TTLCache(1, clock=ManualClock(), on_evict=lambda key, value: evicted.append((key, value)))
    cache["a"] = 1
    cache["b"] = 2
    cache["c"] = 3
    assert evicted == [("a", 1), ("b", 2)]
    assert cache.keys() == ["c"]


def test_hit_and_miss_counters():
    cache = TTLCache(3, clock=ManualClock())
    cache["a"] = 1
    cache.get("a")
    cache.get("a")
    cache.get("b")
    assert "b" not in cache
    assert cache.stats == CacheStats(hits=2, misses=1, evictions=0, expirations=0)
    assert cache.stats.lookups == 3


def test_hit_rate():
    stats = CacheStats(hits=3, misses=1)
    assert stats.hit_rate == 0.75
    assert CacheStats().hit_rate == 0.0


def test_reset_stats_zeroes_counters():
    cache = TTLCache(1, clock=ManualClock())
    cache["a"] = 1
    cache["b"] = 2
    cache.get("b")
    cache.reset_stats()
    assert cache.stats == CacheStats()
    assert cache["b"] == 2


def test_on_evict_receives_key_then_value():
    evicted = []
    cache = TTLCache(2, clock=ManualClock(), on_evict=lambda key, value: evicted.append((key, value)))
    cache["x"] = 10
    cache["y"] = 20
    cache["z"] = 30
    cache["w"] = 40
    assert evicted == [("x", 10), ("y", 20)]
    assert cache.keys() == ["z", "w"]
