"""Public schemas: attributes with finite, public domains (see docs/design.md).

The domain of a schema is the product of its attributes' domains (Smith et
al., PoPETs 2022: "a domain is the Cartesian product of attributes"). It may have
10^20000 points, so nothing here ever enumerates it: every value is addressed by its
*position* ``0 .. size-1`` inside its attribute, and sets of values are sorted lists of
half-open position intervals.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from dpcurator.errors import SchemaError
from dpcurator.queries import values

AttributeType = Literal["integer", "float", "timestamp", "date", "boolean", "categorical"]
#: Every attribute type, as a schema names it.
TYPES: tuple[str, ...] = ("integer", "float", "timestamp", "date", "boolean", "categorical")
#: Types whose values lie on an evenly spaced grid of numbers (see :attr:`Attribute.grid`).
GRID_TYPES = frozenset({"integer", "float", "timestamp", "date"})
#: Types whose values are numbers (means, sums and variances take them).
NUMERIC_TYPES = frozenset({"integer", "float"})
#: The most significant digits of a float attribute's values (each is then exactly the
#: shortest decimal of the binary float that answers carry: ``repr(float(v)) == v``).
MAX_FLOAT_DIGITS = 15
#: The most values a float, timestamp or date may have (their codes fit in 63 bits; an
#: integer's range is checked where it is loaded).
MAX_VALUES = 2**62
#: The keys each type takes in a schema (besides ``name`` and ``type``).
_KEYS = {
    "integer": {"min", "max", "ordered", "missing"},
    "float": {"min", "max", "step", "missing"},
    "timestamp": {"min", "max", "unit", "timezone", "missing"},
    "date": {"min", "max", "missing"},
    "boolean": {"missing"},
    "categorical": {"values", "ordered", "missing"},
}
_REQUIRED = {
    "integer": ("min", "max"),
    "float": ("min", "max", "step"),
    "timestamp": ("min", "max"),
    "date": ("min", "max"),
    "boolean": (),
    "categorical": (),
}
_ARTICLE = {
    "integer": "an integer",
    "float": "a float",
    "timestamp": "a timestamp",
    "date": "a date",
    "boolean": "a boolean",
    "categorical": "a categorical",
}
_BOOLEAN_VALUES = ("false", "true")


def _quoted(text: str) -> str:
    """``text`` as an SQL string literal (a quote inside doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _text(s: str) -> bool:
    """Whether ``s`` can be written as UTF-8 (no lone surrogates): every name and value
    ends up in JSON answers, the ledger and the dashboard."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_number(x: Fraction) -> int | float:
    """A grid number as JSON writes it: an integer, else the float whose shortest decimal
    is the number (exact for at most 15 significant digits)."""
    return int(x) if x.denominator == 1 else float(values.as_decimal(x))


@dataclass(frozen=True)
class Attribute:
    """One attribute and its public domain.

    Types (docs/types.md):

    ``integer``: the inclusive range ``[min, max]``.
    ``float``: the multiples of ``step`` from ``min`` to ``max`` (both multiples of it),
    decimals kept exactly; a value in the data is rounded to the nearest multiple (ties
    to even) on load, the one change made to the data.
    ``timestamp``: the instants from ``min`` to ``max`` (ISO 8601) by ``unit`` (second,
    minute or hour, counted from 1970-01-01T00:00:00Z); a value is truncated to the
    start of its unit on load. ``timezone`` (an IANA name, default UTC) reads local
    times written without an offset (in the data, the schema and queries) and tells the
    parts ``year(t)``, ``month(t)``, ``day(t)``, ``weekday(t)``, ``hour(t)``.
    ``date``: the calendar days from ``min`` to ``max`` (``YYYY-MM-DD``).
    ``boolean``: false and true.
    ``categorical``: a list of distinct string values; ``ordered`` allows ranges, which
    compare values by their position in ``values``.

    Integers, floats, timestamps and dates are *grid* types, ordered: position ``p`` is
    the number ``(lo + p) * unit`` (:attr:`grid`) — the value itself, a number of seconds
    since the epoch, or of days — so that ranges, bins and clip bounds are exact
    rational arithmetic whatever the type.

    ``missing``: the attribute may be missing, and this is its missing value (what
    ``IS NULL`` means, and what blank and NULL cells load as). A declared value (a
    categorical's ``"?"``, an integer inside ``[min, max]``) is that value's cell;
    anything else (``-1`` below ``min``, ``"NA"``, ``""``, a categorical's undeclared
    ``"Unknown"``) is one more cell after the declared values, position
    :attr:`value_count`, which no range includes. Either way the missing value is a
    cell of the domain like any other: ``NOT`` and ``!=`` include it, so a query and its
    negation always partition the rows.
    """

    name: str
    type: AttributeType
    values: tuple[str, ...] = ()
    min: Any = 0  # int (integer), Decimal (float), ISO text (timestamp, date)
    max: Any = -1
    ordered: bool = False
    missing: int | float | str | None = None  # the value that means "missing" (IS NULL)
    step: Decimal | None = None  # float: the grid's spacing
    unit: str | None = None  # timestamp: second, minute or hour
    timezone: str | None = None  # timestamp: how local times are read (default UTC)
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    #: Whether the missing value is a cell of its own, after the declared values.
    _extra: bool = field(default=False, compare=False, repr=False)
    #: Grid types: (lo, unit): position p is the number (lo + p) * unit.
    _grid: tuple[int, Fraction] | None = field(default=None, compare=False, repr=False)
    _count: int = field(default=0, compare=False, repr=False)
    #: A categorical's values written as query literals, made at the first rendering
    #: (which reads them once per value it names: a union of IN lists names thousands);
    #: never pickled (see :meth:`__getstate__`).
    _literals: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchemaError("attribute name must be a non-empty string")
        if not _text(self.name):
            raise SchemaError(f"attribute name {self.name!r} is not valid Unicode text")
        if self.type not in TYPES:
            raise SchemaError(
                f"attribute {self.name!r}: unknown type {self.type!r} "
                f"(expected one of {', '.join(repr(t) for t in TYPES)})"
            )
        for key, allowed in (("step", "float"), ("unit", "timestamp"), ("timezone", "timestamp")):
            if getattr(self, key) is not None and self.type != allowed:
                raise SchemaError(f"attribute {self.name!r}: only a {allowed} takes {key!r}")
        getattr(self, f"_init_{self.type}")()
        if self.type != "categorical":
            object.__setattr__(self, "_index", {})
        if self.type in ("float", "timestamp", "date") and self._count > MAX_VALUES:
            raise SchemaError(
                f"attribute {self.name!r}: {self._count} values, more than {MAX_VALUES} "
                "(2^62); use a coarser step or unit"
            )
        object.__setattr__(self, "_extra", False)  # derived below, whatever was passed
        if self.missing is not None:
            self._init_missing()

    def __getstate__(self) -> dict[str, Any]:
        """The state a pickle keeps: without the rendered literals (a solver's job pickles
        the schema; a categorical of 50,000 values would carry them twice)."""
        state = dict(self.__dict__)
        state.pop("_literals", None)
        return state

    # --- construction, per type --------------------------------------------------------

    def _fail(self, message: str) -> SchemaError:
        return SchemaError(f"attribute {self.name!r}: {message}")

    def _init_integer(self) -> None:
        if isinstance(self.min, bool) or isinstance(self.max, bool):
            raise self._fail("min and max must be integers")
        if not isinstance(self.min, int) or not isinstance(self.max, int):
            raise self._fail("min and max must be integers")
        if self.min > self.max:
            raise self._fail(f"min {self.min} is greater than max {self.max}")
        object.__setattr__(self, "ordered", True)
        self._set_grid(self.min, self.max, Fraction(1))

    def _init_float(self) -> None:
        bounds = []
        for key in ("min", "max", "step"):
            raw = getattr(self, key)
            x = None if isinstance(raw, str) else values.number_of(raw)
            if x is None:
                raise self._fail(f"a float's {key} must be a finite number, got {raw!r}")
            # min and max have at most 15 digits before the point (10^15 has 16)
            if abs(x) > 10**MAX_FLOAT_DIGITS or (key != "step" and abs(x) == 10**MAX_FLOAT_DIGITS):
                raise self._fail(
                    f"a float's {key} must be below 10^{MAX_FLOAT_DIGITS} in magnitude (a "
                    f"float keeps {MAX_FLOAT_DIGITS} significant digits), got {raw!r}; larger "
                    "whole numbers fit an integer attribute (64 bits), others a rescaled column"
                )
            try:
                values.as_decimal(x)
            except ValueError:
                raise self._fail(f"a float's {key} must be a decimal number, got {raw!r}") from None
            bounds.append(x)
        lo, hi, step = bounds
        if step <= 0:
            raise self._fail(f"step must be positive, got {self.step!r}")
        for key, x in (("min", lo), ("max", hi)):
            if (x / step).denominator != 1:
                raise self._fail(
                    f"{key} {values.decimal_text(x)} is not a multiple of step "
                    f"{values.decimal_text(step)}: the values are the multiples of step"
                )
        if lo > hi:
            raise self._fail(
                f"min {values.decimal_text(lo)} is greater than max {values.decimal_text(hi)}"
            )
        places = -values.as_decimal(step).normalize().as_tuple().exponent  # type: ignore[operator]
        whole = len(str(int(max(abs(lo), abs(hi)))))
        if max(places, 0) + whole > MAX_FLOAT_DIGITS:
            raise self._fail(
                f"values from {values.decimal_text(lo)} to {values.decimal_text(hi)} in steps of "
                f"{values.decimal_text(step)} need more than {MAX_FLOAT_DIGITS} significant digits"
            )
        object.__setattr__(self, "min", values.as_decimal(lo).normalize())
        object.__setattr__(self, "max", values.as_decimal(hi).normalize())
        object.__setattr__(self, "step", values.as_decimal(step).normalize())
        object.__setattr__(self, "ordered", True)
        self._set_grid(int(lo / step), int(hi / step), step)

    def _init_timestamp(self) -> None:
        unit = "second" if self.unit is None else self.unit
        if unit not in values.TIME_UNITS:
            raise self._fail(f"unit must be 'second', 'minute' or 'hour', got {self.unit!r}")
        zone = self.timezone
        if zone is not None:
            if not isinstance(zone, str):
                raise self._fail(f"timezone must be an IANA name such as 'UTC', got {zone!r}")
            try:
                values.time_zone(zone)
            except ValueError as err:
                raise self._fail(str(err)) from None
        u = values.TIME_UNITS[unit]
        ends = []
        for key in ("min", "max"):
            raw = getattr(self, key)
            t = values.parse_instant(raw.strip(), zone or "UTC") if isinstance(raw, str) else None
            if t is None:
                raise self._fail(
                    f"a timestamp's {key} is an ISO 8601 time such as '2013-01-01T00:00:00Z', "
                    f"got {raw!r}"
                )
            if t.denominator != 1 or t % u:
                raise self._fail(
                    f"{key} {raw!r} is not a whole {unit} (values are kept by the {unit})"
                )
            ends.append(int(t))
        if ends[0] > ends[1]:
            raise self._fail(f"min {self.min!r} is later than max {self.max!r}")
        object.__setattr__(self, "min", values.instant_text(ends[0]))
        object.__setattr__(self, "max", values.instant_text(ends[1]))
        object.__setattr__(self, "unit", self.unit)
        object.__setattr__(self, "ordered", True)
        self._set_grid(ends[0] // u, ends[1] // u, Fraction(u))

    def _init_date(self) -> None:
        ends = []
        for key in ("min", "max"):
            raw = getattr(self, key)
            d = values.parse_date(raw.strip()) if isinstance(raw, str) else None
            if d is None:
                raise self._fail(f"a date's {key} is written 'YYYY-MM-DD', got {raw!r}")
            ends.append(d)
        if ends[0] > ends[1]:
            raise self._fail(f"min {self.min!r} is later than max {self.max!r}")
        object.__setattr__(self, "min", values.date_text(ends[0]))
        object.__setattr__(self, "max", values.date_text(ends[1]))
        object.__setattr__(self, "ordered", True)
        self._set_grid(ends[0], ends[1], Fraction(1))

    def _init_boolean(self) -> None:
        if self.values not in ((), _BOOLEAN_VALUES, list(_BOOLEAN_VALUES)):
            raise self._fail("a boolean's values are false and true (give none)")
        if self.ordered:
            raise self._fail("a boolean is not ordered")
        object.__setattr__(self, "values", ())
        object.__setattr__(self, "_count", 2)

    def _init_categorical(self) -> None:
        vals = tuple(self.values)
        if not vals:
            raise self._fail("a categorical needs values")
        for v in vals:
            if not isinstance(v, str):
                raise self._fail(f"value {v!r} is not a string")
            if not _text(v):
                raise self._fail(f"value {v!r} is not valid Unicode text")
        index = {v: i for i, v in enumerate(vals)}
        if len(index) != len(vals):
            dup = next(v for v in vals if vals.count(v) > 1)
            raise self._fail(f"duplicate value {dup!r}")
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_count", len(vals))

    def _set_grid(self, lo: int, hi: int, unit: Fraction) -> None:
        object.__setattr__(self, "_grid", (lo, unit))
        object.__setattr__(self, "_count", hi - lo + 1)

    def _init_missing(self) -> None:
        m = self.missing
        if self.type == "integer" and (isinstance(m, bool) or not isinstance(m, int | str)):
            raise self._fail(
                f"its missing value must be an integer (e.g. {self.min - 1}, below min) or "
                f'text (e.g. "NA"), got {m!r}'
            )
        if self.type == "float" and (isinstance(m, bool) or not isinstance(m, int | float | str)):
            raise self._fail(
                f'its missing value must be a number (e.g. -1) or text (e.g. "NA"), got {m!r}'
            )
        if self.type in ("float",) and isinstance(m, float) and not math.isfinite(m):
            raise self._fail(f"its missing value must be finite, got {m!r}")
        if self.type in ("timestamp", "date", "boolean", "categorical") and not isinstance(m, str):
            raise self._fail(f'its missing value must be text (e.g. "NA"), got {m!r}')
        try:
            self._position(m)
            declared = True
        except KeyError:
            declared = False
        object.__setattr__(self, "_extra", not declared)

    # --- the domain ---------------------------------------------------------------------

    @property
    def value_count(self) -> int:
        """Number of declared values: positions ``0 .. value_count - 1`` (the ordered
        part of the domain, where ranges live)."""
        return self._count

    @property
    def size(self) -> int:
        """Number of values in the domain (the declared ones and, when the missing
        value is not one of them, its own cell)."""
        return self._count + (1 if self._extra else 0)

    @property
    def grid(self) -> tuple[int, Fraction] | None:
        """``(lo, unit)`` of a grid type (integer, float, timestamp, date): position ``p``
        holds the number ``(lo + p) * unit`` (the value; seconds or days since
        1970-01-01). None for booleans and categoricals."""
        return self._grid

    @property
    def numeric(self) -> bool:
        """Whether the values are numbers (integers and floats: sums and means take them)."""
        return self.type in NUMERIC_TYPES

    @property
    def missing_position(self) -> int | None:
        """Position of the missing value (None if the attribute may not be missing)."""
        if self.missing is None:
            return None
        return self.value_count if self._extra else self.position(self.missing)

    @property
    def missing_cell(self) -> bool:
        """Whether the missing value is a cell of its own, after the declared values."""
        return self._extra

    def number(self, position: int) -> Fraction:
        """The number at a declared position of a grid type."""
        assert self._grid is not None
        lo, unit = self._grid
        return (lo + position) * unit

    def boundary(self, x: Fraction, *, after: bool) -> int:
        """The position boundary just before the grid number ``x`` (the first position
        whose number is at least ``x``; ``after``: greater than ``x``), clamped to the
        declared values ``[0, value_count]``: ``x`` need not be on the grid, nor inside
        it (a range is clamped as SQL means it)."""
        assert self._grid is not None
        lo, unit = self._grid
        k = x / unit
        first = (math.floor(k) + 1) if after else math.ceil(k)
        return min(max(first - lo, 0), self._count)

    def exact_position(self, x: Fraction) -> int:
        """The position of the grid number ``x``; :class:`KeyError` if it is not a value."""
        assert self._grid is not None
        lo, unit = self._grid
        k = x / unit
        if k.denominator != 1 or not 0 <= k.numerator - lo < self._count:
            raise KeyError(x)
        return k.numerator - lo

    def position(self, value: object) -> int:
        """Position of ``value`` in the domain; :class:`KeyError` if it is not there.
        Values are as :meth:`value` gives them; also, for a float any exact number (a
        float by its shortest decimal), for a timestamp ISO text or an aware
        :class:`~datetime.datetime`, for a date ISO text or a :class:`~datetime.date`."""
        if self._extra and type(value) is type(self.missing) and value == self.missing:
            return self.value_count
        return self._position(value)

    def _position(self, value: object) -> int:
        t = self.type
        if t == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise KeyError(value)
            if not self.min <= value <= self.max:
                raise KeyError(value)
            return value - self.min
        if t == "categorical":
            if not isinstance(value, str):
                raise KeyError(value)
            return self._index[value]
        if t == "boolean":
            if isinstance(value, str):
                if value.lower() not in _BOOLEAN_VALUES:
                    raise KeyError(value)
                return _BOOLEAN_VALUES.index(value.lower())
            if type(value).__name__ in ("bool", "bool_"):
                return int(bool(value))  # type: ignore[arg-type]
            raise KeyError(value)
        x = self.grid_number(value)
        if x is None or (isinstance(value, str) and self.type == "float"):
            raise KeyError(value)
        return self.exact_position(x)

    def grid_number(self, value: object) -> Fraction | None:
        """A value of a grid type as its grid number (see :attr:`grid`), whether or not
        it is a value of the domain: for an integer or a float any exact number (a float
        by its shortest decimal, or decimal text), for a timestamp ISO 8601 text or a
        :class:`~datetime.datetime` (a naive one in ``timezone``), for a date
        ``YYYY-MM-DD`` or a :class:`~datetime.date`. None if it is none of these."""
        if self.type in ("integer", "float"):
            return values.number_of(value)
        if self.type == "timestamp":
            if isinstance(value, str):
                return values.parse_instant(value.strip(), self.timezone or "UTC")
            if isinstance(value, dt.datetime):
                if value.tzinfo is None:
                    return Fraction(
                        values.local_seconds(value.replace(microsecond=0), self.timezone or "UTC")
                    ) + Fraction(value.microsecond, 10**6)
                return Fraction(int(value.timestamp() // 1)) + Fraction(value.microsecond, 10**6)
            return None
        if self.type == "date":
            if isinstance(value, str):
                d = values.parse_date(value.strip())
                return None if d is None else Fraction(d)
            if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
                return Fraction(value.toordinal() - _EPOCH_ORDINAL)
            return None
        return None

    def value(self, position: int) -> int | float | str | bool:
        """The value at ``position`` (the inverse of :meth:`position`): an int, a float
        (a float attribute's, exactly its decimal), text (a categorical's; a timestamp's
        ``2013-06-01T00:00:00Z`` in UTC; a date's ``2013-06-01``) or a bool."""
        if not 0 <= position < self.size:
            raise IndexError(position)
        if position == self.value_count:  # the missing value's own cell
            assert self.missing is not None
            return self.missing
        t = self.type
        if t == "integer":
            return self.min + position
        if t == "categorical":
            return self.values[position]
        if t == "boolean":
            return bool(position)
        x = self.number(position)
        if t == "float":
            return _json_number(x)
        if t == "timestamp":
            return values.instant_text(int(x))
        return values.date_text(int(x))

    def literal(self, position: int) -> str:
        """The value at ``position`` written as a query literal (``39.1``, ``'Male'``,
        ``TRUE``, ``'2013-06-01T00:00:00Z'``)."""
        if self.type == "categorical" and 0 <= position < self._count:
            literals = self._literals
            if not literals:  # two threads may both make it: the same tuple
                literals = tuple(_quoted(v) for v in self.values)
                object.__setattr__(self, "_literals", literals)
            return literals[position]
        v = self.value(position)  # the missing value's own cell: its marker
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return values.decimal_text(self.number(position))
        return _quoted(str(v))

    def read(self, text: str) -> int | None:
        """The position a value written in the data loads as (a float rounded to its
        step, ties to even; a timestamp truncated to its unit), or None if ``text`` is no
        value of the domain. Whitespace around it is the caller's to strip; missing
        values are the caller's too."""
        t = self.type
        if t == "categorical":
            return self._index.get(text)
        if t == "boolean":
            b = values.parse_boolean(text)
            return None if b is None else int(b)
        if t == "date":
            d = values.parse_date(text)
            return self._on_grid(None if d is None else Fraction(d), "floor")
        if t == "timestamp":
            return self._on_grid(values.parse_instant(text, self.timezone or "UTC"), "floor")
        x = values.parse_number(text)
        if t == "integer":
            return self._on_grid(x if x is not None and x.denominator == 1 else None, "floor")
        return self._on_grid(x, "even")

    def _on_grid(self, x: Fraction | None, rounding: str) -> int | None:
        if x is None:
            return None
        assert self._grid is not None
        lo, unit = self._grid
        k = x / unit
        n = math.floor(k) if rounding == "floor" else round(k)  # round: ties to even
        p = n - lo
        return p if 0 <= p < self._count else None

    def describe(self) -> str:
        """The domain as messages show it: ``[17, 90]``, ``[0, 800] in steps of 0.1``,
        ``[2013-01-01T00:00:00Z, 2014-01-01T00:00:00Z] by the hour``, ``{false, true}``,
        ``of 3 declared values``."""
        t = self.type
        if t == "integer":
            return f"[{self.min}, {self.max}]"
        if t == "float":
            lo, unit = self._grid  # type: ignore[misc]
            ends = (lo * unit, (lo + self._count - 1) * unit)
            shown = ", ".join(values.decimal_text(x) for x in ends)
            return f"[{shown}] in steps of {values.decimal_text(unit)}"
        if t == "timestamp":
            return f"[{self.min}, {self.max}] by the {self.unit or 'second'}"
        if t == "date":
            return f"[{self.min}, {self.max}]"
        if t == "boolean":
            return "{false, true}"
        return f"of {self.value_count} declared values"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form read by :meth:`Schema.from_dict`."""
        d: dict[str, Any] = {"name": self.name, "type": self.type}
        t = self.type
        if t == "integer":
            d.update(min=self.min, max=self.max)
        elif t == "float":
            lo, unit = self._grid  # type: ignore[misc]
            d.update(
                min=_json_number(lo * unit),
                max=_json_number((lo + self._count - 1) * unit),
                step=_json_number(unit),
            )
        elif t == "timestamp":
            d.update(min=self.min, max=self.max)
            if self.unit is not None:
                d["unit"] = self.unit
            if self.timezone is not None:
                d["timezone"] = self.timezone
        elif t == "date":
            d.update(min=self.min, max=self.max)
        elif t == "categorical":
            if self.ordered:
                d["ordered"] = True
            d["values"] = list(self.values)
        if self.missing is not None:
            d["missing"] = self.missing
        return d


_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class Schema:
    """A list of attributes with distinct names; the domain is their product."""

    attributes: tuple[Attribute, ...]
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    _names: tuple[str, ...] = field(default=(), compare=False, repr=False)
    _folded: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        attrs = tuple(self.attributes)
        if not attrs:
            raise SchemaError("a schema needs at least one attribute")
        index: dict[str, int] = {}
        for i, a in enumerate(attrs):
            if not isinstance(a, Attribute):
                raise SchemaError(f"attribute {i} is not an Attribute")
            if a.name in index:
                raise SchemaError(f"duplicate attribute name {a.name!r}")
            index[a.name] = i
        folded: dict[str, tuple[str, ...]] = {}
        for a in attrs:
            folded[a.name.lower()] = (*folded.get(a.name.lower(), ()), a.name)
        # Built once: a query's parse then costs what its own text costs, whatever the
        # schema's width (a 10,000-attribute schema is looked up, never scanned).
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_names", tuple(a.name for a in attrs))
        object.__setattr__(self, "_folded", folded)

    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def index(self, name: str) -> int:
        """Position of attribute ``name``; :class:`KeyError` if unknown."""
        return self._index[name]

    def attribute(self, name: str) -> Attribute:
        """The attribute called ``name``; :class:`KeyError` if unknown."""
        return self.attributes[self._index[name]]

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def named_like(self, name: str) -> tuple[str, ...]:
        """The attributes whose names equal ``name`` up to case."""
        return self._folded.get(name.lower(), ())

    def log10_size(self) -> float:
        """log10 of the number of points of the domain (it may not fit in a float)."""
        return sum(math.log10(a.size) for a in self.attributes)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schema:
        """Build a schema from its JSON form: ``{"attributes": [{...}, ...]}``."""
        if not isinstance(d, Mapping) or "attributes" not in d:
            raise SchemaError('a schema is an object with an "attributes" list')
        raw = d["attributes"]
        if not isinstance(raw, Sequence) or isinstance(raw, str):
            raise SchemaError('"attributes" must be a list')
        attrs = []
        for i, a in enumerate(raw):
            if not isinstance(a, Mapping):
                raise SchemaError(f"attribute {i} must be an object")
            name = a.get("name")
            if not isinstance(name, str) or not name:
                raise SchemaError(f"attribute {i} needs a non-empty string 'name'")
            kind = a.get("type")
            if kind not in TYPES:
                raise SchemaError(
                    f"attribute {name!r}: unknown type {kind!r} "
                    f"(expected one of {', '.join(repr(t) for t in TYPES)})"
                )
            extra = set(a) - {"name", "type"} - _KEYS[kind]
            for key in _REQUIRED[kind]:
                if key not in a:
                    needs = " and ".join(repr(k) for k in _REQUIRED[kind])
                    raise SchemaError(f"attribute {name!r}: {_ARTICLE[kind]} needs {needs}")
            if kind == "integer" and a.get("ordered", True) is not True:
                raise SchemaError(f"attribute {name!r}: integer attributes are ordered")
            fields: dict[str, Any] = {"missing": a.get("missing")}
            if "values_file" in a:
                raise SchemaError(
                    f"attribute {name!r}: 'values_file' is read from a schema file "
                    "(Schema.load, --schema FILE), relative to it"
                )
            if kind == "categorical":
                vals = a.get("values")
                if not isinstance(vals, Sequence) or isinstance(vals, str):
                    raise SchemaError(f"attribute {name!r}: 'values' must be a list of strings")
                ordered = a.get("ordered", False)
                if not isinstance(ordered, bool):
                    raise SchemaError(f"attribute {name!r}: 'ordered' must be true or false")
                fields.update(values=tuple(vals), ordered=ordered)
            else:
                fields.update(
                    {k: a[k] for k in ("min", "max", "step", "unit", "timezone") if k in a}
                )
            attr = Attribute(name, kind, **fields)
            if extra:
                raise SchemaError(f"attribute {name!r}: unknown key {sorted(extra)[0]!r}")
            attrs.append(attr)
        return cls(tuple(attrs))

    @classmethod
    def of(cls, schema: object) -> Schema:
        """A schema given as a :class:`Schema`, a path to its JSON file, or its
        dictionary (the form :meth:`from_dict` reads); anything else is an error."""
        if isinstance(schema, Schema):
            return schema
        if isinstance(schema, str | Path):
            return cls.load(schema)
        if isinstance(schema, Mapping):
            return cls.from_dict(schema)
        raise SchemaError(
            "schema must be a Schema, a path to a JSON schema or a dictionary, "
            f"got {type(schema).__name__}"
        )

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema from a JSON file; errors name the file."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as err:
            raise SchemaError(f"{p}: cannot read schema: {err.strerror or err}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as err:
            raise SchemaError(f"{p}:{err.lineno}: invalid JSON: {err.msg}") from None
        try:
            return cls.from_dict(_with_values_files(d, p.parent))  # type: ignore[arg-type]
        except SchemaError as err:
            raise SchemaError(f"{p}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form read by :meth:`from_dict`."""
        return {"attributes": [a.to_dict() for a in self.attributes]}


#: The most bytes a categorical's values file may hold.
MAX_VALUES_FILE = 64 * 1024 * 1024


def _with_values_files(d: object, folder: Path) -> object:
    """A schema's JSON with each categorical's ``"values_file"`` (a file beside the
    schema, one value per line, UTF-8) read into its ``"values"``: a long public list
    (airport codes, countries) kept out of the schema's own text. The schema as the
    ledger records it has the values inline."""
    if not isinstance(d, Mapping) or not isinstance(d.get("attributes"), list):
        return d
    attrs = []
    for a in d["attributes"]:
        if isinstance(a, Mapping) and "values_file" in a:
            name = a.get("name")
            if "values" in a:
                raise SchemaError(f"attribute {name!r}: give 'values' or 'values_file', not both")
            rel = a["values_file"]
            if not isinstance(rel, str) or not rel:
                raise SchemaError(f"attribute {name!r}: 'values_file' must be a file name")
            path = folder / rel
            try:
                if path.stat().st_size > MAX_VALUES_FILE:
                    raise SchemaError(f"attribute {name!r}: {path} is over {MAX_VALUES_FILE} bytes")
                text = path.read_text(encoding="utf-8")
            except OSError as err:
                raise SchemaError(
                    f"attribute {name!r}: cannot read values file {path}: {err.strerror or err}"
                ) from None
            except UnicodeDecodeError:
                raise SchemaError(f"attribute {name!r}: values file {path} is not UTF-8") from None
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()  # the final newline
            a = {k: v for k, v in a.items() if k != "values_file"}
            a["values"] = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        attrs.append(a)
    return {**d, "attributes": attrs}
