"""Allocating a budget over the queries of a workload (docs/design.md §8).

Pure mathematics: queries and costs in, costs out; no data, no randomness.

Every allocation gives query q an additive cost c_q (eps, rho or mu^2) such that, for
every point x of the domain, sum_{q covering x} c_q <= B: then the release is B-private
by parallel composition over the maximum overlap (Smith et al. 2022, Thm 5) and
additive composition at the worst point. Three allocations:

* ``sequential``: c_q = B w_q / sum w (the baseline; ignores overlap);
* ``uniform``: c_q = B w_q / gamma_w (the paper: budget over the maximum overlap);
* ``optimal``: minimise sum_q w_q Var_q(c_q) (Var = 2/eps^2 for Laplace, 1/(2 rho) or
  1/mu^2 for Gaussians) subject to the constraint at every point. The program is convex;
  its constraints (one per maximal overlapping set) are far too many to list, so they
  are added lazily: solve over the constraints known so far (a Lagrangian dual, smooth
  and bound-constrained, by L-BFGS-B), ask :func:`max_overlap` for the most violated
  point of the solution, add its query set, repeat. Any direction c is made feasible
  by scaling it by B / gamma_w(c) (the objective is homogeneous), so every round gives
  a feasible candidate (kept if best) and the dual gives a lower bound: the gap is
  reported.

Costs are tied within a *group*: the cells one workload line expands to (a histogram or
a marginal table) share one cost, so every cell of a table has the same error bar. For a
workload of single queries this is the unrestricted optimum; for symmetric workloads such
as all k-way marginals the tied optimum is the unrestricted one (the program is invariant
under permutations of each attribute's values, and convex).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dpcurator import deadlines
from dpcurator.errors import InvalidParameter
from dpcurator.planner import barrier, cuts
from dpcurator.planner.budget import PlanBudget
from dpcurator.queries import OverlapResult, Query, max_overlap

try:  # L-BFGS-B's small dense BLAS calls are ~300x slower with threaded BLAS
    from threadpoolctl import threadpool_limits as _limits
except ImportError:  # pragma: no cover - optional; correct without it, just slower

    def _limits(limits: int = 1):  # type: ignore[no-redef]
        return contextlib.nullcontext()


ALLOCATIONS = ("optimal", "uniform", "sequential")

#: Costs are scaled to (1 - SAFETY) of the budget at the worst point, so that the float
#: arithmetic of the overlap solver can never let the exact sum exceed the budget.
SAFETY = 1e-9


@dataclass(frozen=True)
class Allocation:
    """Additive costs per query, and how they were found."""

    name: str
    costs: np.ndarray  # additive (eps, rho or mu^2), one per query
    load: float  # gamma_w(costs): the worst point's total (<= budget)
    exact: bool  # whether ``load`` was certified by the exact overlap solver
    rounds: int = 0
    lower_bound: float | None = None  # on the optimal objective (dual bound)
    objective: float = 0.0  # sum_q w_q a / c_q^p, the optimiser's model of total variance
    notes: tuple[str, ...] = field(default=())


def groups_of(queries: Sequence[Query]) -> np.ndarray:
    """Group index per query: the queries of one workload line share a group."""
    key: dict[object, int] = {}
    out = np.empty(len(queries), np.int64)
    for i, q in enumerate(queries):
        k = ("line", q.line) if q.line is not None else ("query", i)
        out[i] = key.setdefault(k, len(key))
    return out


def _objective(costs: np.ndarray, weights: np.ndarray, budget: PlanBudget) -> float:
    return float(np.sum(weights * budget.coefficient / costs**budget.exponent))


def _gamma(queries, weights, time_limit):
    res = max_overlap(queries, weights=list(map(float, weights)), time_limit=time_limit)
    return res, float(res.value if res.exact else res.upper_bound)


def sequential(
    queries: Sequence[Query], weights: Sequence[float], budget: PlanBudget
) -> Allocation:
    w = np.asarray(weights, float)
    costs = budget.amount * (1 - SAFETY) * w / math.fsum(w)
    return Allocation(
        "sequential", costs, float(costs.sum()), True, 0, None, _objective(costs, w, budget)
    )


def uniform(
    queries: Sequence[Query],
    weights: Sequence[float],
    budget: PlanBudget,
    *,
    time_limit: float | None = None,
    unweighted: OverlapResult | None = None,
) -> Allocation:
    """``unweighted``: the queries' maximum overlap with unit weights, if known (equal
    weights w then give gamma_w = w gamma, no second solve)."""
    w = np.asarray(weights, float)
    if unweighted is not None and len(w) and np.all(w == w[0]):
        res = unweighted
        gam = float(w[0]) * float(res.value if res.exact else res.upper_bound)
    else:
        res, gam = _gamma(queries, w, time_limit)
    if gam <= 0:  # nothing overlaps anything (all queries empty): any cost is free
        costs = np.full(len(w), budget.amount * (1 - SAFETY))
        return Allocation("uniform", costs, 0.0, True, 0, None, _objective(costs, w, budget))
    costs = budget.amount * (1 - SAFETY) * w / gam
    return Allocation(
        "uniform",
        costs,
        float(budget.amount * (1 - SAFETY)),
        res.exact,
        0,
        None,
        _objective(costs, w, budget),
    )


def optimal(
    queries: Sequence[Query],
    weights: Sequence[float],
    budget: PlanBudget,
    *,
    groups: np.ndarray | None = None,
    max_rounds: int = 200,
    time_limit: float = 30.0,
    tolerance: float = 1e-4,
    start: Allocation | None = None,
) -> Allocation:
    """Minimise the model total variance subject to gamma_w(costs) <= budget.

    Cutting planes: solve the program over the point constraints known so far
    (:mod:`dpcurator.planner.barrier`, which also gives a dual lower bound), find points
    its solution overloads (:mod:`dpcurator.planner.cuts`), add their constraints,
    repeat. Every round's solution, scaled by B / gamma_w, is a feasible candidate. Stops when the
    relative gap between the best candidate and the best dual bound is below
    ``tolerance``, after ``max_rounds`` rounds, or after ``time_limit`` seconds. The
    result is always certified feasible by the exact overlap solver (its gamma_w, or a
    safe upper bound at the time limit, sets the final scale) and never worse than
    ``start`` (the uniform allocation by default).
    """
    t0 = time.monotonic()
    w = np.asarray(weights, float)
    qs = list(queries)
    if start is None:
        start = uniform(qs, w, budget, time_limit=time_limit / 4)
    g = groups_of(qs) if groups is None else np.asarray(groups, np.int64)
    G = int(g.max()) + 1 if len(g) else 0
    empty = np.array([q.is_empty for q in qs], bool)
    live = np.zeros(G, bool)
    np.logical_or.at(live, g, ~empty)
    if not live.any():
        return start
    amount = budget.amount * (1 - SAFETY)
    p, a = budget.exponent, budget.coefficient
    # K_g in normalised units: c = B * chat, objective sum K_g chat^-p
    Kg = np.zeros(G)
    np.add.at(Kg, g, w * a / amount**p)
    scale = float(Kg[live].sum())
    K = Kg[live] / scale

    def per_group(c_live: np.ndarray) -> np.ndarray:
        out = np.ones(G)  # a group of empty queries covers no point: any cost is free
        out[live] = c_live
        return out

    separate = cuts.Separator(qs, slack=tolerance / (10 * p))
    rows: list[np.ndarray] = []
    seen: set[bytes] = set()

    def add(sets: list[np.ndarray]) -> int:
        added = 0
        for cover in sets:
            row = np.bincount(g[cover & ~empty], minlength=G)[live].astype(float)
            key = row.tobytes()
            if row.any() and key not in seen:
                seen.add(key)
                rows.append(row)
                added += 1
        return added

    # The start, per group (its cheapest query: still feasible), gives the first cuts.
    c_live = np.full(G, np.inf)
    np.minimum.at(c_live, g, start.costs / amount)
    c_live = np.minimum(c_live[live], 1.0)
    left = max(0.5, time_limit - (time.monotonic() - t0))
    add(separate(per_group(c_live)[g], left, 0.0).sets)
    best, best_obj = start.costs, _objective(start.costs, w, budget)

    def live_objective(costs: np.ndarray) -> float:
        return _objective(costs[~empty], w[~empty], budget)

    best_res: OverlapResult | None = None  # the exact result behind ``best``, if known
    exact_all = start.exact
    lower: float | None = None
    rounds = 0
    notes: list[str] = []
    gam, tight, polish = math.inf, tolerance * 1e-3, False
    with _limits(1):  # small dense solves: threaded BLAS only adds overhead
        while rounds < max_rounds:
            deadlines.check()  # a request's deadline (see dpcurator.deadlines)
            rounds += 1
            R = np.vstack(rows)
            inside = 0.95 / max(1.0, float((R @ c_live).max()), float(c_live.max()) / 0.95)
            # Inner accuracy tightens as the solutions get nearly feasible (the last load
            # gam predicts the candidate's gap, gam^p - 1): early rounds need a direction.
            inner = tight if polish else min(1e-3, max(tight, 1e-2 * (gam**p - 1)))
            sol = barrier.solve(K, p, R, c_live * inside, rel_gap=inner)
            c_live = sol.c
            low = sol.lower * scale
            lower = low if lower is None else max(lower, low)
            left = max(0.5, time_limit - (time.monotonic() - t0))
            found = separate(per_group(c_live)[g], left, 1.0)
            gam = found.load
            # a candidate from a load that is gamma_w (exact, or up to float rounding on
            # the grid); a clique's load is only a lower bound on it
            if gam > 0 and (found.result is not None or found.exact_load):
                cand = per_group(c_live)[g] * (amount / gam)
                obj = _objective(cand, w, budget)
                if obj < best_obj:
                    best, best_obj, best_res = cand, obj, found.result
            if time.monotonic() - t0 > time_limit:
                notes.append(f"stopped by the time limit ({time_limit:g} s)")
                break
            # Within tolerance, or no new violated point: done, once solved at full
            # accuracy (the early rounds' loose solves get one more, tight, round).
            # the gap is the live queries' (an empty query's variance is no part of the
            # program: it covers no point, so its cost is free and its term unbounded)
            if live_objective(best) <= lower * (1 + tolerance) or not add(found.sets):
                if inner <= tight:
                    break
                polish = True
        else:
            notes.append(f"stopped after {max_rounds} rounds")
    if best is not start.costs:
        if best_res is None:  # found on the float grid: certify with the exact solver
            left = max(0.5, time_limit - (time.monotonic() - t0))
            best_res, gam = _gamma(qs, best, left)
            best = best * (amount / gam)
            best_obj = _objective(best, w, budget)
        if best_obj < _objective(start.costs, w, budget):
            exact_all = best_res.exact
        else:
            best, best_obj = start.costs, _objective(start.costs, w, budget)

    def live_objective(costs: np.ndarray) -> float:
        return _objective(costs[~empty], w[~empty], budget)

    return Allocation(
        "optimal",
        best,
        amount if best is not start.costs else float(start.load),
        exact_all,
        rounds,
        lower,
        best_obj,
        tuple(notes),
    )


def single_constraint(
    queries: Sequence[Query],
    weights: Sequence[float],
    budget: PlanBudget,
    *,
    time_limit: float | None = None,
    unweighted: OverlapResult | None = None,
) -> Allocation | None:
    """The optimal allocation in closed form when one point constraint decides it, else
    None (then :func:`optimal` solves the program).

    If some point is covered by exactly one query of every group (the maximum overlap's
    witness holds one query of each), sum_g c_g <= B is one of the program's
    constraints, and minimising sum_g K_g c_g^-p under it alone gives c_g proportional
    to K_g^(1/(p+1)) (Lagrange): a lower bound on the program. When the overlap solver
    certifies that these costs load no point above B, they are feasible, hence optimal
    (gap 0). Workloads whose every line partitions the domain (marginal tables and
    histograms) are such, whatever their number of cells."""
    qs = list(queries)
    w = np.asarray(weights, float)
    if not qs or any(q.is_empty for q in qs):
        return None
    g = groups_of(qs)
    n_groups = int(g.max()) + 1
    res0 = max_overlap(qs, time_limit=time_limit) if unweighted is None else unweighted
    wit = sorted(int(g[i]) for i in res0.witness_queries)
    if not res0.exact or wit != list(range(n_groups)):
        return None
    p, a = budget.exponent, budget.coefficient
    big_b = budget.amount * (1 - SAFETY)
    k = np.zeros(n_groups)
    np.add.at(k, g, w * a)
    share = k ** (1.0 / (p + 1))
    c_g = big_b * share / share.sum()
    costs = c_g[g]
    res = max_overlap(qs, weights=list(map(float, costs)), time_limit=time_limit)
    if not res.exact or float(res.value) > big_b * (1 + 1e-12):
        return None
    obj = _objective(costs, w, budget)
    return Allocation("optimal", costs, float(res.value), True, 0, obj, obj)


def allocate(
    name: str,
    queries: Sequence[Query],
    weights: Sequence[float],
    budget: PlanBudget,
    *,
    time_limit: float = 30.0,
) -> Allocation:
    if name == "sequential":
        return sequential(queries, weights, budget)
    if name == "uniform":
        return uniform(queries, weights, budget, time_limit=time_limit)
    if name == "optimal":
        return optimal(queries, weights, budget, time_limit=time_limit)
    raise InvalidParameter(f"unknown allocation {name!r}; choose one of {', '.join(ALLOCATIONS)}")
