"""Maximum (weighted) overlap of predicate queries, exactly, without enumerating the domain.

Definitions from Smith et al. ("Making the Most of Parallel Composition in
Differential Privacy", PoPETs 2022): the maximum overlap gamma(Q) is the largest number
of queries whose coverages share a point of the domain, and with additive weights
gamma_w(Q) = max_x sum_{q : x in C_q} w_q. The paper bounds gamma from above by a
greedy colouring of the pairwise-overlap graph (gamma <= clique <= chromatic number);
:func:`colouring_bound` implements it for comparison, :func:`max_overlap` computes the
exact value.

How (see docs/design.md, maximum overlap): on each attribute the queries' coverages cut the values into *atoms*
(values with the same membership signature) and a point only matters through one atom
per attribute; attributes no query constrains do not matter. Attributes linked by no
query are independent, so the problem splits into connected components whose optima
add up. Before that, an attribute whose constraints all share a value is fixed there and
its predicates dropped. Each component is solved by

* one query: any point of it;
* only single intervals on at most three attributes (boxes; Helly: gamma is the max
  depth): best-first search over slabs of one axis with an exact 2-D bound (a 2-D
  difference array over the other two axes), the 3-D block search as a fallback;
* variable elimination of pendant attributes (an attribute linked to at most one other
  becomes a unary potential on that one's atoms): exact on forests; a small remaining
  core is enumerated over its atom combinations;
* otherwise: branch and bound over attributes (choose an atom per attribute, keep the
  surviving queries, re-split into components as attributes get fixed), bounded by
  "at most one query of a family of pairwise-disjoint queries covers a point"
  (histogram bins, marginal cells, detected without a pairwise graph), for a short
  slice; then a 0/1 program on the core (HiGHS via :func:`scipy.optimize.milp`, unary
  potentials in the objective, family-aggregated rows).

When the time limit stops the search, the result is a *safe upper bound* (the smallest
of the valid bounds at hand) with ``exact=False``; the best point found is only
reported as ``lower_bound`` and must never be used to charge a budget.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from dpcurator.queries.dense import dense_max_overlap
from dpcurator.queries.predicates import IntervalSet, Query, intersect

__all__ = ["ColouringResult", "OverlapResult", "colouring_bound", "max_overlap"]

#: Regions of the box solver with at most this many cells are swept densely.
_DENSE_CELLS = 1 << 15
#: Blocks per axis when the box solver splits a region.
_SPLIT = 32
#: Share of the time limit (and cap, in seconds) that branch and bound gets before
#: a component falls back to the 0/1 program (the cap applies without a limit).
_BNB_SHARE, _BNB_CAP = 0.05, 3.0
#: Variable elimination of pendant attributes before search (tests switch it off).
_ELIMINATE = True
#: Box components with at most this many queries go through elimination instead.
_BOX_MIN = 48
#: Cores whose atom combinations times queries stay below this are enumerated.
_BRUTE_WORK = 4_000_000


@dataclass(frozen=True)
class OverlapResult:
    """The maximum (weighted) overlap of a set of queries.

    ``value`` is what to charge: gamma itself when ``exact``, otherwise a safe upper
    bound (equal to ``upper_bound``). ``witness`` is a point of the domain (attribute ->
    value) covered by exactly the queries ``witness_queries`` (0-based), whose total
    weight is ``lower_bound`` (equal to ``value`` when exact).
    """

    value: float
    exact: bool
    upper_bound: float
    lower_bound: float
    witness: Mapping[str, int | str] = field(hash=False)
    witness_queries: tuple[int, ...]
    method: str = ""


@dataclass(frozen=True)
class ColouringResult:
    """The colouring bound of Smith et al. (PoPETs 2022): a greedy colouring of the pairwise-overlap graph.

    Each colour class is a set of pairwise-disjoint queries, so a point is covered by at
    most one query of each class: gamma_w <= sum over classes of the largest weight
    (``value``; the number of ``colours`` when unweighted).
    """

    value: float
    colours: int


class _Timeout(Exception):
    pass


def _num(x: float, integral: bool) -> float:
    return round(x) if integral else float(x)


# --------------------------------------------------------------------------- atoms


@dataclass
class _Attr:
    """One attribute of a component: its atoms and who covers them."""

    j: int  # schema index
    size: int
    qidx: np.ndarray  # local indices of the queries that constrain it
    cover: np.ndarray  # bool (atoms, len(qidx)): atom a is covered by query qidx[k]
    pos: np.ndarray  # a representative value position per atom


def _atoms(
    size: int,
    covs: Sequence[IntervalSet],
    qidx: np.ndarray,
    j: int,
    cid: np.ndarray | None = None,
) -> _Attr:
    """Cut ``[0, size)`` into atoms by the membership signature of ``covs``.

    With ``cid``, ``covs`` are the *distinct* coverages and query ``qidx[k]`` has
    coverage ``covs[cid[k]]``: atoms and dominance are computed on the (few) distinct
    coverages and expanded to the queries at the end.
    """
    if covs and all(len(c) == 1 for c in covs):
        iv = np.asarray([c[0] for c in covs], np.int64)
        breaks = np.unique(np.concatenate([iv.ravel(), [0, size]]))
        seg = breaks[:-1]
        member = (iv[:, :1] <= seg[None, :]) & (seg[None, :] < iv[:, 1:])
        first = np.arange(len(seg))
        cover = member.T.copy()
        _dominance(cover_ref := [cover], first_ref := [first])
        cover = cover_ref[0] if cid is None else cover_ref[0][:, cid]
        return _Attr(j, size, qidx, cover, breaks[first_ref[0]])
    ends = [size, 0]
    rows, starts, stops = [], [], []
    for r, cov in enumerate(covs):
        for s, e in cov:
            ends.append(s)
            ends.append(e)
            rows.append(r)
            starts.append(s)
            stops.append(e)
    breaks = np.unique(np.asarray(ends, dtype=np.int64))
    nseg = len(breaks) - 1
    width = nseg + 1
    if rows:
        r = np.asarray(rows, np.int64) * width
        cells = len(covs) * width
        diff = np.bincount(r + np.searchsorted(breaks, starts), minlength=cells) - np.bincount(
            r + np.searchsorted(breaks, stops), minlength=cells
        )
        diff = diff.reshape(len(covs), width)
    else:
        diff = np.zeros((len(covs), width), np.int64)
    member = np.cumsum(diff, axis=1)[:, :nseg] > 0  # (coverages, segments)
    packed = np.packbits(member, axis=0).T.copy()  # one row of bytes per segment
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel() if packed.size else None
    if keys is None:
        first = np.zeros(1, dtype=np.int64)
    else:
        _, first = np.unique(keys, return_index=True)
    cover = member[:, first].T.copy()
    _dominance(cover_ref := [cover], first_ref := [first])
    cover = cover_ref[0] if cid is None else cover_ref[0][:, cid]
    return _Attr(j, size, qidx, cover, breaks[first_ref[0]])


def _subsets(rows: np.ndarray) -> np.ndarray:
    """``sub[a, b]``: row a (a set, as booleans) is a subset of row b, a != b.

    Bit-packed, without BLAS (a threaded matrix product is erratic on a busy machine).
    """
    n, m = rows.shape
    if n * n * m <= 1 << 20:
        sub = ~(rows[:, None, :] & ~rows[None, :, :]).any(axis=2)
        np.fill_diagonal(sub, False)
        return sub
    words = -(-m // 64)
    packed = np.zeros((n, words * 8), np.uint8)
    packed[:, : -(-m // 8)] = np.packbits(rows, axis=1)
    bits = packed.view(np.uint64)
    sub = np.empty((n, n), bool)
    for a in range(n):
        sub[a] = ~(bits[a][None, :] & ~bits).any(axis=1)
    np.fill_diagonal(sub, False)
    return sub


def _dominance(cover_ref: list[np.ndarray], first_ref: list[np.ndarray]) -> None:
    """Drop atoms whose covering set is a subset of another atom's: choosing the larger
    one is never worse, whatever the other attributes take (weights are non-negative)."""
    cover = cover_ref[0]
    n, m = cover.shape
    if n <= 1 or n * n * max(m, 1) > 4e9:
        return
    sub = _subsets(cover)  # sub[a, b]: a is a subset of b
    # a is dominated if it is a subset of some b that is not equal to it, or equal to an
    # earlier b (atoms are distinct, so equality cannot happen; keep the rule anyway).
    strict = sub & ~(sub.T)
    dominated = strict.any(axis=1)
    if dominated.any():
        keep = ~dominated
        cover_ref[0] = cover[keep]
        first_ref[0] = first_ref[0][keep]


# ---------------------------------------------------------------- disjoint families


def _families(
    qkeys: Sequence[tuple[int, ...]],
    cid_of: Callable[[int, np.ndarray], np.ndarray],
    covs: Sequence[Sequence[IntervalSet]],
    lines: Sequence[int | None],
) -> np.ndarray:
    """Group ids such that the queries of one group are pairwise disjoint.

    A group is a set of queries on the same attributes whose coverages on each attribute
    are equal or disjoint (a grid: histogram bins, marginal cells); then two of them
    overlap iff they are equal. Found by hashing coverage ids, in near-linear time,
    without the pairwise graph. Everything else is a group of its own.

    ``qkeys[k]``: the (component) attributes query k constrains; ``cid_of(ai, members)``:
    the coverage ids of those queries on attribute ``ai``; ``covs[ai]``:
    the distinct coverages.
    """
    n = len(qkeys)
    gid = np.arange(n, dtype=np.int64)
    buckets: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for k, key in enumerate(qkeys):
        buckets[key].append(k)
    next_id = n

    def disjoint_ids(ai: int, ids: np.ndarray) -> bool:
        flat = sorted(iv for c in ids for iv in covs[ai][int(c)])
        return not any(b[0] < a[1] for a, b in itertools.pairwise(flat))

    def try_grid(members: np.ndarray, attrs: tuple[int, ...]) -> bool:
        nonlocal next_id
        cells = np.empty((len(members), len(attrs)), np.int64)
        for d, ai in enumerate(attrs):
            col = cid_of(ai, members)
            if not disjoint_ids(ai, np.unique(col)):
                return False
            cells[:, d] = col
        _, cell = np.unique(cells, axis=0, return_inverse=True)
        cell = cell.ravel()
        order = np.argsort(cell, kind="stable")
        sc = cell[order]
        first = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        rank = np.arange(len(sc)) - np.repeat(first, np.diff(np.r_[first, len(sc)]))
        gid[members[order]] = next_id + rank
        next_id += int(rank.max()) + 1
        return True

    for key, members_list in buckets.items():
        if len(members_list) < 2:
            continue
        members = np.asarray(members_list, np.int64)
        if try_grid(members, key):
            continue
        by_line: dict[int | None, list[int]] = defaultdict(list)
        for k in members_list:
            by_line[lines[k]].append(k)
        for sub in by_line.values():
            if len(sub) >= 2 and len(by_line) > 1:
                try_grid(np.asarray(sub, np.int64), key)
    _, gid = np.unique(gid, return_inverse=True)
    return gid.ravel()


# ------------------------------------------------------------------------ boxes


#: Largest 2-D grid (cells) for the slab sweep of the box solver.
_SLAB_CELLS = 1 << 22
#: Coarsening of the 2-D grid used to prune before the exact 2-D bound.
_COARSE = 16


def _box_max_slabs(
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    sizes: Sequence[int],
    deadline: float,
    eps: float,
) -> tuple[float, float, list[int], bool] | None:
    """Max weighted depth of boxes ``[lo, hi)`` by best-first search over slabs of one
    axis (the one with the most distinct coordinates), with an *exact* 2-D bound: the
    bound of a slab is the max depth, over the other two axes, of the boxes meeting the
    slab (a 2-D difference array on the compressed grid). A slab one cell wide is
    exact, so the first one popped from the heap is optimal. None if the 2-D grid would
    be too large (the caller falls back to :func:`_box_max`)."""
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
    for _ in range(k, 3):
        coords.append(np.array([0, 1]))
    ax = int(np.argmax(dims))
    a1, a2 = (d for d in range(3) if d != ax)
    s1, s2 = dims[a1] + 1, dims[a2] + 1
    if s1 * s2 > _SLAB_CELLS:
        return None
    x0, x1 = clo[:, ax], chi[:, ax]
    y0, y1, z0, z1 = clo[:, a1], chi[:, a1], clo[:, a2], chi[:, a2]
    f = _COARSE
    cy0, cy1, cz0, cz1 = y0 // f, (y1 - 1) // f + 1, z0 // f, (z1 - 1) // f + 1
    cs2 = -(-dims[a2] // f) + 1
    cshape = (-(-dims[a1] // f), cs2 - 1)

    def grid2(i0, i1, j0, j1, ww, shape):  # weighted depth of rectangles on a grid
        t2 = shape[1] + 1
        size = (shape[0] + 1) * t2
        g = np.bincount(i0 * t2 + j0, ww, size) - np.bincount(i0 * t2 + j1, ww, size)
        g -= np.bincount(i1 * t2 + j0, ww, size) - np.bincount(i1 * t2 + j1, ww, size)
        g = g.reshape(shape[0] + 1, t2)
        np.cumsum(g, axis=1, out=g)
        np.cumsum(g, axis=0, out=g)
        return g[:-1, :-1]

    def bound(c0: int, c1: int, best: float) -> tuple[float, int, int]:
        """(bound, cell on axis a1, cell on axis a2); the bound may be <= best (pruned)."""
        meet = np.flatnonzero((x0 < c1) & (x1 > c0))
        cg = grid2(cy0[meet], cy1[meet], cz0[meet], cz1[meet], w[meet], cshape)
        surv = cg > best + eps
        if not surv.any():
            return float(cg.max()) if cg.size else 0.0, 0, 0
        rows = np.flatnonzero(surv.any(axis=1))
        cols = np.flatnonzero(surv.any(axis=0))
        r0, r1 = int(rows[0]) * f, min(int(rows[-1] + 1) * f, dims[a1])
        q0, q1 = int(cols[0]) * f, min(int(cols[-1] + 1) * f, dims[a2])
        sub = meet[(y0[meet] < r1) & (y1[meet] > r0) & (z0[meet] < q1) & (z1[meet] > q0)]
        fg = grid2(
            np.clip(y0[sub], r0, r1) - r0,
            np.clip(y1[sub], r0, r1) - r0,
            np.clip(z0[sub], q0, q1) - q0,
            np.clip(z1[sub], q0, q1) - q0,
            w[sub],
            (r1 - r0, q1 - q0),
        )
        flat = int(np.argmax(fg))
        i, j = divmod(flat, q1 - q0)
        return float(fg[i, j]), r0 + i, q0 + j

    def lower(c0: int, c1: int, p1: int, p2: int) -> tuple[float, int]:
        """Exact best weight along the slab at (p1, p2): a valid point."""
        inside = np.flatnonzero((y0 <= p1) & (p1 < y1) & (z0 <= p2) & (p2 < z1))
        a = np.clip(x0[inside], c0, c1) - c0
        b = np.clip(x1[inside], c0, c1) - c0
        m = c1 - c0 + 1
        depth = np.cumsum(np.bincount(a, w[inside], m) - np.bincount(b, w[inside], m))[:-1]
        x = int(np.argmax(depth))
        return float(depth[x]), c0 + x

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
            ub, p1, p2 = bound(s0, s1, best)
            if ub <= best + eps:
                continue
            val, x = lower(s0, s1, p1, p2)
            if val > best:
                best = val
                best_cell[ax], best_cell[a1], best_cell[a2] = x, p1, p2
            if s1 - s0 > 1 and ub > best + eps:
                heapq.heappush(heap, (-ub, next(counter), s0, s1))
    if not heap:
        top = best
    point = [int(coords[d][best_cell[d]]) for d in range(k)]
    return best, max(top, best), point, exact


def _box_max(
    lo: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    sizes: Sequence[int],
    deadline: float,
    eps: float,
) -> tuple[float, float, list[int], bool]:
    """Max weighted depth of boxes ``[lo, hi)`` (positions, up to 3 axes).

    Best-first branch and bound over blocks of the compressed grid: a block's bound is
    the weight of the boxes that meet it (a 3-D difference array per split), blocks small
    enough are swept densely. Returns (best, bound, point positions, exact).
    """
    n, k = lo.shape
    coords, clo, chi = [], np.zeros((n, 3), np.int64), np.zeros((n, 3), np.int64)
    dims = [1, 1, 1]
    for d in range(k):
        br = np.unique(np.concatenate([lo[:, d], hi[:, d], [0, sizes[d]]]))
        coords.append(br)
        clo[:, d] = np.searchsorted(br, lo[:, d])
        chi[:, d] = np.searchsorted(br, hi[:, d])
        dims[d] = len(br) - 1
    for d in range(k, 3):
        clo[:, d], chi[:, d] = 0, 1
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


# ------------------------------------------------------------------- components


def _keys(pair_q: np.ndarray, pair_a: np.ndarray, n: int) -> list[tuple[int, ...]]:
    """Per query, the tuple of attribute positions it constrains (pairs are grouped by
    query, attributes in schema order)."""
    counts = np.bincount(pair_q, minlength=n)
    starts = np.r_[0, np.cumsum(counts)]
    pa = pair_a.tolist()
    return [tuple(pa[starts[k] : starts[k + 1]]) for k in range(n)]


@dataclass
class _Core:
    """What variable elimination leaves: the core attributes (positions), the unary
    potentials over atoms (per attribute), the multi-attribute queries still in play,
    the elimination steps (attribute, neighbour or -1, argmax table or atom) and the
    constant collected from attributes that ended up isolated."""

    attrs: np.ndarray
    unary: list[np.ndarray]
    queries: np.ndarray
    steps: list[tuple[int, int, np.ndarray | int]]
    const: float


class _Component:
    """Queries linked through shared attributes; solved independently of the others."""

    def __init__(
        self,
        queries: Sequence[Query],
        weights: np.ndarray,
        local: np.ndarray,
        attr_ids: list[int],
        deadline: float,
        eps: float,
        preds: tuple[np.ndarray, np.ndarray, np.ndarray],
        covs: Sequence[Sequence[IntervalSet]],
    ) -> None:
        self.queries = queries
        self.local = local  # global query index per local index
        self.w = weights[local]
        self.deadline = deadline
        self.eps = eps
        self.nodes = 0
        schema = queries[int(local[0])].schema
        self.schema = schema
        self.attr_ids = attr_ids
        na = len(attr_ids)
        # predicates of the component: (local query, attribute position, coverage id),
        # grouped by query in query order; coverages are interned per attribute
        pos_of = np.full(len(schema), -1, np.int64)
        pos_of[attr_ids] = np.arange(na)
        pred_q, pred_a, pred_c = preds
        pair_q = np.searchsorted(local, pred_q)  # local is sorted
        pair_a = pos_of[pred_a]
        by_attr = np.argsort(pair_a, kind="stable")
        cuts = np.searchsorted(pair_a[by_attr], np.arange(na + 1))
        self.cons = [pair_q[by_attr[cuts[i] : cuts[i + 1]]] for i in range(na)]
        raw = [pred_c[by_attr[cuts[i] : cuts[i + 1]]] for i in range(na)]
        #: distinct coverages per attribute, and each constraining query's coverage id
        self.covs: list[list[IntervalSet]] = []
        self.cid: list[np.ndarray] = []
        for ai, j in enumerate(attr_ids):
            used, inv = np.unique(raw[ai], return_inverse=True)
            self.covs.append([covs[j][int(c)] for c in used])
            self.cid.append(inv.ravel().astype(np.int64))
        self._single = all(len(c) == 1 for cs in self.covs for c in cs)
        self.qkeys = _keys(pair_q, pair_a, len(local))
        self.pair_q = pair_q
        self.pair_a = pair_a
        self._attrs: list[_Attr] | None = None
        self._intervals: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._groups: tuple[np.ndarray, np.ndarray] | None = None
        self.memo: dict[tuple[bytes, tuple[int, ...]], tuple[float, dict[int, int]]] = {}

    @property
    def single(self) -> bool:
        """Every predicate is one interval of positions (boxes: Helly applies)."""
        return self._single

    # -- lazily built structures
    @property
    def attrs(self) -> list[_Attr]:
        if self._attrs is None:
            self._attrs = [
                _atoms(
                    self.schema.attributes[j].size,
                    self.covs[ai],
                    self.cons[ai],
                    j,
                    self.cid[ai],
                )
                for ai, j in enumerate(self.attr_ids)
            ]
        return self._attrs

    def groups(self) -> tuple[np.ndarray, np.ndarray]:
        if self._groups is None:
            cons, cid = self.cons, self.cid

            def cid_of(ai: int, members: np.ndarray) -> np.ndarray:
                # cons[ai] is sorted, and every member constrains ai
                return cid[ai][np.searchsorted(cons[ai], members)]

            lines = [self.queries[int(qi)].line for qi in self.local]
            gid = _families(self.qkeys, cid_of, self.covs, lines)
            order = np.argsort(gid, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(gid[order]) != 0])
            self._groups = (order, starts)
        return self._groups

    def bound(self, alive: np.ndarray) -> float:
        order, starts = self.groups()
        v = np.where(alive, self.w, 0.0)[order]
        return float(np.maximum.reduceat(v, starts).sum()) if len(v) else 0.0

    # -- solvers
    def solve_boxes(
        self, alive: np.ndarray, attrs: list[int]
    ) -> tuple[float, float, dict[int, int], bool]:
        qs = np.flatnonzero(alive)
        k = len(attrs)
        lo = np.zeros((len(qs), k), np.int64)
        hi = np.empty((len(qs), k), np.int64)
        sizes = [self.schema.attributes[self.attr_ids[ai]].size for ai in attrs]
        hi[:] = sizes
        row = np.full(len(self.w), -1, np.int64)
        row[qs] = np.arange(len(qs))
        for d, ai in enumerate(attrs):
            _, starts, ends = self.intervals(ai)  # one interval per coverage
            r = row[self.cons[ai]]
            m = r >= 0
            lo[r[m], d] = starts[self.cid[ai][m]]
            hi[r[m], d] = ends[self.cid[ai][m]]
        got = _box_max_slabs(lo, hi, self.w[qs], sizes, self.deadline, self.eps)
        if got is None:
            got = _box_max(lo, hi, self.w[qs], sizes, self.deadline, self.eps)
        best, ub, point, exact = got
        return best, ub, {ai: point[d] for d, ai in enumerate(attrs)}, exact

    def solve(self, alive: np.ndarray, undecided: np.ndarray) -> tuple[float, dict[int, int]]:
        """Exact optimum over the undecided attributes for the alive queries."""
        self.nodes += 1
        if self.nodes % 64 == 0 and time.monotonic() > self.deadline:
            raise _Timeout
        live_pair = alive[self.pair_q] & undecided[self.pair_a]
        open_q = np.zeros(len(self.w), bool)
        open_q[self.pair_q[live_pair]] = True
        settled = alive & ~open_q
        total = float(self.w[settled].sum())
        assign: dict[int, int] = {}
        if not open_q.any():
            return total, assign
        pq, pa = self.pair_q[live_pair], self.pair_a[live_pair]
        na = len(self.attr_ids)
        nq = len(self.w)
        graph = sparse.coo_matrix((np.ones(len(pq)), (pq, nq + pa)), shape=(nq + na, nq + na))
        _, labels = connected_components(graph, directed=False)
        comp_attrs: dict[int, list[int]] = defaultdict(list)
        for ai in np.unique(pa):
            comp_attrs[int(labels[nq + ai])].append(int(ai))
        for lab, attrs in comp_attrs.items():
            sub = open_q & (labels[:nq] == lab)
            val, a = self.solve_connected(sub, attrs)
            total += val
            assign.update(a)
        return total, assign

    def solve_connected(self, alive: np.ndarray, attrs: list[int]) -> tuple[float, dict[int, int]]:
        # Memoised: after branching, sub-components that the branch did not touch come
        # back with the same survivors for every sibling (this is what keeps tree-like
        # workloads polynomial).
        key = (np.packbits(alive).tobytes(), tuple(attrs))
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self._solve_connected(alive, attrs)
        return hit

    def _solve_connected(self, alive: np.ndarray, attrs: list[int]) -> tuple[float, dict[int, int]]:
        if len(attrs) == 1:
            at = self.attrs[attrs[0]]
            wq = np.where(alive[at.qidx], self.w[at.qidx], 0.0)
            scores = np.where(at.cover, wq[None, :], 0.0).sum(axis=1)
            best = int(np.argmax(scores))
            return float(scores[best]), {attrs[0]: int(at.pos[best])}
        if len(attrs) <= 3 and self.single:
            best, _, point, exact = self.solve_boxes(alive, attrs)
            if not exact:
                raise _Timeout
            return best, point
        # branch on the attribute carrying the most alive weight
        und = np.zeros(len(self.attr_ids), bool)
        und[attrs] = True
        live = alive[self.pair_q]
        loads = np.bincount(
            self.pair_a[live], weights=self.w[self.pair_q[live]], minlength=len(und)
        )
        ai = attrs[int(np.argmax(loads[attrs]))]
        at = self.attrs[ai]
        # children differ only on the queries constraining ``ai``: compare those columns
        kc = at.cover & alive[at.qidx][None, :]
        # children with equal survivors are equivalent; one whose survivors are a subset
        # of another's is dominated (node-level dominance)
        if kc.shape[1]:
            packed = np.ascontiguousarray(np.packbits(kc, axis=1))
            _, atom_of = np.unique(
                packed.view(np.dtype((np.void, packed.shape[1]))).ravel(), return_index=True
            )
        else:
            atom_of = np.zeros(1, np.int64)
        kc = kc[atom_of]
        if 1 < len(kc) <= 64:
            sub = _subsets(kc)
            keep = ~(sub & ~sub.T).any(axis=1)
            kc, atom_of = kc[keep], atom_of[keep]
        kids = np.repeat(alive[None, :], len(kc), axis=0)
        kids[:, at.qidx] = kc
        bounds = np.array([self.bound(kd) for kd in kids])
        order = np.argsort(-bounds, kind="stable")
        und[ai] = False
        best, best_assign = -1.0, {}
        for i in order:
            if bounds[i] <= best + self.eps:
                break
            val, a = self.solve(kids[i], und)
            if val > best:
                best = val
                best_assign = {**a, ai: int(at.pos[atom_of[i]])}
        return best, best_assign

    # -- elimination of pendant attributes (variable elimination on the attribute graph)
    def eliminate(self, fold: bool = True) -> _Core:
        """Fold away every attribute that the remaining queries link to at most one other
        attribute: for an atom b of the neighbour k, the best the attribute can add is
        max_a [U_j(a) + sum of the (j, k) queries covering (a, b)], a unary potential on
        k. Exact (max-sum variable elimination on a tree-like part); what is left, the
        *core*, keeps its unary potentials and multi-attribute queries."""
        attrs = self.attrs
        na = len(attrs)
        nq = len(self.w)
        keys = self.qkeys
        multi = np.bincount(self.pair_q, minlength=nq) >= 2
        unary = []
        qs_of: list[set[int]] = []
        for at in attrs:
            m = ~multi[at.qidx]
            wq = np.where(m, self.w[at.qidx], 0.0)
            unary.append(np.where(at.cover, wq[None, :], 0.0).sum(axis=1))
            qs_of.append(set(at.qidx[~m].tolist()) if fold else set())
        if fold and not any(len({a for q in qs for a in keys[q]}) <= 2 for qs in qs_of):
            fold = False  # nothing to eliminate (for instance all 3-way marginals)
        steps: list[tuple[int, int, np.ndarray | int]] = []
        const = 0.0
        done = np.zeros(na, bool)

        def nbrs(ai: int) -> set[int]:
            out: set[int] = set()
            for q in qs_of[ai]:
                out.update(keys[q])
                if len(out) > 2:
                    break
            out.discard(ai)
            return out

        queue = list(range(na)) if fold else []
        while queue:
            ai = queue.pop()
            if done[ai]:
                continue
            nb = nbrs(ai)
            if len(nb) > 1:
                continue
            if not nb:
                best = int(np.argmax(unary[ai]))
                const += float(unary[ai][best])
                steps.append((ai, -1, best))
                done[ai] = True
                continue
            (k,) = nb
            nj, nk = len(unary[ai]), len(unary[k])
            if nj * nk > 4_000_000:
                continue
            qlist = sorted(qs_of[ai])
            cj = attrs[ai].cover[:, np.searchsorted(attrs[ai].qidx, qlist)]
            ck = attrs[k].cover[:, np.searchsorted(attrs[k].qidx, qlist)]
            table = unary[ai][:, None] + (cj * self.w[qlist][None, :]) @ ck.T.astype(np.float64)
            arg = np.argmax(table, axis=0)
            unary[k] = unary[k] + table[arg, np.arange(nk)]
            qs_of[k].difference_update(qlist)
            qs_of[ai].clear()
            steps.append((ai, k, arg))
            done[ai] = True
            queue.append(k)
        core_q = multi.copy()
        for ai in np.flatnonzero(done):
            core_q[attrs[ai].qidx] = False
        return _Core(np.flatnonzero(~done), unary, core_q, steps, const)

    def brute_core(self, core: _Core) -> tuple[float, dict[int, int]] | None:
        """Exact optimum of a small core by evaluating every combination of its atoms
        (vectorised; the core's atoms, never the domain), or None if it is too large."""
        attrs = [int(a) for a in core.attrs]
        sizes = [len(self.attrs[a].cover) for a in attrs]
        qlist = np.flatnonzero(core.queries)
        cells = math.prod(sizes)
        if cells * (len(qlist) + len(attrs)) > _BRUTE_WORK:
            return None
        pos = {a: d for d, a in enumerate(attrs)}
        total = np.zeros(sizes)
        for d, ai in enumerate(attrs):
            shape = [1] * len(attrs)
            shape[d] = sizes[d]
            total += core.unary[ai].reshape(shape)
        for q in qlist.tolist():
            term: np.ndarray | bool = True
            for ai in self.qkeys[q]:
                at = self.attrs[ai]
                col = at.cover[:, int(np.searchsorted(at.qidx, q))]
                shape = [1] * len(attrs)
                shape[pos[ai]] = sizes[pos[ai]]
                term = term & col.reshape(shape)
            total += self.w[q] * np.broadcast_to(term, total.shape)
        flat = int(np.argmax(total))
        cell = np.unravel_index(flat, total.shape)
        return float(total.flat[flat]), {a: int(c) for a, c in zip(attrs, cell, strict=True)}

    def no_elimination(self) -> _Core:
        """The core without elimination: every attribute, unary potentials from the
        single-attribute queries, every multi-attribute query (tests use it)."""
        core = self.eliminate(fold=False)
        return core

    def back_substitute(self, core: _Core, atoms: Mapping[int, int]) -> dict[int, int]:
        """Atoms of the eliminated attributes from the core's atoms; -> value positions."""
        atom = dict(atoms)
        for ai, k, how in reversed(core.steps):
            atom[ai] = int(how) if k < 0 else int(np.asarray(how)[atom[k]])
        return {ai: int(self.attrs[ai].pos[a]) for ai, a in atom.items()}

    def milp_core(
        self, core: _Core, time_limit: float | None
    ) -> tuple[float, dict[int, int], bool]:
        """The 0/1 program on the core: z_{j,a} one-hot per attribute over atoms (with
        the unary potentials as objective coefficients), y_q for each multi-attribute
        query, y_q <= sum_{a in C_{q,j}} z_{j,a} (or the complement form); for a family
        of pairwise-disjoint queries (a grid) the constraints are aggregated, which is
        valid (at most one of them covers a point) and much tighter:
        sum_{q in F, C_{q,j} = C} y_q <= sum_{a in C} z_{j,a}. Returns (upper bound of
        the core objective, atoms, solved to optimality)."""
        from scipy.optimize import LinearConstraint, milp

        attrs = self.attrs
        core_attrs = [int(a) for a in core.attrs]
        offsets = {}
        nz = 0
        for ai in core_attrs:
            offsets[ai] = nz
            nz += len(attrs[ai].cover)
        qlist = np.flatnonzero(core.queries)
        nvar = nz + len(qlist)
        c = np.zeros(nvar)
        for ai in core_attrs:
            c[offsets[ai] : offsets[ai] + len(attrs[ai].cover)] = -core.unary[ai]
        c[nz:] = -self.w[qlist]
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        lb: list[float] = []
        ub: list[float] = []

        def add(cs: np.ndarray, vs: np.ndarray, lo: float, hi: float) -> None:
            rows.append(np.full(len(cs), len(lb), np.int64))
            cols.append(np.asarray(cs, np.int64))
            vals.append(np.asarray(vs, np.float64))
            lb.append(lo)
            ub.append(hi)

        for ai in core_attrs:  # each attribute takes exactly one atom
            n = len(attrs[ai].cover)
            add(offsets[ai] + np.arange(n), np.ones(n), 1.0, 1.0)
        order, starts = self.groups()
        gid = np.empty(len(self.w), np.int64)
        gid[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
        ypos = np.full(len(self.w), -1, np.int64)
        ypos[qlist] = nz + np.arange(len(qlist))
        in_core = core.queries
        for ai in core_attrs:
            at = attrs[ai]
            sel = np.flatnonzero(in_core[at.qidx])
            if not len(sel):
                continue
            # aggregate the queries of one family with the same coverage on this attribute
            key = gid[at.qidx[sel]] * (len(self.covs[ai]) + 1) + self.cid[ai][sel]
            _, rep_, grp = np.unique(key, return_index=True, return_inverse=True)
            grp = grp.ravel()
            ng = len(rep_)
            row0 = len(lb)
            n = len(at.cover)
            cov = at.cover[:, sel[rep_]]  # atoms x groups
            n_in = cov.sum(axis=0)
            use_in = n_in <= n - n_in
            zsel = np.where(use_in[None, :], cov, ~cov)
            za, zg = np.nonzero(zsel)
            rows.append(row0 + grp)
            cols.append(ypos[at.qidx[sel]])
            vals.append(np.ones(len(sel)))
            rows.append(row0 + zg)
            cols.append(offsets[ai] + za)
            vals.append(np.where(use_in[zg], -1.0, 1.0))
            lb.extend([-np.inf] * ng)
            ub.extend(np.where(use_in, 0.0, 1.0).tolist())
        r = len(lb)
        a_mat = sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(r, nvar),
        )
        # y binary too: HiGHS then derives cuts on y (about 1.5x faster on case (d)
        # of the benchmark than with continuous y)
        integrality = np.ones(nvar)
        options: dict[str, float | bool] = {"mip_rel_gap": 0.0, "disp": False}
        if time_limit is not None:
            options["time_limit"] = max(time_limit, 0.01)
        res = milp(
            c,
            constraints=LinearConstraint(a_mat, lb, ub),
            integrality=integrality,
            bounds=(0, 1),
            options=options,
        )
        dual = getattr(res, "mip_dual_bound", None)
        if dual is not None and np.isfinite(dual):
            upper = -float(dual)
        else:
            upper = float(sum(u.max() for u in core.unary if len(u))) + float(self.w.sum())
        atoms: dict[int, int] = {}
        if res.x is not None:
            for ai in core_attrs:
                n = len(attrs[ai].cover)
                atoms[ai] = int(np.argmax(res.x[offsets[ai] : offsets[ai] + n]))
        else:
            atoms = {ai: int(np.argmax(core.unary[ai])) for ai in core_attrs}
        return upper, atoms, res.status == 0

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


# ------------------------------------------------------------------------ public


def _prepare(
    queries: Sequence[Query] | Iterable[Query], weights: Sequence[float] | None
) -> tuple[list[Query], np.ndarray, bool]:
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


def _unions(qs: Sequence[Query]) -> np.ndarray | None:
    """For a list holding boolean queries (unions of boxes), the index of the query
    each box of ``[b for q in qs for b in q.boxes]`` belongs to; None if all are boxes."""
    if all(isinstance(q, Query) for q in qs):
        return None
    return np.repeat(np.arange(len(qs)), [len(q.boxes) for q in qs])


#: Try the dense prefix-sum grid first (tests of the other paths switch it off).
_DENSE = True


def max_overlap(
    queries: Sequence[Query] | Iterable[Query],
    weights: Sequence[float] | None = None,
    time_limit: float | None = None,
) -> OverlapResult:
    """gamma(Q), or gamma_w(Q) with additive weights (Smith et al., PoPETs 2022).

    Exact unless ``time_limit`` (seconds) stops the search; then ``value`` is a safe
    upper bound and ``exact`` is False. ``weights`` default to those of a
    :class:`~dpcurator.queries.parser.Workload`, else 1.
    """
    start = time.monotonic()
    deadline = math.inf if time_limit is None else start + time_limit
    qs, w, integral = _prepare(queries, weights)
    owner = _unions(qs)
    if owner is not None:
        # Boolean queries: every disjoint box carries its query's weight; a point lies
        # in at most one box of each query, so the boxes' overlap is the queries'.
        boxes = [b for q in qs for b in q.boxes]
        res = max_overlap(boxes, w[owner], time_limit)
        return replace(res, witness_queries=tuple(sorted({int(owner[i]) for i in res.witness_queries})))
    eps = 0.0 if integral else 1e-9 * max(1.0, float(w.sum()))
    if not qs:
        return OverlapResult(0, True, 0, 0, {}, (), "empty")
    if _DENSE and integral and len(qs) > 1:
        # A small grid of elementary segments: exact by prefix sums (queries/dense.py).
        dense = dense_max_overlap(qs, w)
        if dense is not None:
            value, point, covering = dense
            v = _num(value, True)
            return OverlapResult(v, True, v, v, point, covering, "dense")
    schema = qs[0].schema
    # one pass over the predicates: emptiness, constrained attributes
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
    dstart = np.full(len(distinct), -1, np.int64)  # single-interval coverages
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
    pa, pc = dj[codes], dc[codes]
    has_pred = lens > 0
    nonempty = np.bincount(pq, weights=dempty[codes], minlength=len(qs)) == 0
    covs = [list(table) for table in interned]
    active = nonempty & (w > 0)
    constrained = active & has_pred
    total = float(w[active & ~constrained].sum())
    # connected components of the bipartite graph queries -- attributes
    keep = constrained[pq]
    pq_a, pa_a, pc_a = pq[keep], pa[keep], pc[keep]
    nq, na = len(qs), len(schema)
    # An attribute on which all the constraints share a value is fixed there: every
    # query constraining it is then satisfied on it, and its predicates are dropped.
    point = [0] * len(schema)
    if len(pa_a):
        ps, pe = dstart[codes][keep], dend[codes][keep]
        by = np.argsort(pa_a, kind="stable")
        js, first = np.unique(pa_a[by], return_index=True)
        multi = np.minimum.reduceat(ps[by], first) < 0
        hi_start = np.maximum.reduceat(ps[by], first)
        lo_end = np.minimum.reduceat(pe[by], first)
        free = np.zeros(na, bool)
        ok = ~multi & (hi_start < lo_end)
        free[js[ok]] = True
        for j, s0 in zip(js[ok].tolist(), hi_start[ok].tolist(), strict=True):
            point[j] = s0
        bnd = np.r_[first, len(by)]
        for t in np.flatnonzero(multi).tolist():
            j = int(js[t])
            inter: IntervalSet = ((0, schema.attributes[j].size),)
            for c in np.unique(pc_a[by[bnd[t] : bnd[t + 1]]]).tolist():
                inter = intersect(inter, covs[j][c])
            if inter:
                free[j] = True
                point[j] = inter[0][0]
        if free.any():
            drop = free[pa_a]
            pq_a, pa_a, pc_a = pq_a[~drop], pa_a[~drop], pc_a[~drop]
            still = np.zeros(nq, bool)
            still[pq_a] = True
            total += float(w[constrained & ~still].sum())
            constrained &= still
    graph = sparse.coo_matrix((np.ones(len(pq_a)), (pq_a, nq + pa_a)), shape=(nq + na, nq + na))
    _, labels = connected_components(graph, directed=False)
    cidx = np.flatnonzero(constrained)
    comp_q: dict[int, list[int]] = defaultdict(list)
    for qi, lab in zip(cidx.tolist(), labels[cidx].tolist(), strict=True):
        comp_q[lab].append(qi)
    comp_attrs: dict[int, list[int]] = defaultdict(list)
    used = np.zeros(na, bool)
    used[pa_a] = True
    for j in np.flatnonzero(used).tolist():
        comp_attrs[int(labels[nq + j])].append(j)
    pred_lab = labels[pq_a]
    pred_order = np.argsort(pred_lab, kind="stable")
    lab_sorted = pred_lab[pred_order]

    lower = upper = total
    exact = True
    methods: set[str] = set()
    covered = active & ~constrained
    hard: list[tuple[_Component, _Core]] = []
    for root, members in comp_q.items():
        lo_, hi_ = np.searchsorted(lab_sorted, [root, root + 1])
        sel = pred_order[lo_:hi_]
        if len(members) == 1:  # one query: any point of it
            qi = members[0]
            upper += float(w[qi])
            lower += float(w[qi])
            covered[qi] = True
            for j, c in zip(pa_a[sel].tolist(), pc_a[sel].tolist(), strict=True):
                point[j] = covs[j][c][0][0]
            methods.add("components")
            continue
        comp = _Component(
            qs,
            w,
            np.asarray(members),
            comp_attrs[root],
            deadline,
            eps,
            (pq_a[sel], pa_a[sel], pc_a[sel]),
            covs,
        )
        alive = np.ones(len(members), bool)
        und = np.ones(len(comp.attr_ids), bool)
        if len(comp.attr_ids) <= 3 and comp.single and len(members) > _BOX_MIN:
            _, up, assign, ok = comp.solve_boxes(alive, list(range(len(comp.attr_ids))))
            methods.add("boxes")
            exact = exact and ok
            upper += up
            cov = comp.covered(assign)
            covered[comp.local[cov]] = True
            for ai, p in assign.items():
                point[comp.attr_ids[ai]] = p
            continue
        core = comp.eliminate() if _ELIMINATE else comp.no_elimination()
        small = comp.brute_core(core) if len(core.attrs) else (0.0, {})
        if small is not None:  # a forest (elimination is exact), or a small core
            methods.add("elimination" if not len(core.attrs) else "small core")
            assign = comp.back_substitute(core, small[1])
            upper += core.const + small[0]
            cov = comp.covered(assign)
            covered[comp.local[cov]] = True
            lower += float(w[comp.local[cov]].sum())
            for ai, p in assign.items():
                point[comp.attr_ids[ai]] = p
            continue
        if len(core.attrs) < len(comp.attr_ids):
            hard.append((comp, core))
            continue
        try:
            if len(comp.attr_ids) > 3 or not comp.single:
                # branch and bound gets a slice of the time, then the 0/1 program
                remaining = (deadline - time.monotonic()) if time_limit is not None else math.inf
                slice_ = min(_BNB_SHARE * remaining, _BNB_CAP)
                comp.deadline = min(deadline, time.monotonic() + slice_)
            val, assign = comp.solve(alive, und)
            methods.add("components" if len(comp_q) > 1 else "branch-and-bound")
            up = val
        except (_Timeout, RecursionError):  # too deep or too slow: the 0/1 program takes over
            comp.deadline = deadline
            hard.append((comp, core))
            continue
        upper += up
        cov = comp.covered(assign)
        covered[comp.local[cov]] = True
        lower += float(w[comp.local[cov]].sum())
        for ai, p in assign.items():
            point[comp.attr_ids[ai]] = p
    for comp, core in hard:
        remaining = None if time_limit is None else max(0.0, deadline - time.monotonic())
        up, atoms, ok = comp.milp_core(core, remaining)
        methods.add("milp")
        if len(core.attrs) < len(comp.attr_ids):
            methods.add("elimination")
        assign = comp.back_substitute(core, atoms)
        up += core.const
        cov = comp.covered(assign)
        got = float(w[comp.local[cov]].sum())
        root_bound = comp.bound(np.ones(len(comp.w), bool))
        up = min(up, root_bound)
        if integral:
            up = math.floor(up + 1e-6)
        if ok and got >= up - max(eps, 1e-7 * max(1.0, up)):
            up = got
        else:
            exact = False
            up = max(up, got)
        upper += up
        lower += got
        covered[comp.local[cov]] = True
        for ai, p in assign.items():
            point[comp.attr_ids[ai]] = p
    witness = {a.name: a.value(point[j]) for j, a in enumerate(schema.attributes)}
    for i in np.flatnonzero(~active):  # weightless queries still belong to the witness set
        if not qs[i].is_empty and qs[i].covers(witness):
            covered[i] = True
    wq = tuple(int(i) for i in np.flatnonzero(covered))
    lower = float(w[list(wq)].sum()) if wq else 0.0
    if exact:
        upper = lower
    elif not exact and len(qs) <= 20000:
        upper = min(upper, colouring_bound(qs, w).value)
    value = lower if exact else upper
    return OverlapResult(
        value=_num(value, integral),
        exact=exact,
        upper_bound=_num(upper, integral) if integral else upper,
        lower_bound=_num(lower, integral),
        witness=witness,
        witness_queries=wq,
        method="+".join(sorted(methods)) or "trivial",
    )


# -------------------------------------------------------------------- colouring


def overlap_graph(queries: Sequence[Query]) -> np.ndarray:
    """Boolean adjacency matrix: True where two queries share a point (Smith et al.'s
    pairwise-overlap graph; quadratic in the number of queries)."""
    t = len(queries)
    if not t:
        return np.zeros((0, 0), bool)
    owner = _unions(queries)
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
        if all(len(c) == 1 for c in covs):
            lo = np.array([c[0][0] for c in covs])
            hi = np.array([c[0][1] for c in covs])
            meet = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
        else:
            at = _atoms(schema.attributes[j].size, covs, ix, j)
            m = at.cover.T.astype(np.float32)
            meet = (m @ m.T) > 0.5
        adj[np.ix_(ix, ix)] &= meet
    adj[empty, :] = False
    adj[:, empty] = False
    np.fill_diagonal(adj, False)
    return adj


def colouring_bound(
    queries: Sequence[Query] | Iterable[Query], weights: Sequence[float] | None = None
) -> ColouringResult:
    """The paper's upper bound (Smith et al., PoPETs 2022): greedy (largest-degree-first) colouring of
    the pairwise-overlap graph. gamma <= clique number <= colours; with weights,
    gamma_w <= sum over colour classes of their largest weight. Costs O(t^2)."""
    qs, w, integral = _prepare(queries, weights)
    if not qs:
        return ColouringResult(0, 0)
    owner = _unions(qs)
    if owner is not None:  # boxes of one query never share a point: same bound
        return colouring_bound([b for q in qs for b in q.boxes], w[owner])
    adj = overlap_graph(qs)
    active = np.array([not q.is_empty for q in qs]) & (w > 0)
    adj[~active] = False
    adj[:, ~active] = False
    colours = np.full(len(qs), -1, np.int64)
    order = np.argsort(-adj.sum(axis=1), kind="stable")
    for v in order:
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
    ncol = int(colours.max()) + 1 if active.any() else 0
    best = np.zeros(max(ncol, 1))
    np.maximum.at(best, colours[active], w[active])
    value = float(best.sum()) if ncol else 0.0
    return ColouringResult(_num(value, integral), ncol)
