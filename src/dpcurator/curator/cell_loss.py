"""The largest loss on every cell of a two-attribute grid, in one pass.

For a table's charges (queries with integer weights: their costs times a common
denominator) the loss of a point x is L(x) = sum of the weights of the charges whose
coverage contains x. A *grid* picks two attributes, cuts each into consecutive bins of
value positions, and asks, for every cell (a bin of the first attribute times a bin of
the second, every value of the other attributes), for the largest L(x) over its points:
exactly what :meth:`OverlapFilter.local` computes for that cell's query, cell by cell.

Here all cells are computed at once, by the prefix-sum method of
:mod:`dpcurator.queries.overlap.dense`: the endpoints of the charges' coverages (and the bin
edges) cut every attribute into elementary segments; L is constant on each cell of the
segment grid and is obtained on all of it by adding each box's weight at its corners of
a difference array and taking cumulative sums along every axis. The maximum over the
other attributes' axes, then over the segments of each bin, gives every cell's largest
loss. Integers throughout (int64, with the total weight below 2^62), so the result is
exact.

When the segment grid is too large it is cut along the first attribute's bins into
blocks, each holding only the charges that meet it (fewer cuts on the other
attributes), down to single bins; if a single bin's block is still too large, or all
blocks together pass ``total_limit`` cells or the deadline, the answer is None and the
caller computes cell by cell. Pure: no I/O, no data, no lock.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.predicates import Query

#: Largest number of segment-grid cells in one block (8 bytes each).
BLOCK_LIMIT = 2_000_000
#: Largest number of segment-grid cells over all blocks of one grid.
TOTAL_LIMIT = 40_000_000
#: Largest number of corner updates (boxes times corners) of one block.
MAX_UPDATES = 20_000_000
#: Weights must add up to less than this, so that int64 sums cannot overflow.
MAX_WEIGHT = 2**62


@dataclass(frozen=True)
class Axis:
    """One side of a grid: an attribute and its bin edges, as value positions.

    ``edges`` are strictly increasing positions ``e0 < e1 < ... < en`` within
    ``[0, size]``; bin i holds the positions ``e_i <= p < e_(i+1)``.
    """

    attribute: str
    edges: tuple[int, ...]

    def __post_init__(self) -> None:
        e = tuple(int(v) for v in self.edges)
        if len(e) < 2 or any(b <= a for a, b in itertools.pairwise(e)) or e[0] < 0:
            raise ValueError(f"bin edges must be at least two increasing positions, got {e!r}")
        object.__setattr__(self, "edges", e)

    @property
    def bins(self) -> int:
        return len(self.edges) - 1

    def spans(self) -> list[tuple[int, int]]:
        return list(zip(self.edges, self.edges[1:], strict=False))


class _GiveUp(Exception):
    """The grid is too large (or too slow) for this method."""


def grid_max_loss(
    queries: Sequence[Query | BooleanQuery],
    weights: Sequence[int],
    rows: Axis,
    cols: Axis,
    *,
    block_limit: int = BLOCK_LIMIT,
    total_limit: int = TOTAL_LIMIT,
    deadline: float = math.inf,
) -> np.ndarray | None:
    """The largest loss over each cell of the grid ``rows`` x ``cols``, exactly.

    ``queries`` are the charges of one table (conjunctions or unions of disjoint boxes,
    over one schema), ``weights`` their non-negative integer weights. Returns an int64
    array of shape ``(rows.bins, cols.bins)``: entry (i, j) is the maximum over the
    points x with ``rows.attribute`` in bin i and ``cols.attribute`` in bin j of the
    sum of the weights of the queries covering x. None when the grid is too large for
    the limits, the weights too large for int64, or ``deadline`` (a
    :func:`time.monotonic` value) has passed.
    """
    if rows.attribute == cols.attribute:
        raise ValueError("a grid needs two different attributes")
    if len(queries) != len(weights):
        raise ValueError(f"got {len(weights)} weights for {len(queries)} queries")
    ws = [int(w) for w in weights]
    if any(w < 0 for w in ws):
        raise ValueError("weights must be non-negative integers")
    out = np.zeros((rows.bins, cols.bins), dtype=np.int64)
    if sum(ws) >= MAX_WEIGHT:
        return None
    # Every box as (attribute, coverage) pairs; a union's boxes carry its weight.
    boxes: list[tuple[list[tuple[str, tuple[tuple[int, int], ...]]], int]] = []
    seen: set[str] = set()
    schema = None
    for q, w in zip(queries, ws, strict=True):
        if w == 0:
            continue
        schema = q.schema
        for b in (q,) if isinstance(q, Query) else q.boxes:
            pairs = [(p.attribute.name, p.coverage) for p in b.predicates]
            if any(not cov for _, cov in pairs):
                continue  # an empty query covers nothing
            boxes.append((pairs, w))
            for n, _ in pairs:
                seen.add(n)
    if schema is None or not boxes:
        return out
    for name, axis in ((rows.attribute, rows), (cols.attribute, cols)):
        if name not in schema:
            raise ValueError(f"unknown attribute {name!r}")
        if axis.edges[-1] > schema.attribute(name).size:
            raise ValueError(
                f"bin edges of {name!r} leave its {schema.attribute(name).size} values"
            )
    # Dimensions: the two axes first, then every other attribute some box constrains.
    others = sorted(seen - {rows.attribute, cols.attribute}, key=schema.index)
    names = [rows.attribute, cols.attribute, *others]
    sizes = [schema.attribute(n).size for n in names]
    column = {n: j for j, n in enumerate(names)}
    lo_list: list[list[int]] = []
    hi_list: list[list[int]] = []
    w_list: list[int] = []
    for pairs, w in boxes:
        low, high = [0] * len(names), list(sizes)
        several = []
        for name, cov in pairs:
            j = column[name]
            if len(cov) == 1:
                low[j], high[j] = cov[0]
            else:
                several.append((j, cov))
        if not several:  # one interval on each attribute: the usual case
            lo_list.append(low)
            hi_list.append(high)
            w_list.append(w)
            continue
        if len(w_list) + math.prod(len(c) for _, c in several) > MAX_UPDATES:
            return None
        for combo in itertools.product(*(c for _, c in several)):
            for (j, _), (s, e) in zip(several, combo, strict=True):
                low[j], high[j] = s, e
            lo_list.append(list(low))
            hi_list.append(list(high))
            w_list.append(w)
    lo = np.array(lo_list, dtype=np.int64).reshape(-1, len(names))
    hi = np.array(hi_list, dtype=np.int64).reshape(-1, len(names))
    w = np.array(w_list, dtype=np.int64)
    # Only the column range matters: clip every box to it once.
    c0, c1 = cols.edges[0], cols.edges[-1]
    keep = (lo[:, 1] < c1) & (hi[:, 1] > c0)
    lo, hi, w = lo[keep], hi[keep], w[keep]
    lo[:, 1] = np.maximum(lo[:, 1], c0)
    hi[:, 1] = np.minimum(hi[:, 1], c1)
    state = {"cells": 0}
    try:
        _blocks(
            out,
            0,
            rows.bins,
            lo,
            hi,
            w,
            rows,
            cols,
            sizes,
            state,
            block_limit,
            total_limit,
            deadline,
        )
    except _GiveUp:
        return None
    return out


def _blocks(
    out: np.ndarray,
    r0: int,
    r1: int,
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    rows: Axis,
    cols: Axis,
    sizes: list[int],
    state: dict[str, int],
    block_limit: int,
    total_limit: int,
    deadline: float,
) -> None:
    """Fill out[r0:r1] from the boxes meeting rows r0..r1 (split in halves if too big)."""
    if time.monotonic() > deadline:
        raise _GiveUp
    p0, p1 = rows.edges[r0], rows.edges[r1]
    meet = (lo[:, 0] < p1) & (hi[:, 0] > p0)
    blo, bhi, bw = lo[meet].copy(), hi[meet].copy(), w[meet]
    if bw.size == 0:
        return  # out is already zero there
    blo[:, 0] = np.maximum(blo[:, 0], p0)
    bhi[:, 0] = np.minimum(bhi[:, 0], p1)
    cuts = []
    for j in range(len(sizes)):
        if j == 0:
            base = np.array(rows.edges[r0 : r1 + 1], dtype=np.int64)
        elif j == 1:
            base = np.array(cols.edges, dtype=np.int64)
        else:
            base = np.array([0, sizes[j]], dtype=np.int64)
        cuts.append(np.unique(np.concatenate([base, blo[:, j], bhi[:, j]])))
    shape = tuple(len(c) - 1 for c in cuts)
    cells = math.prod(shape)
    if cells > block_limit:
        if r1 - r0 > 1:
            mid = (r0 + r1) // 2
            _blocks(
                out,
                r0,
                mid,
                lo,
                hi,
                w,
                rows,
                cols,
                sizes,
                state,
                block_limit,
                total_limit,
                deadline,
            )
            _blocks(
                out,
                mid,
                r1,
                lo,
                hi,
                w,
                rows,
                cols,
                sizes,
                state,
                block_limit,
                total_limit,
                deadline,
            )
            return
        raise _GiveUp
    state["cells"] += cells
    if state["cells"] > total_limit:
        raise _GiveUp
    k = len(shape)
    if k > 60:
        raise _GiveUp
    # Segment indices: each endpoint is one of the cuts.
    slo = np.stack([np.searchsorted(cuts[j], blo[:, j]) for j in range(k)], axis=1)
    shi = np.stack([np.searchsorted(cuts[j], bhi[:, j]) for j in range(k)], axis=1)
    n = np.array(shape, dtype=np.int64)
    # A box adds w at its low corner and alternating signs at the corners that use its
    # high end on some dimensions; a high end at the grid's edge falls outside the grid
    # and is skipped, so each box only needs the corners of the dimensions it cuts.
    cut_mask = (shi < n) @ (1 << np.arange(k, dtype=np.int64))
    # int32 when every sum fits in it: half the memory to sweep.
    dtype = np.int32 if int(bw.sum()) < 2**31 else np.int64
    diff = np.zeros(shape, dtype=dtype)
    updates = 0
    for mask in np.unique(cut_mask).tolist():
        sel = cut_mask == mask
        glo, ghi, gw = slo[sel], shi[sel], bw[sel]
        dims = [j for j in range(k) if mask >> j & 1]
        updates += len(gw) << len(dims)
        if updates > MAX_UPDATES:
            raise _GiveUp
        for sub in range(1 << len(dims)):
            idx = [glo[:, j] for j in range(k)]
            sign = 1
            for t, j in enumerate(dims):
                if sub >> t & 1:
                    idx[j] = ghi[:, j]
                    sign = -sign
            np.add.at(diff, tuple(idx), (gw if sign > 0 else -gw).astype(dtype))
    for axis in range(k):
        _prefix_sum(diff, axis)
    grid = diff.max(axis=tuple(range(2, k))) if k > 2 else diff
    row_starts = np.searchsorted(cuts[0], np.array(rows.edges[r0:r1], dtype=np.int64))
    col_starts = np.searchsorted(cuts[1], np.array(cols.edges[:-1], dtype=np.int64))
    grid = np.maximum.reduceat(grid, row_starts, axis=0)
    grid = np.maximum.reduceat(grid, col_starts, axis=1)
    out[r0:r1] = grid


def _prefix_sum(a: np.ndarray, axis: int) -> None:
    """Cumulative sum of ``a`` along ``axis``, in place. Adding whole slices one after
    the other is several times faster than ``np.cumsum`` on a middle axis of a large
    array (which runs one short loop per position of the other axes); ``np.cumsum``
    wins for a long axis with little after it."""
    n = a.shape[axis]
    post = math.prod(a.shape[axis + 1 :])
    if n > 128 and post < 32:
        np.cumsum(a, axis=axis, dtype=a.dtype, out=a)
        return
    x = a.reshape(math.prod(a.shape[:axis]), n, post)
    for i in range(1, n):
        np.add(x[:, i], x[:, i - 1], out=x[:, i])
