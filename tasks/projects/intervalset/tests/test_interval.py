import math

import pytest
from intervalset import (
    Interval,
    IntervalError,
    closed,
    closed_open,
    make_interval,
    open_closed,
    open_interval,
    point,
)

INF = float("inf")


def test_constructors_set_bound_flags():
    assert closed(1, 2) == Interval(1, 2, True, True)
    assert open_interval(1, 2) == Interval(1, 2, False, False)
    assert closed_open(1, 2) == Interval(1, 2, True, False)
    assert open_closed(1, 2) == Interval(1, 2, False, True)
    assert point(4) == Interval(4, 4)


def test_reversed_bounds_are_rejected():
    with pytest.raises(IntervalError, match="lower bound 5 is greater than upper bound 2"):
        closed(5, 2)


def test_empty_degenerate_interval_is_rejected():
    with pytest.raises(IntervalError, match=r"interval \[3, 3\) is empty"):
        closed_open(3, 3)
    with pytest.raises(IntervalError, match=r"interval \(3, 3\] is empty"):
        open_closed(3, 3)


def test_closed_infinite_bounds_are_rejected():
    with pytest.raises(IntervalError, match="infinite lower bound"):
        Interval(-INF, 0, True, False)
    with pytest.raises(IntervalError, match="infinite upper bound"):
        Interval(0, INF, True, True)


def test_non_numeric_bounds_are_rejected():
    with pytest.raises(IntervalError, match="lower bound must be a number, got '1'"):
        Interval("1", 2)
    with pytest.raises(IntervalError, match="upper bound must be a number, got True"):
        Interval(0, True)
    with pytest.raises(IntervalError, match="lower bound must not be NaN"):
        Interval(math.nan, 1)


def test_length_and_point():
    assert closed_open(1.5, 4).length == 2.5
    assert point(7).length == 0
    assert point(7).is_point
    assert not closed(1, 2).is_point
    assert open_interval(0, INF).length == INF


def test_contains_respects_open_and_closed_ends():
    interval = closed_open(1, 5)
    assert interval.contains(1)
    assert interval.contains(4.999)
    assert interval.contains(5) is False
    assert interval.contains(0.5) is False
    assert interval.contains(6) is False
    assert open_closed(1, 5).contains(1) is False
    assert open_closed(1, 5).contains(5)


def test_in_operator_with_numbers_intervals_and_others():
    interval = closed(0, 10)
    assert 3 in interval
    assert open_interval(0, 10) in interval
    assert closed(-1, 3) not in interval
    assert "3" not in interval
    assert True not in interval


def test_intersection_of_overlapping_intervals():
    assert closed(1, 5).intersection(open_interval(3, 8)) == Interval(3, 5, False, True)
    assert open_interval(3, 8).intersection(closed(1, 5)) == Interval(3, 5, False, True)


def test_intersection_with_shared_bounds_keeps_only_common_closure():
    assert closed(1, 5).intersection(open_interval(1, 5)) == open_interval(1, 5)
    assert closed_open(1, 5).intersection(closed(1, 5)) == closed_open(1, 5)


def test_intersection_of_touching_and_disjoint_intervals():
    assert closed(1, 3).intersection(closed(3, 5)) == point(3)
    assert closed_open(1, 3).intersection(closed(3, 5)) is None
    assert closed(1, 2).intersection(closed(4, 5)) is None


def test_overlaps():
    assert closed(1, 3).overlaps(closed(2, 4))
    assert not closed(1, 3).overlaps(open_closed(3, 4))


def test_is_adjacent():
    assert closed_open(1, 2).is_adjacent(closed(2, 3))
    assert closed(2, 3).is_adjacent(closed_open(1, 2))
    assert not closed(1, 2).is_adjacent(closed(2, 3))
    assert not closed_open(1, 2).is_adjacent(open_closed(2, 3))
    assert closed(1, 2).is_adjacent(closed(5, 6)) is False


def test_hull_takes_outer_bounds():
    assert closed_open(1, 2).hull(open_closed(4, 6)) == closed(1, 6)
    assert open_closed(4, 6).hull(closed_open(1, 2)) == closed(1, 6)


def test_hull_with_equal_bounds_prefers_closed():
    assert open_interval(1, 5).hull(closed_open(1, 3)) == closed_open(1, 5)
    assert open_interval(1, 5).hull(open_closed(2, 5)) == open_closed(1, 5)
    assert closed_open(1, 3).hull(open_interval(1, 5)) == closed_open(1, 5)
    assert open_closed(2, 5).hull(open_interval(1, 5)) == open_closed(1, 5)


def test_subtract_from_the_middle_leaves_two_pieces():
    assert closed(0, 10).subtract(closed(3, 4)) == [closed_open(0, 3), open_closed(4, 10)]


def test_subtract_edges_and_points():
    assert closed(1, 3).subtract(open_interval(1, 2)) == [point(1), closed(2, 3)]
    assert closed(0, 5).subtract(closed(0, 5)) == []
    assert closed(0, 5).subtract(closed(7, 8)) == [closed(0, 5)]


def test_subtract_unbounded_interval():
    assert closed(0, 10).subtract(open_interval(5, INF)) == [closed(0, 5)]
    assert open_interval(-INF, INF).subtract(closed(0, 1)) == [open_interval(-INF, 0), open_interval(1, INF)]


def test_issubset():
    assert closed_open(2, 3).issubset(closed(1, 3))
    assert not closed(2, 3).issubset(closed_open(1, 3))


def test_str():
    assert str(closed_open(1, 5)) == "[1, 5)"
    assert str(open_closed(-INF, 2.5)) == "(-inf, 2.5]"
    assert str(open_interval(-3, INF)) == "(-3, inf)"
    assert str(point(2.0)) == "[2.0, 2.0]"


def test_make_interval_returns_none_for_empty():
    assert make_interval(3, 1, True, True) is None
    assert make_interval(2, 2, True, False) is None
    assert make_interval(2, 2, True, True) == point(2)
    assert make_interval(-INF, 0, True, True) == open_closed(-INF, 0)
    assert make_interval(0, INF, True, True) == closed_open(0, INF)


def test_bad_upper_bounds_are_rejected():
    with pytest.raises(IntervalError, match="upper bound must be a number, got '9'"):
        Interval(0, "9")
    with pytest.raises(IntervalError, match="upper bound must be a number, got None"):
        Interval(1, None)
    with pytest.raises(IntervalError, match=r"upper bound must be a number, got \[3\]"):
        Interval(2, [3])
    with pytest.raises(IntervalError, match="upper bound must not be NaN"):
        Interval(0, math.nan)


def test_hull_with_shared_bounds_keeps_the_closed_side():
    assert str(open_interval(0, 2).hull(closed(0, 1))) == "[0, 2)"
    assert str(closed(0, 1).hull(open_interval(0, 2))) == "[0, 2)"
    assert str(open_interval(0, 2).hull(open_closed(0, 2))) == "(0, 2]"
    assert str(open_closed(3, 6).hull(open_interval(3, 4))) == "(3, 6]"
    assert str(open_interval(3, 4).hull(closed_open(3, 6))) == "[3, 6)"
    assert str(open_interval(0, 3).hull(closed(-1, 3))) == "[-1, 3]"
