"""Exact maximum overlap on a small grid of elementary segments, by prefix sums.

On each attribute that some query constrains, the endpoints of all coverage intervals
cut the values into elementary segments; every query is a union of boxes of segments
(one box when each of its coverages is one interval, as for ranges and marginal cells),
and L(x) = sum of the weights of the boxes containing x is constant on each cell of the
segment grid. When that grid is small (at most ``limit`` cells), L is computed on all
of it at once: each box adds its weight at the 2^k corners of a k-dimensional difference
array, and k cumulative sums turn it into L. The maximum cell is gamma_w exactly.

Used only for integral weights below 2^53, whose sums float64 represents exactly, so
the result is exact; the curator's checks (integer weights on a few attributes) are the
typical case. Returns None when the grid is too large.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from dpcurator.queries.predicates import Query

#: Largest number of grid cells handled densely (8 bytes each).
DENSE_LIMIT = 4_000_000
#: Largest number of boxes x corners added to the difference array.
MAX_UPDATES = 20_000_000


def dense_max_overlap(
    queries: Sequence[Query],
    weights: np.ndarray,
    within: Query | None = None,
    limit: int = DENSE_LIMIT,
) -> tuple[float, dict[str, int | str], tuple[int, ...]] | None:
    """(gamma_w, witness point, indices of the queries covering it), or None.

    With ``within``, the maximum is taken over the points of C_within only (the witness
    lies in it). ``weights`` must be non-negative integers (as floats) with a sum below
    2^53. Empty queries and zero weights are allowed.
    """
    if not queries or float(weights.sum()) >= 2.0**53:
        return None
    if within is not None and within.is_empty:
        return None
    if any(not isinstance(q, Query) for q in queries):
        # boolean queries: their disjoint boxes, each with its query's weight
        owner = [i for i, q in enumerate(queries) for _ in q.boxes]
        got = dense_max_overlap(
            [b for q in queries for b in q.boxes], weights[owner], within, limit
        )
        if got is None:
            return None
        return got[0], got[1], tuple(sorted({owner[i] for i in got[2]}))
    if within is not None and not isinstance(within, Query):
        best = None
        for part in within.boxes:  # the maximum over a union: the best of its boxes
            got = dense_max_overlap(queries, weights, part, limit)
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
    live: list[int] = []
    clipped: dict[int, list[tuple[str, tuple[tuple[int, int], ...]]]] = {}
    for i, q in enumerate(queries):
        if q.is_empty or weights[i] <= 0:
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
            live.append(i)
            clipped[i] = covs
    for n, i in enumerate(live):
        for name, cov in clipped[i]:
            found = ends.get(name)
            bounds = ends[name] = {0, schema.attribute(name).size} if found is None else found
            for s, t in cov:
                bounds.add(s)
                bounds.add(t)
        # Give up early on large grids: the product only grows.
        if n % 256 == 255 and np.prod([len(e) - 1.0 for e in ends.values()]) > limit:
            return None
    names = sorted(ends)
    cuts = [np.array(sorted(ends[name]), dtype=np.int64) for name in names]
    shape = tuple(len(c) - 1 for c in cuts)
    if np.prod(shape, dtype=np.float64) > limit:
        return None
    k = len(names)
    # Boxes: per attribute, the segment ranges of each coverage interval (an endpoint's
    # index among the cuts is its segment boundary).
    where = [{int(v): n for n, v in enumerate(c.tolist())} for c in cuts]
    full = [((0, len(c) - 1),) for c in cuts]
    lows: list[tuple[int, ...]] = []
    highs: list[tuple[int, ...]] = []
    box_w: list[float] = []
    column = {name: j for j, name in enumerate(names)}
    for i in live:
        per_attr: list = list(full)
        for name, cov in clipped[i]:
            j = column[name]
            per_attr[j] = tuple((where[j][s], where[j][e]) for s, e in cov)
        wi = float(weights[i])
        for combo in itertools.product(*per_attr):
            lows.append(tuple(c[0] for c in combo))
            highs.append(tuple(c[1] for c in combo))
            box_w.append(wi)
    if len(box_w) * (1 << k) > MAX_UPDATES:
        return None
    if k == 0:
        value = float(sum(box_w))
    else:
        starts = np.array(lows, dtype=np.int64).reshape(-1, k)
        stops = np.array(highs, dtype=np.int64).reshape(-1, k)
        wb = np.array(box_w)
        diff = np.zeros(tuple(n + 1 for n in shape))
        for corner in itertools.product((0, 1), repeat=k):
            idx = tuple(np.where(c, stops[:, j], starts[:, j]) for j, c in enumerate(corner))
            sign = -1.0 if sum(corner) % 2 else 1.0
            np.add.at(diff, idx, sign * wb)
        for axis in range(k):
            np.cumsum(diff, axis=axis, out=diff)
        grid = diff[tuple(slice(0, n) for n in shape)]
        if within is not None:
            # Only the cells inside C_within count: a product of per-attribute masks.
            for j, name in enumerate(names):
                inside = np.zeros(shape[j], dtype=bool)
                for start, end in within.coverage(name):
                    inside[where[j][start] : where[j][end]] = True
                view: list[slice | None] = [None] * k
                view[j] = slice(None)
                grid = np.where(inside[tuple(view)], grid, -1.0)
        flat = int(np.argmax(grid))
        value = float(grid.flat[flat])
        cell = np.unravel_index(flat, shape)
    point_pos = {a.name: 0 for a in schema.attributes}
    for j, name in enumerate(names):
        point_pos[name] = int(cuts[j][int(cell[j])])
    witness = {a.name: a.value(point_pos[a.name]) for a in schema.attributes}
    if within is not None and not within.covers(witness):
        return None
    covering = tuple(i for i, q in enumerate(queries) if not q.is_empty and q.covers(witness))
    exact_value = float(sum(weights[i] for i in covering))
    if exact_value != value:  # cannot happen with integer weights; refuse to guess
        return None
    return value, witness, covering
