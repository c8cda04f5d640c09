"""What every backend shares: load options, validation messages, the load report, query
checks and the exact clipped-sum arithmetic.

Two backends that load the same data must refuse it with the same one-line message,
keep the same rows and count the same thing for the same query object. Everything here
is engine-free (no SQL, no DataFrame): a backend computes the data-dependent numbers
(invalid rows per attribute, first offending row, the raw value) its own way and hands
them to these functions.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpcurator.backends.unit_rows import SCHEME, UnitReport, check_scheme, check_unit_key
from dpcurator.errors import DataError, InvalidParameter, QueryError
from dpcurator.queries.predicates import IntervalSet, Predicate, Query, complement, intersect
from dpcurator.queries.schema import Attribute, Schema
from dpcurator.queries.values import number_of, parse_date, parse_instant, parse_number

#: Whitespace stripped from both ends of text fields (and CSV header names).
WHITESPACE = " \t\r\n\f\v"
#: Integer text: at most 38 significant digits (< 10^38 < 2^127: it fits 128 bits).
INT_PATTERN = "[+-]?0*[0-9]{1,38}"
#: Integer text as loaded: also with a zero fraction (``517.0``), as pandas writes an
#: integer column that holds a missing value (it becomes a float column).
INT_TEXT_PATTERN = INT_PATTERN + r"(\.0*)?"
#: The zero fraction that :data:`INT_TEXT_PATTERN` allows, removed before the cast.
ZERO_FRACTION = r"\.0*$"
#: Inclusive range of a 64-bit signed integer.
INT64 = (-(2**63), 2**63 - 1)

#: A checked query: (attribute index, coverage) pairs in schema order.
Coverages = tuple[tuple[int, IntervalSet], ...]


def is_integer(x: object) -> bool:
    """An exact integer (Python or numpy), not a bool."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


@dataclass(frozen=True)
class LoadReport:
    """What happened on load (for the data custodian only: it depends on the data).

    ``dropped_privacy_unit``: rows dropped by the privacy unit, those without an id and
    those beyond its k rows (``unit`` tells them apart and describes the units).
    """

    rows_read: int
    rows: int
    dropped_invalid: int = 0
    dropped_privacy_unit: int = 0
    replaced: Mapping[str, int] = field(default_factory=dict)
    #: The privacy unit's statistics (None without a privacy unit).
    unit: UnitReport | None = None


def first_line(message: str) -> str:
    """The first non-blank line of an engine's error message."""
    return next((ln.strip() for ln in str(message).splitlines() if ln.strip()), "error")


def domain_text(attr: Attribute) -> str:
    return attr.describe()


def missing_texts(attr: Attribute, tokens: Sequence[str]) -> list[str]:
    """The texts (whitespace stripped) that load as ``attr``'s missing value: a blank
    field, the load's ``missing`` tokens and the schema's own missing value, but never a
    declared value (``"NA"`` declared as a country loads as that country). Empty when the
    schema does not say the attribute may be missing; NULLs (and NaN in a typed float
    column) load as the missing value too, and, for an integer marker such as ``-1``,
    every form of that integer (``-1``, ``-01``, ``-1.0`` in a float column)."""
    if attr.missing is None:
        return []
    texts = {"", *tokens, str(attr.missing)}
    if attr.type == "categorical":
        return sorted(texts - set(attr.values))

    def declared(t: str) -> bool:
        if attr.type != "integer":
            return attr.read(t) is not None
        return re.fullmatch(INT_PATTERN, t) is not None and attr.min <= int(t) <= attr.max

    return sorted(t for t in texts if not declared(t) or str(attr.missing) == t)


#: Attribute types whose values are read by :func:`value_codes` (in Python, once per
#: distinct text of the column) rather than in each engine's SQL.
MAPPED_TYPES = frozenset({"float", "timestamp", "date", "boolean"})


