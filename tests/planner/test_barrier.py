"""The restricted allocation program's solver (planner/barrier.py): the dual bound holds at
any multipliers, the solver meets its gap, and agrees with an independent solver and with
closed forms; both linear-algebra paths of a Newton step agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from dpcurator.planner import barrier


@st.composite
def programs(draw):
    """A small program: K > 0, p in {1, 2}, 0/1/2 rows (each row a point constraint)."""
    n = draw(st.integers(1, 6))
    m = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    R = rng.integers(0, 3, size=(m, n)).astype(float) * (rng.random((m, n)) < 0.6)
    K = rng.uniform(0.01, 1.0, n)
    return K / K.sum(), draw(st.sampled_from([1, 2])), R, rng


def objective(K, p, c):
    return float(np.sum(K * c ** (-float(p))))


def reference_optimum(K, p, R) -> float:
    """SLSQP on log costs with every constraint listed: an independent oracle."""
    n = len(K)
    A = np.vstack([R, np.eye(n)])
    best = np.inf
    for start in (np.full(n, np.log(0.5 / max(1.0, A.sum(axis=1).max()))), np.full(n, -3.0)):
        r = minimize(
            lambda u: objective(K, p, np.exp(u)),
            start,
            constraints=[{"type": "ineq", "fun": lambda u: 1.0 - A @ np.exp(u)}],
            method="SLSQP",
            options={"maxiter": 1000, "ftol": 1e-15},
        )
        if np.all(A @ np.exp(r.x) <= 1 + 1e-9):
            best = min(best, r.fun)
    return best


@settings(max_examples=200, deadline=None)
@given(programs())
def test_dual_value_is_below_every_feasible_objective(prog) -> None:
    """Weak duality at arbitrary multipliers: D(lambda, nu) <= f(c) for every feasible c
    (random multipliers, some zero; random feasible points, some on the boundary)."""
    K, p, R, rng = prog
    m, n = R.shape
    for _ in range(20):
        lam = rng.exponential(1.0, m) * (rng.random(m) < 0.7)
        nu = rng.exponential(0.1, n) * (rng.random(n) < 0.5)
        d = barrier.dual_value(K, p, R, lam, nu)
        c = rng.uniform(0.01, 1.0, n)
        load = max(1.0, float((R @ c).max()), float(c.max()))
        c = c / load  # feasible; on the boundary of the tightest constraint
        assert d <= objective(K, p, c) * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_solve_meets_its_gap_and_the_reference(prog) -> None:
    K, p, R, _ = prog
    n = len(K)
    start = np.full(n, 0.5 / max(1.0, R.sum(axis=1).max()))
    sol = barrier.solve(K, p, R, start, rel_gap=1e-9)
    assert np.all(R @ sol.c < 1) and np.all(sol.c < 1) and np.all(sol.c > 0)
    assert sol.value == pytest.approx(objective(K, p, sol.c), rel=1e-12)
    assert sol.lower <= sol.value and sol.value - sol.lower <= 1e-9 * sol.value
    ref = reference_optimum(K, p, R)
    # the bound is below the optimum (SLSQP's point is feasible to 1e-9), the value near it
    assert sol.lower <= ref * (1 + 1e-8)
    assert sol.value <= ref * (1 + 1e-7)


@pytest.mark.parametrize("p", [1, 2])
def test_one_constraint_closed_form(p) -> None:
    """sum c <= 1 alone: c_g proportional to K_g^(1/(p+1)) (Lagrange), optimum
    (sum K^(1/(p+1)))^(p+1)."""
    K = np.array([0.1, 0.2, 0.3, 0.4])
    sol = barrier.solve(K, p, np.ones((1, 4)), np.full(4, 0.2), rel_gap=1e-11)
    share = K ** (1 / (p + 1))
    assert sol.c == pytest.approx(share / share.sum(), rel=1e-5)
    best = share.sum() ** (p + 1)
    assert sol.lower <= best <= sol.value <= best * (1 + 1e-11)


def test_loose_gap_still_gives_a_valid_bound() -> None:
    """Stopping early only weakens the bound: it stays below the optimum."""
    K = np.array([0.5, 0.3, 0.2])
    R = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 2.0]])
    exact = barrier.solve(K, 2, R, np.full(3, 0.1), rel_gap=1e-12)
    for gap in (0.5, 1e-1, 1e-3):
        loose = barrier.solve(K, 2, R, np.full(3, 0.1), rel_gap=gap)
        assert loose.lower <= exact.value
        assert loose.value - loose.lower <= gap * loose.value


def test_newton_paths_agree() -> None:
    """The direct solve (rows >= groups) and Woodbury (rows < groups) give the same step."""
    rng = np.random.default_rng(7)
    for m, n in ((3, 40), (40, 3), (10, 10)):
        diag = rng.uniform(0.1, 10.0, n)
        rs = rng.normal(size=(m, n))
        grad = rng.normal(size=n)
        dense = np.linalg.solve(np.diag(diag) + rs.T @ rs, grad)
        assert barrier._newton(diag, rs, grad) == pytest.approx(dense, rel=1e-9, abs=1e-12)


def test_start_must_be_strictly_feasible() -> None:
    with pytest.raises(ValueError):
        barrier.solve(np.ones(2), 2, np.ones((1, 2)), np.array([0.5, 0.5]))
