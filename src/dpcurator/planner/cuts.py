"""Finding points whose constraint a candidate split violates (the cutting planes of
:func:`dpcurator.planner.allocation.optimal`).

A split gives query q the cost c_q; the constraint of point x is sum_{q covering x} c_q
<= 1 (in units of the budget). Three ways to find overloaded points, cheapest first:

* **The segment grid** (:func:`dpcurator.queries.overlap.dense.segment_grid`), when it has
  at most :data:`GRID_LIMIT` cells: the load of every cell at once by prefix sums, and
  up to :data:`CUTS_PER_ROUND` cuts, the most loaded cells whose query sets are distinct
  and not contained in one another (a contained set's constraint is implied). Its largest
  load is gamma_w up to float rounding.
* **Cliques of boxes.** When every query is one box (one interval per attribute), boxes
  that pairwise intersect share a point (Helly's theorem for axis-parallel boxes: their
  projections on each axis are pairwise intersecting intervals, which share a point), so
  any clique of the intersection graph is a point's set. Greedy cliques grown from the
  most expensive queries give several violated constraints a round without solving the
  maximum overlap; their largest load is only a lower bound on gamma_w.
* **The exact solver's witness** (:func:`dpcurator.queries.max_overlap`), one cut and the
  exact gamma_w: what remains when neither applies, and what settles a round in which
  no clique is violated.

Either way the loads only steer the search: the split returned is certified by the exact
solver (see :func:`~dpcurator.planner.allocation.optimal`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcurator import deadlines
from dpcurator.queries import OverlapResult, Query, max_overlap
from dpcurator.queries.overlap.dense import segment_grid

#: The most grid cells loaded at every round (8 bytes each).
GRID_LIMIT = 1_000_000
#: The most cuts one round adds.
CUTS_PER_ROUND = 64
#: Cliques are grown from this many of the most expensive queries; with at most
#: LOOKAHEAD queries each step also counts what the added query keeps open (a product
#: of SEEDS x n by n x n at every step: 0.2 s a round at 500 queries, 3 s at 2,000).
SEEDS = 256
LOOKAHEAD = 500
#: The most queries whose intersection graph is built (n^2 bytes, and as much again
#: while it is built); beyond, the exact solver's witness.
CLIQUE_QUERIES = 4000


@dataclass(frozen=True)
class Cuts:
    """What one search found: the query sets of violated points (bool per query), the
    largest load seen and how far it can be trusted: ``result`` is the exact solver's
    (then ``load`` is gamma_w, or its safe upper bound at the time limit); otherwise
    ``exact_load`` says whether ``load`` is gamma_w up to float rounding (the grid) or
    only a lower bound on it (cliques)."""

    load: float
    sets: list[np.ndarray]
    result: OverlapResult | None = None
    exact_load: bool = False


class Separator:
    """Violated point constraints of the costs of ``queries`` (see the module doc)."""

    def __init__(self, queries: list[Query], slack: float) -> None:
        """``slack``: a clique loaded at most 1 + slack is not worth a cut (the exact
        solver settles the round instead)."""
        self.qs, self.slack = queries, slack
        self.grid = segment_grid(queries, GRID_LIMIT)
        self.meet = None
        if self.grid is None and len(queries) <= CLIQUE_QUERIES:
            self.meet = _box_intersections(queries)

    def __call__(self, costs: np.ndarray, time_limit: float, floor: float) -> Cuts:
        """Cuts for ``costs`` (per query, in units of the budget). Points loaded above
        ``floor`` are cut candidates (``floor`` 0: those within 10% of the largest)."""
        if self.grid is not None:
            return self._from_grid(costs, floor)
        if self.meet is not None:
            load, sets = _cliques(self.meet, costs, floor, self.slack)
            if sets:
                return Cuts(load, sets)
        res = max_overlap(self.qs, weights=list(map(float, costs)), time_limit=time_limit)
        load = float(res.value if res.exact else res.upper_bound)
        witness = np.zeros(len(self.qs), bool)
        witness[list(res.witness_queries)] = True
        return Cuts(load, [witness], res)

    def _from_grid(self, costs: np.ndarray, floor: float) -> Cuts:
        assert self.grid is not None
        loads = self.grid.loads(costs).ravel()
        top = float(loads.max())
        want = min(len(loads), 4 * CUTS_PER_ROUND)
        cand = np.argpartition(-loads, want - 1)[:want]
        cand = cand[np.argsort(-loads[cand], kind="stable")]
        cand = cand[loads[cand] >= (floor if floor > 0 else 0.9 * top)]
        return Cuts(top, _not_implied(self.grid.covering(cand)), exact_load=True)


def _not_implied(covers: np.ndarray) -> list[np.ndarray]:
    """The sets (rows, most loaded first) not inside an earlier one: a set inside a more
    loaded one's is implied by its constraint (and so, transitively, by a kept one)."""
    as_float = covers.astype(np.float32)
    inside = as_float @ (1.0 - as_float).T == 0  # [i, j]: set i within set j
    implied = np.tril(inside, -1).any(axis=1)
    return list(covers[np.flatnonzero(~implied)[:CUTS_PER_ROUND]])