def value_codes(
    attr: Attribute, texts: Sequence[str | None], missing: Sequence[str], binary: bool
) -> list[int | None]:
    """The code of each distinct text of a column (as the engine writes it: see each
    loader), or None where it is invalid: one reading of every value, shared by the
    backends, so that both load exactly the same codes.

    A NULL, a blank, a ``missing`` token or the schema's missing value (and, for a
    number marker such as ``-1``, every text of that number) is the missing value when
    the attribute may be missing. ``binary``: the column holds binary floats (typed
    ``DOUBLE``/``FLOAT``), read by the shortest decimal of the float (as Python writes
    it), NaN as missing; text is read as the exact decimal it is written as.
    """
    miss = set(missing_texts(attr, missing))
    m_pos = attr.missing_position
    marker = None
    if attr.missing is not None and not isinstance(attr.missing, str):
        marker = number_of(attr.missing)
    out: list[int | None] = []
    for raw in texts:
        if raw is None:
            out.append(m_pos)
            continue
        t = raw.strip(WHITESPACE)
        if t in miss:
            out.append(m_pos)
            continue
        if binary:
            try:
                x = float(t)
            except ValueError:
                out.append(None)
                continue
            if math.isnan(x):
                out.append(m_pos)
                continue
            t = repr(x) if math.isfinite(x) else t
        if marker is not None and parse_number(t) == marker:
            out.append(m_pos)
            continue
        out.append(attr.read(t))
    return out


def why_invalid(attr: Attribute, raw: object) -> str | None:
    """Why a value shown in a refusal is not one of ``attr``'s, when "outside the
    domain" would not say it (``'39.1x'`` is not a number); None otherwise."""
    if raw is None or attr.type not in MAPPED_TYPES:
        return None
    t = str(raw).strip(WHITESPACE)
    if attr.type == "float" and parse_number(t) is None:
        try:
            if math.isfinite(float(t)):
                return None
        except ValueError:
            pass
        return "is not a number"
    if attr.type == "timestamp" and parse_instant(t) is None:
        return "is not an ISO 8601 time such as 2013-01-01T10:00:00Z"
    if attr.type == "date" and parse_date(t) is None:
        return "is not a date YYYY-MM-DD"
    if attr.type == "boolean":
        return "is not true or false"
    return None


def show(value: object) -> str:
    """A raw value as the messages show it: quoted, at most 40 characters."""
    text = str(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return repr(text)


def replacement_position(attr: Attribute, value: object) -> int:
    """Position of a declared replacement value (checked to be in the domain)."""
    if attr.type == "integer" and isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value.strip())
    try:
        return attr.position(value)  # type: ignore[arg-type]
    except KeyError:
        raise InvalidParameter(
            f"replace: {value!r} is not in the domain of {attr.name!r} {domain_text(attr)}"
        ) from None


def matches(names: Sequence[str], name: str) -> list[int]:
    """Positions of the columns called ``name``: exact matches, else matches after
    stripping surrounding whitespace from the column names (CSV headers such as
    ``age, sex``)."""
    found = [j for j, n in enumerate(names) if n == name]
    if not found:
        found = [j for j, n in enumerate(names) if n.strip(WHITESPACE) == name]
    return found


@dataclass(frozen=True)
class LoadOptions:
    """Load options every backend takes, checked (see :func:`check_load_options`)."""

    schema: Schema
    separator: str
    header: bool | None
    columns: tuple[str, ...] | None
    skip: int
    missing: tuple[str, ...]
    on_invalid: str
    #: Attribute name -> position of its declared replacement value.
    replace: Mapping[str, int]
    privacy_unit: tuple[str, int] | None
    name: str
    show_values: bool
    #: The key that chooses each unit's rows (see :mod:`dpcurator.backends.unit_rows`).
    unit_key: bytes | None = field(default=None, repr=False)
    #: The scheme that chooses each unit's rows (the ledger's; see unit_rows).
    unit_rows: int = SCHEME
    #: Under ``on_invalid="drop"``, the largest share of rows that may be dropped.
    max_dropped: float = 0.05


