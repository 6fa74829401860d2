import pytest
from ttlcache import ClockError, ManualClock


def test_manual_clock_starts_at_given_time():
    clock = ManualClock(12.5)
    assert clock() == 12.5
    assert clock.now == 12.5
    assert ManualClock()() == 0.0


def test_manual_clock_advance_accumulates():
    clock = ManualClock()
    assert clock.advance(1.5) == 1.5
    assert clock.advance(2) == 3.5
    assert clock() == 3.5


def test_manual_clock_advance_by_zero_is_allowed():
    clock = ManualClock(4)
    assert clock.advance(0) == 4.0


def test_manual_clock_rejects_negative_advance():
    clock = ManualClock(10)
    with pytest.raises(ClockError, match="-1"):
        clock.advance(-1)
    assert clock() == 10


def test_manual_clock_set_jumps_forward_but_not_back():
    clock = ManualClock(5)
    clock.set(5)
    clock.set(9)
    assert clock() == 9.0
    with pytest.raises(ClockError, match=r"from 9\.0 to 3"):
        clock.set(3)


def test_manual_clock_repr():
    assert repr(ManualClock(2)) == "ManualClock(now=2.0)"
