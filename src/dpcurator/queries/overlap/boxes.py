"""Boxes: queries that are one interval on each of at most three attributes.

For intervals, pairwise overlap implies a common point (Helly's theorem in dimension
one, applied per axis), so gamma_w is the maximum weighted depth of the boxes. Best-first
search over slabs of the axis with the most distinct coordinates; the bound of a slab is
*exact* in the other two axes (the 2-D maximum depth of the boxes meeting the slab, from
a 2-D difference array on the compressed grid, after pruning with a coarser grid), and
a slab one cell wide is exact, so the first such slab popped is optimal. When the 2-D
grid is too large, a best-first search over 3-D blocks of the compressed grid takes
over (a 3-D difference array per split; small blocks are swept densely).

When it applies: a component whose predicates are all single intervals on at most three
attributes (the dispatcher sends those with more than a few dozen queries). Exact, or an
**upper bound** (the best open slab or block) when the deadline stops it. Cost: about
O(n log n) per slab evaluated, with n boxes; a few dozen slabs on random boxes.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Sequence

import numpy as np

from dpcurator.queries.overlap.component import Component, Solution

#: Regions of the block search with at most this many cells are swept densely.
_DENSE_CELLS = 1 << 15
#: Blocks per axis when the block search splits a region.
_SPLIT = 32
#: Largest 2-D grid (cells) for the slab sweep.
_SLAB_CELLS = 1 << 22
#: Coarsening of the 2-D grid used to prune before the exact 2-D bound.
_COARSE = 16

#: (best weight found, upper bound, point positions, exact)
Depth = tuple[float, float, list[int], bool]


def solve_boxes(comp: Component, alive: np.ndarray, attrs: list[int], deadline: float) -> Solution:
    """Max weighted depth of the alive queries of ``comp`` (single intervals) over the
    attribute positions ``attrs`` (at most three)."""
    qs = np.flatnonzero(alive)
    k = len(attrs)
    lo = np.zeros((len(qs), k), np.int64)
    hi = np.empty((len(qs), k), np.int64)
    sizes = [comp.schema.attributes[comp.attr_ids[ai]].size for ai in attrs]
    hi[:] = sizes
    row = np.full(len(comp.w), -1, np.int64)
    row[qs] = np.arange(len(qs))
    for d, ai in enumerate(attrs):
        _, starts, ends = comp.intervals(ai)  # one interval per coverage
        r = row[comp.cons[ai]]
        m = r >= 0
        lo[r[m], d] = starts[comp.cid[ai][m]]
        hi[r[m], d] = ends[comp.cid[ai][m]]
    got = box_max_slabs(lo, hi, comp.w[qs], sizes, deadline, comp.eps)
    if got is None:
        got = box_max(lo, hi, comp.w[qs], sizes, deadline, comp.eps)
    best, ub, point, exact = got
    assign = {ai: point[d] for d, ai in enumerate(attrs)}
    if not exact:  # stopped early: the weight of the point it reports
        best = float(comp.w[alive & comp.covered(assign)].sum())
    return Solution(best, ub, assign, exact)


def _compress(
    lo: np.ndarray, hi: np.ndarray, sizes: Sequence[int]
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[int]]:
    """Coordinates per axis, the boxes as cell ranges of the compressed grid (always 3
    axes: a missing axis is one cell wide), and the grid's shape."""
    n, k = lo.shape
    coords = []
    clo = np.zeros((n, 3), np.int64)
    chi = np.ones((n, 3), np.int64)
    dims = [1, 1, 1]
    for d in range(k):
        br = np.unique(np.concatenate([lo[:, d], hi[:, d], [0, sizes[d]]]))
        coords.append(br)
        clo[:, d] = np.searchsorted(br, lo[:, d])
        chi[:, d] = np.searchsorted(br, hi[:, d])
        dims[d] = len(br) - 1
    return coords, clo, chi, dims


def _depth_2d(
    i0: np.ndarray,
    i1: np.ndarray,
    j0: np.ndarray,
    j1: np.ndarray,
    w: np.ndarray,
    shape: tuple[int, int],
) -> np.ndarray:
    """Weighted depth of rectangles ``[i0, i1) x [j0, j1)`` at each cell of a grid."""
    t2 = shape[1] + 1
    size = (shape[0] + 1) * t2
    g = np.bincount(i0 * t2 + j0, w, size) - np.bincount(i0 * t2 + j1, w, size)
    g -= np.bincount(i1 * t2 + j0, w, size) - np.bincount(i1 * t2 + j1, w, size)
    g = g.reshape(shape[0] + 1, t2)
    np.cumsum(g, axis=1, out=g)
    np.cumsum(g, axis=0, out=g)
    return g[:-1, :-1]


