"""Choosing a strategy's costs: the budget split over its measurement tables.

Every measurement table of a strategy partitions the (atom) domain into cells, so each
point is in exactly one cell of each table and pays every table's cost once: the
per-point constraint of the curator's filter (docs/design.md §7) is sum_t c_t <= B.

The optimiser's model of a cell's noise is its *precision* (1 / variance) as a function
of the cost c in the additive currency:

* epsilon (discrete Laplace of scale 1/c, exact): Var = 2 e^-c / (1 - e^-c)^2, so the
  precision is 2 sinh^2(c/2) = cosh(c) - 1;
* rho (discrete Gaussian with sigma^2 = 1/(2 rho)): 2 rho (the continuous value; the
  discrete variance is a hair below sigma^2);
* mu^2 (GDP, sigma = 1/mu): mu^2.

Reported figures never use the model: they use each table's exact noise at the cost as
charged (:meth:`dpcurator.mechanisms.noise.Noise.variance`).

A strategy's answers have variances v_k(c) (one per distinct query profile k) that
decrease in every c_t. The weighted objectives (``total``, ``per-table``) minimise
sum_k omega_k v_k(c) by L-BFGS-B over directions u >= 0 with c = B u / sum u (the
variances are homogeneous in nothing, but any direction is feasible after this scaling,
so the search has no constraint). ``max`` minimises the largest v_k in epigraph form
(min t s.t. v_k(c) <= t, sum c <= B) by SLSQP, started from the weighted optimum: a
convex program under zCDP and GDP (each v_k is a convex function of the precisions,
which are linear in c there), a local one under pure DP. Several starts; the best wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.allocation import _limits  # one BLAS thread: L-BFGS-B's calls are tiny

#: Relative lower bound on a table's share of the budget during the search (so that no
#: variance becomes infinite); tables left below PRUNE of the budget are dropped after.
FLOOR = 1e-9
PRUNE = 1e-4

#: v(c) -> (variances per profile, Jacobian profiles x tables)
VarianceFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def precision(c: np.ndarray, currency: str) -> np.ndarray:
    """The model precision 1/Var of a sensitivity-1 count at additive cost ``c``."""
    c = np.asarray(c, float)
    if currency == "epsilon":
        return 2.0 * np.sinh(c / 2.0) ** 2  # = cosh(c) - 1, without cancellation
    return 2.0 * c if currency == "rho" else c.copy()


def precision_slope(c: np.ndarray, currency: str) -> np.ndarray:
    """d precision / dc."""
    c = np.asarray(c, float)
    if currency == "epsilon":
        return np.sinh(c)
    return np.full_like(c, 2.0 if currency == "rho" else 1.0)


def minimise_weighted(
    fn: VarianceFn, omega: np.ndarray, budget: float, starts: Sequence[np.ndarray]
) -> tuple[np.ndarray, float]:
    """The costs (summing to ``budget``) minimising omega . v(c), best of ``starts``."""
    m = len(starts[0])
    best_c, best_f = None, np.inf

    def f(u: np.ndarray) -> tuple[float, np.ndarray]:
        s = float(u.sum())
        c = budget * u / s
        v, jac = fn(c)
        val = float(omega @ v)
        if not np.isfinite(val):
            return 1e300, np.zeros(m)
        g = omega @ jac
        return val, (budget / s) * (g - float(g @ u) / s)

    from scipy.optimize import minimize  # imported when first needed: slow to import

    with _limits(1):  # once for all starts: setting the limit costs milliseconds
        for st in starts:
            u0 = np.maximum(np.asarray(st, float), FLOOR)
            u0 = u0 / u0.sum()
            res = minimize(
                f,
                u0,
                jac=True,
                method="L-BFGS-B",
                bounds=[(FLOOR, None)] * m,
                options={"maxiter": 3000, "ftol": 1e-13, "gtol": 1e-11},
            )
            u = np.maximum(res.x, FLOOR)
            c = budget * u / u.sum()
            val = float(omega @ fn(c)[0])
            if val < best_f:
                best_c, best_f = c, val
    if best_c is None:  # every start's error overflows: no cost split is meaningful
        raise InvalidParameter(f"a budget of {budget:.3g} is too small to plan these measurements")
    return best_c, best_f


def minimise_max(fn: VarianceFn, budget: float, start: np.ndarray) -> tuple[np.ndarray, float]:
    """The costs (summing to at most ``budget``) minimising max_k v_k(c), by SLSQP on the
    epigraph form from ``start``; never worse than ``start``."""
    m = len(start)
    v0 = fn(start)[0]
    scale = float(v0.max())
    if not (np.isfinite(scale) and scale > 0):
        return start, scale
    lo = FLOOR * budget

    def cons(z: np.ndarray) -> np.ndarray:
        v, _ = fn(np.maximum(z[:m], lo))
        return np.concatenate([z[m] - v / scale, [1.0 - z[:m].sum() / budget]])

    def cons_jac(z: np.ndarray) -> np.ndarray:
        _, jac = fn(np.maximum(z[:m], lo))
        top = np.hstack([-jac / scale, np.ones((len(jac), 1))])
        bottom = np.concatenate([-np.ones(m) / budget, [0.0]])[None, :]
        return np.vstack([top, bottom])

    z0 = np.concatenate([start, [1.0]])
    with _limits(1):
        res = _slsqp(cons, cons_jac, z0, m, lo, budget)
    c = np.maximum(res.x[:m], lo)
    total = c.sum()
    if total > budget:
        c = c * (budget / total)
    val = float(fn(c)[0].max())
    if not (val < scale):
        return start, scale
    return c, val


def _slsqp(cons, cons_jac, z0: np.ndarray, m: int, lo: float, budget: float):
    from scipy.optimize import minimize

    return minimize(
        lambda z: (z[m], np.eye(m + 1)[m]),
        z0,
        jac=True,
        method="SLSQP",
        bounds=[(lo, budget)] * m + [(0.0, None)],
        constraints=[{"type": "ineq", "fun": cons, "jac": cons_jac}],
        options={"maxiter": 300, "ftol": 1e-12},
    )
