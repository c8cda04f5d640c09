"""Maximum overlap for integer weights of any size, exactly: rational costs times their
common denominator, which float64 cannot add exactly once they pass 2^53.

The strategies of :func:`~dpcurator.queries.overlap.max_overlap` work in float64, exact
for integer weights whose sum is below 2^53. Wider weights W_i are first cut to
U_i = ceil(W_i / 2^s), the smallest shift s that makes the U_i add up below 2^52: for
every point x, W(x) <= 2^s U(x), so the exact maximum U* of the narrow weights bounds
gamma_W from above, outward. The point the solver found is weighed again exactly (its
covering set is combinatorial, the sum a Python integer): a lower bound. The two meet
only when the rounding lost nothing, so the domain is then searched best-first, in boxes
(branch and bound over a partition of the domain, Land & Doig 1960): a box's bound is
2^s times the narrow maximum of the queries restricted to it; a box whose bound is at
most the best exact load found cannot hold a heavier point and is closed; the others are
cut in two at the median endpoint of the coverages inside them, until their segment
grid is small enough for :func:`~dpcurator.queries.overlap.dense.dense_max_overlap`,
which computes their maximum exactly in multi-precision limbs. Only the few boxes
whose narrow bound comes within the rounding slack (at most the number of queries, in
units of 2^s) of the best point are cut: near-ties; far from them the first bound
closes the box.

The result is exact unless the time limit stops the search; the upper bound is then the
largest bound of the boxes still open, an integer, never below the true maximum (it is
2^s times an exact integer maximum or a solver's safe bound). With ``decide_at=T`` the
search also stops once the answer to "gamma_W <= T?" is certain: every open box's bound
is at most T, or a point weighs more than T.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from dpcurator import deadlines
from dpcurator.queries.boolean import boxes_of, intersection
from dpcurator.queries.overlap import max_overlap
from dpcurator.queries.overlap.dense import DENSE_FIRST_WORK, DENSE_LIMIT, dense_max_overlap
from dpcurator.queries.predicates import Query, disjoint

#: The narrow weights add up below this, well inside float64's exact integers (the
#: strategies also add a few of them, e.g. a component's total and the rest).
_NARROW = 2**52

#: A box whose segment grid has at most this many cells (and cells x attributes) is
#: decided on it, exactly.
GRID_CELLS, GRID_WORK = DENSE_LIMIT, DENSE_FIRST_WORK

Point = dict[str, int | float | str]


@dataclass(frozen=True)
class WideResult:
    """gamma_W, or bounds on it. ``upper`` is at least the maximum (equal when
    ``exact``); ``witness`` is a real point (None if none was found) and ``lower`` its
    exact load, so a lower bound on the maximum (equal when ``exact``)."""

    upper: int
    lower: int
    exact: bool
    witness: Point | None


@dataclass
class _Box:
    """A box of the domain (attribute -> [lo, hi) positions; the rest whole), with the
    queries that meet it restricted to it (their original indices and weights)."""

    spans: dict[str, tuple[int, int]]
    queries: list[Query]
    index: list[int]
    weights: list[int]


def max_overlap_wide(
    queries: Sequence[Query],
    weights: Sequence[int],
    time_limit: float,
    *,
    decide_at: int | None = None,
    grid_first: bool = True,
) -> WideResult:
    """max_x sum of the weights of the queries covering x, for non-negative integer
    weights of any size, exactly unless ``time_limit`` (seconds) stops the search.

    ``decide_at``: only whether the maximum is at most this matters (the search may stop
    once either answer is certain, ``exact`` then False). ``grid_first`` False skips the
    dense grid on the whole domain (the caller tried it already).
    """
    deadline = time.monotonic() + max(0.0, time_limit)
    ws = [int(w) for w in weights]
    if len(ws) != len(queries) or any(w < 0 for w in ws):
        raise ValueError("weights must be one non-negative integer per query")
    total = sum(ws)
    if not queries or total == 0:
        return WideResult(0, 0, True, None)
    # narrow sums below 2^51 + len(ws): no rounding at all when the sum is already narrow
    shift = 0 if total < _NARROW else total.bit_length() - _NARROW.bit_length() + 2
    root = _Box({}, list(queries), list(range(len(ws))), ws)
    search = _Search(shift, decide_at, deadline)
    search.evaluate(root, grid=grid_first)
    # narrow weights lose nothing: the root's answer is the solver's, exact or a bound
    while search.open and shift:
        top = -search.open[0][0]
        if top <= search.best or search.decided():
            break
        if time.monotonic() > deadline:
            break
        deadlines.check()
        _, _, box = heapq.heappop(search.open)
        parts = _halves(box)
        if parts is None:  # every query covers all of the box: its load is their sum
            search.found(sum(box.weights), _corner(box))
            continue
        for part in parts:
            search.evaluate(part, grid=True)
    upper = max(search.best, search.settled, -search.open[0][0] if search.open else 0)
    exact = upper == search.best and search.witness is not None and not search.narrow_bound
    return WideResult(upper, max(search.best, 0), exact, search.witness)


class _Search:
    """The state of the best-first search: the best point, the open boxes (a heap on
    their bounds), the largest bound of the boxes closed by the threshold."""

    def __init__(self, shift: int, decide_at: int | None, deadline: float) -> None:
        self.shift = shift
        self.decide_at = decide_at
        self.deadline = deadline
        self.best = -1
        self.witness: Point | None = None
        self.settled = 0
        # unrounded weights and an inexact solver: its answer, as it says (not exact)
        self.narrow_bound = False
        self.open: list[tuple[int, int, _Box]] = []
        self.counter = itertools.count()

    def decided(self) -> bool:
        """Whether the threshold's answer is certain: a point beyond it, or every open
        box's bound within it."""
        if self.decide_at is None:
            return False
        if self.best > self.decide_at:
            return True
        return self.settled <= self.decide_at and -self.open[0][0] <= self.decide_at

    def found(self, load: int, witness: Point) -> None:
        if load > self.best:
            self.best, self.witness = load, witness

    def evaluate(self, box: _Box, *, grid: bool) -> None:
        """Decide a box exactly on its segment grid, or bound it by the narrow weights
        and keep it open while that bound passes the best point."""
        if not box.queries:
            return
        if grid:
            dense = dense_max_overlap(box.queries, box.weights, limit=GRID_CELLS, work=GRID_WORK)
            if dense is not None:
                self.found(int(dense[0]), dense[1])
                return
        s = self.shift
        narrow = [-(-w >> s) for w in box.weights]  # ceil(w / 2^s): W(x) <= 2^s U(x)
        left = max(0.0, self.deadline - time.monotonic())
        # U(x) <= floor(T / 2^s) implies W(x) <= T
        at = None if self.decide_at is None else self.decide_at >> s
        res = max_overlap(box.queries, narrow, left, decide_at=at)
        witness = dict(res.witness)
        # the solver's point weighed again exactly; a point of positive load lies in the
        # box (the restricted queries do), where their load is the original queries'
        load = sum(w for q, w in zip(box.queries, box.weights, strict=True) if q.covers(witness))
        if load > 0 or not box.spans:
            self.found(load, witness)
        bound = (round(res.value) if res.exact else math.ceil(res.upper_bound)) << s
        self.narrow_bound |= not s and not res.exact
        if bound <= self.best:
            return
        if not res.exact and self.decide_at is not None and bound <= self.decide_at:
            self.settled = max(self.settled, bound)
            return
        heapq.heappush(self.open, (-bound, next(self.counter), box))