def check_load_options(
    schema: Schema | str | Path | Mapping[str, Any],
    *,
    separator: str = ",",
    header: bool | None = None,
    columns: Sequence[str] | None = None,
    skip: int = 0,
    missing: Sequence[str] = ("", "?", "NA"),
    on_invalid: str = "error",
    replace: Mapping[str, object] | None = None,
    privacy_unit: tuple[str, int] | None = None,
    name: str = "data",
    show_values: bool = True,
    unit_key: bytes | None = None,
    max_dropped: float = 0.05,
    unit_rows: int = SCHEME,
) -> LoadOptions:
    """Check the options of a load, in a fixed order, before any data is read.

    ``unit_key`` is required with a privacy unit: the backends draw no randomness, and a
    key they made up would keep other rows in another process. Without a privacy unit it
    is checked and unused (a caller may always pass its ledger's key)."""
    schema = Schema.of(schema)
    if on_invalid not in ("error", "drop"):
        raise InvalidParameter(f"on_invalid must be 'error' or 'drop', got {on_invalid!r}")
    if (
        isinstance(max_dropped, bool)
        or not isinstance(max_dropped, int | float)
        or not 0 <= max_dropped <= 1
    ):
        raise InvalidParameter(f"max_dropped must be a share from 0 to 1, got {max_dropped!r}")
    if not isinstance(separator, str) or not separator:
        raise InvalidParameter("separator must be a non-empty string")
    if header is not None and not isinstance(header, bool):
        raise InvalidParameter("header must be True, False or None (detect)")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise InvalidParameter("skip must be a non-negative integer")
    if isinstance(missing, str) or not all(isinstance(m, str) for m in missing):
        raise InvalidParameter("missing must be a list of strings")
    if not isinstance(name, str) or not name:
        raise InvalidParameter("name must be a non-empty string")
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise InvalidParameter("columns must be a list of column names")
        if len(set(columns)) != len(columns):
            raise InvalidParameter("columns must be distinct")
    replace_pos: dict[str, int] = {}
    for attr_name, value in (replace or {}).items():
        if attr_name not in schema:
            raise InvalidParameter(f"replace: unknown attribute {attr_name!r}")
        replace_pos[attr_name] = replacement_position(schema.attribute(attr_name), value)
    unit: tuple[str, int] | None = None
    if privacy_unit is not None:
        if (
            not isinstance(privacy_unit, tuple | list)
            or len(privacy_unit) != 2
            or not isinstance(privacy_unit[0], str)
            or isinstance(privacy_unit[1], bool)
            or not isinstance(privacy_unit[1], int)
            or privacy_unit[1] < 1
        ):
            raise InvalidParameter("privacy_unit must be (id_column, k) with k a positive integer")
        unit = (privacy_unit[0], privacy_unit[1])
    key = None if unit_key is None else check_unit_key(unit_key)
    scheme = check_scheme(unit_rows)
    if unit is not None and key is None:
        raise InvalidParameter(
            "privacy_unit needs unit_key: 32 secret random bytes (secrets.token_bytes(32)) "
            "that choose each unit's rows; pass the same bytes again to keep the same rows"
        )
    for attr in schema.attributes:
        if attr.type == "integer" and not (
            INT64[0] <= attr.min and attr.max <= INT64[1] and attr.size <= INT64[1]
        ):
            raise InvalidParameter(
                f"attribute {attr.name!r}: domain [{attr.min}, {attr.max}] exceeds 64-bit "
                "integers (min and max from -2^63 to 2^63 - 1, at most 2^63 - 1 values)"
            )
        if isinstance(attr.missing, int) and not INT64[0] <= attr.missing <= INT64[1]:
            raise InvalidParameter(
                f"attribute {attr.name!r}: its missing value {attr.missing} exceeds 64-bit integers"
            )
    return LoadOptions(
        schema=schema,
        separator=separator,
        header=header,
        columns=None if columns is None else tuple(columns),
        skip=skip,
        missing=tuple(missing),
        on_invalid=on_invalid,
        replace=replace_pos,
        privacy_unit=unit,
        name=name,
        show_values=show_values,
        unit_key=key,
        max_dropped=float(max_dropped),
        unit_rows=scheme,
    )


# ---------------------------------------------------------------------- messages

#: ``raw`` of :func:`invalid_message` when the raw value was not looked up.
NOT_SHOWN = object()


