import pytest
from moneyx import Money, MoneyError


def amounts(parts):
    return [str(part.amount) for part in parts]


def test_allocate_even_split_gives_remainder_to_first():
    assert amounts(Money("10", "EUR").allocate([1, 1, 1])) == ["3.34", "3.33", "3.33"]


def test_allocate_exact_ratios():
    assert amounts(Money("100", "EUR").allocate([70, 20, 10])) == ["70.00", "20.00", "10.00"]


def test_allocate_gives_leftover_to_largest_loss():
    # exact shares: 0.3333..., 0.6666... cents -> the second part lost more
    assert amounts(Money("0.01", "USD").allocate([1, 2])) == ["0.00", "0.01"]
    assert amounts(Money("0.04", "USD").allocate([1, 2])) == ["0.01", "0.03"]


def test_allocate_breaks_ties_by_position():
    # exact shares 1.5 and 3.5 cents lose the same amount, so the earlier part wins
    assert amounts(Money("0.05", "USD").allocate([3, 7])) == ["0.02", "0.03"]


def test_allocate_keeps_the_total():
    parts = Money("1000.01", "USD").allocate([1, 3, 3, 7])
    assert sum(parts) == Money("1000.01", "USD")
    assert amounts(parts) == ["71.43", "214.29", "214.29", "500.00"]


def test_allocate_negative_amount():
    assert amounts(Money("-10", "EUR").allocate([1, 1, 1])) == ["-3.34", "-3.33", "-3.33"]


def test_allocate_rounds_the_total_first():
    assert amounts(Money("0.125", "EUR").allocate([1, 1])) == ["0.06", "0.06"]


def test_allocate_respects_minor_units():
    assert amounts(Money("100", "JPY").allocate([1, 1, 1])) == ["34", "33", "33"]
    assert amounts(Money("1", "KWD").allocate([1, 2])) == ["0.333", "0.667"]


def test_allocate_with_zero_and_decimal_ratios():
    assert amounts(Money("5", "EUR").allocate([0, "0.5", "1.5"])) == ["0.00", "1.25", "3.75"]


def test_allocate_rejects_empty_ratios():
    with pytest.raises(MoneyError, match="empty list of ratios"):
        Money("5", "EUR").allocate([])


def test_allocate_rejects_negative_ratios():
    with pytest.raises(MoneyError, match=r"ratios must not be negative: \[1, -1\]"):
        Money("5", "EUR").allocate([1, -1])


def test_allocate_rejects_all_zero_ratios():
    with pytest.raises(MoneyError, match=r"ratios must not all be zero: \[0, 0\]"):
        Money("5", "EUR").allocate([0, 0])


def test_split():
    assert amounts(Money("0.05", "USD").split(3)) == ["0.02", "0.02", "0.01"]
    assert amounts(Money("7", "USD").split(1)) == ["7.00"]


def test_split_rejects_bad_part_counts():
    with pytest.raises(MoneyError, match="parts must be a positive int, got 0"):
        Money("1", "USD").split(0)
    with pytest.raises(MoneyError, match="got True"):
        Money("1", "USD").split(True)
    with pytest.raises(MoneyError, match=r"got 2\.0"):
        Money("1", "USD").split(2.0)
