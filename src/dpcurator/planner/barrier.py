"""The allocation program over a known list of point constraints, and its dual bound.

    minimise  f(c) = sum_g K_g c_g^-p   subject to   R c <= 1,  c <= 1   (c > 0)

in units of the budget: c_g is group g's cost over B, row i of R counts the queries of
each group that cover one point of the domain (a point constraint), K_g > 0 and p = 2
(pure DP: Var = 2 / eps^2) or 1 (zCDP, GDP: Var = 1 / (2 rho), 1 / mu^2). The program is
convex; :mod:`dpcurator.planner.allocation` adds its rows lazily (cutting planes) and
calls :func:`solve` on each list.

Solved by the log-barrier method (Boyd & Vandenberghe 2004, Sec. 11.3): Newton steps on
t f(c) - sum log(1 - R c) - sum log(1 - c) for growing t, each new t entered along the
central path's tangent (a predictor step). The Hessian is a diagonal plus
R^T diag(1 / s^2) R, so a step costs one dense solve of the smaller of rows and groups
(Woodbury when the rows are fewer); a few dozen steps reach a relative gap of 1e-9,
where a first-order method needs thousands.

**The bound is rigorous at any accuracy.** For multipliers lambda, nu >= 0 let
y = R^T lambda + nu; the Lagrangian is minimised over c > 0 at
c_g = (p K_g / y_g)^(1/(p+1)), giving the dual function

    D(lambda, nu) = sum_g (p+1)/p y_g c_g - sum lambda - sum nu,

which is a lower bound on the program for *every* lambda, nu >= 0 (weak duality), hence on
the full program (it has more constraints). :func:`solve` evaluates D at the barrier's
multipliers lambda = 1/(t s), nu = 1/(t (1 - c)) in closed form, so a loose or early stop
only makes the bound weaker, never wrong; and the primal candidate is certified feasible
by the exact overlap solver before it is used, never by this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Newton centering stops when half the squared Newton decrement is below this.
CENTRED = 1e-6
#: Factor by which t grows between centerings.
GROWTH = 12.0
#: Most Newton steps in one call (a safety net: ~40 are typical).
MAX_STEPS = 400


@dataclass(frozen=True)
class Solution:
    """The barrier's primal point ``c`` (strictly feasible for the rows given), its
    objective ``value`` and the dual bound ``lower`` (<= the program's optimum)."""

    c: np.ndarray
    value: float
    lower: float
    steps: int


def dual_value(K: np.ndarray, p: int, R: np.ndarray, lam: np.ndarray, nu: np.ndarray) -> float:
    """D(lambda, nu) (see the module doc): a lower bound on the program for any
    lambda, nu >= 0. A group with y_g = 0 contributes its infimum, 0."""
    y = lam @ R + nu
    pos = y > 0
    c = (p * K[pos] / y[pos]) ** (1.0 / (p + 1))
    return float((p + 1) / p * np.sum(y[pos] * c) - lam.sum() - nu.sum())


def solve(
    K: np.ndarray, p: int, R: np.ndarray, start: np.ndarray, rel_gap: float = 1e-9
) -> Solution:
    """Solve the program over rows ``R`` from ``start`` (strictly feasible: R start < 1,
    0 < start < 1) until the dual bound is within ``rel_gap`` of the objective."""
    K = np.asarray(K, float)
    m, n = R.shape
    c = np.asarray(start, float).copy()
    if not (np.all(c > 0) and np.all(c < 1) and np.all(R @ c < 1)):
        raise ValueError("the barrier needs a strictly feasible start")
    pw = float(p)

    def f(x: np.ndarray) -> float:
        return float(np.sum(K * x**-pw))

    def phi(x: np.ndarray, t: float) -> float:
        s, u = 1.0 - R @ x, 1.0 - x
        if np.any(x <= 0) or np.any(s <= 0) or np.any(u <= 0):
            return np.inf
        return t * f(x) - float(np.sum(np.log(s)) + np.sum(np.log(u)))

    t = 100.0 * (m + n) / f(c)  # a first gap of about 1% of the objective
    best_lower = -np.inf
    steps = 0
    step = np.zeros(n)
    while True:
        # centre: Newton on phi(., t)
        while steps < MAX_STEPS:
            steps += 1
            s, u = 1.0 - R @ c, 1.0 - c
            grad = -t * pw * K * c ** (-pw - 1) + (1.0 / s) @ R + 1.0 / u
            diag = t * pw * (pw + 1) * K * c ** (-pw - 2) + 1.0 / u**2
            step = -_newton(diag, R / s[:, None], grad)
            dec = -float(grad @ step)
            if dec / 2 <= CENTRED:
                break
            alpha, now = 1.0, phi(c, t)
            while phi(c + alpha * step, t) > now - 0.25 * alpha * dec:
                alpha *= 0.5
                if alpha < 1e-12:
                    break
            if alpha < 1e-12:
                break
            c = c + alpha * step
        s, u = 1.0 - R @ c, 1.0 - c
        # Multipliers 1/(t s) corrected by the last Newton step (the linearised barrier
        # gradient at the centre): their error is second order in the centring error,
        # where 1/(t s) alone would stall the bound near the boundary. Any lambda, nu >= 0
        # give a valid bound; these give a tight one.
        ds, du = R @ step, step
        lam = np.maximum(0.0, (1.0 + ds / s) / (t * s))
        nu = np.maximum(0.0, (1.0 + du / u) / (t * u))
        best_lower = max(best_lower, dual_value(K, p, R, lam, nu))
        value = f(c)
        done = value - best_lower <= rel_gap * value
        if done or steps >= MAX_STEPS or (m + n) / t < 1e-14 * value:  # float's limit
            return Solution(c, value, best_lower, steps)
        # predictor: follow the central path's tangent dc/dt = -H^-1 grad f to the next t
        grad_f = -pw * K * c ** (-pw - 1)
        diag = t * pw * (pw + 1) * K * c ** (-pw - 2) + 1.0 / u**2
        tangent = -_newton(diag, R / s[:, None], grad_f)
        t_next = t * GROWTH
        alpha = 1.0
        now = phi(c, t_next)
        while alpha > 1e-3:
            if phi(c + alpha * (t_next - t) * tangent, t_next) < now:
                c = c + alpha * (t_next - t) * tangent
                break
            alpha *= 0.5
        t = t_next


def _newton(diag: np.ndarray, rs: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """(diag(diag) + rs^T rs)^-1 grad, by the smaller of the two dense solves."""
    m, n = rs.shape
    if m >= n:
        h = rs.T @ rs
        h[np.diag_indices(n)] += diag
        return np.linalg.solve(h, grad)
    # Woodbury: D^-1 g - D^-1 rs^T (I + rs D^-1 rs^T)^-1 rs D^-1 g
    dg = grad / diag
    rd = rs / diag
    small = rd @ rs.T
    small[np.diag_indices(m)] += 1.0
    return dg - (np.linalg.solve(small, rs @ dg) @ rd)
