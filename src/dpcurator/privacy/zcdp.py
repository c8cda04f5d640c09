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
from fractions import Fraction

from mpmath import iv

from dpcurator.privacy import _rigor


def _log_delta_cks(rho: float, epsilon: float, t: float) -> float:
    """log delta of CKS Cor. 13 at alpha = 1 + e^t (t parametrises alpha > 1 stably)."""
    alpha = 1 + math.exp(t)
    # log(1 - 1/alpha) = log(alpha - 1) - log(alpha) = t - log1p(e^t)
    return (alpha - 1) * (alpha * rho - epsilon) - t + alpha * (t - math.log1p(math.exp(t)))


def zcdp_delta_bun_steinke(rho: float, epsilon: float) -> float:
    """delta(eps) from Bun & Steinke 2016, Prop. 1.3, in floats (1 when eps <= rho)."""
    if rho == 0:
        return 0.0
    if epsilon <= rho:
        return 1.0
    return math.exp(-((epsilon - rho) ** 2) / (4 * rho))


def _best_alpha(rho: float, epsilon: float) -> tuple[float, float] | None:
    """(alpha, log delta) minimising CKS Cor. 13 in floats, or None if floats cannot say."""
    if not (rho > 0 and math.isfinite(rho) and math.isfinite(epsilon)):
        return None
    try:
        # The unconstrained optimum of the leading term is alpha ~ (eps + rho) / (2 rho);
        # search log(alpha - 1) on a window around it.
        guess = (epsilon + rho) / (2 * rho) - 1
        if not math.isfinite(guess):
            return None
        centre = math.log(max(guess, 1e-6))
        from scipy.optimize import minimize_scalar  # when first needed: it slows start-up

        res = minimize_scalar(
            lambda t: _log_delta_cks(rho, epsilon, t),
            bounds=(min(centre, 0.0) - 30, min(max(centre, 0.0) + 10, 700.0)),
            method="bounded",
            options={"xatol": 1e-10},
        )
        t, fun = float(res.x), float(res.fun)
    except (OverflowError, ValueError, ZeroDivisionError):
        return None
    if not (math.isfinite(t) and math.isfinite(fun)):
        return None
    return 1 + math.exp(t), fun


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) from Canonne, Kamath & Steinke 2020, Cor. 13, minimised over alpha > 1
    in floats (not certified)."""
    if rho == 0:
        return 0.0
    best = _best_alpha(rho, epsilon)
    return 1.0 if best is None else min(1.0, math.exp(min(best[1], 0.0)))


def bun_steinke_upper(rho: Fraction, epsilon: Fraction) -> Fraction:
    """Proven upper bound on Bun & Steinke Prop. 1.3's delta = exp(-(eps - rho)^2 / (4 rho))."""
    if rho == 0:
        return Fraction(0)
    if epsilon <= rho:
        return Fraction(1)
    with _rigor.precision():
        v = _rigor.exp(-((epsilon - rho) ** 2) / (4 * rho))
        return min(Fraction(1), _rigor.hi(v)) if _rigor.finite(v) else Fraction(1)


def cks_upper(rho: Fraction, epsilon: Fraction, alpha: Fraction) -> Fraction:
    """Proven upper bound on CKS Cor. 13 at one alpha > 1:
    delta = e^{(alpha-1)(alpha rho - eps)} / (alpha - 1) * (1 - 1/alpha)^alpha."""
    if alpha <= 1:
        return Fraction(1)
    with _rigor.precision():
        log_d = (
            _rigor.q((alpha - 1) * (alpha * rho - epsilon))
            - iv.log(_rigor.q(alpha - 1))
            + _rigor.q(alpha) * iv.log(_rigor.q((alpha - 1) / alpha))
        )
        if not _rigor.finite(log_d) or _rigor.hi(log_d) >= 0:
            return Fraction(1)
        v = _rigor.exp(_rigor.hi(log_d))
        return _rigor.hi(v) if _rigor.finite(v) else Fraction(1)


def zcdp_delta_upper(rho: Fraction, epsilon: Fraction) -> Fraction:
    """Proven upper bound on the smaller of the two conversions at the same eps.

    Both bounds hold at every eps, so their minimum does; CKS holds at *every*
    alpha > 1, so the float-optimised alpha is simply the one checked.
    """
    if rho == 0:
        return Fraction(0)
    best = Fraction(1)
    try:
        fr, fe = float(rho), float(epsilon)
    except OverflowError:
        return best
    cand = _best_alpha(fr, fe)
    if cand is not None:
        best = min(best, cks_upper(rho, epsilon, Fraction(cand[0])))
    return min(best, bun_steinke_upper(rho, epsilon))


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The smaller of the two rigorous conversions at eps, rounded up: certified.

    rho is read at the larger and eps at the smaller of its binary and decimal values.
    """
    if rho == 0:
        return 0.0
    up = zcdp_delta_upper(_rigor.worst_high(rho), _rigor.worst_low(epsilon))
    return min(1.0, _rigor.float_up(up))


def bun_steinke_epsilon(rho: Fraction, delta: Fraction) -> float:
    """rho + 2 sqrt(rho ln(1/delta)) (Bun & Steinke 2016, Prop. 1.3), rounded up."""
    with _rigor.precision():
        v = _rigor.q(rho) + 2 * iv.sqrt(_rigor.q(rho) * iv.log(1 / _rigor.q(delta)))
        return _rigor.float_up(_rigor.hi(v)) if _rigor.finite(v) else math.inf


def zcdp_epsilon_exact(rho: Fraction, delta: Fraction) -> float | None:
    """The smallest float eps found whose certified delta is <= delta (exact rho, delta).

    Bun & Steinke's closed form, rounded up, is always certified; below it, the float
    root of the CKS bound is a candidate stepped up by ulps until the interval check of
    :func:`zcdp_delta_upper` passes. None if no finite eps is certified.
    """
    if rho == 0:
        return 0.0
    closed = bun_steinke_epsilon(rho, delta)
    try:
        fr, fd = float(rho), float(delta)
    except OverflowError:
        return closed if math.isfinite(closed) else None
    if zcdp_delta_upper(rho, Fraction(0)) <= delta:
        return 0.0
    hi = closed if math.isfinite(closed) else None
    if hi is None:
        return None
    ld = math.log(fd)

    def gap(e: float) -> float:
        best = _best_alpha(fr, e)
        return (0.0 if best is None else min(best[1], 0.0)) - ld

    found: float | None = None
    try:
        if gap(hi) <= 0 < gap(0.0):
            from scipy.optimize import brentq  # when first needed: it slows start-up

            cand = float(brentq(gap, 0.0, hi, xtol=1e-13, rtol=1e-13))
            slope = _rigor.log_slope(lambda e: zcdp_delta_cks(fr, e), cand)
            found = _rigor.certify_decreasing(
                cand, lambda e: zcdp_delta_upper(rho, _rigor.worst_low(e)), delta, slope, hi
            )
    except (ValueError, RuntimeError):
        found = None
    return hi if found is None else min(hi, found)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest eps with zcdp_delta(rho, eps) <= delta, certified (never optimistic).

    Starts from Bun & Steinke's closed form eps = rho + 2 sqrt(rho ln(1/delta)),
    which is always valid, and searches below it with the tighter CKS bound.
    rho is read at the larger and delta at the smaller of its two readings.
    """
    out = zcdp_epsilon_exact(_rigor.worst_high(rho), _rigor.worst_low(delta))
    return math.inf if out is None else out
