from decimal import Decimal

import pytest
from moneyx import CURRENCIES, Currency, RoundingMode, UnknownCurrencyError, currency_for_symbol, get_currency


def test_get_currency_is_case_insensitive():
    euro = get_currency(" eur ")
    assert euro.code == "EUR"
    assert euro.minor_units == 2
    assert euro.symbol == "€"


def test_get_currency_passes_currency_objects_through():
    yen = CURRENCIES["JPY"]
    assert get_currency(yen) is yen


def test_get_currency_rejects_unknown_codes():
    with pytest.raises(UnknownCurrencyError, match="unknown currency code 'XYZ'"):
        get_currency("XYZ")
    with pytest.raises(UnknownCurrencyError, match="currency code must be a string, got 978"):
        get_currency(978)


def test_currency_table_is_read_only():
    with pytest.raises(TypeError):
        CURRENCIES["ABC"] = Currency("ABC", 2, "A", "Test")


def test_minor_units_and_quantum():
    assert get_currency("JPY").quantum == Decimal("1")
    assert get_currency("KWD").quantum == Decimal("0.001")
    assert get_currency("USD").quantum == Decimal("0.01")


def test_currency_for_symbol():
    assert currency_for_symbol("$").code == "USD"
    assert currency_for_symbol("£").code == "GBP"
    assert currency_for_symbol("KR").code == "SEK"


def test_currency_for_symbol_rejects_unknown():
    with pytest.raises(UnknownCurrencyError, match="unknown currency symbol '₿'"):
        currency_for_symbol("₿")


def test_currency_round_modes():
    usd = get_currency("USD")
    assert usd.round(Decimal("2.345")) == Decimal("2.34")
    assert usd.round(Decimal("2.345"), RoundingMode.HALF_UP) == Decimal("2.35")
    assert usd.round(Decimal("2.345"), RoundingMode.HALF_DOWN) == Decimal("2.34")
    assert usd.round(Decimal("2.349"), RoundingMode.DOWN) == Decimal("2.34")
    assert usd.round(Decimal("2.341"), RoundingMode.UP) == Decimal("2.35")


def test_currency_round_directed_modes_on_negatives():
    usd = get_currency("USD")
    assert usd.round(Decimal("-2.341"), RoundingMode.CEILING) == Decimal("-2.34")
    assert usd.round(Decimal("-2.341"), RoundingMode.FLOOR) == Decimal("-2.35")
    assert usd.round(Decimal("-2.349"), RoundingMode.DOWN) == Decimal("-2.34")


def test_currency_str_is_code():
    assert str(get_currency("gbp")) == "GBP"
