import pytest
from moneyx import Money, MoneyError, RoundingMode, format_amount, format_money, group_digits


def test_group_digits():
    assert group_digits("1234567", ",") == "1,234,567"
    assert group_digits("123456", ",") == "123,456"
    assert group_digits("12", ",") == "12"
    assert group_digits("1234", "") == "1234"
    assert group_digits("12345", " ") == "12 345"


def test_format_symbol_style():
    assert format_money(Money("1234.5", "USD")) == "$1,234.50"
    assert format_money(Money("0.5", "GBP")) == "£0.50"


def test_format_negative_puts_sign_before_symbol():
    assert format_money(Money("-1234.5", "EUR")) == "-€1,234.50"


def test_format_alphabetic_symbol_gets_a_space():
    assert format_money(Money("12", "SEK")) == "kr 12.00"
    assert format_money(Money("-3.5", "CHF")) == "-Fr 3.50"


def test_format_code_style():
    assert format_money(Money("1234.5", "EUR"), style="code") == "EUR 1,234.50"
    assert format_money(Money("-5", "USD"), style="code") == "USD -5.00"


def test_format_plain_style():
    assert format_money(Money("-1234567.891", "USD"), style="plain") == "-1,234,567.89"


def test_format_unknown_style_is_rejected():
    with pytest.raises(MoneyError, match="unknown format style 'fancy'"):
        format_money(Money("1", "USD"), style="fancy")


def test_format_currency_without_minor_units():
    assert format_money(Money("1234567", "JPY")) == "¥1,234,567"
    assert format_money(Money("1234.5", "JPY")) == "¥1,234"


def test_format_three_minor_units():
    assert format_money(Money("1234.5678", "KWD"), style="code") == "KWD 1,234.568"


def test_format_custom_separators():
    money = Money("1234567.891", "EUR")
    assert format_money(money, thousands=".", decimal=",") == "€1.234.567,89"
    assert format_amount(money, thousands="", decimal=",") == "1234567,89"


def test_format_same_separators_are_rejected():
    with pytest.raises(MoneyError, match="separators must differ, both are ','"):
        format_amount(Money("1", "EUR"), thousands=",", decimal=",")


def test_format_rounding_mode():
    assert format_amount(Money("2.345", "USD")) == "2.34"
    assert format_amount(Money("2.345", "USD"), mode=RoundingMode.HALF_UP) == "2.35"
    assert format_money(Money("2.349", "USD"), mode=RoundingMode.DOWN) == "$2.34"


def test_format_small_negative_that_rounds_to_zero():
    assert format_amount(Money("-0.001", "USD")) == "0.00"
    assert format_amount(Money("-0.005", "USD"), mode=RoundingMode.UP) == "-0.01"
