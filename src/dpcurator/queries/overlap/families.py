"""Families of pairwise-disjoint queries, and the bound they give.

A *family* is a set of queries on the same attributes whose coverages on each attribute
are pairwise equal or disjoint (a grid: histogram bins, the cells of a marginal table);
two of them overlap iff they are equal. At most one query of a family covers a point,
so gamma_w <= sum over families of the heaviest query: the colouring argument of Smith
et al. (PoPETs 2022) applied to classes found without the pairwise graph.

When it applies: always, as an **upper bound** (every query not in a larger family is a
family of its own); for a workload of marginal tables it equals the number of tables,
which is what lets branch and bound and the 0/1 program prove optimality at the root.
Cost: near-linear, by hashing coverage ids (no t x t graph).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator.queries.predicates import IntervalSet

#: ``cid_of(ai, members)``: the coverage ids of the queries ``members`` on attribute ``ai``.
CoverageIds = Callable[[int, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Families:
    """Family ids of a component's queries, and their grouping."""

    gid: np.ndarray  # family id per query, 0 .. families - 1
    order: np.ndarray  # queries sorted by family
    starts: np.ndarray  # where each family starts in ``order``

    @classmethod
    def of(cls, gid: np.ndarray) -> Families:
        order = np.argsort(gid, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(gid[order]) != 0])
        return cls(gid, order, starts)

    def bound(self, w: np.ndarray, alive: np.ndarray) -> float:
        """Upper bound on the weight of alive queries covering one point: the heaviest
        alive query of each family."""
        v = np.where(alive, w, 0.0)[self.order]
        return float(np.maximum.reduceat(v, self.starts).sum()) if len(v) else 0.0


def families(
    qkeys: Sequence[tuple[int, ...]],
    cid_of: CoverageIds,
    covs: Sequence[Sequence[IntervalSet]],
    lines: Sequence[int | None],
) -> Families:
    """Group the queries so that the queries of one group are pairwise disjoint.

    ``qkeys[k]``: the (component) attributes query k constrains; ``covs[ai]``: the
    distinct coverages of attribute ``ai``; ``lines[k]``: the workload line of query k
    (a macro's cells form a grid even when another line repeats some of them).
    """
    n = len(qkeys)
    gid = np.arange(n, dtype=np.int64)
    buckets: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for k, key in enumerate(qkeys):
        buckets[key].append(k)
    grid = _Grids(gid, cid_of, covs, n)
    for key, members in buckets.items():
        if len(members) < 2 or grid.mark(np.asarray(members, np.int64), key):
            continue
        by_line: dict[int | None, list[int]] = defaultdict(list)
        for k in members:
            by_line[lines[k]].append(k)
        for sub in by_line.values():
            if len(sub) >= 2 and len(by_line) > 1:
                grid.mark(np.asarray(sub, np.int64), key)
    _, dense_ids = np.unique(gid, return_inverse=True)
    return Families.of(dense_ids.ravel())


class _Grids:
    """Assigns family ids to the queries of grids, in place in ``gid``."""

    def __init__(
        self, gid: np.ndarray, cid_of: CoverageIds, covs: Sequence[Sequence[IntervalSet]], n: int
    ) -> None:
        self.gid = gid
        self.cid_of = cid_of
        self.covs = covs
        self.next_id = n

    def disjoint(self, ai: int, ids: np.ndarray) -> bool:
        flat = sorted(iv for c in ids for iv in self.covs[ai][int(c)])
        return not any(b[0] < a[1] for a, b in itertools.pairwise(flat))

    def mark(self, members: np.ndarray, attrs: tuple[int, ...]) -> bool:
        """If ``members`` form a grid (equal or disjoint coverages on every attribute),
        give the queries of each cell distinct families (one query per cell and family)."""
        cells = np.empty((len(members), len(attrs)), np.int64)
        for d, ai in enumerate(attrs):
            col = self.cid_of(ai, members)
            if not self.disjoint(ai, np.unique(col)):
                return False
            cells[:, d] = col
        _, cell = np.unique(cells, axis=0, return_inverse=True)
        cell = cell.ravel()
        order = np.argsort(cell, kind="stable")
        sc = cell[order]
        first = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        rank = np.arange(len(sc)) - np.repeat(first, np.diff(np.r_[first, len(sc)]))
        self.gid[members[order]] = self.next_id + rank
        self.next_id += int(rank.max()) + 1
        return True
