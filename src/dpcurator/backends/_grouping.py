"""What grouped statistics need from a backend, shared by every engine: checked
arguments, and the exact arithmetic around the engine's aggregates.

A backend answers two aggregate questions per *group cell* (every combination of the
``by`` attributes' values, in :func:`itertools.product` order over the attributes as
given; one cell without ``by``), over the rows a ``where`` query covers:

* :func:`moments`: the row count, the sum of ``clip(value, lower, upper)`` and the sum of
  its squares. The engine only sums offsets ``d = clip(code, low, high) - low`` in
  ``[0, high - low]`` (and their squares) in 128-bit or ``DECIMAL(38, 0)`` arithmetic;
  the values ``base + d`` are recovered here exactly: sum = n base + sum d, sum of squares =
  n base^2 + 2 base sum d + sum d^2.
* :func:`bin_counts`: the rows whose value *position* (the code: ``value - min`` for an
  integer, the index in ``values`` for a categorical) lies in each half-open bin
  ``[edges[j], edges[j + 1])``, from the engine's count per (cell, code).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcurator.backends._validation import ClipPlan, clip_plan, is_integer
from dpcurator.errors import InvalidParameter, QueryError
from dpcurator.queries.parts import GroupTerm, group_term
from dpcurator.queries.schema import Schema

#: Most group cells one request may ask for (every cell is materialised).
MAX_CELLS = 10**7
#: The widest clipped range whose squares are summed: (high - low)^2 < 2^64, so that the
#: sum of squares of fewer than 2^63 rows fits in 127 bits.
MAX_SQUARED_SPAN = 2**32


@dataclass(frozen=True)
class Groups:
    """The ``by`` group terms (attributes, or parts of times: see
    :mod:`dpcurator.queries.parts`): the distinct attributes the engine groups by
    (``indices``, schema positions) and the number of groups of each term."""

    terms: tuple[GroupTerm, ...]
    indices: tuple[int, ...]
    sizes: tuple[int, ...]
    #: For each term, its attribute's place in ``indices``.
    places: tuple[int, ...] = ()

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def cell_of(self, codes: Sequence[np.ndarray]) -> np.ndarray:
        """The cell number of each row of per-attribute codes (one array per index)."""
        if not self.terms:
            n = len(codes[0]) if codes else 0
            return np.zeros(n, dtype=np.int64)
        arrays = [np.asarray(c, np.int64) for c in codes]
        groups = tuple(t.group_of(arrays[p]) for t, p in zip(self.terms, self.places, strict=True))
        return np.ravel_multi_index(groups, self.sizes)

    def with_column(self, j: int) -> tuple[list[int], int]:
        """The attributes to group by with attribute ``j`` also kept (once), and where
        ``j`` is among them."""
        cols = list(self.indices)
        if j not in cols:
            cols.append(j)
        return cols, cols.index(j)


def groups(schema: Schema, by: object) -> Groups:
    """The checked ``by`` terms (a list or tuple of distinct attribute names or parts
    such as ``month(time_hour)``, possibly empty)."""
    if isinstance(by, str) or not isinstance(by, list | tuple):
        raise InvalidParameter(f"by must be a list of attribute names, got {type(by).__name__}")
    names = list(by)
    terms: list[GroupTerm] = []
    for n in names:
        if not isinstance(n, str):
            raise InvalidParameter(f"unknown attribute {n!r} in by")
        try:
            terms.append(group_term(schema, n))
        except QueryError:
            raise InvalidParameter(f"unknown attribute {n!r} in by") from None
    if len({t.text for t in terms}) != len(terms):
        raise InvalidParameter("by names an attribute twice")
    idx: list[int] = []
    places = []
    for t in terms:
        j = schema.index(t.attribute.name)
        if j not in idx:
            idx.append(j)
        places.append(idx.index(j))
    sizes = tuple(t.groups for t in terms)
    if math.prod(sizes) > MAX_CELLS:
        raise InvalidParameter(f"by makes {math.prod(sizes)} group cells, over {MAX_CELLS}")
    return Groups(tuple(terms), tuple(idx), sizes, tuple(places))


def moments_plan(
    schema: Schema,
    attribute: object,
    lower: object,
    upper: object,
    squares: bool,
    unit: object = 1,
) -> ClipPlan:
    plan = clip_plan(schema, attribute, lower, upper, unit)
    if squares and plan.constant is None and plan.span >= MAX_SQUARED_SPAN:
        raise InvalidParameter(
            f"sums of squares need a clipped range of width below {MAX_SQUARED_SPAN}"
        )
    return plan


def moments(
    plan: ClipPlan,
    cells: int,
    cell: np.ndarray,
    count: Sequence[int],
    offsets: Sequence[int | None],
    squares: Sequence[int | None] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Exact per-cell (count, sum of clipped values, sum of their squares) as ``object``
    arrays of Python integers, from the engine's per-cell count, sum of offsets and sum
    of squared offsets (None where a cell has no row)."""
    n = np.zeros(cells, dtype=object)
    s1 = np.zeros(cells, dtype=object)
    s2 = np.zeros(cells, dtype=object) if squares is not None else None
    base = plan.constant if plan.constant is not None else plan.base
    for i, c in enumerate(cell.tolist()):
        k = int(count[i])
        d1 = 0 if plan.constant is not None or offsets[i] is None else int(offsets[i])  # type: ignore[arg-type]
        n[c] += k
        s1[c] += k * base + d1
        if s2 is not None:
            sq = squares[i] if squares is not None else None
            d2 = 0 if plan.constant is not None or sq is None else int(sq)
            s2[c] += k * base * base + 2 * base * d1 + d2
    return n, s1, s2


