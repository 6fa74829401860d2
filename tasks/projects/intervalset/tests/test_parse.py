import pytest
from intervalset import (
    Interval,
    IntervalError,
    IntervalParseError,
    IntervalSet,
    closed,
    closed_open,
    open_interval,
    parse_interval,
    parse_number,
    parse_set,
    point,
)

INF = float("inf")


def test_parse_number_kinds():
    assert parse_number("42") == 42
    assert isinstance(parse_number("42"), int)
    assert parse_number("-2.5") == -2.5
    assert parse_number(" .5 ") == 0.5
    assert parse_number("1e3") == 1000.0
    assert isinstance(parse_number("1E3"), float)


def test_parse_number_infinities():
    assert parse_number("inf") == INF
    assert parse_number("-INF") == -INF
    assert parse_number("+inf") == INF


def test_parse_number_rejects_garbage():
    with pytest.raises(IntervalParseError, match="invalid number 'ten'"):
        parse_number("ten")
    with pytest.raises(IntervalParseError, match=r"invalid number '1\.2\.3'"):
        parse_number("1.2.3")


def test_parse_interval_brackets():
    assert parse_interval("[1, 5)") == closed_open(1, 5)
    assert parse_interval("(1,5]") == Interval(1, 5, False, True)
    assert parse_interval(" ( -inf , 0 ) ") == open_interval(-INF, 0)
    assert parse_interval("[2.5, 2.5]") == point(2.5)


def test_parse_interval_rejects_bad_syntax():
    with pytest.raises(IntervalParseError, match=r"invalid interval '\[1; 5\]'"):
        parse_interval("[1; 5]")
    with pytest.raises(IntervalParseError, match="invalid interval"):
        parse_interval("1, 5")


def test_parse_interval_rejects_impossible_interval():
    with pytest.raises(IntervalParseError, match=r"invalid interval '\[5, 1\]': lower bound 5 is greater"):
        parse_interval("[5, 1]")
    with pytest.raises(IntervalError, match="infinite lower bound"):
        parse_interval("[-inf, 1]")


def test_parse_set_pipe_separated():
    items = parse_set("[1,5) | [7,9]")
    assert items.intervals == (closed_open(1, 5), closed(7, 9))


def test_parse_set_union_symbol_and_merging():
    items = parse_set("[1, 5) ∪ [5, 6] ∪ (8, 9)")
    assert items.intervals == (closed(1, 6), open_interval(8, 9))


def test_parse_set_empty_forms():
    assert parse_set("{}") == IntervalSet()
    assert parse_set("  ") == IntervalSet()
    assert parse_set("∅") == IntervalSet()


def test_parse_set_rejects_empty_member():
    with pytest.raises(IntervalParseError, match=r"empty member in interval set '\[1, 2\] \|'"):
        parse_set("[1, 2] |")


def test_parse_set_reports_bad_member():
    with pytest.raises(IntervalParseError, match=r"invalid interval '\[3, x\]'"):
        parse_set("[1, 2] | [3, x]")


def test_str_round_trips_through_parse_set():
    items = parse_set("(-inf, -1) | [0, 2.5) | (3, 4] | [10, inf)")
    assert str(items) == "(-inf, -1) | [0, 2.5) | (3, 4] | [10, inf)"
    assert parse_set(str(items)) == items
    assert parse_set(str(~items)) == ~items
