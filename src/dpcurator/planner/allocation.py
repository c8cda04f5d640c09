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
from scipy.optimize import minimize

from dpcurator.errors import InvalidParameter
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


class _Dual:
    """The Lagrangian dual of  min sum_g K_g c_g^-p  s.t.  R c <= 1, c_g <= 1.

    For multipliers (lambda, nu) >= 0, y = R^T lambda + nu and the minimising
    c_g = (p K_g / y_g)^(1/(p+1)); the dual value is a lower bound on the program.
    """

    def __init__(self, K: np.ndarray, p: int) -> None:
        self.K, self.p = K, p
        # A floor on y: the dual of the program with the tiny extra term sum floor_g c_g,
        # which keeps c bounded (<= 10^(6/(p+1)) budgets) and the dual smooth. Its value
        # minus sum(floor) (c <= 1 when feasible) is still a lower bound on the program.
        self.floor = 1e-6 * p * K
        self.slack = float(self.floor.sum())

    def primal(self, y: np.ndarray) -> np.ndarray:
        return (self.p * self.K / (y + self.floor)) ** (1.0 / (self.p + 1))

    def solve(self, R: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        m, G = R.shape
        K, p = self.K, self.p

        def neg(z):
            lam, nu = z[:m], z[m:]
            y = lam @ R + nu
            c = self.primal(y)
            val = np.sum(K * c ** (-p)) + np.sum((y + self.floor) * c) - z.sum()
            grad = np.concatenate([R @ c - 1.0, c - 1.0])
            return -val, -grad

        with _limits(1):
            res = self._minimize(neg, start, m + G)
        z = res.x
        y = z[:m] @ R + z[m:]
        return z, self.primal(y), -float(res.fun) - self.slack

    @staticmethod
    def _minimize(neg, start, n):
        return minimize(
            neg,
            start,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * n,
            options={"maxiter": 20000, "maxfun": 40000, "ftol": 1e-15, "gtol": 1e-12},
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

    Stops when the relative gap between the best feasible candidate and the dual bound
    is below ``tolerance``, after ``max_rounds`` cuts, or after ``time_limit`` seconds;
    the result is always feasible (certified by the overlap solver) and never worse than
    ``start`` (the uniform allocation by default).
    """
    t0 = time.monotonic()
    w = np.asarray(weights, float)
    qs = list(queries)
    if start is None:
        start = uniform(qs, w, budget, time_limit=time_limit / 4)
    g = groups_of(qs) if groups is None else np.asarray(groups, np.int64)
    G = int(g.max()) + 1 if len(g) else 0
    if G == 0:
        return start
    B = budget.amount * (1 - SAFETY)
    p, a = budget.exponent, budget.coefficient
    empty = np.array([q.is_empty for q in qs])
    live = np.zeros(G, bool)
    np.logical_or.at(live, g, ~empty)
    # K_g in normalised units: c = B * chat, objective sum K_g chat^-p
    Kg = np.zeros(G)
    np.add.at(Kg, g, w * a / B**p)
    scale = Kg[live].sum() if live.any() else 1.0
    K = np.where(live, Kg / scale, 0.0)
    dual = _Dual(np.where(live, K, 1.0), p)

    def expand(chat: np.ndarray) -> np.ndarray:
        return chat[g] * B

    best = start
    best_obj = _objective(start.costs, w, budget)
    rows: list[np.ndarray] = []
    seen: set[bytes] = set()

    def add_cut(witness_queries: Sequence[int]) -> bool:
        row = np.zeros(G)
        idx = np.asarray(list(witness_queries), np.int64)
        if len(idx):
            np.add.at(row, g[idx], 1.0)
        row[~live] = 0.0
        key = row.tobytes()
        if key in seen or not row.any():
            return False
        seen.add(key)
        rows.append(row)
        return True

    res0 = max_overlap(qs, weights=list(map(float, start.costs)), time_limit=time_limit / 4)
    add_cut(res0.witness_queries)
    z = np.concatenate([np.full(len(rows), 1.0), np.full(G, 1e-3)])
    lower = None
    rounds = 0
    notes: list[str] = []
    exact_all = start.exact
    while rounds < max_rounds:
        rounds += 1
        R = np.vstack(rows) if rows else np.zeros((0, G))
        if len(z) < R.shape[0] + G:  # a new cut starts with multiplier 0
            m_old = len(z) - G
            z = np.concatenate([z[:m_old], np.zeros(R.shape[0] - m_old), z[m_old:]])
        z, chat, low = dual.solve(R, z)
        low_obj = low * scale
        lower = low_obj if lower is None else max(lower, low_obj)
        chat = np.where(live, chat, 1.0)
        costs = expand(chat)
        left = max(0.5, time_limit - (time.monotonic() - t0))
        res, gam = _gamma(qs, costs, left)
        if gam > 0:
            cand = costs * (budget.amount * (1 - SAFETY) / gam)
            obj = _objective(cand, w, budget)
            if obj < best_obj:
                best = Allocation("optimal", cand, budget.amount * (1 - SAFETY), res.exact)
                best_obj = obj
                exact_all = res.exact
        if best_obj <= lower * (1 + tolerance):
            break
        if time.monotonic() - t0 > time_limit:
            notes.append(f"stopped by the time limit ({time_limit:g} s)")
            break
        if not add_cut(res.witness_queries):
            break  # the solver found no new violated set: done to its accuracy
    else:
        notes.append(f"stopped after {max_rounds} rounds")
    return Allocation(
        "optimal",
        best.costs,
        float(best.load),
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
