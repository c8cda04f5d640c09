"""Exact maximum overlap on a small grid of elementary segments, by prefix sums.

On each attribute that some query constrains, the endpoints of all coverage intervals
cut the values into elementary segments; every query is a union of boxes of segments
(one box when each of its coverages is one interval, as for ranges and marginal cells),
and L(x) = sum of the weights of the boxes containing x is constant on each cell of the
segment grid. When that grid is small (at most ``limit`` cells), L is computed on all
of it at once: each box adds its weight at the 2^k corners of a k-dimensional difference
array, and k cumulative sums turn it into L. The maximum cell is gamma_w exactly.

:func:`dense_max_overlap` takes integer weights only, so the result is exact: with a sum
below 2^53 float64 adds them exactly. Wider ones (costs with large denominators, times
their common denominator, can need a hundred bits) go through their top bits in int64,
which leave only the cells within the rounding slack of the best as candidates, weighed
exactly; when those are many, every cell is computed in limbs of int64 with carries
(multi-precision arithmetic: Knuth, TAOCP vol. 2, 4.3.1). The curator's checks
(integer weights on a few attributes) are the typical case. :func:`segment_grid` hands
the grid itself to a caller that needs the load of every cell for many weightings (the
planner's search for violated point constraints), in float arithmetic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator import deadlines
from dpcurator.queries.boolean import boxes_of
from dpcurator.queries.predicates import IntervalSet, Query
from dpcurator.queries.schema import Schema

#: Largest number of grid cells handled densely (8 bytes each).
DENSE_LIMIT = 4_000_000
#: Largest cells x attributes (the prefix sums' work) for :func:`max_overlap` to try the
#: grid first: beyond it (2.5 million cells on 7 attributes take half a second and 90 MB)
#: the structured strategies decide marginal-like workloads in milliseconds.
DENSE_FIRST_WORK = 4_000_000
#: Largest number of boxes x corners added to the difference array.
MAX_UPDATES = 20_000_000

#: Cells x boxes x attributes compared at once when candidate cells are weighed exactly.
_COVER_CELLS = 1 << 22

#: A box to place on the grid: its owner's index and its coverages (attribute, intervals).
_Item = tuple[int, list[tuple[str, IntervalSet]]]


@dataclass(frozen=True)
class SegmentGrid:
    """The segment grid of some boxes: the constrained attributes ``names`` (sorted),
    their segment boundaries ``cuts``, and every box as the segment indices where it
    starts and stops on each attribute (``starts``/``stops``, boxes x attributes), with
    the index of the query it belongs to (``owner``)."""

    schema: Schema
    names: tuple[str, ...]
    cuts: tuple[np.ndarray, ...]
    starts: np.ndarray
    stops: np.ndarray
    owner: np.ndarray
    queries: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(c) - 1 for c in self.cuts)

    def loads(self, weights: np.ndarray, dtype: type = float) -> np.ndarray:
        """L on every cell: the sum of the weights of the queries covering it (a point
        lies in at most one box of each query); in ``dtype`` (int64: exact as long as
        the boxes' weights add up to less than 2^63)."""
        k, shape = len(self.names), self.shape
        wb = np.asarray(weights, dtype)[self.owner]
        if k == 0:
            return np.array(wb.sum(), dtype)
        diff: np.ndarray = np.zeros(tuple(n + 1 for n in shape), dtype)
        for corner in itertools.product((0, 1), repeat=k):
            idx = tuple(self.stops[:, j] if c else self.starts[:, j] for j, c in enumerate(corner))
            np.add.at(diff, idx, -wb if sum(corner) % 2 else wb)
        for axis in range(k):
            np.cumsum(diff, axis=axis, out=diff)
        return diff[tuple(slice(0, n) for n in shape)]

    def covering(self, cells: np.ndarray) -> np.ndarray:
        """(cells x queries) bool: which queries cover each cell (flat indices)."""
        cells = np.asarray(cells, np.int64)
        if not self.names:  # one cell, the whole domain
            at = np.zeros((len(cells), 0), np.int64)
        else:
            at = np.stack(np.unravel_index(cells, self.shape), axis=1)
        inside = np.all(
            (self.starts[None, :, :] <= at[:, None, :]) & (at[:, None, :] < self.stops[None, :, :]),
            axis=2,
        )
        out = np.zeros((len(at), self.queries), bool)
        for b in range(len(self.owner)):  # few boxes per query: an OR per box
            out[:, self.owner[b]] |= inside[:, b]
        return out

    def point(self, cell: Sequence[int]) -> dict[str, int | float | str]:
        """A domain point in ``cell`` (grid index per attribute): each constrained
        attribute at its segment's first value, the others at their first value."""
        pos = {a.name: 0 for a in self.schema.attributes}
        for j, name in enumerate(self.names):
            pos[name] = int(self.cuts[j][int(cell[j])])
        return {a.name: a.value(pos[a.name]) for a in self.schema.attributes}


def _build(
    schema: Schema,
    items: Sequence[_Item],
    ends: dict[str, set[int]],
    n: int,
    limit: int,
    work: float = math.inf,
) -> SegmentGrid | None:
    """The grid of ``items`` (n owners), with extra boundaries ``ends``; None when it has
    more than ``limit`` cells, cells x attributes above ``work``, or too many box corners."""
    ends = {name: set(e) for name, e in ends.items()}
    for m, (_, covs) in enumerate(items):
        for name, cov in covs:
            found = ends.get(name)
            bounds = ends[name] = {0, schema.attribute(name).size} if found is None else found
            for s, t in cov:
                bounds.add(s)
                bounds.add(t)
        # Give up early on large grids: the product only grows.
        if m % 256 == 255 and np.prod([len(e) - 1.0 for e in ends.values()]) > limit:
            return None
    names = tuple(sorted(ends))
    cuts = tuple(np.array(sorted(ends[name]), dtype=np.int64) for name in names)
    cells = float(np.prod([len(c) - 1.0 for c in cuts]))
    if cells > limit or cells * len(cuts) > work:
        return None
    k = len(names)
    # Boxes: per attribute, the segment ranges of each coverage interval (an endpoint's
    # index among the cuts is its segment boundary).
    where = [{int(v): i for i, v in enumerate(c.tolist())} for c in cuts]
    full = [((0, len(c) - 1),) for c in cuts]
    column = {name: j for j, name in enumerate(names)}
    lows: list[tuple[int, ...]] = []
    highs: list[tuple[int, ...]] = []
    owner: list[int] = []
    for i, covs in items:
        per_attr: list = list(full)
        for name, cov in covs:
            j = column[name]
            per_attr[j] = tuple((where[j][s], where[j][e]) for s, e in cov)
        for combo in itertools.product(*per_attr):
            lows.append(tuple(c[0] for c in combo))
            highs.append(tuple(c[1] for c in combo))
            owner.append(i)
    if len(owner) * (1 << k) > MAX_UPDATES:
        return None
    return SegmentGrid(
        schema,
        names,
        cuts,
        np.array(lows, dtype=np.int64).reshape(len(owner), k),
        np.array(highs, dtype=np.int64).reshape(len(owner), k),
        np.array(owner, dtype=np.int64),
        n,
    )


def segment_grid(queries: Sequence[Query], limit: int = DENSE_LIMIT) -> SegmentGrid | None:
    """The segment grid of ``queries`` (predicate or boolean; empty ones cover no cell),
    or None when it has more than ``limit`` cells."""
    qs = list(queries)
    if not qs:
        return None
    items = [
        (i, [(p.attribute.name, p.coverage) for p in b.predicates])
        for i, q in enumerate(qs)
        for b in boxes_of(q)
    ]
    return _build(qs[0].schema, items, {}, len(qs), limit)


def dense_max_overlap(
    queries: Sequence[Query],
    weights: np.ndarray | Sequence[int],
    within: Query | None = None,
    limit: int = DENSE_LIMIT,
    work: float = math.inf,
) -> tuple[float, dict[str, int | float | str], tuple[int, ...]] | None:
    """(gamma_w, witness point, indices of the queries covering it), or None.

    With ``within``, the maximum is taken over the points of C_within only (the witness
    lies in it). ``weights`` must be non-negative integers: floats with a sum below
    2^53, or Python ints of any size (then gamma_w is a Python int, exact). Empty
    queries and zero weights are allowed. None when the grid has more than ``limit``
    cells or more than ``work`` cells x attributes.
    """
    if not queries:
        return None
    w = _as_weights(weights)
    if w is None:
        return None
    if within is not None and within.is_empty:
        return None
    if any(not isinstance(q, Query) for q in queries):
        # boolean queries: their disjoint boxes, each with its query's weight
        owner = [i for i, q in enumerate(queries) for _ in q.boxes]
        got = dense_max_overlap(
            [b for q in queries for b in q.boxes], w[owner], within, limit, work
        )
        if got is None:
            return None
        return got[0], got[1], tuple(sorted({owner[i] for i in got[2]}))
    if within is not None and not isinstance(within, Query):
        best = None
        for part in within.boxes:  # the maximum over a union: the best of its boxes
            got = dense_max_overlap(queries, w, part, limit, work)
            if got is None:
                return None
            if best is None or got[0] > best[0]:
                best = got
        return best
    schema = queries[0].schema
    # With ``within``, the grid spans only the hull of C_within on each attribute it
    # constrains: every coverage is clipped to that hull (a query missing it adds
    # nothing there), so a small ``within`` makes a small grid.
    ends: dict[str, set[int]] = {}
    hull: dict[str, tuple[int, int]] = {}
    for p in within.predicates if within is not None else ():
        lo, hi = p.coverage[0][0], p.coverage[-1][1]
        hull[p.attribute.name] = (lo, hi)
        e = ends[p.attribute.name] = {lo, hi}
        for s, t in p.coverage:
            e.add(s)
            e.add(t)
    items: list[_Item] = []
    for i, q in enumerate(queries):
        if q.is_empty or w[i] <= 0:
            continue
        covs = []
        for p in q.predicates:
            name, cov = p.attribute.name, p.coverage
            if name in hull:
                lo, hi = hull[name]
                cov = tuple((max(s, lo), min(t, hi)) for s, t in cov if max(s, lo) < min(t, hi))
                if not cov:
                    break
            covs.append((name, cov))
        else:
            items.append((i, covs))
    grid = _build(schema, items, ends, len(queries), limit, work)
    if grid is None:
        return None
    shape = grid.shape
    big = w.dtype == object
    if not grid.names:
        value = w[grid.owner].sum()
        cell: tuple[int, ...] = ()
    else:
        # Only the cells inside C_within count: a product of per-attribute masks.
        inside = None if within is None else _inside(grid, within)
        if big:
            flat, value = _exact_best(grid, w, inside)
        else:
            loads = grid.loads(w)
            if inside is not None:
                loads = np.where(inside, loads, -1.0)
            flat = int(np.argmax(loads))
            value = float(loads.flat[flat])
        cell = tuple(int(c) for c in np.unravel_index(flat, shape))
    witness = grid.point(cell)
    if within is not None and not within.covers(witness):
        return None
    covering = tuple(i for i, q in enumerate(queries) if not q.is_empty and q.covers(witness))
    exact_value = sum((w[i] for i in covering), 0 if big else 0.0)
    if exact_value != value:  # cannot happen with integer weights; refuse to guess
        return None
    return value, witness, covering


def _as_weights(weights: np.ndarray | Sequence[int]) -> np.ndarray | None:
    """The weights as float64 when their sum is below 2^53 (float adds them exactly),
    else as Python ints (an object array); None if some weight is not a non-negative
    integer."""
    floats = isinstance(weights, np.ndarray) and weights.dtype == np.float64
    if floats and float(np.sum(weights)) < 2.0**53:  # the common case, in one pass
        return np.asarray(weights)
    ints = [int(x) for x in weights]
    if any(x < 0 or x != y for x, y in zip(ints, weights, strict=True)):
        return None
    if sum(ints) < 2**53:
        return np.asarray(ints, np.float64)
    out = np.empty(len(ints), object)
    out[:] = ints
    return out


def _inside(grid: SegmentGrid, within: Query) -> np.ndarray:
    """Which cells of the grid lie in C_within (a box): a product of per-attribute masks."""
    mask = np.ones(grid.shape, bool)
    for j, name in enumerate(grid.names):
        inside = np.zeros(grid.shape[j], dtype=bool)
        starts = grid.cuts[j]
        for start, end in within.coverage(name):
            inside[np.searchsorted(starts, start) : np.searchsorted(starts, end)] = True
        view: list[slice | None] = [None] * len(grid.shape)
        view[j] = slice(None)
        mask &= inside[tuple(view)]
    return mask


def _exact_best(
    grid: SegmentGrid, weights: np.ndarray, inside: np.ndarray | None
) -> tuple[int, int]:
    """(flat index, load) of a cell of largest load (inside ``inside``), exactly, for
    integer weights of any size.

    One pass with the top bits of the weights, H_i = floor(W_i / 2^s), small enough to add
    up exactly in int64: 2^s H(x) <= W(x) < 2^s (H(x) + n) for the n queries, so only the
    cells with H(x) > max H - n can hold the maximum (near-ties and exact ties). Those
    few are weighed exactly, once per distinct covering set; when there are too many,
    all cells are, in limbs (:func:`_limb_best`)."""
    ints = [int(x) for x in weights]
    cand = np.arange(math.prod(grid.shape)) if inside is None else np.flatnonzero(inside.ravel())
    if not cand.size:
        return 0, -1
    # the boxes' top bits add up below 2^62: so do the partial sums of the difference array
    owners = set(grid.owner.tolist())  # the others are on no cell of the grid
    ints = [x if i in owners else 0 for i, x in enumerate(ints)]
    shift = max(0, sum(ints[o] for o in grid.owner.tolist()).bit_length() - 62)
    high = grid.loads(np.array([x >> shift for x in ints], np.int64), np.int64).ravel()
    h = high[cand]
    if not shift:  # the loads themselves, exactly
        flat = int(cand[int(np.argmax(h))])
        return flat, int(high[flat])
    cand = cand[h > h.max() - grid.queries]
    if len(cand) * max(1, len(grid.owner)) > high.size:  # cheaper: all cells, in limbs
        return _limb_best(grid, ints, cand)
    best, flat = -1, int(cand[0])
    step = max(1, _COVER_CELLS // max(1, len(grid.owner) * len(grid.names)))
    for k in range(0, len(cand), step):
        part = cand[k : k + step]
        cover = grid.covering(part)
        packed = np.packbits(cover, axis=1)
        _, first = np.unique(packed, axis=0, return_index=True)
        for r in first.tolist():  # one exact sum per distinct covering set
            load = sum(ints[i] for i in np.flatnonzero(cover[r]).tolist())
            if load > best:
                best, flat = load, int(part[r])
    return flat, best


def _limb_best(grid: SegmentGrid, ints: list[int], cand: np.ndarray) -> tuple[int, int]:
    """(flat index, load) of a cell of ``cand`` of largest load, exactly: the weights cut
    into limbs small enough that each limb's loads add up exactly in int64, the carries
    propagated, and the limbs compared from the top (multi-precision arithmetic: Knuth,
    TAOCP vol. 2, 4.3.1)."""
    # a limb's partial sums on the difference array stay below boxes x 2^bits <= 2^62
    bits = 62 - max(1, len(grid.owner)).bit_length()
    count = max(1, -(-max(ints, default=0).bit_length() // bits))
    mask = (1 << bits) - 1
    digits: list[np.ndarray] = []
    carry: np.ndarray | int = 0
    for j in range(count):
        part = np.array([(x >> (j * bits)) & mask for x in ints], np.int64)
        g = grid.loads(part, np.int64) + carry
        if j < count - 1:
            carry = g >> bits
            g &= mask
        digits.append(g.ravel())
    for d in reversed(digits):  # normalised digits: the order of the numbers is lexicographic
        v = d[cand]
        cand = cand[v == v.max()]
    flat = int(cand[0])
    return flat, sum(int(d[flat]) << (j * bits) for j, d in enumerate(digits))


def _segments(size: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """The cuts of one attribute of ``size`` positions (0, size and every box's ends,
    sorted, distinct) and each box's start and stop as indices into them: by marking
    positions when the attribute is small next to the boxes (no sort), else by sorting."""
    if size <= 4 * len(lo) + 1024:
        marks = np.zeros(size + 1, bool)
        marks[0] = marks[size] = True
        marks[lo] = True
        marks[hi] = True
        rank = np.cumsum(marks) - 1
        return np.flatnonzero(marks), rank[lo], rank[hi]
    cuts = np.unique(np.concatenate(([0, size], lo, hi)))
    return cuts, np.searchsorted(cuts, lo), np.searchsorted(cuts, hi)


def box_maximum(
    sizes: Sequence[int],
    lo: np.ndarray,
    hi: np.ndarray,
    codes: np.ndarray,
    weights: Sequence[int],
    limit: int = DENSE_LIMIT,
) -> tuple[int, tuple[int, ...]] | None:
    """max over the points x of sum_i weights[codes[i]] [lo_i <= x < hi_i], exactly, and
    the positions of a point reaching it; None when the segment grid times the distinct
    weights used passes ``limit`` cells (or a weight passes the float range).

    Boxes are given as arrays (``lo``/``hi``: boxes x attributes, half-open positions on
    every attribute of ``sizes``; an empty box adds nothing), weights as non-negative
    integers of any size, shared through ``codes``: a long history of charges has few
    distinct costs. So the loads are counted per distinct weight, in int64 (exact: at
    most one per box), by a difference array (``np.bincount`` at the 2^k corners) and k
    cumulative sums; L(x) = sum_d w_d C_d(x). The float sum of those terms is within a
    relative (D + 2) 2^-53 of L(x) for D distinct weights (every term is non-negative),
    so every cell within a relative 2^-30 of the float maximum is a candidate, and the
    candidates' distinct count vectors are weighed exactly in Python integers. When the
    largest weight times the number of boxes stays below 2^62 (the curator's costs over
    one common denominator, the usual case), L is summed in int64 directly, exactly,
    and no candidates are needed."""
    live = np.all(hi > lo, axis=1)
    lo, hi, codes = lo[live], hi[live], np.asarray(codes, dtype=np.int64)[live]
    k = len(sizes)
    if not len(lo):
        return 0, (0,) * k
    if not k:  # one point: every box holds it
        return sum(int(weights[int(c)]) for c in codes), ()
    present = np.bincount(codes)  # the codes index ``weights``: small non-negative ints
    used = np.flatnonzero(present)
    remap = np.zeros(len(present), np.int64)
    remap[used] = np.arange(len(used))
    code = remap[codes]
    exact = [int(weights[int(u)]) for u in used]
    # only the attributes some box narrows: the others are one segment, every box's
    full = np.asarray(sizes, dtype=np.int64)
    narrow = np.flatnonzero((lo > 0).any(axis=0) | (hi < full).any(axis=0)).tolist()
    if not narrow:  # every box is the whole domain
        return sum(exact[int(c)] for c in code), (0,) * k
    lo, hi = lo[:, narrow], hi[:, narrow]
    m = len(narrow)
    cuts, starts, stops = [], [], []
    for i, j in enumerate(narrow):
        c, a, b = _segments(int(full[j]), lo[:, i], hi[:, i])
        cuts.append(c)
        starts.append(a)
        stops.append(b)
    shape = tuple(len(c) - 1 for c in cuts)
    ext = tuple(n + 1 for n in shape)
    size = math.prod(ext)
    # the work: 2^m corner passes over the boxes and the grid
    if len(used) * size > limit or (1 << m) * (len(lo) + len(used) * size) > MAX_UPDATES:
        return None
    base = code * size
    diff = np.zeros(len(used) * size, np.int64)
    for corner in itertools.product((0, 1), repeat=m):
        deadlines.check()
        at = np.ravel_multi_index([stops[j] if c else starts[j] for j, c in enumerate(corner)], ext)
        counts = np.bincount(base + at, minlength=len(diff))
        diff += -counts if sum(corner) % 2 else counts
    grid = diff.reshape(len(used), *ext)
    for axis in range(1, m + 1):
        np.cumsum(grid, axis=axis, out=grid)
    grid = grid[(slice(None), *(slice(0, n) for n in shape))].reshape(len(used), -1)
    if min(exact) >= 0 and max(exact) * len(lo) < 1 << 62:  # every load fits int64: exact
        loads = np.array(exact, np.int64) @ grid
        at_cell = int(np.argmax(loads))
        best = int(loads[at_cell])
    else:
        try:
            wf = np.array([float(w) for w in exact])
        except OverflowError:
            return None
        with np.errstate(over="ignore"):  # an overflow is seen below, and refused
            approx = wf @ grid
        top = float(approx.max())
        if not math.isfinite(top):  # the float sums overflowed: no rigorous prefilter
            return None
        cand = np.flatnonzero(approx >= top * (1 - 2.0**-30))
        vectors, first = np.unique(grid[:, cand].T, axis=0, return_index=True)
        best, at_cell = -1, int(cand[0])
        for vec, f in zip(vectors.tolist(), first.tolist(), strict=True):
            load = sum(w * c for w, c in zip(exact, vec, strict=True))
            if load > best:
                best, at_cell = load, int(cand[f])
    cell = np.unravel_index(at_cell, shape)
    point = [0] * k
    for i, j in enumerate(narrow):
        point[j] = int(cuts[i][cell[i]])
    return best, tuple(point)
