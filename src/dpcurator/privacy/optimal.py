"""Exact optimal composition of n homogeneous (eps, delta)-DP mechanisms.

Kairouz, Oh & Viswanath, *The Composition Theorem for Differential Privacy*
(IEEE Trans. IT 2017), Thm 3.3: n mechanisms, each (eps, delta)-DP, are
(eps', delta_n(eps'))-DP with

    delta_n(eps') = 1 - (1 - delta)^n (1 - delta_RR(eps')),
    delta_RR(eps') = sum_j C(n, j) max(0, e^{(n-j) eps} - e^{eps'} e^{j eps}) / (1 + e^eps)^n,

and no smaller delta holds for all such mechanisms. Everything is evaluated in log
space (n may be 10^5 or more); nothing is discretised. Terms more than e^-800 below
the largest one are dropped: they vanish in double precision anyway.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln, logsumexp

from dpcurator.privacy.gaussian import nudge_up

_NEGLIGIBLE = 800.0


@lru_cache(maxsize=32)
def _log_base(epsilon: float, n: int) -> np.ndarray:
    """log C(n, j) + (n - j) eps - n log(1 + e^eps), for j = 0..n.

    log C(n, j) = -log(n + 1) - log B(n - j + 1, j + 1); scipy's betaln avoids the
    cancellation that subtracting three log-gammas of size n log n would suffer.
    """
    j = np.arange(n + 1, dtype=np.float64)
    log_binom = -math.log(n + 1) - betaln(n - j + 1, j + 1)
    out = log_binom + (n - j) * epsilon - n * float(np.logaddexp(0.0, epsilon))
    out.setflags(write=False)
    return out


def log_delta_rr(epsilon: float, n: int, eps_prime: float) -> float:
    """log delta_RR(eps') of KOV Thm 3.3 (-inf when it is 0)."""
    if epsilon == 0:
        return -math.inf
    # Terms with (n - j) eps > eps' + j eps, i.e. j < (n eps - eps') / (2 eps).
    j_stop = min(n + 1, math.ceil((n * epsilon - eps_prime) / (2 * epsilon)))
    if j_stop <= 0:
        return -math.inf
    base = _log_base(epsilon, n)[:j_stop]
    j = np.arange(j_stop, dtype=np.float64)
    # log(1 - e^x) with x = eps' - (n - 2j) eps < 0, evaluated stably.
    x = eps_prime - (n - 2 * j) * epsilon
    keep = base > base.max() - _NEGLIGIBLE
    base, x = base[keep], x[keep]
    with np.errstate(divide="ignore"):
        factor = np.where(x > -math.log(2), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    return float(logsumexp(base + factor))


def optimal_delta(epsilon: float, delta: float, n: int, eps_prime: float) -> float:
    """delta_n(eps') of KOV Thm 3.3: the exact smallest delta at eps'."""
    log_rr = log_delta_rr(epsilon, n, eps_prime)
    if delta == 0:
        return math.exp(log_rr)
    rr = math.exp(log_rr)
    return -math.expm1(n * math.log1p(-delta) + math.log1p(-rr))


def optimal_epsilon(epsilon: float, delta: float, n: int, target_delta: float) -> float | None:
    """The smallest eps' with delta_n(eps') <= target_delta, or None if none exists.

    delta_n is non-increasing in eps'; Brent's method finds the crossing to ~1e-15
    relative and the result is then nudged up until the certificate holds.
    """
    floor = -math.expm1(n * math.log1p(-delta)) if delta else 0.0  # delta_n(n eps)
    if floor >= target_delta:
        return None
    if optimal_delta(epsilon, delta, n, 0.0) <= target_delta:
        return 0.0
    hi = n * epsilon
    eps = brentq(
        lambda e: optimal_delta(epsilon, delta, n, e) - target_delta,
        0.0,
        hi,
        xtol=1e-15,
        rtol=8.9e-16,
        maxiter=500,
    )
    return min(hi, nudge_up(eps, lambda e: optimal_delta(epsilon, delta, n, e) <= target_delta))