@dataclass(frozen=True)
class GroupedCounts:
    """What one pass over a table tells per group cell (see ``grouped_counts``): the rows
    a ``where`` covers, the rows each condition holds for among them, each clipped
    column's (rows with a value, sum, sum of squares), and for each attribute asked its
    rows per (cell, code) — from which counts, sums and quantiles' ranks follow exactly."""

    rows: np.ndarray  # (cells,) int64
    held: tuple[np.ndarray, ...]  # per condition, (cells,) int64
    moments: tuple[tuple[np.ndarray, np.ndarray, np.ndarray | None], ...]
    codes: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # attribute -> (cell, code, n)


@dataclass(frozen=True)
class MomentsPart:
    """A clipped sum asked of ``grouped_counts``: the rows with a value (codes other than
    ``missing``), how many fall below, in and above the clip's codes, and the sums of the
    codes in it (and of their squares)."""

    plan: ClipPlan
    low_code: int  # the first code whose offset is above 0
    high_code: int  # the last code whose offset is below span
    missing: int | None
    squares: bool

    def total(
        self, n: int, below: int, above: int, mid: int, s: int, s2: int | None
    ) -> tuple[int, int, int | None]:
        """(rows, sum of clipped values, sum of their squares) in units, exactly, from the
        engine's counts and code sums: below the clip the offset is 0, above it span, in
        it scale * code + shift."""
        p = self.plan
        if p.constant is not None:
            c = p.constant
            return n, n * c, (n * c * c if self.squares else None)
        a, b = p.scale, p.shift
        d1 = p.span * above + a * s + b * mid
        total = n * p.base + d1
        if not self.squares:
            return n, total, None
        assert s2 is not None
        d2 = p.span * p.span * above + a * a * s2 + 2 * a * b * s + b * b * mid
        return n, total, n * p.base * p.base + 2 * p.base * d1 + d2