def invalid_message(
    source: str,
    schema: Schema,
    bad: Sequence[tuple[int, int, int]],
    *,
    raw: object = NOT_SHOWN,
    missing: Sequence[str] = (),
) -> str:
    """The one-line refusal of invalid values.

    ``bad``: ``(attribute index, invalid rows, first invalid row)`` per invalid attribute
    in schema order (rows are 1-based data rows); ``raw``: the first row's raw value of
    the first attribute as text (None for a NULL), or :data:`NOT_SHOWN` to leave it out
    (``show_values=False``).
    """
    i, n_bad, first = bad[0]
    attr = schema.attributes[i]
    was_missing = raw is None or (raw is not NOT_SHOWN and str(raw).strip(WHITESPACE) in missing)
    where = f"first: row {first}"
    if raw is not NOT_SHOWN:
        if raw is None or str(raw).strip(WHITESPACE) in missing:
            where += ", missing" if raw is None else f", missing value {show(raw)}"
        else:
            where += f", value {show(raw)}"
    rows = "1 row has a value" if n_bad == 1 else f"{n_bad} rows have values"
    msg = (
        f"{source}: attribute {attr.name!r}: {rows} outside the domain "
        f"{domain_text(attr)} or missing ({where})"
    )
    reason = why_invalid(attr, raw) if raw is not NOT_SHOWN and not was_missing else None
    if reason is not None:
        rows = "1 row" if n_bad == 1 else f"{n_bad} rows"
        msg = (
            f"{source}: attribute {attr.name!r}: row {first}, value {show(raw)} {reason} "
            f"({rows} not in the domain {domain_text(attr)} or missing)"
        )
    if attr.type == "integer" and raw is not NOT_SHOWN and _fractional(raw):
        rows = "1 row" if n_bad == 1 else f"{n_bad} rows"
        msg = (
            f"{source}: attribute {attr.name!r}: row {first}, value {show(raw)} is not an "
            f"integer ({rows} not integers in the domain {domain_text(attr)} or missing)"
        )
    if was_missing and attr.missing is None:  # and the schema does not allow one
        example = (
            f"{attr.min - 1}"
            if attr.type == "integer"
            else '"?"'
            if attr.type == "categorical"
            else '"NA"'
        )
        msg += (
            f'; if {attr.name!r} may be missing, say so in the schema ("missing": '
            f"{example}): blank and NULL cells then load as that value"
        )
    if len(bad) > 1:
        others = ", ".join(f"{schema.attributes[j].name!r} ({n} rows)" for j, n, _ in bad[1:4])
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        msg += f"; also invalid: {others}{more}"
    return msg + "; fix the data, or pass on_invalid='drop' or replace={attribute: value}"


def _fractional(raw: object) -> bool:
    """Whether a raw value is a finite number with a nonzero fraction (``3.5``): refused
    as not an integer, which "outside the domain" would not say."""
    try:
        x = float(str(raw).strip(WHITESPACE))
    except ValueError:
        return False
    return math.isfinite(x) and x != math.floor(x)


def check_dropped(
    source: str,
    schema: Schema,
    bad: Sequence[tuple[int, int]],
    dropped: int,
    rows_read: int,
    max_dropped: float,
) -> None:
    """Refuse a load under ``on_invalid="drop"`` that would drop more than
    ``max_dropped`` of the rows: a release over the few rows left describes them, not
    the table, and would be charged as if it described the table. ``bad``: (attribute
    index, invalid rows) per attribute, named in the message."""
    if dropped <= max_dropped * rows_read:
        return
    worst = sorted(bad, key=lambda b: (-b[1], b[0]))
    named = ", ".join(f"{schema.attributes[j].name!r} ({n:,} rows)" for j, n in worst[:5])
    more = f" and {len(worst) - 5} more" if len(worst) > 5 else ""
    raise DataError(
        f"{source}: on_invalid='drop' would drop {dropped:,} of {rows_read:,} rows "
        f"({dropped / rows_read:.1%}, more than max_dropped={max_dropped:g}): invalid "
        f"values in {named}{more}; fix the schema or the data, or raise max_dropped"
    )