def _halves(box: _Box) -> tuple[_Box, _Box] | None:
    """The box cut in two on the attribute with the most coverage endpoints inside it,
    at their median, with each half's queries restricted to it; None if no endpoint
    lies inside (then every query covers all of the box or none)."""
    schema = box.queries[0].schema
    inner: dict[str, set[int]] = {}
    for q in box.queries:
        for b in boxes_of(q):
            for p in b.predicates:
                name = p.attribute.name
                lo, hi = box.spans.get(name, (0, p.attribute.size))
                cuts = inner.setdefault(name, set())
                for s, e in p.coverage:
                    if lo < s < hi:
                        cuts.add(s)
                    if lo < e < hi:
                        cuts.add(e)
    most = max(inner, key=lambda n: (len(inner[n]), -schema.index(n)), default=None)
    if most is None or not inner[most]:
        return None
    name = most
    mid = sorted(inner[name])[len(inner[name]) // 2]
    lo, hi = box.spans.get(name, (0, schema.attribute(name).size))
    return _part(box, name, lo, mid), _part(box, name, mid, hi)


def _part(box: _Box, name: str, lo: int, hi: int) -> _Box:
    """The part of ``box`` with ``name`` in [lo, hi), and its queries restricted to it."""
    schema = box.queries[0].schema
    spans = {**box.spans, name: (lo, hi)}
    cut = Query.from_coverages(schema, {name: ((lo, hi),)})
    qs, index, ws = [], [], []
    for q, i, w in zip(box.queries, box.index, box.weights, strict=True):
        if not disjoint(q, cut):
            # a union of boxes goes wherever a conjunction does (grid and solver take both)
            qs.append(cast(Query, intersection(q, cut)))
            index.append(i)
            ws.append(w)
    return _Box(spans, qs, index, ws)


def _corner(box: _Box) -> Point:
    """The box's first point (every attribute at the start of its span)."""
    schema = box.queries[0].schema
    return {a.name: a.value(box.spans.get(a.name, (0, a.size))[0]) for a in schema.attributes}
