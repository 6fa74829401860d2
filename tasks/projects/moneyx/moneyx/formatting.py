"""Render Money as text and read it back."""

from __future__ import annotations

import re
from decimal import Decimal

from .currency import Currency, RoundingMode, currency_for_symbol, get_currency
from .errors import CurrencyMismatchError, MoneyError, MoneyParseError, UnknownCurrencyError
from .money import Money

_STYLES = ("symbol", "code", "plain")
_LEADING_TOKEN = re.compile(r"([^\d\s.,+-]+)\s*")
_TRAILING_TOKEN = re.compile(r"\s*([^\d\s.,+-]+)$")


def group_digits(digits: str, separator: str) -> str:
    """Insert ``separator`` every three digits from the right: ``"1234567"`` -> ``"1,234,567"``."""
    head = len(digits) % 3 or 3
    groups = [digits[:head]] + [digits[index : index + 3] for index in range(head, len(digits), 3)]
    return separator.join(groups)


def format_amount(
    money: Money,
    *,
    thousands: str = ",",
    decimal: str = ".",
    mode: RoundingMode = RoundingMode.HALF_EVEN,
) -> str:
    """The rounded amount with separators but without any currency marker, e.g. ``"-1,234.50"``."""
    if thousands == decimal:
        raise MoneyError(f"thousands and decimal separators must differ, both are {decimal!r}")
    rounded = money.round(mode).amount
    sign = "-" if rounded < 0 else ""
    text = f"{abs(rounded):.{money.currency.minor_units}f}"
    whole, _, fraction = text.partition(".")
    result = sign + group_digits(whole, thousands)
    if fraction:
        result += decimal + fraction
    return result


def format_money(
    money: Money,
    *,
    style: str = "symbol",
    thousands: str = ",",
    decimal: str = ".",
    mode: RoundingMode = RoundingMode.HALF_EVEN,
) -> str:
    """Format as ``"$1,234.50"`` (style ``symbol``), ``"USD 1,234.50"`` (``code``) or ``"1,234.50"`` (``plain``).

    A minus sign goes before the symbol (``"-$5.00"``) but after the code (``"USD -5.00"``);
    alphabetic symbols are followed by a space (``"kr 12.00"``).
    """
    if style not in _STYLES:
        raise MoneyError(f"unknown format style {style!r}")
    amount = format_amount(money, thousands=thousands, decimal=decimal, mode=mode)
    if style == "code":
        return f"{money.currency.code} {amount}"
    if style == "plain":
        return amount
    symbol = money.currency.symbol
    if symbol[-1].isalpha():
        symbol += " "
    if amount.startswith("-"):
        return f"-{symbol}{amount[1:]}"
    return symbol + amount


def _resolve_token(token: str) -> Currency:
    """A currency named by its ISO code or, failing that, by its symbol."""
    try:
        return get_currency(token)
    except UnknownCurrencyError:
        return currency_for_symbol(token)


def _number_pattern(thousands: str, decimal: str) -> re.Pattern[str]:
    fraction = rf"(?:{re.escape(decimal)}(?P<fraction>\d+))?"
    if thousands:
        whole = rf"(?P<whole>\d{{1,3}}(?:{re.escape(thousands)}\d{{3}})+|\d+)"
    else:
        whole = r"(?P<whole>\d+)"
    return re.compile(whole + fraction)


def parse_money(
    text: str,
    currency: str | Currency | None = None,
    *,
    thousands: str = ",",
    decimal: str = ".",
) -> Money:
    """Read ``"EUR 1,234.50"``, ``"1,234.50 EUR"``, ``"$1,234.50"``, ``"-€5"`` or ``"USD -5"``.

    ``currency`` supplies the currency when the text has none, and must agree with it
    when it does. More decimal places than the currency allows are rejected.
    """
    if thousands == decimal:
        raise MoneyError(f"thousands and decimal separators must differ, both are {decimal!r}")
    rest = text.strip()
    negative = rest.startswith("-")
    if negative:
        rest = rest[1:].lstrip()
    found: Currency | None = None
    leading = _LEADING_TOKEN.match(rest)
    if leading:
        found = _resolve_token(leading.group(1))
        rest = rest[leading.end() :]
        if rest.startswith("-"):
            if negative:
                raise MoneyParseError(f"more than one minus sign in {text!r}")
            negative = True
            rest = rest[1:].lstrip()
    trailing = _TRAILING_TOKEN.search(rest)
    if trailing:
        if found is not None:
            raise MoneyParseError(f"currency given twice in {text!r}")
        found = _resolve_token(trailing.group(1))
        rest = rest[: trailing.start()]
    if found is None:
        if currency is None:
            raise MoneyParseError(f"no currency in {text!r}")
        found = get_currency(currency)
    elif currency is not None and get_currency(currency) != found:
        raise CurrencyMismatchError(f"{text!r} is in {found.code}, expected {get_currency(currency).code}")
    match = _number_pattern(thousands, decimal).fullmatch(rest)
    if match is None:
        raise MoneyParseError(f"invalid amount {rest!r} in {text!r}")
    fraction = match.group("fraction") or ""
    if len(fraction) > found.minor_units:
        raise MoneyParseError(f"too many decimal places for {found.code} in {text!r}")
    digits = match.group("whole").replace(thousands, "") if thousands else match.group("whole")
    amount = Decimal(f"{digits}.{fraction}") if fraction else Decimal(digits)
    return Money(-amount if negative else amount, found)
