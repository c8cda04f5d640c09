"""Predicates, predicate queries and their coverage (Smith et al., PoPETs 2022).

Following Smith et al., a *predicate* on an attribute is a set of its values (its
*coverage*). A :class:`Query` here is a conjunction of predicates on distinct attributes
(a *box*): its coverage is the product of the per-attribute coverages, and attributes it
does not mention carry a tautology. Any other boolean combination is a union of disjoint
boxes (:mod:`dpcurator.queries.boolean`). A coverage is stored as sorted, disjoint, non-adjacent
half-open intervals of value positions, so a predicate like ``age != 40`` on a huge
integer range costs two intervals, not a billion values.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dpcurator.errors import QueryError
from dpcurator.queries.schema import Attribute, Schema

Interval = tuple[int, int]
IntervalSet = tuple[Interval, ...]


def normalize(intervals: Iterable[Interval]) -> IntervalSet:
    """Sort, drop empties and merge overlapping or touching intervals."""
    out: list[list[int]] = []
    for s, e in sorted((s, e) for s, e in intervals if s < e):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Intersection of two normalised interval sets (linear merge; every set operation
    of a parse and of the overlap checks runs through it, so it reads each interval
    once)."""
    if not a or not b:
        return ()
    out: list[Interval] = []
    i = j = 0
    na, nb = len(a), len(b)
    s1, e1 = a[0]
    s2, e2 = b[0]
    while True:
        s = s1 if s1 > s2 else s2
        if e1 < e2:
            if s < e1:
                out.append((s, e1))
            i += 1
            if i == na:
                break
            s1, e1 = a[i]
        else:
            if s < e2:
                out.append((s, e2))
            j += 1
            if j == nb:
                break
            s2, e2 = b[j]
    return tuple(out)


