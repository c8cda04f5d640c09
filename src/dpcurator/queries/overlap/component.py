"""One connected component of the query-attribute graph, as the strategies see it.

Attributes linked by no query are independent, so gamma_w is the sum of the components'
optima (:mod:`~dpcurator.queries.overlap.split` finds them). A :class:`Component` holds
its queries' predicates as coverage ids per attribute, and builds lazily what the
strategies share: the atoms of each attribute, the disjoint families and their bound,
and the test of which queries cover a point. Every strategy returns a :class:`Solution`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpcurator.queries.overlap.atoms import Attr, atoms
from dpcurator.queries.overlap.families import Families, families
from dpcurator.queries.predicates import IntervalSet, Query


@dataclass(frozen=True)
class Solution:
    """A strategy's answer for one component: ``assign`` is the best point found
    (attribute position -> value position) and ``value`` its weight; ``upper`` bounds the
    component's optimum (both equal it, up to rounding, when ``exact``)."""

    value: float
    upper: float
    assign: dict[int, int]
    exact: bool


class Component:
    """Queries linked through shared attributes; solved independently of the others."""

    def __init__(
        self,
        queries: Sequence[Query],
        weights: np.ndarray,
        local: np.ndarray,
        attr_ids: list[int],
        eps: float,
        preds: tuple[np.ndarray, np.ndarray, np.ndarray],
        covs: Sequence[Sequence[IntervalSet]],
    ) -> None:
        self.queries = queries
        self.local = local  # global query index per local index (sorted)
        self.w = weights[local]
        self.eps = eps
        self.schema = queries[int(local[0])].schema
        self.attr_ids = attr_ids
        na = len(attr_ids)
        # predicates of the component: (local query, attribute position, coverage id),
        # grouped by query in query order; coverages are interned per attribute
        pos_of = np.full(len(self.schema), -1, np.int64)
        pos_of[attr_ids] = np.arange(na)
        pred_q, pred_a, pred_c = preds
        self.pair_q = np.searchsorted(local, pred_q)
        self.pair_a = pos_of[pred_a]
        by_attr = np.argsort(self.pair_a, kind="stable")
        cuts = np.searchsorted(self.pair_a[by_attr], np.arange(na + 1))
        #: per attribute position: the (sorted) local queries constraining it
        self.cons = [self.pair_q[by_attr[cuts[i] : cuts[i + 1]]] for i in range(na)]
        raw = [pred_c[by_attr[cuts[i] : cuts[i + 1]]] for i in range(na)]
        #: distinct coverages per attribute, and each constraining query's coverage id
        self.covs: list[list[IntervalSet]] = []
        self.cid: list[np.ndarray] = []
        for ai, j in enumerate(attr_ids):
            used, inv = np.unique(raw[ai], return_inverse=True)
            self.covs.append([covs[j][int(c)] for c in used])
            self.cid.append(inv.ravel().astype(np.int64))
        self.qkeys = _keys(self.pair_q, self.pair_a, len(local))
        self._intervals: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @cached_property
    def single(self) -> bool:
        """Every predicate is one interval of positions (boxes: Helly applies)."""
        return all(len(c) == 1 for cs in self.covs for c in cs)

    @cached_property
    def attrs(self) -> list[Attr]:
        """The atoms of each attribute (positions as in ``attr_ids``)."""
        return [
            atoms(self.schema.attributes[j].size, self.covs[ai], self.cons[ai], self.cid[ai])
            for ai, j in enumerate(self.attr_ids)
        ]

    @cached_property
    def families(self) -> Families:
        """The families of pairwise-disjoint queries (grids), found by hashing."""
        lines = [self.queries[int(qi)].line for qi in self.local]
        return families(self.qkeys, self._coverage_ids, self.covs, lines)

    def _coverage_ids(self, ai: int, members: np.ndarray) -> np.ndarray:
        # cons[ai] is sorted, and every member constrains ai
        return self.cid[ai][np.searchsorted(self.cons[ai], members)]

    def bound(self, alive: np.ndarray) -> float:
        """The disjoint-family bound on the weight of the alive queries at one point."""
        return self.families.bound(self.w, alive)

    def intervals(self, ai: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct coverages of attribute ``ai`` as flat arrays (owner, start, end)."""
        hit = self._intervals.get(ai)
        if hit is None:
            covs = self.covs[ai]
            owner = np.repeat(np.arange(len(covs)), [len(c) for c in covs])
            flat = [iv for c in covs for iv in c]
            arr = np.asarray(flat, np.int64).reshape(-1, 2)
            hit = self._intervals[ai] = (owner, arr[:, 0], arr[:, 1])
        return hit

    def covered(self, assign: Mapping[int, int]) -> np.ndarray:
        """Local queries that cover the point (attribute position -> value position)."""
        ok = np.ones(len(self.w), bool)
        for ai in range(len(self.attr_ids)):
            p = assign.get(ai, 0)
            owner, starts, ends = self.intervals(ai)
            inside = np.zeros(len(self.covs[ai]), bool)
            inside[owner[(starts <= p) & (p < ends)]] = True
            hit = inside[self.cid[ai]] if len(self.cid[ai]) else np.zeros(0, bool)
            ok[self.cons[ai][~hit]] = False
        return ok


def _keys(pair_q: np.ndarray, pair_a: np.ndarray, n: int) -> list[tuple[int, ...]]:
    """Per query, the tuple of attribute positions it constrains (pairs are grouped by
    query, attributes in schema order)."""
    counts = np.bincount(pair_q, minlength=n)
    starts = np.r_[0, np.cumsum(counts)]
    pa = pair_a.tolist()
    return [tuple(pa[starts[k] : starts[k + 1]]) for k in range(n)]