def missing_id_message(source: str, column: str, rows: int, first: int) -> str:
    """The one-line refusal of rows without a privacy-unit id."""
    return (
        f"{source}: privacy unit column {column!r}: "
        f"{rows} rows have a missing id (first: row {first}); on_invalid='drop' leaves "
        "them out"
    )


def no_column_message(source: str, name: str) -> str:
    return f"{source}: no column {name!r} for attribute {name!r}"


def no_unit_column_message(source: str, column: str) -> str:
    return f"{source}: privacy unit column {column!r} is not in the data"


def duplicate_column_message(source: str, name: str, what: str) -> str:
    return f"{source}: duplicate column {name!r} (for {what})"


def column_count_message(
    source: str, width: int, names: Sequence[str], columns_given: bool
) -> str | None:
    """The refusal of a headerless CSV file whose width does not match the names, or
    None if it matches."""
    if len(names) == width:
        return None
    hint = (
        "; pass columns=[...] naming every column of the file"
        if width > len(names) and not columns_given
        else ""
    )
    what = "columns=" if columns_given else "the schema"
    return f"{source}: the file has {width} columns but {what} names {len(names)}{hint}"


# ---------------------------------------------------------------------- query checks


class QueryChecker:
    """Checks query objects (which may be built by hand) against one schema.

    :meth:`check` gives the query's ``(attribute index, coverage)`` pairs in schema
    order, tautologies dropped, or None if it covers nothing. Nothing about a query
    object is trusted: its schema, every predicate's attribute (this schema's, not
    another's of the same name), one predicate per attribute, and every coverage (pairs
    of integers ``0 <= start < end <= size``, sorted, disjoint and non-adjacent) are
    checked, so that what is counted is exactly what the caller's coverage says.
    Schemas and attributes seen equal to ours are remembered by id (and kept alive, so
    that their ids are never reused).
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.index = {a.name: i for i, a in enumerate(schema.attributes)}
        self.sizes = [a.size for a in schema.attributes]
        self._attrs_ok: dict[int, tuple[int, Attribute]] = {
            id(a): (j, a) for j, a in enumerate(schema.attributes)
        }
        self._schemas_ok: dict[int, Schema] = {id(schema): schema}

    def check(self, q: object) -> Coverages | None:
        if not isinstance(q, Query):
            raise InvalidParameter(f"expected a Query, got {type(q).__name__}")
        sid = id(q.schema)
        if sid not in self._schemas_ok:
            if not isinstance(q.schema, Schema) or q.schema != self.schema:
                raise InvalidParameter("the query is over a different schema")
            self._schemas_ok[sid] = q.schema
        preds = q.predicates
        if not isinstance(preds, tuple | list):
            raise QueryError(
                f"a query's predicates must be a tuple of Predicate, got {type(preds).__name__}"
            )
        out: list[tuple[int, IntervalSet]] = []
        seen: set[int] = set()
        empty = False
        attrs_ok, sizes = self._attrs_ok, self.sizes
        for p in preds:
            if not isinstance(p, Predicate):
                raise QueryError(
                    f"a query's predicates must be Predicate objects, got {type(p).__name__}"
                )
            known = attrs_ok.get(id(p.attribute))
            j = known[0] if known is not None else self.attribute_index(p.attribute)
            if j in seen:
                raise QueryError(
                    f"two predicates on {self.schema.attributes[j].name!r} in one query: "
                    "give one coverage (their intersection)"
                )
            seen.add(j)
            # Fast path for the canonical form (a tuple of (int, int) tuples with
            # prev_end < start < end <= size); anything else is converted or refused.
            cov = p.coverage
            size, prev = sizes[j], -1
            if type(cov) is tuple:
                for iv in cov:
                    if type(iv) is not tuple or len(iv) != 2:
                        break
                    s, e = iv
                    if type(s) is not int or type(e) is not int or not prev < s < e <= size:
                        break
                    prev = e
                else:
                    prev = -2  # checked
            if prev != -2:
                cov = self.coverage(j, cov)
            if not cov:
                empty = True
            elif len(cov) > 1 or cov[0][0] or cov[0][1] != size:
                out.append((j, cov))
        if empty:
            return None
        if len(out) > 1:
            out.sort()
        return tuple(out)

    def attribute_index(self, attr: object) -> int:
        """Position of a predicate's attribute, which must be this schema's."""
        known = self._attrs_ok.get(id(attr))
        if known is not None:
            return known[0]
        if not isinstance(attr, Attribute):
            raise QueryError(f"a predicate needs an Attribute, got {type(attr).__name__}")
        j = self.index.get(attr.name) if isinstance(attr.name, str) else None
        if j is None:
            raise QueryError(f"predicate on {attr.name!r}, which is not an attribute of the table")
        if attr != self.schema.attributes[j]:
            raise QueryError(
                f"the predicate on {attr.name!r} was built for another schema's attribute"
            )
        self._attrs_ok[id(attr)] = (j, attr)  # kept alive: its id is never reused
        return j

    def coverage(self, j: int, cov: object) -> IntervalSet:
        """A predicate's coverage, checked to be canonical and inside attribute ``j``."""
        name = self.schema.attributes[j].name
        if not isinstance(cov, tuple | list):
            raise QueryError(
                f"coverage of {name!r} must be a tuple of (start, end) intervals, "
                f"got {type(cov).__name__}"
            )
        size = self.schema.attributes[j].size
        out: list[tuple[int, int]] = []
        prev = -1
        for iv in cov:
            if (
                not isinstance(iv, tuple | list)
                or len(iv) != 2
                or not (is_integer(iv[0]) and is_integer(iv[1]))
            ):
                raise QueryError(
                    f"coverage of {name!r}: an interval is a pair of integers, got {iv!r}"
                )
            s, e = int(iv[0]), int(iv[1])
            if s >= e:
                raise QueryError(f"coverage of {name!r}: interval {(s, e)} is empty or reversed")
            if s < 0 or e > size:
                raise QueryError(
                    f"coverage of {name!r}: interval {(s, e)} leaves the domain "
                    f"[0, {size}) of value positions"
                )
            if s <= prev:
                raise QueryError(
                    f"coverage of {name!r}: intervals must be sorted, disjoint and "
                    f"non-adjacent, got {(s, e)} after one ending at {prev}"
                )
            prev = e
            out.append((s, e))
        return tuple(out)

    def query_list(self, queries: object) -> list[Any]:
        """The queries of a ``counts`` call as a list (any iterable but a single query
        or a string)."""
        from collections.abc import Iterable

        if isinstance(queries, Query | str | bytes) or not isinstance(queries, Iterable):
            raise InvalidParameter(
                f"counts takes a sequence of queries, got {type(queries).__name__}"
            )
        return list(queries)


