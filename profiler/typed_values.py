"""Numbers, whole numbers, sizes and percentages as a person types them, read one way everywhere.

The command line's options and the app's fields read their values here, so each rule lives
once: digits are ASCII only (`str.isdigit` and `int` accept "²", "٣" and a full-width 3, and
`float` accepts "inf", "nan" and "1e999"), a value is read as a `Decimal` (never a float that
overflows to infinity, nor an int() of thousands of digits), and every value has a range that
is part of the one message a bad value gets: "must be a number of milliseconds between 0.5 and
60000, not 'inf'". The caller puts the option or field in front of it.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from memsight.profiler.units import exact_bytes

# The largest size an option takes: far beyond any machine's RAM or GPU memory, and well
# inside the int64 a profile stores sizes in.
MAX_SIZE_BYTES = 1024**5
MAX_SIZE_TEXT = "1024 TiB"
MAX_PERCENT = 10_000  # a peak 100 times the one before

# ASCII only, whatever the locale or Python's idea of a digit or a space.
_SPACE = "[ \t]*"
_NUMBER = re.compile(
    rf"{_SPACE}([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?){_SPACE}", re.ASCII
)
_INTEGER = re.compile(rf"{_SPACE}([+-]?[0-9]+){_SPACE}", re.ASCII)
_GROUPED_INTEGER = re.compile(rf"{_SPACE}([+-]?[0-9]+(?:[_,][0-9]+)*){_SPACE}", re.ASCII)
_PERCENT = re.compile(
    rf"{_SPACE}([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)){_SPACE}%?{_SPACE}", re.ASCII
)
_SHOWN_CHARACTERS = 40


class OutOfRange(ValueError):
    """A value read fine but outside what its option takes; the message says the range."""


def shown(text: str) -> str:
    """The value as a message quotes it: repr, cut so a 400-digit value stays one short line."""
    if len(text) <= _SHOWN_CHARACTERS:
        return repr(text)
    return repr(text[:_SHOWN_CHARACTERS]) + f"... ({len(text):,} characters)"


def _decimal(pattern: re.Pattern[str], text: str) -> Decimal | None:
    match = pattern.fullmatch(text)
    if match is None:
        return None
    try:
        return Decimal(match.group(1).replace("_", "").replace(",", ""))
    except InvalidOperation:  # an exponent beyond what Decimal holds
        return None


def number_between(text: str, low: float, high: float, what: str = "a number") -> float:
    """A decimal number from `low` to `high` ("10", "0.5", "2e3"); ValueError otherwise."""
    value = _decimal(_NUMBER, text)
    if value is None or not Decimal(repr(low)) <= value <= Decimal(repr(high)):
        raise ValueError(f"must be {what} between {low:g} and {high:g}, not {shown(text)}")
    return float(value)


def integer_between(
    text: str, low: int, high: int, what: str = "a whole number", grouped: bool = False
) -> int:
    """A whole number from `low` to `high`; `grouped` also reads 100_000 and 100,000."""
    value = _decimal(_GROUPED_INTEGER if grouped else _INTEGER, text)
    if value is None or not low <= value <= high:
        raise ValueError(f"must be {what} between {low:,} and {high:,}, not {shown(text)}")
    return int(value)


def size_between(text: str, low: int = 1, high: int = MAX_SIZE_BYTES) -> int:
    """A size in binary units (units.exact_bytes: "512MiB", "1.5 GiB", "2g") from `low` to
    `high` bytes; OutOfRange for a size beyond them, ValueError for text that is no size."""
    value = exact_bytes(text)
    if value is None:
        raise ValueError(f"not a size: {shown(text)} (examples: 512MiB, 1.5GiB, 2G)")
    if not low <= value <= high:
        top = MAX_SIZE_TEXT if high == MAX_SIZE_BYTES else f"{high:,} B"
        raise OutOfRange(f"must be a size between {low:,} B and {top}, not {shown(text)}")
    return int(value)


def share_of_percent(text: str, high: float = MAX_PERCENT) -> float:
    """A percentage from 0 to `high` ("10%", "2.5 %", "15") as a share (0.10, 0.025, 0.15)."""
    value = _decimal(_PERCENT, text)
    if value is None:
        raise ValueError(f"not a percentage: {shown(text)} (examples: 10%, 2.5%)")
    if not 0 <= value <= Decimal(repr(high)):
        raise OutOfRange(f"must be a percentage between 0 % and {high:g} %, not {shown(text)}")
    return float(value) / 100.0
