"""Currency definitions and the rounding modes used to fit amounts to them."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import (
    ROUND_CEILING,
    ROUND_DOWN,
    ROUND_FLOOR,
    ROUND_HALF_DOWN,
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    ROUND_UP,
    Decimal,
)
from enum import Enum
from types import MappingProxyType

from .errors import UnknownCurrencyError


class RoundingMode(Enum):
    """How to drop digits beyond a currency's minor unit."""

    HALF_EVEN = ROUND_HALF_EVEN
    HALF_UP = ROUND_HALF_UP
    HALF_DOWN = ROUND_HALF_DOWN
    DOWN = ROUND_DOWN
    UP = ROUND_UP
    CEILING = ROUND_CEILING
    FLOOR = ROUND_FLOOR


@dataclass(frozen=True)
class Currency:
    """An ISO-4217 currency: ``minor_units`` is the number of decimal places it uses."""

    code: str
    minor_units: int
    symbol: str
    name: str

    @property
    def quantum(self) -> Decimal:
        """The smallest representable amount, e.g. ``Decimal("0.01")`` for EUR."""
        return Decimal(1).scaleb(-self.minor_units)

    def round(self, amount: Decimal, mode: RoundingMode = RoundingMode.HALF_EVEN) -> Decimal:
        """Round ``amount`` to this currency's minor unit."""
        return amount.quantize(self.quantum, rounding=mode.value)

    def __str__(self) -> str:
        return self.code


CURRENCIES: MappingProxyType[str, Currency] = MappingProxyType(
    {
        currency.code: currency
        for currency in (
            Currency("USD", 2, "$", "US Dollar"),
            Currency("EUR", 2, "€", "Euro"),
            Currency("GBP", 2, "£", "Pound Sterling"),
            Currency("CHF", 2, "Fr", "Swiss Franc"),
            Currency("SEK", 2, "kr", "Swedish Krona"),
            Currency("JPY", 0, "¥", "Yen"),
            Currency("KWD", 3, "KD", "Kuwaiti Dinar"),
        )
    }
)


def get_currency(code: str | Currency) -> Currency:
    """Look up a currency by its (case-insensitive) ISO code; Currency objects pass through."""
    if isinstance(code, Currency):
        return code
    if not isinstance(code, str):
        raise UnknownCurrencyError(f"currency code must be a string, got {code!r}")
    try:
        return CURRENCIES[code.strip().upper()]
    except KeyError:
        raise UnknownCurrencyError(f"unknown currency code {code!r}") from None


def currency_for_symbol(symbol: str) -> Currency:
    """Find the currency written with ``symbol`` (``"$"``, ``"€"``, ``"kr"`` ...)."""
    for currency in CURRENCIES.values():
        if currency.symbol.lower() == symbol.lower():
            return currency
    raise UnknownCurrencyError(f"unknown currency symbol {symbol!r}")
