"""Maximum (weighted) overlap of predicate queries, exactly, without enumerating the domain.

Definitions from Smith et al. ("Making the Most of Parallel Composition in
Differential Privacy", PoPETs 2022): the maximum overlap gamma(Q) is the largest number
of queries whose coverages share a point of the domain, and with additive weights
gamma_w(Q) = max_x sum_{q : x in C_q} w_q. Computing it is NP-hard in general, but
workloads are structured; :func:`max_overlap` tries one strategy module after another,
cheapest first, and ``OverlapResult.method`` names the one that decided:

* ``dense``: a small grid of elementary segments, by prefix sums (exact; first when
  its cells x attributes are at most :data:`~dpcurator.queries.overlap.dense.DENSE_FIRST_WORK`);
* ``split``: shared values fixed, independent components, lone queries (exact);
* ``atoms``: the values an attribute's queries cannot tell apart; a component of one
  attribute is its best atom (exact);
* ``boxes``: single intervals on at most three attributes, by a slab sweep (Helly; exact,
  or an upper bound at the deadline);
* ``eliminate``: variable elimination of pendant attributes, then enumeration of a
  small core (exact);
* ``search``: branch and bound, pruned by a Lagrangian bound where that is below the
  families' (``lagrangian``; exact, or an upper bound at the deadline), else by the
  disjoint ``families`` for a short slice of the time (exact, or gives up);
* ``milp``: the 0/1 program on the core, by HiGHS (exact, or its dual bound; with a
  threshold at or above the families' bound, that bound without HiGHS);
* ``colouring``: the paper's colouring bound (an upper bound, for comparison).

When the time limit stops the search, the result is a *safe upper bound* (the smallest
of the valid bounds at hand) with ``exact=False`` and ``method="bound"``; the best point
found is only reported as ``lower_bound`` and must never be used to charge a budget.
A caller that only needs to know whether gamma_w exceeds a threshold T (the curator's
admission check) passes ``decide_at=T`` and reads both ends of an inexact result:
``upper_bound <= T`` settles "at most T", a witness of weight ``lower_bound > T`` settles
"more than T" (the best point found at the deadline is usually the optimum, only not
proved so).
How each strategy works and what it costs: docs/overlap.md and docs/design.md (maximum
overlap).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from dpcurator import deadlines
from dpcurator.queries.overlap import search
from dpcurator.queries.overlap.atoms import best_atom
from dpcurator.queries.overlap.boxes import solve_boxes
from dpcurator.queries.overlap.colouring import colouring_bound, overlap_graph
from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.overlap.dense import DENSE_FIRST_WORK, dense_max_overlap
from dpcurator.queries.overlap.eliminate import Core, reduce_to_core, solve_eliminated
from dpcurator.queries.overlap.lagrangian import solve_lagrangian
from dpcurator.queries.overlap.milp import solve_milp
from dpcurator.queries.overlap.result import ColouringResult, OverlapResult, as_number, hardest
from dpcurator.queries.overlap.split import Split, prepare, split_components, unions
from dpcurator.queries.predicates import Query

__all__ = ["ColouringResult", "OverlapResult", "colouring_bound", "max_overlap", "overlap_graph"]

#: Try the dense prefix-sum grid first (tests of the other paths switch it off).
_DENSE = True
#: Variable elimination of pendant attributes before search (tests switch it off).
_ELIMINATE = True
#: Box components with at most this many queries go through elimination instead.
_BOX_MIN = 48
#: Share of the time limit (and cap, in seconds) that branch and bound gets before
#: a component falls back to the 0/1 program (the cap applies without a limit).
_SEARCH_SHARE, _SEARCH_CAP = 0.05, 3.0
#: Above this many queries the colouring bound (O(t^2)) is not tried on a time-out; under
#: a time limit the bound is tried only up to the smaller number (milliseconds, where
#: 20,000 queries take seconds past the limit).
_COLOURING_MAX = 20_000
_COLOURING_TIMED = 2_000


def max_overlap(
    queries: Sequence[Query] | Iterable[Query],
    weights: Sequence[float] | None = None,
    time_limit: float | None = None,
    *,
    decide_at: float | None = None,
) -> OverlapResult:
    """gamma(Q), or gamma_w(Q) with additive weights (Smith et al., PoPETs 2022).

    Exact unless ``time_limit`` (seconds) stops the search; then ``value`` is a safe
    upper bound and ``exact`` is False. ``weights`` default to those of a
    :class:`~dpcurator.queries.workload.Workload`, else 1.

    ``decide_at``: only whether gamma_w <= decide_at matters. The search may then stop,
    with ``exact`` False, once ``upper_bound <= decide_at``; a witness of weight
    ``lower_bound > decide_at`` settles the other answer. Bounds stay safe either way.
    """
    _check_number("time_limit", time_limit, minimum=0.0, infinite=True)
    _check_number("decide_at", decide_at)
    deadline = math.inf if time_limit is None else time.monotonic() + time_limit
    qs, w, integral = prepare(queries, weights)
    if not qs:
        return OverlapResult(0, True, 0, 0, {}, (), "empty")
    owner = unions(qs)
    if owner is not None:
        return _over_boxes(qs, w, owner, time_limit, decide_at)
    if _DENSE and integral and len(qs) > 1:
        dense = dense_max_overlap(qs, w, work=DENSE_FIRST_WORK)
        if dense is not None:
            v = as_number(dense[0], True)
            return OverlapResult(v, True, v, v, dense[1], dense[2], "dense")
    if decide_at is not None and len(qs) <= _COLOURING_TIMED:
        # Only "at most decide_at?" matters: the colouring bound (Smith et al. 2022), a
        # few milliseconds here, often settles it before any search (a threshold far
        # above the maximum is the common case of an admission check).
        bound = colouring_bound(qs, w).value
        if bound <= decide_at:
            return _settled_at(qs, w, integral, bound)
    parts = split_components(qs, w, 0.0 if integral else 1e-9 * max(1.0, float(w.sum())))
    upper, exact, methods, hard = parts.total, True, [], []
    # a threshold for the component when it is the only one (the rest is fixed weight)
    alone = (
        decide_at - parts.total if decide_at is not None and len(parts.components) == 1 else None
    )
    for comp in parts.components:
        deadlines.check()
        got = _decide(comp, deadline, time_limit, alone)
        if isinstance(got, Core):  # what no cheap strategy decided: the 0/1 program
            hard.append((comp, got))
            continue
        methods.append(got[0])
        upper, exact = upper + got[1].upper, exact and got[1].exact
        parts.place(comp, got[1])
    for comp, core in hard:  # with what remains of the time limit
        remaining = None if time_limit is None else max(0.0, deadline - time.monotonic())
        # a threshold for this component when everything else is exact and summed
        at = decide_at - upper if decide_at is not None and exact and len(hard) == 1 else None
        sol = solve_milp(comp, core, remaining, integral, decide_at=at)
        methods.append("milp")
        upper, exact = upper + sol.upper, exact and sol.exact
        parts.place(comp, sol)
    colouring = _COLOURING_MAX if time_limit is None else _COLOURING_TIMED
    method = "bound" if not exact else hardest(methods)
    return _result(qs, w, integral, parts, upper, method, colouring)


def _settled_at(qs: list[Query], w: np.ndarray, integral: bool, bound: float) -> OverlapResult:
    """An inexact result with the upper bound ``bound`` and, as its witness, a point of
    the heaviest query (its covering weight is the lower bound)."""
    top = qs[int(np.argmax(w))]
    at = {p.attribute.name: p.coverage[0][0] for p in top.predicates if p.coverage}
    witness = {a.name: a.value(at.get(a.name, 0)) for a in top.schema.attributes}
    covering = tuple(i for i, q in enumerate(qs) if not q.is_empty and q.covers(witness))
    lower = float(w[list(covering)].sum()) if covering else 0.0
    v = as_number(bound, integral)
    return OverlapResult(v, False, v, as_number(lower, integral), witness, covering, "bound")


def _check_number(name: str, x: object, minimum: float = -math.inf, infinite: bool = False) -> None:
    """None, or a real number at least ``minimum``, finite unless ``infinite`` (a bool is
    not a number; an integer of any size is fine)."""
    if x is None:
        return
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number or None, got {type(x).__name__}")
    if isinstance(x, int | np.integer):
        ok = x >= minimum
    else:
        ok = not math.isnan(x) and x >= minimum and (infinite or math.isfinite(x))
    if not ok:
        raise ValueError(
            f"{name} must be a {'' if infinite else 'finite '}number >= {minimum:g}, got {x!r}"
        )


def _decide(
    comp: Component, deadline: float, time_limit: float | None, target: float | None = None
) -> tuple[str, Solution] | Core:
    """(strategy, solution) from the cheap strategies, or the core left for the 0/1 program."""
    everything = list(range(len(comp.attr_ids)))
    if len(everything) <= 3 and comp.single and len(comp.w) > _BOX_MIN:
        return "boxes", solve_boxes(comp, np.ones(len(comp.w), bool), everything, deadline)
    if len(everything) == 1:
        value, atom = best_atom(comp.attrs[0], comp.w, np.ones(len(comp.w), bool))
        return "atoms", Solution(value, value, {0: int(comp.attrs[0].pos[atom])}, True)
    core = reduce_to_core(comp, fold=_ELIMINATE)
    sol = solve_eliminated(comp, core)
    if sol is not None:  # a forest (elimination is exact), or a small core
        return "eliminate", sol
    sol = solve_lagrangian(comp, core, deadline, target)  # None where families bound better
    if sol is not None:
        return "lagrangian", sol
    if len(core.attrs) < len(everything):  # elimination folded a part: the 0/1 program
        return core
    try:
        return "search", search.branch_and_bound(comp, _search_deadline(comp, deadline, time_limit))
    except (search.Timeout, RecursionError):  # too slow or too deep
        return core


def _search_deadline(comp: Component, deadline: float, time_limit: float | None) -> float:
    """Branch and bound gets a slice of the time, except on small box components."""
    if len(comp.attr_ids) <= 3 and comp.single:
        return deadline
    remaining = (deadline - time.monotonic()) if time_limit is not None else math.inf
    return min(deadline, time.monotonic() + min(_SEARCH_SHARE * remaining, _SEARCH_CAP))


def _over_boxes(
    qs: list[Query],
    w: np.ndarray,
    owner: np.ndarray,
    time_limit: float | None,
    decide_at: float | None,
) -> OverlapResult:
    """Boolean queries: every disjoint box carries its query's weight; a point lies in
    at most one box of each query, so the boxes' overlap is the queries'."""
    boxes = [b for q in qs for b in q.boxes]
    res = max_overlap(boxes, w[owner], time_limit, decide_at=decide_at)
    return replace(res, witness_queries=tuple(sorted({int(owner[i]) for i in res.witness_queries})))


def _result(
    qs: list[Query],
    w: np.ndarray,
    integral: bool,
    parts: Split,
    upper: float,
    method: str,
    colouring: int,
) -> OverlapResult:
    """The witness from the point the components placed, and the final bounds."""
    schema = qs[0].schema
    witness = {a.name: a.value(parts.point[j]) for j, a in enumerate(schema.attributes)}
    covered = parts.covered
    for i in np.flatnonzero(w == 0):  # weightless queries still belong to the witness set
        if not qs[i].is_empty and qs[i].covers(witness):
            covered[i] = True
    wq = tuple(int(i) for i in np.flatnonzero(covered))
    lower = float(w[list(wq)].sum()) if wq else 0.0
    exact = method != "bound"
    if exact:
        upper = lower
    elif len(qs) <= colouring:
        upper = min(upper, colouring_bound(qs, w).value)
    return OverlapResult(
        value=as_number(lower if exact else upper, integral),
        exact=exact,
        upper_bound=as_number(upper, integral),
        lower_bound=as_number(lower, integral),
        witness=witness,
        witness_queries=wq,
        method=method,
    )