class _Slabs:
    """The boxes seen along one axis (x) with the other two (y, z) compressed."""

    def __init__(self, clo: np.ndarray, chi: np.ndarray, w: np.ndarray, dims: list[int]) -> None:
        self.ax = ax = int(np.argmax(dims))
        self.a1, self.a2 = (d for d in range(3) if d != ax)
        self.dims = dims
        self.w = w
        self.x0, self.x1 = clo[:, ax], chi[:, ax]
        self.y0, self.y1 = clo[:, self.a1], chi[:, self.a1]
        self.z0, self.z1 = clo[:, self.a2], chi[:, self.a2]
        f = self.f = _COARSE
        self.cy0, self.cy1 = self.y0 // f, (self.y1 - 1) // f + 1
        self.cz0, self.cz1 = self.z0 // f, (self.z1 - 1) // f + 1
        self.cshape = (-(-dims[self.a1] // f), -(-dims[self.a2] // f))

    def bound(self, c0: int, c1: int, best: float, eps: float) -> tuple[float, int, int]:
        """(bound, cell on axis a1, cell on axis a2) of the slab ``[c0, c1)``: the exact
        2-D max depth of the boxes meeting it; may be <= best (pruned)."""
        meet = np.flatnonzero((self.x0 < c1) & (self.x1 > c0))
        cg = _depth_2d(
            self.cy0[meet],
            self.cy1[meet],
            self.cz0[meet],
            self.cz1[meet],
            self.w[meet],
            self.cshape,
        )
        surv = cg > best + eps
        if not surv.any():
            return float(cg.max()) if cg.size else 0.0, 0, 0
        f, dims = self.f, self.dims
        rows = np.flatnonzero(surv.any(axis=1))
        cols = np.flatnonzero(surv.any(axis=0))
        r0, r1 = int(rows[0]) * f, min(int(rows[-1] + 1) * f, dims[self.a1])
        q0, q1 = int(cols[0]) * f, min(int(cols[-1] + 1) * f, dims[self.a2])
        y0, y1, z0, z1 = self.y0, self.y1, self.z0, self.z1
        sub = meet[(y0[meet] < r1) & (y1[meet] > r0) & (z0[meet] < q1) & (z1[meet] > q0)]
        fg = _depth_2d(
            np.clip(y0[sub], r0, r1) - r0,
            np.clip(y1[sub], r0, r1) - r0,
            np.clip(z0[sub], q0, q1) - q0,
            np.clip(z1[sub], q0, q1) - q0,
            self.w[sub],
            (r1 - r0, q1 - q0),
        )
        flat = int(np.argmax(fg))
        i, j = divmod(flat, q1 - q0)
        return float(fg[i, j]), r0 + i, q0 + j

    def lower(self, c0: int, c1: int, p1: int, p2: int) -> tuple[float, int]:
        """Exact best weight along the slab at (p1, p2): a valid point."""
        y0, y1, z0, z1 = self.y0, self.y1, self.z0, self.z1
        inside = np.flatnonzero((y0 <= p1) & (p1 < y1) & (z0 <= p2) & (p2 < z1))
        a = np.clip(self.x0[inside], c0, c1) - c0
        b = np.clip(self.x1[inside], c0, c1) - c0
        m = c1 - c0 + 1
        w = self.w[inside]
        depth = np.cumsum(np.bincount(a, w, m) - np.bincount(b, w, m))[:-1]
        x = int(np.argmax(depth))
        return float(depth[x]), c0 + x


def box_max_slabs(
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    sizes: Sequence[int],
    deadline: float,
    eps: float,
) -> Depth | None:
    """Max weighted depth of boxes ``[lo, hi)`` (positions, up to 3 axes) by best-first
    search over slabs of one axis, with an exact 2-D bound. None if the 2-D grid would
    be too large (then :func:`box_max` applies)."""
    coords, clo, chi, dims = _compress(lo, hi, sizes)
    coords += [np.array([0, 1])] * (3 - len(coords))
    slabs = _Slabs(clo, chi, w, dims)
    if (dims[slabs.a1] + 1) * (dims[slabs.a2] + 1) > _SLAB_CELLS:
        return None
    ax, a1, a2 = slabs.ax, slabs.a1, slabs.a2
    counter = itertools.count()
    best, best_cell = -1.0, [0, 0, 0]
    heap: list[tuple[float, int, int, int]] = [(-float(w.sum()), next(counter), 0, dims[ax])]
    exact = True
    top = math.inf
    while heap:
        neg, _, c0, c1 = heap[0]
        top = -neg
        if top <= best + eps:
            break
        if time.monotonic() > deadline:
            exact = False
            break
        heapq.heappop(heap)
        mid = (c0 + c1) // 2 if c1 - c0 > 1 else c1
        for s0, s1 in ((c0, mid), (mid, c1)):
            if s0 >= s1:
                continue
            ub, p1, p2 = slabs.bound(s0, s1, best, eps)
            if ub <= best + eps:
                continue
            val, x = slabs.lower(s0, s1, p1, p2)
            if val > best:
                best = val
                best_cell[ax], best_cell[a1], best_cell[a2] = x, p1, p2
            if s1 - s0 > 1 and ub > best + eps:
                heapq.heappush(heap, (-ub, next(counter), s0, s1))
    if not heap:
        top = best
    return best, max(top, best), _box_point(coords, best_cell, lo.shape[1]), exact


def box_max(
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    sizes: Sequence[int],
    deadline: float,
    eps: float,
) -> Depth:
    """Max weighted depth of boxes ``[lo, hi)`` (positions, up to 3 axes).

    Best-first branch and bound over blocks of the compressed grid: a block's bound is
    the weight of the boxes that meet it (a 3-D difference array per split), blocks small
    enough are swept densely.
    """
    n, k = lo.shape
    coords, clo, chi, dims = _compress(lo, hi, sizes)
    best, best_cell = -1.0, [0, 0, 0]
    counter = itertools.count()
    whole = (0, dims[0], 0, dims[1], 0, dims[2])
    heap: list[tuple[float, int, tuple[int, ...], np.ndarray]] = [
        (-float(w.sum()), next(counter), whole, np.arange(n))
    ]
    while heap:
        neg_ub, _, reg, parent = heap[0]
        if -neg_ub <= best + eps:
            heap.clear()
            break
        if time.monotonic() > deadline:
            return best, -neg_ub, _box_point(coords, best_cell, k), False
        heapq.heappop(heap)
        r0 = np.array(reg[0::2])
        r1 = np.array(reg[1::2])
        sel = parent[np.all((clo[parent] < r1) & (chi[parent] > r0), axis=1)]
        shape = r1 - r0
        a = np.clip(clo[sel], r0, r1) - r0
        b = np.clip(chi[sel], r0, r1) - r0
        ws = w[sel]
        if int(np.prod(shape)) <= _DENSE_CELLS:
            grid = _diff_sum(a, b, ws, shape)
            flat = int(np.argmax(grid))
            val = float(grid.flat[flat])
            if val > best:
                best = val
                cell = np.unravel_index(flat, grid.shape)
                best_cell = [int(c) + int(o) for c, o in zip(cell, r0, strict=True)]
            continue
        m = np.minimum(shape, _SPLIT)
        step = -(-shape // m)
        m = -(-shape // step)
        ub = _diff_sum(a // step, (b - 1) // step + 1, ws, m)
        for idx in zip(*np.nonzero(ub > best + eps), strict=True):
            u = float(ub[idx])
            s = r0 + np.array(idx) * step
            e = np.minimum(s + step, r1)
            heapq.heappush(
                heap,
                (-u, next(counter), (s[0], e[0], s[1], e[1], s[2], e[2]), sel),
            )
    return best, best, _box_point(coords, best_cell, k), True


def _box_point(coords: list[np.ndarray], cell: list[int], k: int) -> list[int]:
    return [int(coords[d][cell[d]]) for d in range(k)]


def _diff_sum(a: np.ndarray, b: np.ndarray, w: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Weighted count of boxes [a, b) at each cell of a grid of ``shape`` (3-D)."""
    s0, s1, s2 = (int(x) + 1 for x in shape)
    out = np.zeros(s0 * s1 * s2)
    for c0, c1, c2 in itertools.product((0, 1), repeat=3):
        sign = -1.0 if (c0 + c1 + c2) % 2 else 1.0
        i0 = b[:, 0] if c0 else a[:, 0]
        i1 = b[:, 1] if c1 else a[:, 1]
        i2 = b[:, 2] if c2 else a[:, 2]
        out += np.bincount((i0 * s1 + i1) * s2 + i2, weights=sign * w, minlength=out.size)
    grid = out.reshape(s0, s1, s2)
    grid = grid.cumsum(0).cumsum(1).cumsum(2)
    return grid[:-1, :-1, :-1]
