"""What a request to the curator may contain: validation and normalisation, no charge.

Every argument of every request is hostile until checked here: query text and
hand-built :class:`~dpcurator.queries.Query` objects, bins, clipping bounds, attribute
and analyst names, lists that may be generators. Each function either returns a value
the curator can use as is, or raises a one-line :class:`~dpcurator.errors.DpCuratorError`
subclass. Nothing here reads data or touches the ledger, so a refused request has
changed nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dpcurator.errors import InvalidParameter, QueryError, TooLarge
from dpcurator.queries import Query, Schema, parse_query
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.boxes import MAX_BOXES
from dpcurator.queries.histogram import cell_count, histogram_cells
from dpcurator.queries.predicates import IntervalSet, Predicate
from dpcurator.queries.values import decimal_places, decimal_text, number_of

#: The longest query text accepted (characters).
MAX_QUERY_TEXT = 20_000
#: The most cells one histogram or marginal may have (by default).
MAX_CELLS = 1_000_000
#: The most queries one batch release or workload may have (by default).
MAX_BATCH = 1_000_000
#: The most cells one whole request may ask for, every line of it together (by default).
MAX_REQUEST_CELLS = 1_000_000


@dataclass(frozen=True)
class RequestLimits:
    """How much work one request may ask for: the cells of one histogram or marginal
    (or the groups of one statistic), the queries of one batch or workload (macros
    counted as they would expand, before anything is built), the ledger rows (charges)
    one request may write, and the cells of the whole request, every line together
    (``max_request_cells``: a workload of many lines each within ``max_cells`` is still
    one request). A server sets them lower than a custodian's own session, so that a
    request of a few bytes cannot keep it busy for minutes. A request over a limit is
    refused with :class:`~dpcurator.errors.TooLarge` naming the limit, before any data
    is read or anything is charged."""

    max_cells: int = MAX_CELLS
    max_queries: int = MAX_BATCH
    max_charges: int = MAX_BATCH
    max_request_cells: int = MAX_REQUEST_CELLS

    def __post_init__(self) -> None:
        for name in ("max_cells", "max_queries", "max_charges", "max_request_cells"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10**8:
                raise InvalidParameter(f"{name} must be an integer in [1, 10^8], got {v!r}")

    @property
    def cell_cap(self) -> tuple[int, str]:
        """The most cells one table, statistic or line may have, and the name of the
        limit that says so: ``max_cells``, or ``max_request_cells`` when that is smaller
        (a request of one line is the whole request)."""
        if self.max_request_cells < self.max_cells:
            return self.max_request_cells, "max_request_cells"
        return self.max_cells, "max_cells"

    def check_request(self, cells: int, what: str) -> None:
        """Refuse a request asking for more than ``max_request_cells`` cells in all
        (counted from the public request alone, before anything is built, read or
        charged). ``what`` names the request ("this workload")."""
        if cells > self.max_request_cells:
            raise TooLarge(
                f"{what} asks for {cells} cells in all, over the limit "
                f"max_request_cells = {self.max_request_cells}; split it"
            )


#: The longest analyst name.
MAX_NAME = 200


def canonical_query(query: object, schema: Schema) -> Query | BooleanQuery:
    """The query a request means, over ``schema``'s own attributes.

    Text is parsed. A :class:`Query` (or :class:`BooleanQuery`) object is rebuilt from
    its coverages through the validating constructors, after checking it was made for
    this very schema (a boolean query's boxes are made disjoint again, whatever was done
    to the object); its text is kept only if it parses back to the same coverage, so
    that the ledger and every label describe what is really charged.
    """
    if query is None:
        return Query.from_coverages(schema, {})
    if isinstance(query, str):
        if len(query) > MAX_QUERY_TEXT:
            raise TooLarge(f"query text of {len(query)} characters exceeds {MAX_QUERY_TEXT}")
        return parse_query(query, schema)
    if not isinstance(query, Query | BooleanQuery):
        raise QueryError(f"a query must be text or a Query, got {type(query).__name__}")
    if query.schema is not schema and query.schema != schema:
        raise QueryError("the query was built for another schema than this table's")
    q: Query | BooleanQuery
    if isinstance(query, BooleanQuery):
        parts = query.boxes
        if not isinstance(parts, tuple) or not all(isinstance(b, Query) for b in parts):
            raise QueryError("a boolean query's boxes must be a tuple of Query objects")
        if len(parts) > MAX_BOXES:
            raise TooLarge(f"a boolean query of {len(parts)} boxes exceeds {MAX_BOXES}")
        q = BooleanQuery.from_boxes(schema, [_box(b, schema) for b in parts])
    else:
        q = _box(query, schema)
    text = query.text
    if isinstance(text, str) and text and len(text) <= MAX_QUERY_TEXT:
        try:
            if parse_query(text, schema) == q:
                return _with_text(q, text.strip())
        except QueryError:
            pass
    return q


def _box(query: Query, schema: Schema) -> Query:
    """A conjunction rebuilt on ``schema``'s attributes, with its canonical text: an
    object whose fields were changed after construction is checked again here."""
    if query.schema is not schema and query.schema != schema:
        raise QueryError("the query was built for another schema than this table's")
    preds = query.predicates
    if not isinstance(preds, tuple) or not all(isinstance(p, Predicate) for p in preds):
        raise QueryError("a query's predicates must be a tuple of Predicate objects")
    rebuilt = []
    for p in preds:
        name = attribute_name(getattr(p.attribute, "name", None), schema)
        rebuilt.append(Predicate(schema.attribute(name), p.coverage))
    q = Query(schema, tuple(rebuilt))
    return Query(schema, q.predicates, q.to_text())


def _with_text(q: Query | BooleanQuery, text: str) -> Query | BooleanQuery:
    if isinstance(q, BooleanQuery):
        return BooleanQuery.from_boxes(q.schema, q.boxes, text=text)
    return Query(q.schema, q.predicates, text)


def attribute_name(name: object, schema: Schema, what: str = "attribute") -> str:
    if not isinstance(name, str):
        raise QueryError(f"{what} must be an attribute name (text), got {type(name).__name__}")
    if name not in schema:
        raise QueryError(f"unknown attribute {name!r}")
    return name


def term_text(term: object) -> str:
    """An attribute or a part of a time (``month(time_hour)``) as a request names it:
    text, checked by :func:`~dpcurator.queries.parts.group_term`."""
    if not isinstance(term, str):
        raise QueryError(f"attribute must be an attribute name (text), got {type(term).__name__}")
    return term


def bounded_list(items: object, limit: int, what: str, limit_name: str = "") -> list[Any]:
    """A list from any iterable (generators included), refusing more than ``limit`` items
    without consuming more than ``limit + 1`` of them."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidParameter(f"{what} must be a list, got {type(items).__name__}")
    out = list(itertools.islice(items, limit + 1))
    if len(out) > limit:
        raise TooLarge(f"{what} has more than {limit} items (the limit {limit_name or what})")
    return out


