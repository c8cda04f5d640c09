"""From rho-zCDP to (eps, delta)-DP.

Two rigorous conversions, both valid at the same eps, so their minimum is valid too:

- Bun & Steinke, *Concentrated Differential Privacy* (TCC 2016), Prop. 1.3:
  (rho + 2 sqrt(rho ln(1/delta)), delta)-DP, i.e. delta = exp(-(eps - rho)^2 / (4 rho))
  for eps >= rho.
- Canonne, Kamath & Steinke, *The Discrete Gaussian for Differential Privacy*
  (NeurIPS 2020), Cor. 13: for every alpha > 1,
  delta = exp((alpha - 1)(alpha rho - eps)) / (alpha - 1) * (1 - 1/alpha)^alpha.
  Any alpha gives a valid delta, so an imprecise minimisation can only be loose,
  never optimistic.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq, minimize_scalar

from dpcurator.privacy.gaussian import nudge_up


def _log_delta_cks(rho: float, epsilon: float, t: float) -> float:
    """log delta of CKS Cor. 13 at alpha = 1 + e^t (t parametrises alpha > 1 stably)."""
    alpha = 1 + math.exp(t)
    # log(1 - 1/alpha) = log(alpha - 1) - log(alpha) = t - log1p(e^t)
    return (alpha - 1) * (alpha * rho - epsilon) - t + alpha * (t - math.log1p(math.exp(t)))


def zcdp_delta_bun_steinke(rho: float, epsilon: float) -> float:
    """delta(eps) from Bun & Steinke 2016, Prop. 1.3 (1 when eps <= rho: no guarantee)."""
    if rho == 0:
        return 0.0
    if epsilon <= rho:
        return 1.0
    return math.exp(-((epsilon - rho) ** 2) / (4 * rho))


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) from Canonne, Kamath & Steinke 2020, Cor. 13, minimised over alpha > 1."""
    if rho == 0:
        return 0.0
    # The unconstrained optimum of the leading term is alpha ~ (eps + rho) / (2 rho);
    # search log(alpha - 1) on a window around it.
    centre = math.log(max((epsilon + rho) / (2 * rho) - 1, 1e-6))
    res = minimize_scalar(
        lambda t: _log_delta_cks(rho, epsilon, t),
        bounds=(min(centre, 0.0) - 30, max(centre, 0.0) + 10),
        method="bounded",
        options={"xatol": 1e-10},
    )
    return min(1.0, math.exp(float(res.fun)))


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The smaller of the two rigorous conversions at the same eps."""
    return min(zcdp_delta_bun_steinke(rho, epsilon), zcdp_delta_cks(rho, epsilon))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest eps with zcdp_delta(rho, eps) <= delta (never optimistic).

    Starts from Bun & Steinke's closed form eps = rho + 2 sqrt(rho ln(1/delta)),
    which is always feasible, and searches below it with the tighter bound.
    """
    if rho == 0:
        return 0.0
    hi = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    if zcdp_delta_cks(rho, 0.0) <= delta:
        return 0.0
    if zcdp_delta_cks(rho, hi) > delta:
        return hi
    eps = brentq(
        lambda e: math.log(zcdp_delta_cks(rho, e)) - math.log(delta),
        0.0,
        hi,
        xtol=1e-13,
        rtol=1e-13,
    )
    return min(hi, nudge_up(eps, lambda e: zcdp_delta(rho, e) <= delta))