# ---------------------------------------------------------------------- clipped sums


@dataclass(frozen=True)
class ClipPlan:
    """How to compute ``sum(clip(value, lower, upper))`` exactly, in a ``unit`` (1 for
    integers; ``0.1`` for a float on a step of 0.1, or finer for finer bounds), over the
    rows of a table whose attribute ``index`` stores codes in ``[0, size)``.

    In units, a row's value is ``scale * code + first`` and the bounds are integers, so
    the engine sums the integer *offsets* ``d = clip(scale * code + shift, 0, span)``
    (``shift = first - base``), each in ``[0, span]``, and the clipped value is
    ``base + d`` (:meth:`total`). ``constant`` is not None when the bounds put every
    value on one side: the sum is then ``count * constant``. With ``scale == 1`` the
    offset is ``clip(code, low, high) - low`` (:attr:`low`, :attr:`high`: codes below
    2^63), which engines compute in 64 bits.
    """

    index: int
    constant: int | None
    scale: int
    shift: int
    span: int
    base: int

    @property
    def low(self) -> int:
        """With ``scale == 1``: the code clipped up to (the lower bound's)."""
        return -self.shift

    @property
    def high(self) -> int:
        """With ``scale == 1``: the code clipped down to (the upper bound's)."""
        return self.span - self.shift

    def offsets(self, codes: Sequence[int]) -> list[int]:
        """The offsets ``d`` of codes, in exact Python integers."""
        return [min(max(self.scale * c + self.shift, 0), self.span) for c in codes]

    def total(self, count: int, offset_sum: int | None) -> int:
        if self.constant is not None:
            return count * self.constant
        return count * self.base + (0 if offset_sum is None else offset_sum)