def moments_part(
    schema: Schema, attribute: object, lower: object, upper: object, unit: object, squares: bool
) -> MomentsPart:
    """A clipped sum's plan as code ranges (see :class:`MomentsPart`)."""
    plan = moments_plan(schema, attribute, lower, upper, squares, unit)
    attr = schema.attribute(str(attribute))
    if plan.constant is not None:
        lo = hi = 0
    else:  # offset = scale * code + shift, clipped to [0, span]
        lo = -(plan.shift // plan.scale)  # ceil(-shift / scale)
        hi = (plan.span - plan.shift) // plan.scale
    return MomentsPart(plan, lo, hi, attr.missing_position, squares)


def check_grouped(schema: Schema, attributes: object, conditions: object) -> list[str]:
    """The attributes of a ``grouped_counts`` call: distinct names of the schema, each
    with at most :data:`HISTOGRAM_VALUES` values (a count per value must stay small)."""
    if isinstance(attributes, str) or not isinstance(attributes, list | tuple):
        raise InvalidParameter("attributes must be a list of attribute names")
    if isinstance(conditions, str) or not isinstance(conditions, list | tuple):
        raise InvalidParameter("conditions must be a list of queries")
    names = list(dict.fromkeys(attributes))
    for n in names:
        if not isinstance(n, str) or n not in schema:
            raise InvalidParameter(f"unknown attribute {n!r}")
        if schema.attribute(n).size > HISTOGRAM_VALUES:
            raise InvalidParameter(
                f"{n!r} has {schema.attribute(n).size} values: count it per value with "
                "clipped_moments instead"
            )
    return names


def grouped_result(
    g: Groups,
    cells: int,
    cell: np.ndarray,
    values: Sequence[Sequence[Any]],
    conditions: Sequence[Any],
    parts: Sequence[MomentsPart],
    names: Sequence[str],
    per_code: Sequence[tuple[list[str], Any, int]],
) -> GroupedCounts:
    """A :class:`GroupedCounts` from the engine's rows: per result row its cell and its
    aggregates in ``grouped_counts``' order (rows, a count per condition, then per
    clipped column its present, above, mid counts, code sum [and sum of squares]); per
    attribute asked, the engine's (cell columns..., code, n) table."""
    rows = np.zeros(cells, dtype=np.int64)
    held = [np.zeros(cells, dtype=np.int64) for _ in conditions]
    sums: list[list[list[int]]] = [[[0] * 5 for _ in range(cells)] for _ in parts]
    for c, vals in zip(cell.tolist(), values, strict=True):
        rows[c] += int(vals[0])
        for i in range(len(conditions)):
            held[i][c] += int(vals[1 + i])
        at = 1 + len(conditions)
        for j, m in enumerate(parts):
            width = 5 if m.squares else 4
            acc = sums[j][c]
            for t in range(width):
                v = vals[at + t]
                acc[t] += 0 if v is None else int(v)
            at += width
    moments_out = []
    for j, m in enumerate(parts):
        n = np.zeros(cells, dtype=object)
        s1 = np.zeros(cells, dtype=object)
        s2 = np.zeros(cells, dtype=object) if m.squares else None
        for c in range(cells):
            present, above, mid, s, sq = sums[j][c]
            n[c], s1[c], t2 = m.total(present, 0, above, mid, s, sq if m.squares else None)
            if s2 is not None:
                s2[c] = t2
        moments_out.append((n, s1, s2))
    codes: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, (columns, table, at) in zip(names, per_code, strict=True):
        k = len(g.indices)
        c = g.cell_of([np.asarray(table[columns[i]], np.int64) for i in range(k)])
        if not k:
            c = np.zeros(len(table[columns[-1]]), np.int64)
        codes[name] = (
            c,
            np.asarray(table[columns[at]], np.int64),
            np.asarray(table[columns[-1]], np.int64),
        )
    return GroupedCounts(rows, tuple(held), tuple(moments_out), codes)


def fold_rows(cells: int, cell: np.ndarray, count: np.ndarray) -> np.ndarray:
    """(cells,) int64 totals of the engine's per-row counts."""
    out = np.zeros(cells, dtype=np.int64)
    np.add.at(out, np.asarray(cell, np.int64), np.asarray(count, np.int64))
    return out


#: Attributes with at most this many values get their moments from a count per value
#: (one GROUP BY, then exact integer sums here), which engines do faster than 128-bit sums.
HISTOGRAM_VALUES = 1 << 16


def moments_from_counts(
    plan: ClipPlan,
    cells: int,
    cell: np.ndarray,
    code: np.ndarray,
    count: np.ndarray,
    squares: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`moments` from the engine's rows (cell, code, count): the offsets
    d = clip(scale code + shift, 0, span) summed here, exactly: in 64-bit integers when
    every total fits (the rows times the widest square stay below 2^62), else in Python
    integers."""
    code = np.asarray(code, dtype=np.int64)
    cell = np.asarray(cell, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    total = int(count.sum()) if count.size else 0
    if plan.constant is not None:
        d: Any = np.zeros(code.size, dtype=np.int64)
    elif plan.scale * HISTOGRAM_VALUES + abs(plan.shift) < 2**62:  # int64 is exact
        d = np.clip(code * plan.scale + plan.shift, 0, plan.span)
    else:
        d = np.asarray(plan.offsets(code.tolist()), dtype=object)
    if d.dtype != object and total * max(plan.span, 1) ** 2 < 2**62:
        n = np.zeros(cells, dtype=np.int64)
        s1 = np.zeros(cells, dtype=np.int64)
        s2 = np.zeros(cells, dtype=np.int64)
        np.add.at(n, cell, count)
        np.add.at(s1, cell, count * d)
        np.add.at(s2, cell, count * d * d)
        as_int = [int(v) for v in n], [int(v) for v in s1], [int(v) for v in s2]
    else:
        n_o = np.zeros(cells, dtype=object)
        s1_o = np.zeros(cells, dtype=object)
        s2_o = np.zeros(cells, dtype=object)
        for c, k, x in zip(cell.tolist(), count.tolist(), d.tolist(), strict=True):
            n_o[c] += k
            s1_o[c] += k * x
            s2_o[c] += k * x * x
        as_int = n_o.tolist(), s1_o.tolist(), s2_o.tolist()
    return moments(
        plan, cells, np.arange(cells), as_int[0], as_int[1], as_int[2] if squares else None
    )


def check_edges(schema: Schema, attribute: object, edges: object) -> tuple[int, np.ndarray]:
    """(attribute index, edges as int64): strictly increasing positions in [0, size]."""
    if not isinstance(attribute, str) or attribute not in schema:
        raise InvalidParameter(f"unknown attribute {attribute!r}")
    j = schema.index(attribute)
    size = schema.attributes[j].size
    if isinstance(edges, str | bytes) or not isinstance(edges, Sequence | np.ndarray):
        raise InvalidParameter("edges must be a list of integer positions")
    raw = list(edges)
    if len(raw) < 2 or not all(is_integer(e) for e in raw):
        raise InvalidParameter("edges must be at least two integer positions")
    e = [int(x) for x in raw]
    if any(b <= a for a, b in itertools.pairwise(e)) or e[0] < 0 or e[-1] > size:
        raise InvalidParameter(f"edges must increase strictly within [0, {size}]")
    return j, np.asarray(e, dtype=np.int64)


def bin_counts(
    cells: int, edges: np.ndarray, cell: np.ndarray, code: np.ndarray, count: np.ndarray
) -> np.ndarray:
    """(cells, bins) int64 counts from the engine's rows (cell, code, count)."""
    out = np.zeros((cells, len(edges) - 1), dtype=np.int64)
    code = np.asarray(code, dtype=np.int64)
    b = np.searchsorted(edges, code, side="right") - 1
    keep = (b >= 0) & (code < edges[-1])
    np.add.at(out, (np.asarray(cell, np.int64)[keep], b[keep]), np.asarray(count, np.int64)[keep])
    return out
