"""The colouring bound of Smith et al. (PoPETs 2022), and the pairwise-overlap graph.

Two queries are adjacent when they share a point; each colour class of a proper
colouring is a set of pairwise-disjoint queries, so at most one of them covers a point:
gamma <= clique number <= colours, and gamma_w <= sum over classes of the largest
weight. The classes come from a greedy colouring, largest degree first.

When it applies: any workload, as an **upper bound** (the paper's; the solver caps its
own time-limited bound with it when t <= 20,000). Cost: O(t^2) time and memory for the
graph alone, whatever the structure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from dpcurator import deadlines
from dpcurator.queries.overlap.atoms import atoms
from dpcurator.queries.overlap.result import ColouringResult, as_number
from dpcurator.queries.overlap.split import prepare, unions
from dpcurator.queries.predicates import IntervalSet, Query


def overlap_graph(queries: Sequence[Query]) -> np.ndarray:
    """Boolean adjacency matrix: True where two queries share a point (Smith et al.'s
    pairwise-overlap graph; quadratic in the number of queries)."""
    t = len(queries)
    if not t:
        return np.zeros((0, 0), bool)
    owner = unions(queries)
    if owner is not None:  # two unions meet iff some boxes of theirs do
        boxes = overlap_graph([b for q in queries for b in q.boxes])
        onehot = np.zeros((len(owner), t), np.float32)
        onehot[np.arange(len(owner)), owner] = 1
        adj = (onehot.T @ boxes.astype(np.float32) @ onehot) > 0.5
        np.fill_diagonal(adj, False)
        return adj
    schema = queries[0].schema
    adj = np.ones((t, t), bool)
    empty = np.array([q.is_empty for q in queries])
    per_attr: dict[int, tuple[list[int], list[IntervalSet]]] = defaultdict(lambda: ([], []))
    for i, q in enumerate(queries):
        for p in q.predicates:
            idx, covs = per_attr[schema.index(p.attribute.name)]
            idx.append(i)
            covs.append(p.coverage)
    for j, (idx, covs) in per_attr.items():
        ix = np.asarray(idx)
        adj[np.ix_(ix, ix)] &= _meet(schema.attributes[j].size, covs, ix)
    adj[empty, :] = False
    adj[:, empty] = False
    np.fill_diagonal(adj, False)
    return adj


def _meet(size: int, covs: list[IntervalSet], ix: np.ndarray) -> np.ndarray:
    """Which pairs of coverages of one attribute share a value."""
    if all(len(c) == 1 for c in covs):
        lo = np.array([c[0][0] for c in covs])
        hi = np.array([c[0][1] for c in covs])
        return (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
    m = atoms(size, covs, ix).cover.T.astype(np.float32)
    return (m @ m.T) > 0.5


def colouring_bound(
    queries: Sequence[Query] | Iterable[Query], weights: Sequence[float] | np.ndarray | None = None
) -> ColouringResult:
    """The paper's upper bound (Smith et al., PoPETs 2022): greedy (largest-degree-first) colouring of
    the pairwise-overlap graph. gamma <= clique number <= colours; with weights,
    gamma_w <= sum over colour classes of their largest weight. Costs O(t^2)."""
    qs, w, integral = prepare(queries, weights)
    if not qs:
        return ColouringResult(0, 0)
    owner = unions(qs)
    if owner is not None:  # boxes of one query never share a point: same bound
        return colouring_bound([b for q in qs for b in q.boxes], w[owner])
    adj = overlap_graph(qs)
    active = np.array([not q.is_empty for q in qs]) & (w > 0)
    adj[~active] = False
    adj[:, ~active] = False
    colours = _greedy_colours(adj, active)
    ncol = int(colours.max()) + 1 if active.any() else 0
    best = np.zeros(max(ncol, 1))
    np.maximum.at(best, colours[active], w[active])
    value = float(best.sum()) if ncol else 0.0
    return ColouringResult(as_number(value, integral), ncol)


def _greedy_colours(adj: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Colour per vertex (-1 for inactive ones): the smallest colour no coloured
    neighbour has, vertices by decreasing degree."""
    colours = np.full(len(adj), -1, np.int64)
    order = np.argsort(-adj.sum(axis=1), kind="stable")
    for n, v in enumerate(order):
        if n % 256 == 0:
            deadlines.check()
        if not active[v]:
            continue
        used = colours[adj[v]]
        used = used[used >= 0]
        if used.size == 0:
            colours[v] = 0
            continue
        taken = np.zeros(int(used.max()) + 2, bool)
        taken[used] = True
        colours[v] = int(np.argmin(taken))
    return colours
