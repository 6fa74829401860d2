from decimal import Decimal

import pytest
from moneyx import CurrencyMismatchError, Money, MoneyError, RoundingMode, UnknownCurrencyError


def test_construction_from_str_int_and_decimal():
    assert Money("12.50", "EUR").amount == Decimal("12.50")
    assert Money(3, "usd").amount == Decimal(3)
    assert Money(Decimal("0.1"), "GBP").currency.code == "GBP"


def test_floats_and_bools_are_rejected():
    with pytest.raises(MoneyError, match=r"amount must be an int, str or Decimal, not 0\.1"):
        Money(0.1, "EUR")
    with pytest.raises(MoneyError, match="not True"):
        Money(True, "EUR")
    with pytest.raises(MoneyError, match=r"not \[1\]"):
        Money([1], "EUR")


def test_invalid_and_non_finite_amounts_are_rejected():
    with pytest.raises(MoneyError, match="invalid amount '12,5'"):
        Money("12,5", "EUR")
    with pytest.raises(MoneyError, match="amount must be finite, got 'NaN'"):
        Money("NaN", "EUR")


def test_unknown_currency_is_rejected():
    with pytest.raises(UnknownCurrencyError):
        Money("1", "EURO")


def test_equality_ignores_trailing_zeros_but_not_currency():
    assert Money("1.0", "EUR") == Money("1.00", "EUR")
    assert Money("1", "EUR") != Money("1", "USD")
    assert Money("1", "EUR") != Money("2", "EUR")
    assert hash(Money("1.0", "EUR")) == hash(Money("1", "EUR"))


def test_money_is_immutable():
    money = Money("1", "EUR")
    with pytest.raises(AttributeError):
        money.amount = Decimal("2")


def test_repr_and_str():
    assert repr(Money("1.50", "EUR")) == "Money('1.50', 'EUR')"
    assert str(Money("-3", "JPY")) == "JPY -3"


def test_zero_and_sign_predicates():
    zero = Money.zero("USD")
    assert zero.is_zero()
    assert not zero.is_positive()
    assert not zero.is_negative()
    assert Money("0.01", "USD").is_positive()
    assert Money("-0.01", "USD").is_negative()


def test_minor_unit_conversion():
    assert Money.from_minor(1050, "EUR") == Money("10.50", "EUR")
    assert Money.from_minor(-7, "KWD") == Money("-0.007", "KWD")
    assert Money.from_minor(500, "JPY") == Money("500", "JPY")
    assert Money("10.505", "EUR").to_minor() == 1050
    assert Money("10.505", "EUR").to_minor(RoundingMode.HALF_UP) == 1051


def test_from_minor_requires_int():
    with pytest.raises(MoneyError, match=r"minor units must be an int, got 10\.5"):
        Money.from_minor(10.5, "EUR")


def test_round_uses_currency_precision():
    assert Money("2.675", "USD").round() == Money("2.68", "USD")
    assert Money("2.665", "USD").round() == Money("2.66", "USD")
    assert Money("2.665", "USD").round(RoundingMode.HALF_UP) == Money("2.67", "USD")
    assert Money("1234.5", "JPY").round().amount == Decimal("1234")
    assert Money("1.23456", "KWD").round(RoundingMode.DOWN).amount == Decimal("1.234")


def test_is_rounded():
    assert Money("2.50", "EUR").is_rounded
    assert not Money("2.505", "EUR").is_rounded
    assert not Money("1.5", "JPY").is_rounded


def test_addition_and_subtraction():
    assert Money("1.10", "EUR") + Money("2.25", "EUR") == Money("3.35", "EUR")
    assert Money("1.10", "EUR") - Money("2.25", "EUR") == Money("-1.15", "EUR")


def test_sum_starts_from_zero():
    assert sum([Money("1.5", "USD"), Money("2", "USD")]) == Money("3.5", "USD")


def test_mixing_currencies_is_rejected():
    with pytest.raises(CurrencyMismatchError, match="cannot add EUR and USD"):
        Money("1", "EUR") + Money("1", "USD")
    with pytest.raises(CurrencyMismatchError, match="cannot subtract USD and EUR"):
        Money("1", "USD") - Money("1", "EUR")
    with pytest.raises(CurrencyMismatchError, match="cannot compare EUR and GBP"):
        assert Money("1", "EUR") < Money("2", "GBP")


def test_adding_plain_numbers_is_a_type_error():
    with pytest.raises(TypeError, match="cannot add Money and int"):
        Money("1", "EUR") + 1
    with pytest.raises(TypeError, match="cannot add Money and int"):
        5 + Money("1", "EUR")