def union(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Union of two interval sets."""
    return normalize(a + b)


def complement(a: IntervalSet, size: int) -> IntervalSet:
    """Complement of ``a`` inside ``[0, size)``."""
    out: list[Interval] = []
    prev = 0
    for s, e in a:
        if s > prev:
            out.append((prev, s))
        prev = e
    if prev < size:
        out.append((prev, size))
    return tuple(out)


def contains(a: IntervalSet, pos: int) -> bool:
    """Whether position ``pos`` is in ``a``."""
    return any(s <= pos < e for s, e in a)


def measure(a: IntervalSet) -> int:
    """Number of positions in ``a``."""
    return sum(e - s for s, e in a)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _canonical(coverage: tuple, size: int) -> bool:
    """Whether a coverage is already in canonical form: a tuple of ``(int, int)`` tuples
    with ``previous end < start < end <= size`` (one pass, no sorting: the form every
    coverage built here has, checked as fast as it can be read)."""
    prev = -1
    for iv in coverage:
        if type(iv) is not tuple or len(iv) != 2:
            return False
        s, e = iv
        if type(s) is not int or type(e) is not int or not prev < s < e <= size:
            return False
        prev = e
    return True


def _checked_coverage(attr: Attribute, coverage: object) -> IntervalSet:
    """A hand-built coverage, validated and normalised.

    Queries also arrive as objects built by hand (or over the network), so nothing about
    a coverage is trusted: every interval must be a pair of integers ``0 <= start < end
    <= size``; a reversed, empty or out-of-domain interval is an error rather than a
    silent contradiction, because the overlap index, the backends and the ledger all
    read the coverage and must agree on it.
    """
    if isinstance(coverage, str | bytes) or not isinstance(coverage, tuple | list):
        raise QueryError(
            f"coverage of {attr.name!r} must be a tuple of (start, end) intervals, "
            f"got {type(coverage).__name__}"
        )
    size = attr.size
    if type(coverage) is tuple and _canonical(coverage, size):
        return coverage  # type: ignore[return-value]
    out: list[Interval] = []
    for iv in coverage:
        if not isinstance(iv, tuple | list) or len(iv) != 2 or not all(_is_int(v) for v in iv):
            raise QueryError(
                f"coverage of {attr.name!r}: an interval is a pair of integers, got {iv!r}"
            )
        s, e = iv
        if s >= e:
            raise QueryError(
                f"coverage of {attr.name!r}: interval {tuple(iv)} is empty or reversed"
            )
        if s < 0 or e > size:
            raise QueryError(
                f"coverage of {attr.name!r}: interval {tuple(iv)} leaves the domain "
                f"[0, {size}) of value positions"
            )
        out.append((int(s), int(e)))
    return normalize(out)


@dataclass(frozen=True)
class Predicate:
    """The coverage of a query on one attribute: value positions, as intervals.

    Built by hand or by the parser, the coverage is validated and normalised on
    construction (sorted, disjoint, non-adjacent, inside the domain).
    """

    attribute: Attribute
    coverage: IntervalSet

    def __post_init__(self) -> None:
        if not isinstance(self.attribute, Attribute):
            raise QueryError(f"a predicate needs an Attribute, got {type(self.attribute).__name__}")
        object.__setattr__(self, "coverage", _checked_coverage(self.attribute, self.coverage))

    def covers(self, value: int | float | str) -> bool:
        """Whether the attribute value ``value`` satisfies the predicate."""
        try:
            pos = self.attribute.position(value)
        except KeyError:
            return False
        return contains(self.coverage, pos)

    @property
    def is_tautology(self) -> bool:
        return self.coverage == ((0, self.attribute.size),)

    @property
    def is_contradiction(self) -> bool:
        return not self.coverage

    def to_text(self) -> str:
        """Query-language text that parses back to this predicate."""
        return render_coverage(self.attribute, self.coverage)


def _lit(attr: Attribute, pos: int) -> str:
    return attr.literal(pos)


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: Words of the query language; a column named like one must be written in double quotes.
KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "TRUE", "FALSE", "LIKE"})
#: Words a bare column name may not be (``total`` is the whole-domain query; ``select``
#: after a parenthesis is read as the start of a sub-query, and refused).
_RESERVED = KEYWORDS | {"TOTAL", "SELECT"}


@functools.lru_cache(maxsize=4096)
def render_name(name: str) -> str:
    """An attribute name as query text: bare when it can be, else in double quotes (a
    double quote inside doubled, as in SQL). Cached: a schema has few names, and a
    query's text names them once per box."""
    if _PLAIN_NAME.fullmatch(name) and name.upper() not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def render_coverage(attr: Attribute, cov: IntervalSet) -> str:
    """Shortest-ish text for a coverage: ``=``, ``BETWEEN``, ``IN``, ``NOT IN``, ``IS [NOT]
    NULL`` or an OR of them; it parses back to ``cov``."""
    name = render_name(attr.name)
    if not cov:
        return f"{name} IN ()"
    if not attr.missing_cell:
        return _render_values(attr, cov, attr.size)
    # The missing value's own cell (the last position) is only ever named by IS NULL:
    # ranges stop before it, and NOT IN / != take it in.
    m = attr.value_count
    values, null = intersect(cov, ((0, m),)), contains(cov, m)
    if not values:
        return f"{name} IS NULL"
    if values == ((0, m),):
        return f"{name} IS NOT NULL" if not null else f"({name} IS NULL OR {name} IS NOT NULL)"
    n = measure(values)
    if not attr.ordered and 2 * n > m:  # NOT IN (the others): the missing value included
        text = _render_values(attr, union(values, ((m, m + 1),)), attr.size)
        return text if null else f"({text} AND {name} IS NOT NULL)"
    alternatives = [f"{name} IS NULL"] if null else []
    return _render_values(attr, values, m, complements=False, alternatives=alternatives)


def _render_values(
    attr: Attribute,
    cov: IntervalSet,
    size: int,
    *,
    complements: bool = True,
    alternatives: Sequence[str] = (),
) -> str:
    """``cov`` (declared values only, or a whole domain of ``size`` positions) as text,
    ORed with ``alternatives``; ``complements=False`` never uses ``NOT IN`` (which would
    take the missing value's cell in)."""
    name = render_name(attr.name)
    n = measure(cov)
    if not attr.ordered:
        text = _render_set(attr, cov, size, n, complements)
        return f"({' OR '.join([text, *alternatives])})" if alternatives else text
    parts = []
    for s, e in cov:
        if e - s == 1:
            parts.append(f"{name} = {_lit(attr, s)}")
        elif s == 0 and e == size:
            parts.append(f"{name} BETWEEN {_lit(attr, 0)} AND {_lit(attr, size - 1)}")
        elif s == 0:
            parts.append(f"{name} <= {_lit(attr, e - 1)}")
        elif e == size:
            parts.append(f"{name} >= {_lit(attr, s)}")
        else:
            parts.append(f"{name} BETWEEN {_lit(attr, s)} AND {_lit(attr, e - 1)}")
    parts += alternatives
    if len(parts) == 1:
        return parts[0]
    return "(" + " OR ".join(parts) + ")"


def _render_set(attr: Attribute, cov: IntervalSet, size: int, n: int, complements: bool) -> str:
    """An unordered attribute's coverage: ``=``, ``IN``, ``!=`` or ``NOT IN``."""
    name = render_name(attr.name)
    if n == 1:
        return f"{name} = {_lit(attr, cov[0][0])}"
    if complements and 2 * n > size:
        comp = complement(cov, size)
        vals = [_lit(attr, p) for s, e in comp for p in range(s, e)]
        return f"{name} != {vals[0]}" if len(vals) == 1 else f"{name} NOT IN ({', '.join(vals)})"
    vals = [_lit(attr, p) for s, e in cov for p in range(s, e)]
    return f"{name} IN ({', '.join(vals)})"


@dataclass(frozen=True)
class Query:
    """A predicate query: a conjunction of predicates on distinct attributes.

    ``predicates`` holds only the non-tautological ones, in schema order; a query with
    none covers the whole domain (``total``), one with a contradiction covers nothing
    (valid: its count is 0). ``text`` and ``line`` record where it came from.
    """

    schema: Schema = field(compare=False, repr=False)
    predicates: tuple[Predicate, ...]
    text: str = field(default="", compare=False)
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Validate and normalise, whoever built the query.

        Every predicate's attribute must be the schema's attribute of that name (not
        one from another schema), each attribute may be constrained once, and the
        predicates are kept in schema order without tautologies: two queries with the
        same coverage are then equal, whatever their origin.
        """
        schema = self.schema
        if not isinstance(schema, Schema):
            raise QueryError(f"a query needs a Schema, got {type(schema).__name__}")
        preds = self.predicates
        if not isinstance(preds, tuple):
            if isinstance(preds, str | bytes) or not isinstance(preds, list):
                raise QueryError(
                    f"a query's predicates must be a tuple of Predicate, got {type(preds).__name__}"
                )
            preds = tuple(preds)
        seen: dict[int, Predicate] = {}
        for p in preds:
            if not isinstance(p, Predicate):
                raise QueryError(f"a query's predicates must be Predicate objects, got {p!r}")
            name = p.attribute.name
            if name not in schema:
                raise QueryError(f"predicate on {name!r}, which is not an attribute of the schema")
            j = schema.index(name)
            if p.attribute is not schema.attributes[j] and p.attribute != schema.attributes[j]:
                raise QueryError(
                    f"the predicate on {name!r} was built for another schema's attribute"
                )
            if j in seen:
                raise QueryError(
                    f"two predicates on {name!r}: combine them into one coverage "
                    "(their intersection)"
                )
            seen[j] = p
        canonical = tuple(seen[j] for j in sorted(seen) if not seen[j].is_tautology)
        if any(p.is_contradiction for p in canonical):  # every empty query is the same
            canonical = (Predicate(schema.attributes[0], ()),)
        if canonical != preds:
            object.__setattr__(self, "predicates", canonical)
        if not isinstance(self.text, str):
            raise QueryError(f"a query's text must be a string, got {type(self.text).__name__}")
        if self.line is not None and not _is_int(self.line):
            raise QueryError(f"a query's line must be an integer, got {self.line!r}")

    @classmethod
    def from_coverages(
        cls,
        schema: Schema,
        coverages: dict[str, IntervalSet],
        text: str = "",
        line: int | None = None,
        *,
        render: bool = True,
    ) -> Query:
        """Build a query from attribute name -> coverage (tautologies are dropped); with
        no ``text``, its canonical text is rendered, unless ``render`` is False (the
        boxes of a union: ``str()`` still renders them on demand)."""
        for name in coverages:
            if name not in schema:
                raise QueryError(f"unknown attribute {name!r}")
        preds = []
        for j in sorted(schema.index(name) for name in coverages):  # never the whole schema
            attr = schema.attributes[j]
            cov = coverages[attr.name]
            if type(cov) is not tuple or not _canonical(cov, attr.size):
                cov = normalize(cov)
            if cov != ((0, attr.size),):
                preds.append(Predicate(attr, cov))
        q = cls(schema, tuple(preds), text, line)
        if not text and render:
            object.__setattr__(q, "text", q.to_text())
        return q

    @property
    def is_empty(self) -> bool:
        """True if the query covers no point of the domain (a contradiction)."""
        return any(not p.coverage for p in self.predicates)

    @property
    def boxes(self) -> tuple[Query, ...]:
        """The disjoint boxes the query covers: itself (none if it is a contradiction).
        A :class:`~dpcurator.queries.boolean.BooleanQuery` has several."""
        return () if self.is_empty else (self,)

    @property
    def attributes(self) -> tuple[str, ...]:
        """Names of the attributes the query constrains."""
        return tuple(p.attribute.name for p in self.predicates)

    def coverage(self, name: str) -> IntervalSet:
        """Coverage on attribute ``name`` (the whole domain if unconstrained)."""
        for p in self.predicates:
            if p.attribute.name == name:
                return p.coverage
        return ((0, self.schema.attribute(name).size),)

    def covers(self, point: dict[str, int | float | str]) -> bool:
        """Whether the domain point ``point`` (attribute -> value) satisfies the query."""
        return all(p.covers(point[p.attribute.name]) for p in self.predicates)

    def to_text(self) -> str:
        """Canonical query text; ``parse_query(q.to_text(), schema) == q``."""
        if not self.predicates:
            return "total"
        return " AND ".join(p.to_text() for p in self.predicates)

    def __str__(self) -> str:
        return self.text or self.to_text()


def disjoint(q1: Query, q2: Query) -> bool:
    """Whether two queries share no point. Two conjunctions are disjoint iff on some
    attribute their coverages are (polynomial in the number of attributes; Smith et al.,
    PoPETs 2022); two unions of boxes iff every pair of their boxes is."""
    if q1.is_empty or q2.is_empty:
        return True
    if not isinstance(q1, Query) or not isinstance(q2, Query):
        return all(_boxes_disjoint(a, b) for a in q1.boxes for b in q2.boxes)
    return _boxes_disjoint(q1, q2)


def _boxes_disjoint(q1: Query, q2: Query) -> bool:
    c2 = {p.attribute.name: p.coverage for p in q2.predicates}
    for p in q1.predicates:
        other = c2.get(p.attribute.name)
        if other is not None and not intersect(p.coverage, other):
            return True
    return False


def common_point(queries: Sequence[Query]) -> dict[str, int | float | str] | None:
    """A point covered by every query, or None. A set of queries has a common point iff
    on every attribute the coverages of all of them intersect (Smith et al., PoPETs 2022)."""
    if not queries:
        raise ValueError("common_point needs at least one query")
    if any(not isinstance(q, Query) for q in queries):
        # unions: some choice of one box per query must meet (a small search)
        for choice in itertools.product(*(q.boxes for q in queries)):
            found = common_point(list(choice))
            if found is not None:
                return found
        return None
    schema = queries[0].schema
    point: dict[str, int | float | str] = {}
    for attr in schema.attributes:
        cov: IntervalSet = ((0, attr.size),)
        for q in queries:
            for p in q.predicates:
                if p.attribute.name == attr.name:
                    cov = intersect(cov, p.coverage)
        if not cov:
            return None
        point[attr.name] = attr.value(cov[0][0])
    return point