def integer(value: object, name: str) -> int:
    """An exact integer: ints, or floats/numpy numbers with an integral finite value."""
    if isinstance(value, bool):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return int(value)
    try:
        as_int = int(value)  # type: ignore[call-overload]
        ok = as_int == value
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidParameter(f"{name} must be an integer, got {value!r}")
    return as_int


def histogram_bins(
    attr: Any, bins: object, max_cells: int = MAX_CELLS, limit: str | None = None
) -> list[IntervalSet]:
    """The cells of a histogram of ``attr`` (``bins`` None: one per value), each as its
    coverage on ``attr``: the one rule of :mod:`dpcurator.queries.histogram` (edges as
    the attribute's values are written: numbers, or ISO 8601 text for times and dates;
    no more than ``max_cells`` of them are read). ``limit`` names the limit in the
    refusal (``max_cells = N``)."""
    edges = None
    if bins is not None:
        edges = bounded_list(bins, max_cells + 1, "bins")
    n = cell_count(attr, edges)
    if n > max_cells:
        give = ": give bins=" if bins is None and attr.grid is not None else ""
        raise TooLarge(f"a histogram of {n} cells exceeds the limit {limit or max_cells}{give}")
    return histogram_cells(attr, edges)


#: A number as a request may give it: exact (an int, a Fraction, a Decimal) or a float,
#: read as the shortest decimal it prints as (``30.5``, ``0.1``).
Number = int | float | Decimal | Fraction
#: The most decimal places of a clip bound (and of the unit a sum is counted in).
MAX_PLACES = 12


def number(value: object, name: str) -> Fraction:
    """An exact, finite number (see :data:`Number`, text aside: a bound is a number); a
    bool, text, NaN or infinity is refused."""
    x = number_of(value) if not isinstance(value, bool | str) else None
    if x is None:
        raise InvalidParameter(f"{name} must be a finite number, got {value!r}")
    return x


def clip_bounds(lower: object, upper: object) -> tuple[Fraction, Fraction]:
    """Clip bounds as the exact decimals they are written as."""
    lo, hi = number(lower, "lower"), number(upper, "upper")
    for label, x in (("lower", lo), ("upper", hi)):
        if decimal_places(x) is None or decimal_places(x) > MAX_PLACES:  # type: ignore[operator]
            raise InvalidParameter(
                f"{label} must be a decimal number with at most {MAX_PLACES} decimal places, "
                f"got {lower if label == 'lower' else upper!r}"
            )
    if lo > hi:
        raise InvalidParameter(
            f"lower must be <= upper, got [{decimal_text(lo)}, {decimal_text(hi)}]"
        )
    if lo == hi == 0:
        raise InvalidParameter("clip bounds [0, 0] make every sum 0: nothing to release")
    return lo, hi


def value_unit(attr: Any, *bounds: Fraction) -> Fraction:
    """The unit a sum of ``attr`` clipped to ``bounds`` is counted in, exactly: the
    largest power of ten of which every value of the attribute and every bound is a
    whole multiple (1 for integers clipped to integers; 0.1 for a float on a step of 0.1
    clipped to [30.5, 60.5]). The sums, their noise and sensitivity are then integers in
    that unit, and the answers are scaled back exactly."""
    lo, unit = attr.grid
    places = max(decimal_places(x) or 0 for x in (unit, lo * unit, *bounds))
    return Fraction(1, 10**places)


def analyst_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidParameter("an analyst needs a non-empty name")
    if len(name) > MAX_NAME or not name.isprintable():
        raise InvalidParameter(
            f"an analyst name is at most {MAX_NAME} printable characters, got {name[:40]!r}"
        )
    return name


def table_name(table: object, tables: Sequence[str]) -> str:
    """The table a request names (or the only one)."""
    if table is None:
        if len(tables) == 1:
            return tables[0]
        raise InvalidParameter(
            f"this curator has several tables ({', '.join(sorted(tables))}): name one with table="
        )
    if not isinstance(table, str) or table not in tables:
        raise InvalidParameter(f"unknown table {table!r}; known: {', '.join(sorted(tables))}")
    return table
