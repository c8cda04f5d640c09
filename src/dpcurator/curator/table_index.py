"""One table's charges, indexed for the filter: each charge's per-attribute hull and
level in numpy arrays, shared copy-on-write by the filter's forks (see
:class:`TableIndex`), and the level order that finds the largest level near a query
(:mod:`dpcurator.curator.level_order`). The filter itself, and the theorems it applies,
are in :mod:`dpcurator.curator.overlap_filter`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcurator.curator.lazy_rows import LazyRows
from dpcurator.curator.level_order import LevelOrder, meeting
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import hull
from dpcurator.queries.overlap.dense import box_maximum
from dpcurator.queries.predicates import disjoint

if TYPE_CHECKING:
    from dpcurator.curator.checkpoint import TableSegment

#: A charge's coverage for the fast paths: one interval per attribute it constrains (its
#: hull is its coverage), a union or several intervals, or no point at all (the codes
#: of :mod:`dpcurator.curator.checkpoint`).
BOX, UNION, EMPTY = 0, 1, 2
#: How many charges :meth:`TableIndex.likely_near` compares with a query at most.
SAMPLED = 8192


@dataclass(frozen=True)
class Charge:
    """One answered request: the points it covered (``query``) and what it cost there.

    ``level`` is the level recorded when it was admitted (see the module docstring); the
    filter may later lower it in memory when an exact computation shows a smaller bound.
    """

    id: int
    table: str
    analyst: str | None
    query: Query
    cost: Fraction
    level: Fraction


def float_up(x: Fraction) -> float:
    """The smallest float >= x (inf if x is beyond the float range)."""
    try:
        f = float(x)
    except OverflowError:
        return math.inf
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


class TableIndex:
    """The charges of one table, with each one's per-attribute hull [lo, hi) and level in
    numpy arrays, so that the charges that may overlap a query are found, and their
    largest level read, in a few vector operations (10^4 charges: ~0.2 ms).

    Snapshots share storage. The first ``n`` rows are never rewritten except to lower a
    level (every level ever stored is a valid bound, so a reader that sees either the
    old or the new one is right, and a level proven on a snapshot holds for the filter it
    came from: see :meth:`OverlapFilter.fork`). New rows go past ``n``: the filter a
    snapshot came from appends there freely, and a snapshot that adds charges of its own
    first takes private copies (``owned``). So a snapshot costs O(1), not O(charges).
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.names = {name: j for j, name in enumerate(schema.names)}
        self.sizes = np.array([schema.attribute(n).size for n in schema.names], dtype=np.int64)
        self.n = 0
        self.charges: LazyRows[Charge] = LazyRows()
        # current levels (exact), may be lowered
        self.levels: LazyRows[Fraction] = LazyRows(lower=min)
        self.lo = np.zeros((64, len(self.names)), dtype=np.int64)
        self.hi = np.zeros((64, len(self.names)), dtype=np.int64)
        self.level = np.zeros(64)  # float levels rounded up: safe for bounds
        self.shape = np.zeros(64, dtype=np.uint8)  # BOX, UNION or EMPTY
        # each charge's cost and analyst, as indices into these (appended only)
        self.cost = np.zeros(64, dtype=np.int32)
        self.who = np.zeros(64, dtype=np.int32)
        self.costs: list[Fraction] = []
        self.whos: list[str | None] = []
        self._codes: dict[object, int] = {}
        self.top = Fraction(0)  # at least every level: bounds max_x L(x) on the table
        self.spent: dict[str | None, Fraction] = {}  # each analyst's costs, summed
        self.owned = True
        self.order: LevelOrder | None = None  # the first charges by level (built lazily)
        # The newest order built on rows this index shares with the filter it was forked
        # from, shared by that filter and all its snapshots (so that one fork's build
        # serves the next), and how many of its rows are that filter's (None: it is it).
        self._cell: list[LevelOrder | None] = [None]
        self.shared_upto: int | None = None

    def snapshot(self) -> TableIndex:
        new = TableIndex.__new__(TableIndex)
        new.__dict__.update(self.__dict__)
        new.spent = dict(self.spent)
        new.owned = False
        new.shared_upto = self.n if self.shared_upto is None else min(self.shared_upto, self.n)
        return new

    _ARRAYS = ("lo", "hi", "level", "shape", "cost", "who")

    def _own(self) -> None:
        """Private copies of the shared storage, before this snapshot writes a row."""
        n = self.n
        self.charges, self.levels = self.charges.head(n), self.levels.head(n)
        for name in self._ARRAYS:
            setattr(self, name, getattr(self, name).copy())
        # the codes first: a code is published only after its value is appended (_code)
        self._codes = dict(self._codes)
        self.costs, self.whos = list(self.costs), list(self.whos)
        self.owned = True

    def _grow(self, size: int) -> None:
        """Room for ``size`` rows in the arrays (doubling)."""
        if size > len(self.lo):
            room = max(size, 2 * len(self.lo))
            for name in self._ARRAYS:
                old = getattr(self, name)
                new = np.zeros((room, *old.shape[1:]), dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def _code(self, kind: str, value: object) -> int:
        """The index of a cost (``kind="cost"``) or an analyst (``"who"``) in its list."""
        key = (kind, value)
        code = self._codes.get(key)
        if code is None:
            values: list = self.costs if kind == "cost" else self.whos
            code = len(values)
            values.append(value)
            self._codes[key] = code  # last: a snapshot copying now never sees it half-made
        return code

    def add(self, charge: Charge) -> None:
        if not self.owned:
            self._own()
        n = self.n
        self._grow(n + 1)
        self.charges.truncate(n)  # rows a rollback left behind
        self.levels.truncate(n)
        self._drop_orders_past(n)  # they hold rows a rollback left behind
        self.lo[n] = 0
        self.hi[n] = 0  # lo = hi = 0: overlaps nothing (empty charges stay so)
        self.level[n] = float_up(charge.level)
        q = charge.query
        if q.is_empty:
            self.shape[n] = EMPTY
        else:
            one = isinstance(q, Query) and all(len(p.coverage) == 1 for p in q.predicates)
            self.shape[n] = BOX if one else UNION
            self.hi[n] = self.sizes
            for name, (lo, hi) in hull(q).items():
                j = self.names[name]
                self.lo[n, j], self.hi[n, j] = lo, hi
        self.cost[n] = self._code("cost", charge.cost)
        self.who[n] = self._code("who", charge.analyst)
        self.charges.append(charge)
        self.levels.append(charge.level)
        self.n = n + 1  # last: a reader of the shared storage never sees a half-made row
        self.top = max(self.top, charge.level)
        self.spent[charge.analyst] = self.spent.get(charge.analyst, Fraction(0)) + charge.cost

    def load(
        self,
        parts: Sequence[TableSegment],
        top: Fraction,
        spent: dict[str | None, Fraction],
        make: Callable[[int], Charge],
        level_of: Callable[[int], Fraction],
    ) -> None:
        """Start from a checkpoint's charges of this table (an empty index only): their
        arrays copied in, their charges and exact levels made by ``make(i)`` and
        ``level_of(i)`` when first read (see :mod:`dpcurator.curator.checkpoint`).
        ``ValueError`` if they name an attribute the schema lacks or pass its domain."""
        assert self.n == 0 and self.owned
        total = sum(p.n for p in parts)
        self._grow(total)
        at = 0
        for p in parts:
            rows = slice(at, at + p.n)
            self.hi[rows] = self.sizes
            empty = p.shape == EMPTY
            for c, name in enumerate(p.attrs):
                j = self.names[name]  # KeyError: the caller's ValueError
                lo, hi = p.lo[:, c], p.hi[:, c]
                whole = hi < 0
                flat = ~whole & ~empty & (lo >= hi)
                if (lo < 0).any() or (hi > self.sizes[j]).any() or flat.any():
                    raise ValueError(f"attribute {name}: a hull outside its domain")
                self.lo[rows, j] = np.where(whole, 0, lo)
                self.hi[rows, j] = np.where(whole, self.sizes[j], hi)
            self.lo[rows][empty] = 0
            self.hi[rows][empty] = 0
            self.level[rows] = p.level
            self.shape[rows] = p.shape
            costs = np.array([self._code("cost", Fraction(c)) for c in p.costs], np.int32)
            whos = np.array([self._code("who", a) for a in (*p.analysts, None)], np.int32)
            self.cost[rows] = costs[p.cost]
            self.who[rows] = whos[p.analyst]  # -1: the last, None
            at += p.n
        self.charges = LazyRows(total, make)
        self.levels = LazyRows(total, level_of, lower=min)
        self.n = total
        self.top = top
        self.spent = dict(spent)

    def truncate(self, keep: int) -> None:
        """Forget the charges past ``keep`` (provisional ones, on an owned snapshot)."""
        assert self.owned, "only a snapshot's own charges are rolled back"
        for c in self.charges.range(keep, self.n):
            self.spent[c.analyst] -= c.cost
        self.n = keep
        self._drop_orders_past(keep)
        if self.shared_upto is not None:
            self.shared_upto = min(self.shared_upto, keep)
        self.level[keep:] = 0
        self.hi[keep:] = 0
        self.lo[keep:] = 0

    def lower(self, i: int, value: Fraction) -> None:
        """Lower charge i's level to ``value`` (never raise it)."""
        if value < self.levels[i]:
            self.levels[i] = value
            self.level[i] = float_up(value)

    def lower_all(self, value: Fraction) -> None:
        """Lower every charge's level to at most ``value`` (a bound on every point's
        loss): the floats in one vector operation, the exact levels of the charges a
        checkpoint loaded by a cap, the others one by one."""
        n = self.n
        np.minimum(self.level[:n], float_up(value), out=self.level[:n])
        self.levels.cap(n, value)
        for i in range(self.levels.loaded, n):
            self.lower(i, value)

    def all_charges(self) -> list[Charge]:
        return self.charges.range(0, self.n)

    def box_within(
        self, positions: np.ndarray, query: Query, analyst: object = all, cells: int = 50_000
    ) -> Fraction | None:
        """max over x in C_query of the summed costs of the charges at ``positions`` (only
        ``analyst``'s, if given) covering x, exactly, from the arrays (no query object
        made), when the query and those charges are boxes and their grid within the
        query has at most ``cells`` cells; else None. Each box is clipped to the query's:
        outside it they add nothing, inside they are unchanged."""
        if not isinstance(query, Query) or any(len(p.coverage) != 1 for p in query.predicates):
            return None
        pos = np.asarray(positions, dtype=np.int64)
        if analyst is not all:
            code = self._codes.get(("who", analyst))
            pos = pos[self.who[pos] == code] if code is not None else pos[:0]
        if (self.shape[pos] == UNION).any():
            return None
        lo, hi = self.lo[pos].copy(), self.hi[pos].copy()
        for p in query.predicates:
            j = self.names[p.attribute.name]
            ((qlo, qhi),) = p.coverage
            np.maximum(lo[:, j], qlo, out=lo[:, j])
            np.minimum(hi[:, j], qhi, out=hi[:, j])
        empty = self.shape[pos] == EMPTY
        hi[empty] = lo[empty]  # adds nothing
        costs = self.costs
        scale = math.lcm(*(c.denominator for c in costs))
        weights = [c.numerator * (scale // c.denominator) for c in costs]
        got = box_maximum(self.sizes.tolist(), lo, hi, self.cost[pos], weights, cells)
        return None if got is None else Fraction(got[0], scale)

    def box_worst(self, analyst: object = all) -> tuple[Fraction, dict[str, int]] | None:
        """max_x of the summed costs of the charges covering x (only ``analyst``'s, if
        given), exactly, with the positions of a point reaching it, when every charge
        is a box (its hull is its coverage) and their segment grid is small: from the
        arrays alone, so that the whole table's maximum after a long history costs a
        few vector passes, not a Python pass per charge. None otherwise."""
        n = self.n
        if not n:
            return Fraction(0), {}
        shape = self.shape[:n]
        if (shape == UNION).any():
            return None
        keep = shape == BOX
        if analyst is not all:
            code = self._codes.get(("who", analyst))
            if code is None:
                return Fraction(0), {}
            keep &= self.who[:n] == code
        if not keep.any():
            return Fraction(0), {}
        costs = self.costs
        scale = math.lcm(*(c.denominator for c in costs))
        weights = [c.numerator * (scale // c.denominator) for c in costs]
        got = box_maximum(
            self.sizes.tolist(), self.lo[:n][keep], self.hi[:n][keep], self.cost[:n][keep], weights
        )
        if got is None:
            return None
        value, point = got
        return Fraction(value, scale), dict(zip(self.names, point, strict=True))

    def _drop_orders_past(self, n: int) -> None:
        if self.order is not None and self.order.count > n:
            self.order = None
        shared = self._cell[0]
        if self.shared_upto is None and shared is not None and shared.count > n:
            self._cell[0] = None

    def _box(self, query: Query) -> list[tuple[int, int, int]]:
        return [(self.names[name], lo, hi) for name, (lo, hi) in hull(query).items()]

    def _hull_mask(self, query: Query) -> np.ndarray:
        """Charges whose per-attribute hulls meet the query's: a superset of the overlapping."""
        n = self.n
        return meeting(self.lo[:n], self.hi[:n], self._box(query))

    def top_near(self, query: Query) -> float:
        """An upper bound on the largest level among the charges whose hulls meet the
        query's (0 if none): that level (float, rounded up) as this index or a filter it
        shares rows with last lowered it, scanned from the highest level down
        (:mod:`dpcurator.curator.level_order`)."""
        if query.is_empty or not self.n:
            return 0.0
        n, order, shared = self.n, self.order, self._cell[0]
        mine = n if self.shared_upto is None else min(self.shared_upto, n)  # rows in common
        if (
            shared is not None
            and shared.count <= mine
            and (order is None or shared.count > order.count)
        ):
            order = shared
        if order is None or order.stale(n):
            order = LevelOrder.build(self.lo, self.hi, self.level, n)
            if order.count <= mine and (shared is None or shared.count < order.count):
                self._cell[0] = order  # valid for every index that shares these rows
        self.order = order
        box = self._box(query)
        tail = meeting(self.lo[order.count : n], self.hi[order.count : n], box)
        best = float(self.level[order.count : n][tail].max()) if tail.any() else -1.0
        return max(0.0, order.top_meeting(box, self.level, best))

    def bound(self, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on max_{x in C_query} L(x): the largest level among the charges
        whose hulls meet the query (see the module docstring); with ``refine``, among the
        charges that really overlap it (a Python pass over the hull candidates)."""
        if query.is_empty or not self.n:
            return Fraction(0)
        if refine:
            return max(
                (self.levels[i] for i in self.overlapping_positions(query)), default=Fraction(0)
            )
        return Fraction(self.top_near(query))

    def likely_near(self, query: Query) -> int:
        """About how many charges' hulls meet the query's: all of them counted when they
        are at most :data:`SAMPLED`, else every (n // SAMPLED)-th counted and scaled up,
        so that a long history costs a few thousand comparisons, not n. What it decides
        (whether to look at the charges near a query one by one) changes only how exact
        a bound is, never whether it is safe, and it reads only the public charges."""
        n = self.n
        if query.is_empty or not n:
            return 0
        step = max(1, n // SAMPLED)
        box = self._box(query)
        return int(np.count_nonzero(meeting(self.lo[:n:step], self.hi[:n:step], box))) * step

    def candidate_positions(self, query: Query) -> list[int]:
        if query.is_empty or not self.n:
            return []
        return np.flatnonzero(self._hull_mask(query)).tolist()

    def within_hull(self, query: Query, positions: list[int]) -> list[int]:
        """Those of ``positions`` whose charge's hull lies inside the query's hull: a
        superset of the charges C_query contains (a few vector operations, so that the
        exact containment test runs on few charges)."""
        if not positions:
            return []
        pos = np.array(positions, dtype=np.int64)
        mask = np.ones(len(pos), dtype=bool)
        for name, (lo, hi) in hull(query).items():
            j = self.names[name]
            mask &= (self.lo[pos, j] >= lo) & (self.hi[pos, j] <= hi)
        return pos[mask].tolist()

    def candidates(self, query: Query) -> list[Charge]:
        """The charges whose hulls meet ``query``'s: a superset of those overlapping it."""
        return [self.charges[i] for i in self.candidate_positions(query)]

    def overlapping_positions(self, query: Query) -> list[int]:
        return [
            i for i in self.candidate_positions(query) if not disjoint(self.charges[i].query, query)
        ]
