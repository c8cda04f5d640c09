"""HDMM's p-Identity strategies: the histogram plus p weighted rows, optimised.

McKenna, Miklau, Hay & Machanavajjhala (VLDB 2018, Sec. 5.2) parameterise a strategy
over n cells by a non-negative p x n matrix Theta:

    A(Theta) = [I; Theta] D^-1,   D = diag of the column norms of [I; Theta],

so that every column of A has norm 1: under pure DP the L1 norm (D = I + diag(1^T Theta)),
under zCDP and GDP the L2 norm (D^2 = I + diag(1^T (Theta o Theta))). The matrix
mechanism's expected squared error of a workload with Gram matrix Omega = W^T W is then
proportional to tr(Omega (A^T A)^-1) (Li, Miklau, Hay, McGregor & Rastogi, VLDB J. 2015),
and, with X = I + Theta^T Theta, (A^T A)^-1 = D X^-1 D: a smooth function of Theta,
minimised by L-BFGS-B from a few random starts (the program is not convex; the starts come
from a fixed seed, so a workload always gets the same plan). X^-1 is formed by Woodbury's
identity through the p x p matrix I + Theta Theta^T, so an iteration costs O(p n^2).

The rows are then made integers (:mod:`.weights`): row r's weight on cell x is
floor(K Theta_rx / D_x), and the identity row of x gives its column what is left of its
norm: under pure DP, K - sum_r k_rx >= 1; under zCDP the largest m_x with
m_x^2 + sum_r k_rx^2 <= K^2, and the rest (at most 2 m_x) is written as a sum of four
squares (Lagrange) and spread over four *slack* rows, whose weights on x are those
squares' roots. Every column's norm is then exactly K (pure DP) or K^2 in squares
(zCDP), nothing is wasted (the slack rows are measured and used like the others), and
the whole strategy is one measurement, charged once at the budget on every point, with
each row's noise at 1/K (pure DP) or 1/K^2 (zCDP) of it. The errors reported are the integer
strategy's, exactly; with K = 1024 they are within 0.001% of the real-valued optimum's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpcurator import deadlines

#: The integer scale of the rows (see the module doc).
SCALE = 1024
#: Random starts per p, from a fixed seed (public and data-independent).
STARTS = 3
SEED = 20180827
#: L-BFGS-B iterations per start, at most; and the work per start, at most, in the
#: units of one iteration's O(p n^2) (so that 256 atoms plan in about a second).
ITERATIONS = 2000
WORK = 4e8
#: Above this many cells: one start, one p (about n/16).
LARGE = 128


def _norm_of(currency: str) -> int:
    return 1 if currency == "epsilon" else 2


def _norms(theta: np.ndarray, order: int) -> np.ndarray:
    """The column norms of [I; Theta]: L1 (``order`` 1) or L2 (2)."""
    if order == 1:
        return 1.0 + theta.sum(axis=0)
    return np.sqrt(1.0 + (theta * theta).sum(axis=0))


def objective(theta: np.ndarray, omega: np.ndarray, order: int) -> tuple[float, np.ndarray]:
    """tr(Omega D X^-1 D) and its gradient in Theta (p x n) for columns normalised in
    the L1 (``order`` 1) or L2 (2) norm."""
    p, n = theta.shape
    d = _norms(theta, order)
    small = np.eye(p) + theta @ theta.T
    xi = np.eye(n) - theta.T @ np.linalg.solve(small, theta)  # Woodbury: (I + T^T T)^-1
    m = (d[:, None] * omega) * d[None, :]
    value = float(np.sum(m * xi))
    g_d = 2.0 * ((omega * xi) @ d)
    tx = theta @ xi
    grad = -2.0 * (tx @ m) @ xi
    grad += g_d[None, :] if order == 1 else theta * (g_d / d)[None, :]
    return value, grad


def optimise(
    omega: np.ndarray, p: int, currency: str, seed: int = SEED, start: np.ndarray | None = None
) -> np.ndarray:
    """The best Theta (p x n) found for the workload Gram matrix ``omega`` (n x n), from
    :data:`STARTS` random starts, or from ``start`` alone when given."""
    from scipy.optimize import minimize  # imported when first needed: slow to import

    n = omega.shape[0]
    order = _norm_of(currency)
    scale = float(np.trace(omega)) or 1.0
    om = omega / scale

    def f(x: np.ndarray) -> tuple[float, np.ndarray]:
        deadlines.check()  # a request's deadline (see dpcurator.deadlines)
        v, g = objective(x.reshape(p, n), om, order)
        return v, g.ravel()

    rng = np.random.default_rng(seed + 7919 * p + n)
    best, best_v = np.zeros((p, n)), np.inf
    starts = STARTS if n <= LARGE else 1
    firsts = [start.ravel()] if start is not None else [rng.random(p * n) for _ in range(starts)]
    iterations = int(min(ITERATIONS, max(100, WORK / (p * n * n))))
    for x0 in firsts:
        res = minimize(
            f,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * (p * n),
            options={"maxiter": iterations},
        )
        if res.fun < best_v:
            best, best_v = res.x.reshape(p, n), float(res.fun)
    return best


def integer_rows(theta: np.ndarray, currency: str, scale: int = SCALE) -> np.ndarray:
    """The integer strategy (rows x n): Theta's rows scaled by ``scale`` and rounded
    down, then the identity rows that bring every column's norm to exactly ``scale``
    (L1) or ``scale``^2 (squared L2; see the module doc); rows of zeros are left out."""
    order = _norm_of(currency)
    t = np.maximum(np.asarray(theta, float), 0.0)
    d = _norms(t, order)
    k = np.floor(scale * t / d[None, :]).astype(np.int64)
    if order == 1:
        ident = scale - k.sum(axis=0)  # >= 1: sum_r k_rx <= scale sum/(1 + sum) < scale
        rows = np.vstack([np.diag(ident), k])
    else:
        room = [scale * scale - int(v) for v in (k * k).sum(axis=0)]  # >= 1
        ident = [math.isqrt(r) for r in room]
        slack = np.array(
            [four_squares(r - m * m) for r, m in zip(room, ident, strict=True)], np.int64
        ).T
        rows = np.vstack([np.diag(np.array(ident, np.int64)), k, slack])
    return rows[np.any(rows != 0, axis=1)]


def four_squares(n: int) -> tuple[int, int, int, int]:
    """(a, b, c, d) with a^2 + b^2 + c^2 + d^2 = n (Lagrange: every n >= 0 has one), by
    a search from the largest squares (n is at most 2 scale here: a few steps)."""
    for a in range(math.isqrt(n), -1, -1):
        r1 = n - a * a
        for b in range(min(a, math.isqrt(r1)), -1, -1):
            r2 = r1 - b * b
            for c in range(min(b, math.isqrt(r2)), -1, -1):
                d = math.isqrt(r2 - c * c)
                if c * c + d * d == r2 and d <= c:
                    return a, b, c, d
    raise AssertionError("unreachable: Lagrange's four-square theorem")


@dataclass(frozen=True)
class PIdentity:
    """An integer p-Identity strategy and its model objective (at unit row precision)."""

    rows: np.ndarray  # int64, rows x n
    scale: int  # every column's norm (L1), or its square root (squared L2)
    p: int
    objective: float
    theta: np.ndarray  # the real-valued Theta the rows were made from (p x n)  # tr(Omega (A^T A)^-1) of the integer rows, A normalised by the scale


def candidates(n: int, currency: str = "epsilon") -> tuple[int, ...]:
    """The p tried for n cells: about n/16 (HDMM's choice), n/12 and n/8; above
    :data:`LARGE` cells one of them, n/16 under pure DP and n/8 under zCDP and GDP (the
    better on ranges, where the L2 normalisation favours more rows)."""
    if n > LARGE:
        return (round(n / 16) if currency == "epsilon" else round(n / 8),)
    ps = {max(1, round(n / 16)), max(1, round(n / 12)), max(1, round(n / 8))}
    return tuple(sorted(p for p in ps if p < n))


def best(
    omega: np.ndarray,
    currency: str,
    ps: tuple[int, ...] | None = None,
    scale: int = SCALE,
    start: np.ndarray | None = None,
) -> PIdentity:
    """The best integer p-Identity strategy over ``ps`` (default :func:`candidates`, each
    from random starts; given ``ps``, from ``start`` if any) for the workload Gram
    matrix ``omega`` with rows scaled by ``scale``, judged on the integer rows."""
    n = omega.shape[0]
    out: PIdentity | None = None
    for p in ps if ps is not None else candidates(n, currency):
        theta = optimise(omega, p, currency, start=start if ps is not None else None)
        rows = integer_rows(theta, currency, scale)
        a = rows.astype(float) / scale
        try:
            v = float(np.sum(omega * np.linalg.inv(a.T @ a)))
        except np.linalg.LinAlgError:
            continue
        if out is None or v < out.objective:
            out = PIdentity(rows, scale, p, v, theta)
    if out is None:  # n == 1, or every p singular: the identity alone
        rows = np.eye(n, dtype=np.int64) * scale
        out = PIdentity(rows, scale, 0, float(np.trace(omega)), np.zeros((0, n)))
    return out


__all__ = [
    "SCALE",
    "PIdentity",
    "best",
    "candidates",
    "four_squares",
    "integer_rows",
    "objective",
    "optimise",
]
