"""Exception types raised by moneyx."""


class MoneyError(ValueError):
    """Base class for every error raised by moneyx."""


class UnknownCurrencyError(MoneyError):
    """Raised for a currency code or symbol missing from the currency table."""


class CurrencyMismatchError(MoneyError):
    """Raised when an operation combines amounts in different currencies."""


class MoneyParseError(MoneyError):
    """Raised when text cannot be read as a money amount."""
