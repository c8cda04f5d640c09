"""The Gaussian trade-off G_mu and its exact privacy profile.

Dong, Roth & Su, *Gaussian Differential Privacy* (JRSS-B 2022):
G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu) (Def. 2.7) and mu-GDP holds iff
(eps, delta(eps))-DP holds for every eps >= 0 with
delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Cor. 2.13).
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr, ndtri


def gdp_delta(mu: float, epsilon: float) -> float:
    """Exact delta(eps) of mu-GDP (Dong, Roth & Su 2022, Cor. 2.13).

    The second term is evaluated in log space, so large eps neither overflows
    e^eps nor loses the difference to cancellation more than necessary.
    """
    if mu == 0:
        return 0.0
    first = float(ndtr(-epsilon / mu + mu / 2))
    second = math.exp(epsilon + float(log_ndtr(-epsilon / mu - mu / 2)))
    return max(0.0, first - second)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest eps >= 0 with delta(eps) <= delta for mu-GDP (exact, by root finding).

    delta(eps) is strictly decreasing in eps (Dong, Roth & Su 2022, Cor. 2.13), so a
    bracketed root is unique; the returned eps is nudged up until delta(eps) <= delta,
    so the (eps, delta) pair it certifies is never optimistic.
    """
    if mu == 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    eps = brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-14, rtol=1e-14)
    return nudge_up(eps, lambda e: gdp_delta(mu, e) <= delta)


def gaussian_tradeoff(mu: float, alpha):  # type: ignore[no-untyped-def]
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu), vectorised (Dong, Roth & Su, Def. 2.7)."""
    return ndtr(ndtri(1 - alpha) - mu)


def mu_from_pure(epsilon: float) -> float:
    """The GDP parameter implied by eps-DP: mu = -2 Phi^{-1}(1 / (1 + e^eps)).

    f_{eps,0} consists of two chords of the convex curve G_mu through its symmetric
    point alpha* = 1/(1+e^eps), where both equal 1/(1+e^eps); a convex function lies
    below its chords, so G_mu <= f_{eps,0} and eps-DP implies mu-GDP. The value equals
    2 Phi^{-1}(e^eps/(1+e^eps)), computed without cancellation.
    """
    return -2.0 * float(ndtri(1.0 / (1.0 + math.exp(epsilon)))) if epsilon < 700 else math.inf


def nudge_up(x: float, ok, steps: int = 200) -> float:  # type: ignore[no-untyped-def]
    """Increase x by a few ulps (then geometrically) until ``ok(x)`` holds.

    Root finders stop within a tolerance on either side of the root; a rigorous
    answer must be on the safe side, so we step up until the certificate holds.
    """
    step = max(abs(x) * 1e-15, 1e-300)
    for _ in range(steps):
        if ok(x):
            return x
        x += step
        step *= 2
    raise ArithmeticError("could not certify a root on the safe side")
