"""Counts of predicate queries from a dense contingency array (pure numpy, no data access).

A dense array ``D`` over attributes ``a_1 .. a_m`` (shape ``(s_1, .., s_m)``, cell
``D[x]`` = number of rows with codes ``x``) answers every query constraining exactly
those attributes: ``count(q) = sum_x D[x] * prod_j [x_j in C_{q,j}]``. Two batched
evaluations, chosen per query by cost:

* **boxes** — the coverage is a union of ``B = prod_j (#intervals_j)`` boxes; with the
  summed-area table ``P`` each box costs ``2^m`` look-ups (inclusion-exclusion), all
  queries' boxes gathered in one vectorised pass. Exact in int64. Cheap for cells,
  ranges and histograms.
* **indicators** — per attribute a 0/1 matrix ``I_j`` (queries x values); the counts are
  the contraction ``einsum('qa,qb,..,ab..->q')`` done as one matrix product followed by
  batched reductions. Used when a query has many scattered values on several attributes
  (``B`` large). Float64 products of 0/1 and counts are exact below 2^53 rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from dpcurator.queries.predicates import IntervalSet

#: Largest ``queries x cells`` block materialised by the indicator contraction.
_BLOCK = 1 << 23


def prefix_sums(dense: np.ndarray) -> np.ndarray:
    """Summed-area table with a zero border: ``P[i_1..i_m] = sum D[:i_1, .., :i_m]``."""
    p = np.zeros(tuple(s + 1 for s in dense.shape), dtype=np.int64)
    inner = dense.astype(np.int64, copy=True)
    for axis in range(dense.ndim):
        np.cumsum(inner, axis=axis, out=inner)
    p[tuple(slice(1, None) for _ in range(dense.ndim))] = inner
    return p


def box_counts(psum: np.ndarray, coverages: Sequence[Sequence[IntervalSet]]) -> np.ndarray:
    """Counts of queries given as per-attribute interval sets, via the summed-area table."""
    m = psum.ndim
    n = len(coverages)
    lo: list[list[int]] = [[] for _ in range(m)]
    hi: list[list[int]] = [[] for _ in range(m)]
    owner: list[int] = []
    for qi, covs in enumerate(coverages):
        if m == 1:
            for s, e in covs[0]:
                lo[0].append(s)
                hi[0].append(e)
                owner.append(qi)
            continue
        for box in itertools.product(*covs):
            for j, (s, e) in enumerate(box):
                lo[j].append(s)
                hi[j].append(e)
            owner.append(qi)
    if not owner:
        return np.zeros(n, dtype=np.int64)
    lo_a = [np.asarray(x, dtype=np.int64) for x in lo]
    hi_a = [np.asarray(x, dtype=np.int64) for x in hi]
    flat = psum.ravel()
    total = np.zeros(len(owner), dtype=np.int64)
    for corner in range(1 << m):
        idx = []
        lows = 0
        for j in range(m):
            if corner >> j & 1:
                idx.append(hi_a[j])
            else:
                idx.append(lo_a[j])
                lows += 1
        vals = flat[np.ravel_multi_index(tuple(idx), psum.shape)]
        if lows % 2:
            total -= vals
        else:
            total += vals
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, np.asarray(owner, dtype=np.int64), total)
    return out


def _indicator(size: int, covs: Sequence[IntervalSet]) -> np.ndarray:
    ind = np.zeros((len(covs), size), dtype=np.float64)
    for qi, cov in enumerate(covs):
        for s, e in cov:
            ind[qi, s:e] = 1.0
    return ind


def indicator_counts(dense: np.ndarray, coverages: Sequence[Sequence[IntervalSet]]) -> np.ndarray:
    """Counts by contracting ``dense`` with per-attribute 0/1 indicator matrices."""
    n = len(coverages)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    shape = dense.shape
    first, rest = shape[0], math.prod(shape[1:])
    d2 = dense.reshape(first, rest).astype(np.float64)
    step = max(1, _BLOCK // max(1, rest))
    for start in range(0, n, step):
        chunk = coverages[start : start + step]
        t = _indicator(first, [c[0] for c in chunk]) @ d2  # (q, rest): one matrix product
        for j in range(1, len(shape)):
            t = t.reshape(len(chunk), shape[j], -1)
            t = np.einsum("qsr,qs->qr", t, _indicator(shape[j], [c[j] for c in chunk]))
        out[start : start + len(chunk)] = np.rint(t.reshape(len(chunk))).astype(np.int64)
    return out


def contract(
    dense: np.ndarray,
    coverages: Sequence[Sequence[IntervalSet]],
    *,
    psum: np.ndarray | None = None,
) -> np.ndarray:
    """Counts of the queries (per-attribute coverages, in ``dense``'s axis order);
    ``psum``: ``dense``'s summed-area table if already made."""
    n = len(coverages)
    m = dense.ndim
    cells = dense.size
    # Per query: boxes cost B * 2^m look-ups, indicators cost about one pass over the cells.
    by_box: list[int] = []
    by_ind: list[int] = []
    for qi, covs in enumerate(coverages):
        boxes = math.prod(len(c) for c in covs)
        (by_box if boxes << m <= max(64, cells // 4) else by_ind).append(qi)
    out = np.zeros(n, dtype=np.int64)
    if by_box:
        table = prefix_sums(dense) if psum is None else psum
        out[by_box] = box_counts(table, [coverages[i] for i in by_box])
    if by_ind:
        out[by_ind] = indicator_counts(dense, [coverages[i] for i in by_ind])
    return out
