"""Parts of a time: ``year(t)``, ``month(t)``, ``day(t)``, ``weekday(t)``, ``hour(t)``.

A part is a function of a timestamp's or a date's value, so the set of values with a
given part (``month(time_hour) = 6``: every instant of June, of every year in the
domain) is a union of intervals of the attribute's positions. A predicate on a part is
therefore an ordinary predicate on the attribute, charged on the attribute's own points,
and a group or a histogram cell of a part is a union of intervals too: nothing below
this module knows parts exist. Parts are told in the attribute's time zone (a
timestamp's ``timezone``, UTC by default; a date has none), each position by the local
time at its start; ``weekday`` is ISO 8601's (1 = Monday .. 7 = Sunday).

A *group term* is what ``by=`` and macros take: an attribute name, or a part of one
(``month(time_hour)``). Its groups are the attribute's values, or the part's values
(every one of its public domain, empty or not), and, for an attribute that may be
missing, its missing value last.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcurator import deadlines
from dpcurator.errors import QueryError, TooLarge
from dpcurator.queries import values
from dpcurator.queries.predicates import (
    IntervalSet,
    intersect,
    normalize,
    render_coverage,
    render_name,
)
from dpcurator.queries.schema import Attribute, Schema

__all__ = ["MAX_SEGMENTS", "PARTS", "GroupTerm", "Part", "group_term", "part_of", "table_cell"]

#: The parts of a time, and the range of each one's values.
PARTS: dict[str, tuple[int, int] | None] = {
    "year": None,  # the years of the domain
    "month": (1, 12),
    "day": (1, 31),
    "weekday": (1, 7),
    "hour": (0, 23),
}
#: The most pieces one part may cut its attribute into (an hour of a timestamp over
#: a century would be 876,600): computed before they are built.
MAX_SEGMENTS = 1_000_000
_PERIOD_SECONDS = {
    "year": 365 * 86400,
    "month": 28 * 86400,
    "day": 86400,
    "weekday": 86400,
    "hour": 3600,
}
#: ``part(inner)``: the inner text is taken whole (no nested quantifiers: linear time).
_TERM = re.compile(r"([A-Za-z]+)[ \t]*\((.*)\)", re.DOTALL)


@dataclass(frozen=True)
class Part:
    """A part of a timestamp or date attribute: its values ``lo .. hi`` and the pieces
    it cuts the attribute's declared positions into (``starts[i]`` to ``starts[i + 1]``,
    the last to ``value_count``, holding part value ``values[i]``)."""

    attribute: Attribute
    name: str
    lo: int
    hi: int
    starts: np.ndarray
    values: np.ndarray

    @property
    def text(self) -> str:
        """``month(time_hour)``: how queries and labels write it."""
        return f"{self.name}({render_name(self.attribute.name)})"

    @property
    def value_count(self) -> int:
        return self.hi - self.lo + 1

    def coverage(self, wanted: Sequence[int]) -> IntervalSet:
        """The positions whose part is one of ``wanted`` (never the missing value)."""
        if len(wanted) == 1:
            return self.of_value(int(wanted[0]))
        keep = np.isin(self.values, np.asarray(list(wanted), dtype=np.int64))
        ends = np.append(self.starts[1:], self.attribute.value_count)
        return normalize(zip(self.starts[keep].tolist(), ends[keep].tolist(), strict=True))

    def of_value(self, value: int) -> IntervalSet:
        """The positions whose part is ``value`` (each part value's computed once: a
        histogram of ``hour(t)`` asks for all 24, again at every request)."""
        cache: dict[int, IntervalSet] = self.__dict__.setdefault("_of_value", {})
        if value not in cache:
            keep = self.values == value
            ends = np.append(self.starts[1:], self.attribute.value_count)
            cache[value] = normalize(
                zip(self.starts[keep].tolist(), ends[keep].tolist(), strict=True)
            )
        return cache[value]

    def value_range(self, low: int, high: int) -> IntervalSet:
        """The positions whose part lies in ``[low, high]``."""
        keep = (self.values >= low) & (self.values <= high)
        ends = np.append(self.starts[1:], self.attribute.value_count)
        return normalize(zip(self.starts[keep].tolist(), ends[keep].tolist(), strict=True))

    def group_of(self, positions: np.ndarray) -> np.ndarray:
        """The part value minus ``lo`` of each declared position (an int64 array)."""
        seg = np.searchsorted(self.starts, np.asarray(positions, np.int64), side="right") - 1
        return self.values[seg] - self.lo


def part_of(attr: Attribute, name: str) -> Part:
    """The part ``name`` of ``attr`` (a timestamp, or a date but for ``hour``), its
    pieces computed once per attribute and part."""
    name = name.lower()
    if name not in PARTS:
        raise QueryError(f"{name}(...) is not a part of a time; parts: {', '.join(PARTS)}")
    if attr.type not in ("timestamp", "date"):
        raise QueryError(
            f"{name}({attr.name}) needs a timestamp or a date; {attr.name!r} is {attr.type}"
        )
    if name == "hour" and attr.type == "date":
        raise QueryError(f"hour({attr.name}): a date has no hours")
    return _part(attr, name)


@functools.lru_cache(maxsize=256)
def _part(attr: Attribute, name: str) -> Part:
    grid = attr.grid
    assert grid is not None
    lo, unit = grid
    first, last = lo * unit, (lo + attr.value_count - 1) * unit
    span = (last - first) * (86400 if attr.type == "date" else 1)
    pieces = math.floor(span / _PERIOD_SECONDS[name]) + 2
    if pieces > MAX_SEGMENTS:
        raise TooLarge(
            f"{name}({attr.name}) would cut {attr.name!r} into about {pieces:,} pieces, over "
            f"the limit {MAX_SEGMENTS:,}; use a narrower domain"
        )
    if attr.type == "date":
        starts, vals = _date_pieces(int(first), int(last), name)
        positions = [max(0, s - lo) for s in starts]
    else:
        zone = attr.timezone or "UTC"
        starts, vals = _instant_pieces(int(first), int(last), name, zone)
        positions = [max(0, math.ceil(Fraction(s) / unit) - lo) for s in starts]
    # drop pieces left empty (a local hour skipped by a change of clocks)
    kept_starts: list[int] = []
    kept_vals: list[int] = []
    for i, p in enumerate(positions):
        end = positions[i + 1] if i + 1 < len(positions) else attr.value_count
        if end > p:
            kept_starts.append(p)
            kept_vals.append(vals[i])
    fixed = PARTS[name]
    if fixed is None:
        p_lo, p_hi = min(kept_vals), max(kept_vals)
    else:
        p_lo, p_hi = fixed
    return Part(
        attr,
        name,
        p_lo,
        p_hi,
        np.asarray(kept_starts, dtype=np.int64),
        np.asarray(kept_vals, dtype=np.int64),
    )


def _value(name: str, d: dt.date | dt.datetime) -> int:
    if name == "year":
        return d.year
    if name == "month":
        return d.month
    if name == "day":
        return d.day
    if name == "weekday":
        return d.isoweekday()
    assert isinstance(d, dt.datetime)
    return d.hour


def _period_start(name: str, d: dt.datetime) -> dt.datetime:
    if name == "year":
        return d.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if name == "month":
        return d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if name in ("day", "weekday"):
        return d.replace(hour=0, minute=0, second=0, microsecond=0)
    return d.replace(minute=0, second=0, microsecond=0)


def _next(name: str, d: dt.datetime) -> dt.datetime:
    if name == "year":
        return d.replace(year=d.year + 1)
    if name == "month":
        return d.replace(year=d.year + d.month // 12, month=d.month % 12 + 1)
    if name in ("day", "weekday"):
        return d + dt.timedelta(days=1)
    return d + dt.timedelta(hours=1)


def _instant_pieces(first: int, last: int, name: str, zone: str) -> tuple[list[int], list[int]]:
    """(start in seconds, part value) of every local period from the one holding
    ``first`` to the one holding ``last``: naive local arithmetic, each start read back
    in the zone (``fold=0``)."""
    local = values.local_time(first, zone).replace(tzinfo=None)
    period = _period_start(name, local)
    starts: list[int] = []
    vals: list[int] = []
    while True:
        if len(starts) % 4096 == 0:
            deadlines.check()
        s = values.local_seconds(period, zone)
        if s > last:
            break
        starts.append(s)
        vals.append(_value(name, period))
        period = _next(name, period)
    return starts, vals


def _date_pieces(first: int, last: int, name: str) -> tuple[list[int], list[int]]:
    """(start in days, part value) of every period over the days ``first .. last``."""
    day = values.date_of(first)
    if name == "year":
        day = day.replace(month=1, day=1)
    elif name == "month":
        day = day.replace(day=1)
    starts: list[int] = []
    vals: list[int] = []
    epoch = dt.date(1970, 1, 1).toordinal()
    while day.toordinal() - epoch <= last:
        if len(starts) % 4096 == 0:
            deadlines.check()
        starts.append(day.toordinal() - epoch)
        vals.append(_value(name, day))
        if name == "year":
            day = day.replace(year=day.year + 1)
        elif name == "month":
            day = day.replace(year=day.year + day.month // 12, month=day.month % 12 + 1)
        else:
            day = day + dt.timedelta(days=1)
    return starts, vals


@dataclass(frozen=True)
class GroupTerm:
    """What one ``by=`` entry (or one axis of a marginal or histogram) groups by: an
    attribute's values, or a part's. ``groups`` counts them (every one of the public
    domain, and the attribute's missing value last when it may be missing)."""

    attribute: Attribute
    part: Part | None = None

    @property
    def text(self) -> str:
        return self.part.text if self.part is not None else self.attribute.name

    @property
    def groups(self) -> int:
        if self.part is None:
            return self.attribute.size
        return self.part.value_count + (1 if self.attribute.missing_cell else 0)

    def coverage(self, g: int) -> IntervalSet:
        """Group ``g``'s positions on the attribute."""
        attr = self.attribute
        if self.part is None:
            return ((g, g + 1),)
        if g == self.part.value_count:  # the missing value's own cell
            m = attr.value_count
            return ((m, m + 1),)
        return self.part.coverage([self.part.lo + g])

    def label(self, g: int) -> str:
        """Group ``g`` as query text: ``sex = 'Male'``, ``month(time_hour) = 6``."""
        if self.part is None or g == self.part.value_count:
            return render_coverage(self.attribute, self.coverage(g))
        return f"{self.part.text} = {self.part.lo + g}"

    def value(self, g: int) -> int | float | str | bool | None:
        """Group ``g``'s value: the attribute's value, the part's, or None (missing)."""
        if self.part is None:
            if self.attribute.missing_cell and g == self.attribute.value_count:
                return None
            return self.attribute.value(g)
        return None if g == self.part.value_count else self.part.lo + g

    def group_of(self, codes: np.ndarray) -> np.ndarray:
        """The group of each stored code (a position of the attribute)."""
        codes = np.asarray(codes, np.int64)
        if self.part is None:
            return codes
        out = np.empty(codes.shape, np.int64)
        declared = codes < self.attribute.value_count
        out[declared] = self.part.group_of(codes[declared])
        out[~declared] = self.part.value_count
        return out


def group_term(schema: Schema, text: object, what: str = "by") -> GroupTerm:
    """The group term written as ``text``: an attribute name (which wins, even if it
    looks like a part), or ``part(attribute)``; errors speak of ``what``."""
    if not isinstance(text, str):
        raise QueryError(f"{what} must be an attribute name (text), got {type(text).__name__}")
    if text in schema:
        return GroupTerm(schema.attribute(text))
    m = _TERM.fullmatch(text.strip())
    if m is None or m.group(1).lower() not in PARTS:
        raise QueryError(f"unknown attribute {_shown(text)} in {what}")
    inner = m.group(2).strip()
    quoted = len(inner) >= 2 and inner[0] == inner[-1] == '"'
    name = inner[1:-1].replace('""', '"') if quoted else inner
    if name not in schema:
        raise QueryError(f"unknown attribute {_shown(name)} in {what}")
    return GroupTerm(schema.attribute(name), part_of(schema.attribute(name), m.group(1)))


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def table_cell(
    terms: Sequence[GroupTerm], groups: Sequence[int]
) -> tuple[dict[str, IntervalSet], str]:
    """The cell of a table (a histogram, a marginal) over group terms, one group of each:
    its coverage on each attribute (two parts of one attribute intersected; empty where
    they never meet, as day 31 of February) and its label (``month(t) = 2 AND day(t) =
    31``)."""
    covs: dict[str, IntervalSet] = {}
    for term, g in zip(terms, groups, strict=True):
        name, cov = term.attribute.name, term.coverage(g)
        covs[name] = intersect(covs[name], cov) if name in covs else cov
    return covs, " AND ".join(t.label(g) for t, g in zip(terms, groups, strict=True))
