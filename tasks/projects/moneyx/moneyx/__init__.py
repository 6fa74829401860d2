"""Exact money amounts with currencies, rounding, allocation, formatting and parsing."""

from .currency import CURRENCIES, Currency, RoundingMode, currency_for_symbol, get_currency
from .errors import CurrencyMismatchError, MoneyError, MoneyParseError, UnknownCurrencyError
from .formatting import format_amount, format_money, group_digits, parse_money
from .money import Money

__all__ = [
    "CURRENCIES",
    "Currency",
    "CurrencyMismatchError",
    "Money",
    "MoneyError",
    "MoneyParseError",
    "RoundingMode",
    "UnknownCurrencyError",
    "currency_for_symbol",
    "format_amount",
    "format_money",
    "get_currency",
    "group_digits",
    "parse_money",
]
