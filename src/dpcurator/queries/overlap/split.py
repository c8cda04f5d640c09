"""From queries to independent components: validation, interning, shared values.

One pass over the predicates interns each attribute's coverages (a predicate object
shared by many queries, as in expanded marginals, is handled once), so everything after
works on integer ids; empty and weight-0 queries drop out. An attribute on which all
the constraints share a value is fixed there (every query constraining it is satisfied
on it) and its predicates are dropped. Attributes linked by no query are independent,
so the rest splits into the connected components of the query-attribute graph, whose
optima add up (Smith et al., PoPETs 2022, define gamma as a maximum over points, and a
point is one choice per attribute). A component of one query is decided here: any point
of it.

Exact. Cost: near-linear in the number of predicates.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.predicates import IntervalSet, Query, intersect
from dpcurator.queries.schema import Attribute


def prepare(
    queries: Sequence[Query] | Iterable[Query], weights: Sequence[float] | np.ndarray | None
) -> tuple[list[Query], np.ndarray, bool]:
    """(queries, weights as floats, all weights integers); weights default to those of a
    workload, else 1. Raises ValueError on bad weights or mixed schemas."""
    qs = list(queries)
    if weights is None:
        ws = getattr(queries, "weights", None)
        weights = ws if ws is not None else [1.0] * len(qs)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (len(qs),):
        raise ValueError(f"got {len(w)} weights for {len(qs)} queries")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    if qs:
        schema = qs[0].schema
        if any(q.schema is not schema and q.schema != schema for q in qs):
            raise ValueError("all queries must share one schema")
    integral = bool(np.all(w == np.round(w)))
    return qs, w, integral


def unions(qs: Sequence[Query]) -> np.ndarray | None:
    """For a list holding boolean queries (unions of boxes), the index of the query
    each box of ``[b for q in qs for b in q.boxes]`` belongs to; None if all are boxes."""
    if all(isinstance(q, Query) for q in qs):
        return None
    return np.repeat(np.arange(len(qs)), [len(q.boxes) for q in qs])


@dataclass
class Split:
    """The problem after splitting: ``point`` (value position per schema attribute) is
    fixed on shared-value attributes and lone queries' attributes; ``covered`` marks the
    queries known to cover it, of total weight ``total``; ``components`` remain."""

    point: list[int]
    covered: np.ndarray
    total: float
    components: list[Component]

    def place(self, comp: Component, sol: Solution) -> None:
        """Record a component's point: its attributes' values and its covering queries."""
        self.covered[comp.local[comp.covered(sol.assign)]] = True
        for ai, p in sol.assign.items():
            self.point[comp.attr_ids[ai]] = p


@dataclass
class _Predicates:
    """Every predicate of the active constrained queries as (query, attribute,
    coverage id), with the distinct coverages per attribute and single intervals."""

    pq: np.ndarray
    pa: np.ndarray
    pc: np.ndarray
    start: np.ndarray  # start of the coverage when it is one interval, else -1
    end: np.ndarray
    covs: list[list[IntervalSet]]


def split_components(qs: list[Query], w: np.ndarray, eps: float) -> Split:
    """Split non-empty ``qs`` (all boxes) with weights ``w`` into components."""
    schema = qs[0].schema
    preds, empty = _intern(qs)
    active = ~empty & (w > 0)
    constrained = active & (np.bincount(preds.pq, minlength=len(qs)) > 0)
    keep = constrained[preds.pq]
    preds = _Predicates(
        preds.pq[keep],
        preds.pa[keep],
        preds.pc[keep],
        preds.start[keep],
        preds.end[keep],
        preds.covs,
    )
    point = [0] * len(schema)
    preds = _fix_shared(schema.attributes, preds, point)
    still = np.zeros(len(qs), bool)
    still[preds.pq] = True
    constrained &= still
    out = Split(point, active & ~constrained, float(w[active & ~constrained].sum()), [])
    for members, attrs, sel in _components(preds, constrained, len(qs), len(schema)):
        if len(members) == 1:  # one query: any point of it
            out.covered[members[0]] = True
            out.total += float(w[members[0]])
            for j, c in zip(preds.pa[sel].tolist(), preds.pc[sel].tolist(), strict=True):
                point[j] = preds.covs[j][c][0][0]
            continue
        sub = (preds.pq[sel], preds.pa[sel], preds.pc[sel])
        out.components.append(Component(qs, w, np.asarray(members), attrs, eps, sub, preds.covs))
    return out


def _intern(qs: list[Query]) -> tuple[_Predicates, np.ndarray]:
    """All predicates, coverages interned per attribute; and which queries are empty."""
    schema = qs[0].schema
    index = schema._index
    lens = np.fromiter((len(q.predicates) for q in qs), np.int64, len(qs))
    flat = list(itertools.chain.from_iterable(q.predicates for q in qs))
    # predicates are often shared between queries (macro expansion): handle each
    # distinct object once
    ids = np.fromiter(map(id, flat), np.uint64, len(flat))
    _, first_of, codes = np.unique(ids, return_index=True, return_inverse=True)
    codes = codes.ravel()
    distinct = [flat[i] for i in first_of.tolist()]
    interned: list[dict[IntervalSet, int]] = [{} for _ in range(len(schema))]
    dj = np.empty(len(distinct), np.int64)
    dc = np.empty(len(distinct), np.int64)
    dempty = np.empty(len(distinct), bool)
    dstart = np.full(len(distinct), -1, np.int64)
    dend = np.full(len(distinct), -1, np.int64)
    for k, p in enumerate(distinct):
        j = index[p.attribute.name]
        table = interned[j]
        dj[k] = j
        dc[k] = table.setdefault(p.coverage, len(table))
        dempty[k] = not p.coverage
        if len(p.coverage) == 1:
            dstart[k], dend[k] = p.coverage[0]
    pq = np.repeat(np.arange(len(qs)), lens)
    empty = np.bincount(pq, weights=dempty[codes], minlength=len(qs)) > 0
    covs = [list(table) for table in interned]
    preds = _Predicates(pq, dj[codes], dc[codes], dstart[codes], dend[codes], covs)
    return preds, empty


def _fix_shared(
    attributes: Sequence[Attribute], preds: _Predicates, point: list[int]
) -> _Predicates:
    """Fix every attribute on which all the constraints share a value (in ``point``) and
    drop its predicates."""
    if not len(preds.pa):
        return preds
    by = np.argsort(preds.pa, kind="stable")
    js, first = np.unique(preds.pa[by], return_index=True)
    ps, pe = preds.start[by], preds.end[by]
    multi = np.minimum.reduceat(ps, first) < 0
    hi_start = np.maximum.reduceat(ps, first)
    lo_end = np.minimum.reduceat(pe, first)
    free = np.zeros(len(attributes), bool)
    ok = ~multi & (hi_start < lo_end)
    free[js[ok]] = True
    for j, s0 in zip(js[ok].tolist(), hi_start[ok].tolist(), strict=True):
        point[j] = s0
    bnd = np.r_[first, len(by)]
    for t in np.flatnonzero(multi).tolist():
        j = int(js[t])
        inter: IntervalSet = ((0, attributes[j].size),)
        for c in np.unique(preds.pc[by[bnd[t] : bnd[t + 1]]]).tolist():
            inter = intersect(inter, preds.covs[j][c])
        if inter:
            free[j] = True
            point[j] = inter[0][0]
    if not free.any():
        return preds
    keep = ~free[preds.pa]
    return _Predicates(
        preds.pq[keep],
        preds.pa[keep],
        preds.pc[keep],
        preds.start[keep],
        preds.end[keep],
        preds.covs,
    )


def _components(
    preds: _Predicates, constrained: np.ndarray, nq: int, na: int
) -> list[tuple[list[int], list[int], np.ndarray]]:
    """Connected components of the bipartite graph queries -- attributes, as (queries,
    attributes, indices of their predicates)."""
    pq, pa = preds.pq, preds.pa
    graph = sparse.coo_matrix((np.ones(len(pq)), (pq, nq + pa)), shape=(nq + na, nq + na))
    _, labels = connected_components(graph, directed=False)
    comp_q: dict[int, list[int]] = defaultdict(list)
    cidx = np.flatnonzero(constrained)
    for qi, lab in zip(cidx.tolist(), labels[cidx].tolist(), strict=True):
        comp_q[lab].append(qi)
    comp_attrs: dict[int, list[int]] = defaultdict(list)
    used = np.zeros(na, bool)
    used[pa] = True
    for j in np.flatnonzero(used).tolist():
        comp_attrs[int(labels[nq + j])].append(j)
    pred_lab = labels[pq]
    pred_order = np.argsort(pred_lab, kind="stable")
    lab_sorted = pred_lab[pred_order]
    out = []
    for root, members in comp_q.items():
        lo, hi = np.searchsorted(lab_sorted, [root, root + 1])
        out.append((members, comp_attrs[root], pred_order[lo:hi]))
    return out
