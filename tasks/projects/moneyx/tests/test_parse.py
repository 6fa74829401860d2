from decimal import Decimal

import pytest
from moneyx import (
    CurrencyMismatchError,
    Money,
    MoneyError,
    MoneyParseError,
    UnknownCurrencyError,
    format_money,
    parse_money,
)


def test_parse_code_prefix_with_grouping():
    assert parse_money("EUR 1,234.50") == Money("1234.50", "EUR")


def test_parse_code_suffix():
    assert parse_money("1,234.50 EUR") == Money("1234.50", "EUR")
    assert parse_money("12 usd") == Money("12", "USD")


def test_parse_symbols():
    assert parse_money("$1,234.50") == Money("1234.50", "USD")
    assert parse_money("¥1,235") == Money("1235", "JPY")
    assert parse_money("12 kr") == Money("12", "SEK")
    assert parse_money("KD 1.250") == Money("1.25", "KWD")


def test_parse_without_fraction_keeps_integer_amount():
    assert parse_money("EUR 5").amount.as_tuple().exponent == 0
    assert parse_money("EUR 5.5").amount == Decimal("5.5")


def test_parse_negative_forms():
    assert parse_money("-€5") == Money("-5", "EUR")
    assert parse_money("USD -5.25") == Money("-5.25", "USD")
    assert parse_money("-1,000 EUR") == Money("-1000", "EUR")


def test_parse_double_minus_is_rejected():
    with pytest.raises(MoneyParseError, match="more than one minus sign in '-USD -5'"):
        parse_money("-USD -5")


def test_parse_with_currency_argument():
    assert parse_money("1,234.50", "GBP") == Money("1234.50", "GBP")
    assert parse_money("GBP 3", currency="gbp") == Money("3", "GBP")


def test_parse_currency_argument_must_agree():
    with pytest.raises(CurrencyMismatchError, match="'EUR 3' is in EUR, expected USD"):
        parse_money("EUR 3", "USD")


def test_parse_missing_currency_is_rejected():
    with pytest.raises(MoneyParseError, match=r"no currency in '1,234\.50'"):
        parse_money("1,234.50")


def test_parse_currency_given_twice_is_rejected():
    with pytest.raises(MoneyParseError, match="currency given twice in 'EUR 5 EUR'"):
        parse_money("EUR 5 EUR")


def test_parse_unknown_currency_is_rejected():
    with pytest.raises(UnknownCurrencyError, match="unknown currency symbol 'ABC'"):
        parse_money("ABC 5")


def test_parse_bad_grouping_is_rejected():
    with pytest.raises(MoneyParseError, match="invalid amount '1,23,4' in 'EUR 1,23,4'"):
        parse_money("EUR 1,23,4")
    with pytest.raises(MoneyParseError, match="invalid amount"):
        parse_money("EUR 1234,567")


def test_parse_ungrouped_digits_are_accepted():
    assert parse_money("EUR 1234567.89") == Money("1234567.89", "EUR")


def test_parse_too_many_decimals_is_rejected():
    with pytest.raises(MoneyParseError, match=r"too many decimal places for EUR in 'EUR 1\.234'"):
        parse_money("EUR 1.234")
    with pytest.raises(MoneyParseError, match="too many decimal places for JPY"):
        parse_money("JPY 5.0")


def test_parse_european_separators():
    assert parse_money("1.234,50 EUR", thousands=".", decimal=",") == Money("1234.50", "EUR")
    assert parse_money("EUR 1234,5", thousands="", decimal=",") == Money("1234.5", "EUR")


def test_parse_same_separators_are_rejected():
    with pytest.raises(MoneyError, match="separators must differ"):
        parse_money("EUR 1", thousands=".", decimal=".")


def test_format_and_parse_round_trip():
    money = Money("-1234567.25", "CHF")
    assert parse_money(format_money(money)) == money
    assert parse_money(format_money(money, style="code")) == money
