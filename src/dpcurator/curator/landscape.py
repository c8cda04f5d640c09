"""The budget as a landscape: what is left on every cell of a two-attribute grid.

With parallel composition the budget left is not one number but a function of the
points of the domain. :func:`remaining_grid` gives, for two attributes (each cut into at
most ``MAX_BINS`` bins), the figures :meth:`Curator.remaining_detail` gives for each
cell's query, all at once: for everyone, and of an analyst's quota. They read only the
public queries and costs of the ledger's charges, never the data.

Every cell's largest loss comes from one prefix-sum pass
(:func:`~dpcurator.curator.cell_loss.grid_max_loss`, exact); when the charges' segment
grid is too large for it, cell by cell with the filter's exact maximum-overlap
computation, and past the time limit from the filter's safe bounds (then the figures are
lower bounds, never more than truly remains, and ``exact`` says so).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcurator.curator import requests
from dpcurator.curator.cell_loss import Axis, grid_max_loss
from dpcurator.curator.overlap_filter import Charge, OverlapFilter
from dpcurator.errors import QueryError
from dpcurator.queries import Query, Schema
from dpcurator.queries.predicates import render_coverage

if TYPE_CHECKING:
    from dpcurator.curator.curator import Curator

#: The most bins on each side of a grid.
MAX_BINS = 100
#: Seconds one grid may take (both the budget's and a quota's figures).
TIME_LIMIT = 2.0


def snapshot(curator: Curator) -> OverlapFilter:
    """A fork of the curator's overlap-aware filter, up to date with the ledger (every
    process's charges): to read without holding the ledger's lock."""
    with curator.ledger.lock:
        curator._sync()
        return curator._filter.fork()


@dataclass(frozen=True)
class GridAxis:
    """One side of a grid: the attribute, its bins (as value positions) and their labels."""

    axis: Axis
    labels: tuple[str, ...]

    @property
    def attribute(self) -> str:
        return self.axis.attribute


def grid_axis(schema: Schema, name: object, edges: Sequence[int] | None = None) -> GridAxis:
    """The bins of attribute ``name``: one per value when it has at most ``MAX_BINS``;
    else ``edges`` (half-open integer bin edges, as for a histogram), or bins of equal
    width. Raises :class:`QueryError` or :class:`TooLarge` for bad or too many bins."""
    attr = schema.attribute(requests.attribute_name(name, schema))
    size = attr.size
    if edges is not None:  # a histogram's cells: the same rule as the histogram's
        spans = [c[0] for c in requests.histogram_bins(attr, edges, MAX_BINS)]
    elif size <= MAX_BINS:
        spans = [(p, p + 1) for p in range(size)]
    else:  # equal widths over the declared values; the missing value keeps its cell
        m = attr.value_count
        width = math.ceil(m / (MAX_BINS - (size - m)))
        spans = list(itertools.pairwise([*range(0, m, width), m]))
        spans += [(m, size)] if size > m else []
    pos = [spans[0][0]] + [e for _, e in spans]
    return GridAxis(Axis(attr.name, tuple(pos)), tuple(_label(attr, s) for s in spans))


def _label(attr, span: tuple[int, int]) -> str:
    s, e = span
    if attr.missing_cell and s == attr.value_count:
        return "missing"
    if e - s == 1:
        return str(attr.value(s))
    if attr.type == "integer":
        return f"{attr.value(s)}–{attr.value(e - 1)}"
    return f"{attr.value(s)} … {attr.value(e - 1)}"


def cell_query(schema: Schema, rows: GridAxis, i: int, cols: GridAxis, j: int) -> Query:
    """The query of cell (i, j): its row's bin and its column's bin, any other value."""
    return Query.from_coverages(
        schema,
        {rows.attribute: (rows.axis.spans()[i],), cols.attribute: (cols.axis.spans()[j],)},
    )


def cell_text(schema: Schema, rows: GridAxis, i: int, cols: GridAxis, j: int) -> str:
    """The query text of cell (i, j), as ``GET /v1/budget?query=`` takes it."""
    return " AND ".join(
        render_coverage(schema.attribute(g.attribute), (g.axis.spans()[k],))
        for g, k in ((rows, i), (cols, j))
    )


@dataclass(frozen=True)
class Losses:
    """The largest loss of each cell (exact fractions) and which cells are exact."""

    values: np.ndarray  # object array of Fraction, shape (rows, cols)
    exact: np.ndarray  # bool array
    method: str  # "grid" (one pass) or "cells" (cell by cell)


def cell_losses(
    filt: OverlapFilter,
    table: str,
    rows: GridAxis,
    cols: GridAxis,
    analyst: str | None = None,
    *,
    deadline: float = math.inf,
) -> Losses:
    """max over each cell's points of the loss on ``table`` (only ``analyst``'s charges
    if given): the ``local`` figure of each cell's query."""
    charges: list[Charge] = filt.charges(table, analyst)
    shape = (rows.axis.bins, cols.axis.bins)
    if not charges:
        return Losses(np.full(shape, Fraction(0), dtype=object), np.ones(shape, bool), "grid")
    scale = math.lcm(*{c.cost.denominator for c in charges})
    weights = [c.cost.numerator * (scale // c.cost.denominator) for c in charges]
    got = grid_max_loss(
        [c.query for c in charges], weights, rows.axis, cols.axis, deadline=deadline
    )
    if got is not None:
        memo: dict[int, Fraction] = {}
        values = np.empty(shape, dtype=object)
        for idx, v in np.ndenumerate(got):
            f = memo.get(int(v))
            if f is None:
                f = memo[int(v)] = Fraction(int(v), scale)
            values[idx] = f
        return Losses(values, np.ones(shape, bool), "grid")
    schema = charges[0].query.schema
    values = np.empty(shape, dtype=object)
    exact = np.zeros(shape, dtype=bool)
    for i in range(shape[0]):
        for j in range(shape[1]):
            q = cell_query(schema, rows, i, cols, j)
            if time.monotonic() < deadline:
                loss = filt.local(table, q, analyst, deadline=deadline)
                values[i, j], exact[i, j] = loss.value, loss.exact
            else:  # the largest level bounds every analyst's loss too
                values[i, j], exact[i, j] = filt.quick_local(table, q), False
    return Losses(values, exact, "cells")


def worst_loss(
    filt: OverlapFilter,
    tables: Sequence[str],
    analyst: str | None = None,
    *,
    deadline: float = math.inf,
) -> tuple[Fraction, bool]:
    """The most any one person may have lost on ``tables`` (only ``analyst``'s charges
    if given): the sum of each table's largest loss, as
    :meth:`OverlapFilter.elsewhere` computes it, with whether it is exact. Each table's
    maximum is the largest cell of a grid of one row per value of its first attribute
    (:func:`grid_max_loss`, which can then work in blocks), else the filter's own."""
    total, exact = Fraction(0), True
    for t in tables:
        charges = filt.charges(t, analyst)
        if not charges:
            continue
        schema = charges[0].query.schema
        if len(schema) >= 2:
            a, b = schema.attributes[:2]
            scale = math.lcm(*{c.cost.denominator for c in charges})
            weights = [c.cost.numerator * (scale // c.cost.denominator) for c in charges]
            width = max(1, math.ceil(a.size / 4096))
            got = grid_max_loss(
                [c.query for c in charges],
                weights,
                Axis(a.name, (*range(0, a.size, width), a.size)),
                Axis(b.name, (0, b.size)),
                deadline=deadline,
            )
            if got is not None:
                total += Fraction(int(got.max()), scale)
                continue
        loss = filt.worst(t, analyst, deadline=deadline)
        total += loss.value
        exact = exact and loss.exact
    return total, exact


@dataclass(frozen=True)
class RemainingGrid:
    """What :meth:`Curator.remaining_detail` says of each cell's query, for one caller.

    ``remaining`` is the smaller of ``remaining_budget`` (for everyone) and
    ``quota_remaining`` (the caller's quota; None without one), in the budget's own
    unit, never more than truly remains; ``exact`` is False for the cells where a time
    limit made the figures lower bounds.
    """

    table: str
    rows: GridAxis
    cols: GridAxis
    remaining: list[list[float]]
    remaining_budget: list[list[float]]
    quota_remaining: list[list[float]] | None
    exact: list[list[bool]]
    method: str
    version: int
    seconds: float


def remaining_grid(
    curator: Curator,
    table: str,
    rows: GridAxis,
    cols: GridAxis,
    *,
    analyst: str | None = None,
    filt: OverlapFilter | None = None,
    time_limit: float = TIME_LIMIT,
    everyone: Losses | None = None,
) -> RemainingGrid:
    """The remaining budget of every cell of ``rows`` x ``cols`` on ``table``, as
    ``curator.remaining_detail(cell, _analyst=analyst)`` would give it.

    ``filt``: a snapshot to read (default: a new one); ``everyone``: the cells' losses
    over all charges already computed on that snapshot (they do not depend on the
    caller)."""
    start = time.monotonic()
    deadline = start + time_limit
    if rows.attribute == cols.attribute:
        raise QueryError("pick two different attributes")
    f = snapshot(curator) if filt is None else filt
    budget = curator.budget
    quota = None
    if analyst is not None:
        q = curator.ledger.quota(analyst)
        quota = None if q is False or q is None else q
    shown: dict[Fraction, float] = {}

    def display(x: Fraction) -> float:
        v = shown.get(x)
        if v is None:
            v = shown[x] = budget.display(x)
        return v

    others = [t for t in curator.tables if t != table]
    every = everyone or cell_losses(f, table, rows, cols, deadline=deadline)
    there, there_exact = worst_loss(f, others, deadline=deadline)
    left = [[budget.amount - (v + there) for v in row] for row in every.values]
    exact = every.exact & there_exact
    method = every.method
    quota_left = None
    if quota is not None:
        mine = cell_losses(f, table, rows, cols, analyst, deadline=deadline)
        mine_there, mine_exact = worst_loss(f, others, analyst, deadline=deadline)
        quota_left = [[quota - (v + mine_there) for v in row] for row in mine.values]
        exact = exact & mine.exact & mine_exact
        method = "cells" if "cells" in (method, mine.method) else method
    both = (
        left
        if quota_left is None
        else [
            [min(a, b) for a, b in zip(r1, r2, strict=True)]
            for r1, r2 in zip(left, quota_left, strict=True)
        ]
    )
    return RemainingGrid(
        table=table,
        rows=rows,
        cols=cols,
        remaining=[[display(x) for x in row] for row in both],
        remaining_budget=[[display(x) for x in row] for row in left],
        quota_remaining=None
        if quota_left is None
        else [[display(x) for x in row] for row in quota_left],
        exact=exact.tolist(),
        method=method,
        version=f.last_id,
        seconds=time.monotonic() - start,
    )
