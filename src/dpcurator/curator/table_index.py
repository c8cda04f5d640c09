"""One table's charges, indexed for the filter: each charge's per-attribute hull and
level in numpy arrays, shared copy-on-write by the filter's forks (see
:class:`TableIndex`), and the level order that finds the largest level near a query
(:mod:`dpcurator.curator.level_order`). The filter itself, and the theorems it applies,
are in :mod:`dpcurator.curator.overlap_filter`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcurator.curator.level_order import LevelOrder, meeting
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import hull
from dpcurator.queries.predicates import disjoint


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
        self.charges: list[Charge] = []
        self.levels: list[Fraction] = []  # current levels (exact), may be lowered
        self.lo = np.zeros((64, len(self.names)), dtype=np.int64)
        self.hi = np.zeros((64, len(self.names)), dtype=np.int64)
        self.level = np.zeros(64)  # float levels rounded up: safe for bounds
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

    def _own(self) -> None:
        """Private copies of the shared storage, before this snapshot writes a row."""
        n = self.n
        self.charges, self.levels = self.charges[:n], self.levels[:n]
        self.lo, self.hi, self.level = self.lo.copy(), self.hi.copy(), self.level.copy()
        self.owned = True

    def add(self, charge: Charge) -> None:
        if not self.owned:
            self._own()
        n = self.n
        if n == len(self.lo):
            self.lo = np.concatenate([self.lo, np.zeros_like(self.lo)])
            self.hi = np.concatenate([self.hi, np.zeros_like(self.hi)])
            self.level = np.concatenate([self.level, np.zeros_like(self.level)])
        del self.charges[n:], self.levels[n:]  # rows a rollback left behind
        self._drop_orders_past(n)  # they hold rows a rollback left behind
        self.lo[n] = 0
        self.hi[n] = 0  # lo = hi = 0: overlaps nothing (empty charges stay so)
        self.level[n] = float_up(charge.level)
        if not charge.query.is_empty:
            self.hi[n] = self.sizes
            for name, (lo, hi) in hull(charge.query).items():
                j = self.names[name]
                self.lo[n, j], self.hi[n, j] = lo, hi
        self.charges.append(charge)
        self.levels.append(charge.level)
        self.n = n + 1  # last: a reader of the shared storage never sees a half-made row
        self.top = max(self.top, charge.level)
        self.spent[charge.analyst] = self.spent.get(charge.analyst, Fraction(0)) + charge.cost

    def truncate(self, keep: int) -> None:
        """Forget the charges past ``keep`` (provisional ones, on an owned snapshot)."""
        assert self.owned, "only a snapshot's own charges are rolled back"
        for c in self.charges[keep : self.n]:
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

    def all_charges(self) -> list[Charge]:
        return self.charges[: self.n]

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
