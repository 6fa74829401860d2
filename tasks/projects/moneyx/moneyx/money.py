"""The :class:`Money` value type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from .currency import Currency, RoundingMode, get_currency
from .errors import CurrencyMismatchError, MoneyError


def _to_decimal(value: object, what: str) -> Decimal:
    if isinstance(value, bool | float):
        raise MoneyError(f"{what} must be an int, str or Decimal, not {value!r}")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int | str):
        try:
            result = Decimal(value)
        except InvalidOperation:
            raise MoneyError(f"invalid {what} {value!r}") from None
    else:
        raise MoneyError(f"{what} must be an int, str or Decimal, not {value!r}")
    if not result.is_finite():
        raise MoneyError(f"{what} must be finite, got {value!r}")
    return result


@dataclass(frozen=True)
class Money:
    """An exact amount of one currency.

    Amounts are kept unrounded so that chained calculations stay exact; call
    :meth:`round` to fit the currency's minor unit.
    """

    amount: Decimal
    currency: Currency

    def __init__(self, amount: int | str | Decimal, currency: str | Currency) -> None:
        object.__setattr__(self, "amount", _to_decimal(amount, "amount"))
        object.__setattr__(self, "currency", get_currency(currency))

    @classmethod
    def zero(cls, currency: str | Currency) -> Money:
        """Nothing, in ``currency``."""
        return cls(0, currency)

    @classmethod
    def from_minor(cls, units: int, currency: str | Currency) -> Money:
        """Build from an integer count of minor units: ``from_minor(1050, "EUR")`` is 10.50 EUR."""
        if isinstance(units, bool) or not isinstance(units, int):
            raise MoneyError(f"minor units must be an int, got {units!r}")
        resolved = get_currency(currency)
        return cls(Decimal(units).scaleb(-resolved.minor_units), resolved)

    def to_minor(self, mode: RoundingMode = RoundingMode.HALF_EVEN) -> int:
        """The amount as an integer count of minor units, rounded with ``mode``."""
        return int(self.round(mode).amount.scaleb(self.currency.minor_units))

    def round(self, mode: RoundingMode = RoundingMode.HALF_EVEN) -> Money:
        """This amount rounded to the currency's minor unit."""
        return Money(self.currency.round(self.amount, mode), self.currency)

    @property
    def is_rounded(self) -> bool:
        """True when the amount has no digits beyond the minor unit."""
        return self.currency.round(self.amount) == self.amount

    def is_zero(self) -> bool:
        return self.amount == 0

    def is_positive(self) -> bool:
        return self.amount > 0

    def is_negative(self) -> bool:
        return self.amount < 0

    def _same_currency(self, other: object, action: str) -> Money:
        if not isinstance(other, Money):
            raise TypeError(f"cannot {action} Money and {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatchError(f"cannot {action} {self.currency.code} and {other.currency.code}")
        return other

    def __add__(self, other: object) -> Money:
        other_money = self._same_currency(other, "add")
        return Money(self.amount + other_money.amount, self.currency)

    def __radd__(self, other: object) -> Money:
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return self.__add__(other)

    def __sub__(self, other: object) -> Money:
        other_money = self._same_currency(other, "subtract")
        return Money(self.amount - other_money.amount, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount, self.currency)

    def __pos__(self) -> Money:
        return self

    def __abs__(self) -> Money:
        return Money(abs(self.amount), self.currency)

    def __mul__(self, factor: object) -> Money:
        if isinstance(factor, Money):
            raise TypeError("cannot multiply Money by Money")
        return Money(self.amount * _to_decimal(factor, "factor"), self.currency)

    __rmul__ = __mul__

    def __truediv__(self, divisor: object) -> Money | Decimal:
        """Divide by a number (giving unrounded Money) or by Money of the same currency (giving a ratio)."""
        if isinstance(divisor, Money):
            other = self._same_currency(divisor, "divide")
            if other.amount == 0:
                raise MoneyError(f"cannot divide {self} by a zero amount")
            return self.amount / other.amount
        value = _to_decimal(divisor, "divisor")
        if value == 0:
            raise MoneyError(f"cannot divide {self} by zero")
        return Money(self.amount / value, self.currency)

    def __lt__(self, other: object) -> bool:
        return self.amount < self._same_currency(other, "compare").amount

    def __le__(self, other: object) -> bool:
        return self.amount <= self._same_currency(other, "compare").amount

    def __gt__(self, other: object) -> bool:
        return self.amount > self._same_currency(other, "compare").amount

    def __ge__(self, other: object) -> bool:
        return self.amount >= self._same_currency(other, "compare").amount

    def __repr__(self) -> str:
        return f"Money({str(self.amount)!r}, {self.currency.code!r})"

    def __str__(self) -> str:
        return f"{self.currency.code} {self.amount}"

    def allocate(self, ratios: Sequence[int | str | Decimal]) -> list[Money]:
        """Share the (rounded) amount between ``len(ratios)`` parties in proportion to ``ratios``.

        Parts are whole minor units and always add up to the rounded total. Leftover
        minor units go to the parts whose exact share lost the most in truncation,
        earlier parts first on ties.
        """
        if not ratios:
            raise MoneyError("cannot allocate to an empty list of ratios")
        weights = [_to_decimal(ratio, "ratio") for ratio in ratios]
        if any(weight < 0 for weight in weights):
            raise MoneyError(f"ratios must not be negative: {list(ratios)!r}")
        total_weight = sum(weights)
        if total_weight == 0:
            raise MoneyError(f"ratios must not all be zero: {list(ratios)!r}")
        total = self.to_minor()
        magnitude = abs(total)
        exact = [magnitude * weight / total_weight for weight in weights]
        shares = [int(value) for value in exact]
        leftover = magnitude - sum(shares)
        by_loss = sorted(range(len(shares)), key=lambda index: (-(exact[index] - shares[index]), index))
        for index in by_loss[:leftover]:
            shares[index] += 1
        sign = -1 if total < 0 else 1
        return [Money.from_minor(sign * share, self.currency) for share in shares]

    def split(self, parts: int) -> list[Money]:
        """Share the amount into ``parts`` near-equal pieces (largest pieces first)."""
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise MoneyError(f"parts must be a positive int, got {parts!r}")
        return self.allocate([1] * parts)

    def convert(self, currency: str | Currency, rate: int | str | Decimal) -> Money:
        """Convert to ``currency`` at ``rate`` units of it per unit of this currency (unrounded)."""
        factor = _to_decimal(rate, "rate")
        if factor <= 0:
            raise MoneyError(f"exchange rate must be positive, got {rate!r}")
        return Money(self.amount * factor, currency)