def _box_intersections(queries: list[Query]) -> np.ndarray | None:
    """[i, j]: boxes i and j intersect (empty queries meet nothing), or None unless every
    query is one box: one interval on each attribute it constrains."""
    if not queries or any(not isinstance(q, Query) for q in queries):
        return None
    schema = queries[0].schema
    names = sorted({p.attribute.name for q in queries for p in q.predicates})
    lo = np.zeros((len(queries), len(names)), np.int64)
    hi = np.array([[schema.attribute(n).size for n in names]] * len(queries), np.int64)
    empty = np.zeros(len(queries), bool)
    for i, q in enumerate(queries):
        for p in q.predicates:
            if len(p.coverage) > 1:
                return None
            j = names.index(p.attribute.name)
            if p.coverage:
                lo[i, j], hi[i, j] = p.coverage[0]
            else:
                empty[i] = True
    meet = np.ones((len(queries), len(queries)), bool)
    for j in range(len(names)):
        meet &= (lo[:, None, j] < hi[None, :, j]) & (lo[None, :, j] < hi[:, None, j])
    meet[empty, :] = False
    meet[:, empty] = False
    return meet


def _cliques(
    meet: np.ndarray, costs: np.ndarray, floor: float, slack: float
) -> tuple[float, list[np.ndarray]]:
    """Greedy cliques of the intersection graph grown from the most expensive queries
    (each step adds the most expensive query meeting every member): (the largest load,
    the sets of those loaded at least max(floor, 1 + slack), most loaded first; ``floor``
    0: within 10% of the largest)."""
    live = np.flatnonzero(meet.diagonal() & (costs > 0))
    if len(live) == 0:
        return 0.0, []
    seeds = live[np.argsort(-costs[live], kind="stable")][:SEEDS]
    members = np.zeros((len(seeds), len(costs)), bool)
    members[np.arange(len(seeds)), seeds] = True
    open_ = meet[seeds].copy()
    open_[np.arange(len(seeds)), seeds] = False
    ahead = len(costs) <= LOOKAHEAD
    weighted = meet * costs[None, :] if ahead else None
    while open_.any():
        deadlines.check()  # a request's deadline (see dpcurator.deadlines)
        # the query adding the most: its cost and, when the graph is small, the cost of
        # the open queries it keeps open (a one-step look-ahead)
        gain = np.where(open_, costs[None, :], -np.inf)
        if weighted is not None:
            gain = gain + (open_ * costs[None, :]) @ weighted.T
        pick = np.argmax(gain, axis=1)
        growing = open_.any(axis=1)
        rows = np.flatnonzero(growing)
        members[rows, pick[rows]] = True
        open_[rows] &= meet[pick[rows]]
        open_[rows, pick[rows]] = False
    loads = members.astype(float) @ costs
    order = np.argsort(-loads, kind="stable")
    bar = 0.9 * float(loads.max()) if floor <= 0 else max(floor, 1.0 + slack)
    keep = order[loads[order] >= bar]
    if len(keep) == 0:
        return float(loads.max()), []
    unique = np.unique(members[keep], axis=0, return_index=True)[1]
    keep = keep[np.sort(unique)]
    return float(loads.max()), _not_implied(members[keep])