def test_unary_operators():
    assert -Money("2.5", "EUR") == Money("-2.5", "EUR")
    assert +Money("2.5", "EUR") == Money("2.5", "EUR")
    assert abs(Money("-2.5", "EUR")) == Money("2.5", "EUR")


def test_multiplication_is_exact():
    assert Money("19.99", "USD") * 3 == Money("59.97", "USD")
    assert Decimal("0.5") * Money("1.01", "USD") == Money("0.505", "USD")
    assert Money("2", "USD") * "1.5" == Money("3", "USD")


def test_multiplication_by_money_or_float_is_rejected():
    with pytest.raises(TypeError, match="cannot multiply Money by Money"):
        Money("2", "USD") * Money("2", "USD")
    with pytest.raises(MoneyError, match="factor must be an int, str or Decimal"):
        Money("2", "USD") * 1.5


def test_division_by_number():
    assert Money("10", "EUR") / 4 == Money("2.5", "EUR")
    assert (Money("10", "EUR") / 3).round() == Money("3.33", "EUR")


def test_division_by_money_gives_ratio():
    assert Money("3", "EUR") / Money("12", "EUR") == Decimal("0.25")


def test_division_by_zero_is_rejected():
    with pytest.raises(MoneyError, match="cannot divide EUR 10 by zero"):
        Money("10", "EUR") / 0
    with pytest.raises(MoneyError, match="cannot divide EUR 10 by a zero amount"):
        Money("10", "EUR") / Money("0", "EUR")
    with pytest.raises(CurrencyMismatchError, match="cannot divide EUR and USD"):
        Money("10", "EUR") / Money("2", "USD")


def test_ordering():
    small, large = Money("1.99", "EUR"), Money("2", "EUR")
    assert small < large
    assert small <= large
    assert large > small
    assert large >= small
    assert large <= Money("2.00", "EUR")
    assert large >= Money("2.00", "EUR")
    assert not large < small
    assert not small > large
    assert not large < Money("2.00", "EUR")
    assert not large > Money("2.00", "EUR")
    assert sorted([large, small]) == [small, large]


def test_convert():
    assert Money("10", "EUR").convert("USD", "1.0825") == Money("10.825", "USD")
    assert Money("10", "EUR").convert("JPY", 160).round() == Money("1600", "JPY")
    assert Money("10", "USD").convert("GBP", "0.5") == Money("5", "GBP")


def test_convert_rejects_non_positive_rate():
    with pytest.raises(MoneyError, match="exchange rate must be positive, got '0'"):
        Money("10", "EUR").convert("USD", "0")


def test_division_by_zero_in_other_currencies():
    with pytest.raises(MoneyError, match=r"cannot divide USD 7\.50 by zero"):
        Money("7.50", "USD") / 0
    with pytest.raises(MoneyError, match="cannot divide JPY 3 by a zero amount"):
        Money("3", "JPY") / Money("0", "JPY")
    with pytest.raises(CurrencyMismatchError, match="cannot divide USD and EUR"):
        Money("1", "USD") / Money("1", "EUR")


def test_is_zero_on_other_amounts():
    assert Money("0.00", "EUR").is_zero() is True
    assert Money("1.00", "EUR").is_zero() is False
    assert Money("-0.01", "EUR").is_zero() is False
    assert Money("0.50", "EUR").is_positive() is True


def test_subtraction_and_addition_of_other_amounts():
    assert str(Money("5", "USD") - Money("7.25", "USD")) == "USD -2.25"
    assert str(Money("10.00", "EUR") - Money("0.01", "EUR")) == "EUR 9.99"
    assert str(Money("0.30", "EUR") + Money("0.70", "EUR")) == "EUR 1.00"


def test_more_invalid_and_non_finite_amounts():
    with pytest.raises(MoneyError, match=r"invalid amount '1\.5\.0'"):
        Money("1.5.0", "EUR")
    with pytest.raises(MoneyError, match="invalid amount 'abc'"):
        Money("abc", "USD")
    with pytest.raises(MoneyError, match="amount must be finite, got 'Infinity'"):
        Money("Infinity", "EUR")
    with pytest.raises(MoneyError, match="amount must be finite, got '-inf'"):
        Money("-inf", "USD")


def test_from_minor_rejects_strings_and_floats():
    with pytest.raises(MoneyError, match="minor units must be an int, got '100'"):
        Money.from_minor("100", "EUR")
    with pytest.raises(MoneyError, match=r"minor units must be an int, got 2\.0"):
        Money.from_minor(2.0, "USD")
    assert str(Money.from_minor(250, "USD")) == "USD 2.50"
