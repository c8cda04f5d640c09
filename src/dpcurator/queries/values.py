"""Reading values written as text: decimal numbers, ISO 8601 times and dates, booleans.

One reader for every place a value is written — a data file's field, a literal in a
query, a clip bound, a bin edge, a schema's bounds — so that ``39.1`` in a file, in
``bill_length_mm > 39.1`` and in ``mean(bill_length_mm, 39.1, 60)`` is one number.
Numbers are read as the exact decimal they are written as (never through a binary
float), times as an exact number of seconds since 1970-01-01T00:00:00Z, dates as a number
of days since 1970-01-01. Pure: no I/O but the IANA time-zone database (reference data,
read through :mod:`zoneinfo`), no randomness.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "TIME_UNITS",
    "as_decimal",
    "date_text",
    "decimal_places",
    "decimal_text",
    "instant_text",
    "number_of",
    "parse_boolean",
    "parse_date",
    "parse_instant",
    "parse_number",
    "time_zone",
]

#: Seconds in each unit a timestamp may be kept in.
TIME_UNITS = {"second": 1, "minute": 60, "hour": 3600}

#: The most digits a number may be written with (Python refuses longer integer texts).
MAX_DIGITS = 1000
#: Exponents beyond this many decimal places are brought to it: every domain's grid has
#: at most 15 significant digits, so no grid point lies between a number of magnitude
#: above 10^LIMIT and infinity, or between 0 and one below 10^-LIMIT, and comparisons
#: with any grid point come out the same (``x > 1e-99999`` is ``x > 0`` plus nothing).
EXPONENT_LIMIT = 1000

# ASCII digits only (re.ASCII: ``\d`` is [0-9]), as integers are read in the engines'
# SQL: an Arabic-Indic or fullwidth digit is refused by every type alike.
_NUMBER = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", re.ASCII)
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r" ?(Z|z|UTC|[+-]\d{2}(?::?\d{2})?)?",
    re.ASCII,
)
_BOOLEANS = {
    "true": True, "t": True, "yes": True, "y": True, "1": True,
    "false": False, "f": False, "no": False, "n": False, "0": False,
}  # fmt: skip
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()


def parse_number(text: str) -> Fraction | None:
    """The exact value of a decimal number (``39.1``, ``-60.5``, ``1e-05``, ``517.``), or
    None if ``text`` is not one. Magnitudes beyond 10^±1000 are brought to that limit
    (see :data:`EXPONENT_LIMIT`), so that no text makes an integer of a billion digits."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign, whole, frac, exp = m.groups()
    frac = frac or ""
    if not whole and not frac:
        return None
    digits = (whole + frac).lstrip("0")
    if len(digits) > MAX_DIGITS:
        return None
    if not digits:
        return Fraction(0)
    e = 0
    if exp is not None:
        shown = exp.lstrip("+-").lstrip("0")
        # an exponent of more than 12 digits is beyond any limit either way
        e = int(exp) if len(shown) <= 12 else (-1 if exp.startswith("-") else 1) * 10**13
    e -= len(frac)
    top = e + len(digits)  # the number is about 10^top in magnitude
    if top > EXPONENT_LIMIT:
        value = Fraction(10) ** (EXPONENT_LIMIT + 1)
    elif top < -EXPONENT_LIMIT:
        value = Fraction(1, 10 ** (EXPONENT_LIMIT + 1))
    else:
        value = int(digits) * Fraction(10) ** e
    return -value if sign == "-" else value


def decimal_places(x: Fraction) -> int | None:
    """The decimal places of ``x`` (0 for an integer), or None if its decimal expansion
    does not end (a third)."""
    d, twos, fives = x.denominator, 0, 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    return max(twos, fives) if d == 1 else None


