import pytest
from intervalset import (
    Interval,
    IntervalError,
    IntervalSet,
    closed,
    closed_open,
    open_closed,
    open_interval,
    point,
)

INF = float("inf")


def test_members_are_sorted_and_overlaps_merged():
    items = IntervalSet([closed(7, 9), closed(1, 4), closed(3, 5)])
    assert items.intervals == (closed(1, 5), closed(7, 9))


def test_touching_members_are_merged():
    assert IntervalSet([closed_open(1, 2), closed(2, 3)]).intervals == (closed(1, 3),)
    assert IntervalSet([closed(1, 2), open_closed(2, 3)]).intervals == (closed(1, 3),)


def test_open_ends_meeting_at_a_point_stay_apart():
    items = IntervalSet([closed_open(1, 2), open_closed(2, 3)])
    assert len(items) == 2
    assert not items.contains(2)


def test_contained_member_is_absorbed():
    assert IntervalSet([closed(0, 10), closed(2, 3), point(10)]).intervals == (closed(0, 10),)


def test_non_interval_member_is_rejected():
    with pytest.raises(IntervalError, match=r"members must be Interval, got \(1, 2\)"):
        IntervalSet([closed(0, 1), (1, 2)])


def test_empty_set_behaviour():
    empty = IntervalSet()
    assert len(empty) == 0
    assert not empty
    assert str(empty) == "{}"
    assert empty.bounds() is None
    assert empty.total_length() == 0
    assert not empty.contains(0)


def test_iteration_and_str():
    items = IntervalSet([closed(7, 9), closed_open(1, 5)])
    assert list(items) == [closed_open(1, 5), closed(7, 9)]
    assert str(items) == "[1, 5) | [7, 9]"
    expected = "IntervalSet([Interval(lower=1, upper=1, lower_closed=True, upper_closed=True)])"
    assert repr(IntervalSet([point(1)])) == expected


def test_equality_and_hash():
    left = IntervalSet([closed(1, 2), closed(2, 3)])
    right = IntervalSet([closed(1, 3)])
    assert left == right
    assert hash(left) == hash(right)
    assert left != IntervalSet([closed(1, 4)])
    assert left != "[1, 3]"
    assert (left == "[1, 3]") is False


def test_contains_uses_the_right_member():
    items = IntervalSet([closed_open(1, 5), open_closed(7, 9)])
    assert items.contains(1)
    assert items.contains(4)
    assert not items.contains(5)
    assert not items.contains(7)
    assert items.contains(9)
    assert not items.contains(0)
    assert not items.contains(10)


def test_in_operator():
    items = IntervalSet([closed(1, 5), closed(7, 9)])
    assert 8 in items
    assert closed(2, 3) in items
    assert closed(4, 8) not in items
    assert "8" not in items


def test_add_returns_new_set():
    items = IntervalSet([closed(1, 2)])
    bigger = items.add(closed(2, 4))
    assert bigger.intervals == (closed(1, 4),)
    assert items.intervals == (closed(1, 2),)


def test_union():
    left = IntervalSet([closed(1, 3), closed(10, 12)])
    right = IntervalSet([closed(2, 5), point(8)])
    assert (left | right).intervals == (closed(1, 5), point(8), closed(10, 12))
    assert left.union(right) == left | right


def test_intersection_sweeps_both_lists():
    left = IntervalSet([closed(0, 4), closed(6, 10)])
    right = IntervalSet([closed(1, 2), closed(3, 7), closed(9, 12)])
    assert (left & right).intervals == (closed(1, 2), closed(3, 4), closed(6, 7), closed(9, 10))


def test_intersection_with_shared_upper_bound():
    left = IntervalSet([closed_open(0, 5), closed(6, 8)])
    right = IntervalSet([closed(2, 5), closed(7, 9)])
    assert left.intersection(right).intervals == (closed_open(2, 5), closed(7, 8))
    assert right.intersection(left).intervals == (closed_open(2, 5), closed(7, 8))


def test_difference():
    whole = IntervalSet([closed(0, 10)])
    holes = IntervalSet([closed(2, 3), open_interval(5, 6)])
    assert (whole - holes).intervals == (closed_open(0, 2), open_closed(3, 5), closed(6, 10))


def test_difference_of_several_members():
    left = IntervalSet([closed(0, 2), closed(4, 6)])
    right = IntervalSet([closed(1, 5)])
    assert left.difference(right).intervals == (closed_open(0, 1), open_closed(5, 6))


def test_symmetric_difference():
    left = IntervalSet([closed(0, 4)])
    right = IntervalSet([closed(2, 6)])
    assert (left ^ right).intervals == (closed_open(0, 2), open_closed(4, 6))


def test_complement():
    items = IntervalSet([closed_open(1, 5), closed(7, 9)])
    assert (~items).intervals == (open_interval(-INF, 1), closed_open(5, 7), open_interval(9, INF))
    assert IntervalSet().complement() == IntervalSet.everything()
    assert IntervalSet.everything().complement() == IntervalSet()


def test_issubset_and_le():
    small = IntervalSet([closed(1, 2), closed(5, 6)])
    big = IntervalSet([closed(0, 3), closed(4, 8)])
    assert small.issubset(big)
    assert small <= big
    assert not big <= small
    assert not IntervalSet([closed(2, 5)]) <= big


def test_bounds():
    items = IntervalSet([open_closed(1, 2), closed_open(5, 6)])
    assert items.bounds() == Interval(1, 6, False, False)


def test_gaps():
    items = IntervalSet([closed(0, 1), closed_open(3, 4), open_interval(4, 5), closed(8, 9)])
    assert items.gaps().intervals == (open_interval(1, 3), point(4), closed_open(5, 8))
    assert IntervalSet([closed(0, 1)]).gaps() == IntervalSet()


def test_total_length():
    items = IntervalSet([closed(0, 1.5), open_interval(3, 5), point(9)])
    assert items.total_length() == 3.5
    assert IntervalSet([closed_open(0, INF)]).total_length() == INF


def test_in_operator_with_open_ends():
    items = IntervalSet([closed(0, 2), open_interval(4, 6)])
    assert 1 in items
    assert 5 in items
    assert 4 not in items
    assert 3 not in items
    assert closed(0, 1) in items
    assert open_interval(4, 6) in items
    assert closed(4, 5) not in items


def test_gaps_between_mixed_intervals():
    assert str(IntervalSet([closed(0, 1), closed(2, 3)]).gaps()) == "(1, 2)"
    assert str(IntervalSet([closed_open(0, 2), open_closed(5, 7), closed(10, 11)]).gaps()) == "[2, 5] | (7, 10)"
    assert str(IntervalSet([open_interval(0, 1), open_interval(1, 2)]).gaps()) == "[1, 1]"