#: The largest scale and shift of a clipped sum (an engine computes ``scale * code +
#: shift`` with codes below 2^62 in 128-bit arithmetic).
MAX_SCALE = 2**62
MAX_SHIFT = 2**125


def summed_rows(preds: Coverages, schema: Schema, j: int) -> Coverages | None:
    """The rows a clipped sum of attribute ``j`` adds up: those of ``preds`` whose value
    of ``j`` is not missing (as SQL's SUM skips NULLs; a skipped row adds 0, well within
    the sensitivity max(|lower|, |upper|) of a row that is added or removed). None when
    no row is left."""
    attr = schema.attributes[j]
    p = attr.missing_position
    if p is None:
        return preds
    out = dict(preds)
    cov = intersect(out.get(j, ((0, attr.size),)), complement(((p, p + 1),), attr.size))
    if not cov:
        return None
    out[j] = cov
    return tuple(sorted(out.items()))


def clip_plan(
    schema: Schema, attribute: object, lower: object, upper: object, unit: object = 1
) -> ClipPlan:
    """Check a clipped sum's arguments and reduce it to integer offsets (see
    :class:`ClipPlan`).

    ``unit`` (a positive exact number; 1 by default) is what the sum is counted in: every
    value of the attribute must be a whole multiple of it (an integer attribute's in 1; a
    float's with a step of 0.1 in 0.1 or any tenth of it), and the bounds are integers
    in that unit (``lower=305`` with ``unit=0.1`` is 30.5). Bounds outside the values are
    moved onto them (``clip(v, lo, hi)`` is unchanged for every value), so the engine
    only clips and sums offsets, and the rest is exact Python arithmetic.
    """
    if not isinstance(attribute, str) or attribute not in schema:
        raise InvalidParameter(f"unknown attribute {attribute!r}")
    j = schema.index(attribute)
    attr = schema.attributes[j]
    if not attr.numeric:
        raise InvalidParameter(f"attribute {attribute!r} is not an integer or float attribute")
    u = _exact(unit)
    if u is None or u <= 0:
        raise InvalidParameter(f"unit must be a positive exact number, got {unit!r}")
    ends: list[int] = []
    for label, b in (("lower", lower), ("upper", upper)):
        if not is_integer(b):
            raise InvalidParameter(f"{label} clipping bound must be an integer, got {b!r}")
        ends.append(int(b))  # type: ignore[call-overload]
    lo, hi = ends
    if lo > hi:
        raise InvalidParameter(f"lower bound {lower} is greater than upper bound {upper}")
    grid = attr.grid
    assert grid is not None
    first_v, step_v = grid[0] * grid[1] / u, grid[1] / u
    if first_v.denominator != 1 or step_v.denominator != 1:
        raise InvalidParameter(f"the values of {attribute!r} are not whole numbers of units of {u}")
    first, scale = int(first_v), int(step_v)
    last = first + scale * (attr.value_count - 1)
    if scale >= MAX_SCALE or max(abs(first), abs(last)) >= MAX_SHIFT:
        raise InvalidParameter(f"the values of {attribute!r} are too large in units of {u}")
    if lo >= last or hi <= first:
        return ClipPlan(j, lo if lo >= last else hi, scale, 0, 0, 0)
    base, top = max(lo, first), min(hi, last)
    return ClipPlan(j, None, scale, first - base, top - base, base)


def _exact(x: object) -> Fraction | None:
    """An exact number: an integer (Python's or numpy's), a Fraction, or a Decimal."""
    if isinstance(x, bool):
        return None
    if is_integer(x):
        return Fraction(int(x))  # type: ignore[call-overload]
    if isinstance(x, Fraction):
        return x
    if isinstance(x, Decimal) and x.is_finite():
        return Fraction(x)
    return None