def as_decimal(x: Fraction) -> Decimal:
    """A number with a finite decimal expansion as an exact :class:`Decimal` (integer
    arithmetic: no context precision rounds it)."""
    places = decimal_places(x)
    if places is None:
        raise ValueError(f"{x} has no finite decimal expansion")
    digits = x.numerator * (10**places // x.denominator)
    return Decimal(digits).scaleb(-places)


def decimal_text(x: Fraction) -> str:
    """A number as the shortest decimal text that reads back as it (``39.1``, ``-60``,
    ``0.001``); only for numbers with a finite decimal expansion."""
    d = as_decimal(x)
    text = format(d.normalize(), "f") if d else "0"
    return "0" if text in ("-0", "") else text


def number_of(value: object) -> Fraction | None:
    """A Python number (int, float, :class:`Decimal`, :class:`Fraction`, numpy's, or
    decimal text) as the exact decimal it is written as: a float by its shortest
    decimal form (``0.1`` is one tenth, as typed), never its binary expansion. None for
    anything else (bools, NaN, infinities)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Decimal):
        return Fraction(value) if value.is_finite() else None
    if isinstance(value, str):
        return parse_number(value.strip())
    try:
        import numpy as np

        if isinstance(value, np.integer):
            return Fraction(int(value))
        if isinstance(value, np.floating):
            value = float(value)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if isinstance(value, float):
        return parse_number(repr(value)) if math.isfinite(value) else None
    return None


@functools.lru_cache(maxsize=64)
def time_zone(name: str) -> dt.tzinfo:
    """The IANA time zone ``name`` (``UTC``, ``America/New_York``); ValueError if there
    is no such zone."""
    if name == "UTC":
        return dt.UTC
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*", name):
        raise ValueError(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown time zone {name!r} (an IANA name such as 'UTC' or 'America/New_York')"
        ) from None


def _offset_seconds(text: str) -> int:
    if text in ("Z", "z", "UTC"):
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise ValueError("offset")
    return sign * (hours * 3600 + minutes * 60)


def parse_instant(text: str, zone: str = "UTC") -> Fraction | None:
    """Seconds since 1970-01-01T00:00:00Z (exact, with any fraction of a second) of an
    ISO 8601 time: ``2013-01-01T10:00:00Z``, ``2013-01-01 05:00:00-05:00``,
    ``2013-06-01`` (midnight), ``2013-06-01T10:00``. A time without an offset is a local
    time in ``zone`` (of two readings of a local time that occurs twice, the earlier;
    PEP 495's ``fold=0``). None if ``text`` is not such a time."""
    m = _INSTANT.fullmatch(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, off = m.groups()
    try:
        local = dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0))
        if off is not None:
            offset = _offset_seconds(off)
        else:
            tz = time_zone(zone)
            delta = local.replace(tzinfo=tz).utcoffset()
            offset = 0 if delta is None else int(delta.total_seconds())
    except (ValueError, OverflowError):
        return None
    seconds = (local - _EPOCH) // dt.timedelta(seconds=1) - offset
    value = Fraction(seconds)
    if frac:
        value += Fraction(int(frac), 10 ** len(frac))
    return value


def parse_date(text: str) -> int | None:
    """Days since 1970-01-01 of an ISO 8601 calendar date ``YYYY-MM-DD``, or None."""
    m = _DATE.fullmatch(text)
    if m is None:
        return None
    try:
        day = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None
    return day.toordinal() - _EPOCH_DAY


def date_text(days: int) -> str:
    """``YYYY-MM-DD`` of a number of days since 1970-01-01."""
    return dt.date.fromordinal(days + _EPOCH_DAY).isoformat()


def date_of(days: int) -> dt.date:
    return dt.date.fromordinal(days + _EPOCH_DAY)


def instant_text(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` of a whole number of seconds since the epoch (UTC)."""
    return (_EPOCH + dt.timedelta(seconds=seconds)).isoformat(timespec="seconds") + "Z"


def local_time(seconds: int, zone: str) -> dt.datetime:
    """The local date and time in ``zone`` of a whole number of seconds since the epoch."""
    utc = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return utc.astimezone(time_zone(zone))


def local_seconds(local: dt.datetime, zone: str) -> int:
    """Seconds since the epoch of a naive local time in ``zone`` (``fold=0``)."""
    delta = local.replace(tzinfo=time_zone(zone)).utcoffset()
    offset = 0 if delta is None else int(delta.total_seconds())
    return (local - _EPOCH) // dt.timedelta(seconds=1) - offset


def parse_boolean(text: str) -> bool | None:
    """``true``/``false`` (also ``t``/``f``, ``yes``/``no``, ``y``/``n``, ``1``/``0``; any
    case), or None."""
    return _BOOLEANS.get(text.lower())
