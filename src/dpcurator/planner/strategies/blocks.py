"""The optimal two-level hierarchy of ranges on one ordered attribute, with per-node costs.

The workload cuts the attribute into D segments (in order). A *two-level hierarchy*
measures every segment, and some *blocks* (runs of consecutive segments, disjoint), each
node at a cost of its own: block B costs c_B on its points, the segments inside it cost
B - c_B each (so every point spends exactly the budget B: the per-point constraint of the
curator's filter, docs/design.md §7), and a segment in no block costs B. This is more
than a tree with one cost per level: where the workload is sparse (for all ranges, near
the ends of the domain, which fewer ranges cover) the blocks stop, and each block's
share of the budget is its own.

**The family's exact optimum, by dynamic programming.** With precisions d = p(B - c_B)
for the segments of B and q = p(c_B) for B itself (p the precision of one count at a
cost: :func:`dpcurator.planner.strategies.costs.precision`), the Gram matrix of the
measurements is block diagonal, X_B = d I + q 1 1^T, so by Sherman–Morrison

    tr(Omega_BB X_B^-1) = t_B / d - q s_B / (d (d + q n_B)),

where Omega = W^T diag(omega) W is the weighted workload's Gram matrix (so that
sum_k omega_k Var_k = tr(Omega X^-1) for the least-squares answers; Li, Miklau, Hay,
McGregor & Rastogi, VLDB J. 2015), n_B the block's size, t_B the trace of Omega over B and
s_B the sum of its entries over B x B. The objective is a sum over blocks of a function
of the block alone, so each block's best cost is a one-dimensional search (all D(D+1)/2
candidate blocks at once, vectorised), and the best partition is a shortest path over the
segment boundaries (O(D^2)). The result is optimal for the two-level family up to the
one-dimensional searches' resolution; the figures reported are always recomputed from
the exact noise at the costs as charged.

On all 2,775 ranges of Adult's 74 ages at epsilon = 1 this gives 100,473 (four blocks of
12 to 15 ages between 27 and 81, the ends measured age by age), against 107,672 for the
best tree with per-level costs and 129,447 for the histogram.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcurator.planner.strategies.costs import precision

#: Grid points of the first pass of each block's one-dimensional search, and the
#: golden-section steps that refine it (each shrinks the bracket by 0.618).
GRID = 64
REFINE = 40
#: Blocks longer than this many segments are not considered (memory: D * LONGEST).
LONGEST = 512


@dataclass(frozen=True)
class TwoLevel:
    """Blocks as [start, end) segment indices with their costs (additive currency);
    segments outside every block are measured at the full budget."""

    blocks: tuple[tuple[int, int], ...]
    costs: tuple[float, ...]
    objective: float  # the model's sum_k omega_k Var_k


def optimal_two_level(omega_gram: np.ndarray, budget: float, currency: str) -> TwoLevel:
    """The two-level hierarchy minimising tr(Omega X^-1) (see the module doc) for the
    workload Gram matrix ``omega_gram`` (D x D, symmetric) under ``budget`` per point."""
    om = np.asarray(omega_gram, float)
    d_n = om.shape[0]
    diag = np.concatenate([[0.0], np.cumsum(np.diag(om))])
    pre = np.zeros((d_n + 1, d_n + 1))
    pre[1:, 1:] = om.cumsum(axis=0).cumsum(axis=1)
    start, end = np.triu_indices(d_n + 1, 1)  # every block [start, end)
    keep = (end - start >= 2) & (end - start <= LONGEST)
    start, end = start[keep], end[keep]
    size = (end - start).astype(float)[:, None]
    trace = (diag[end] - diag[start])[:, None]
    total = (pre[end, end] - pre[start, end] - pre[end, start] + pre[start, start])[:, None]
    alone = float(precision(np.array([budget]), currency)[0])  # a segment at the budget

    def block_value(c: np.ndarray) -> np.ndarray:
        d = precision(budget - c, currency)
        q = precision(c, currency)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = trace / d - q * total / (d * (d + q * size))
        return np.where(np.isfinite(v), v, np.inf)

    # a coarse grid over [0, B) (one point at a time: memory stays one value per block),
    # then golden-section refinement around each block's best grid point
    k = np.zeros((len(start), 1))
    low = np.full((len(start), 1), np.inf)
    for i in range(GRID):
        v = block_value(np.full((len(start), 1), i * budget / GRID))
        k = np.where(v < low, float(i), k)
        low = np.minimum(v, low)
    lo = np.maximum(k - 1, 0) * (budget / GRID)
    hi = np.minimum(k + 1, GRID - 1e-3) * (budget / GRID)
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(REFINE):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        left = block_value(a) < block_value(b)
        hi, lo = np.where(left, b, hi), np.where(left, lo, a)
    cost = (lo + hi) / 2
    value = block_value(cost)[:, 0]
    plain = trace[:, 0] / alone  # the same segments measured alone, at the budget
    better = value < plain
    # shortest path over boundaries: a segment alone, or a block ending at each one
    seg = np.diag(om) / alone
    block_of = np.full((d_n + 1, d_n + 1), np.inf)
    block_of[start[better], end[better]] = value[better]
    cost_of = np.zeros((d_n + 1, d_n + 1))
    cost_of[start, end] = cost[:, 0]
    best = np.full(d_n + 1, np.inf)
    best[0] = 0.0
    back = np.zeros(d_n + 1, np.int64)
    for e in range(1, d_n + 1):
        via = best[:e] + block_of[:e, e]
        j = int(np.argmin(via))
        if best[e - 1] + seg[e - 1] <= via[j]:
            best[e], back[e] = best[e - 1] + seg[e - 1], e - 1
        else:
            best[e], back[e] = via[j], j
    blocks: list[tuple[int, int]] = []
    costs: list[float] = []
    e = d_n
    while e > 0:
        s = int(back[e])
        if e - s >= 2:
            blocks.append((s, e))
            costs.append(float(cost_of[s, e]))
        e = s
    return TwoLevel(tuple(blocks[::-1]), tuple(costs[::-1]), float(best[d_n]))
