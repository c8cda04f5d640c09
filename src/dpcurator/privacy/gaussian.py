"""The Gaussian trade-off G_mu and its exact privacy profile.

Dong, Roth & Su, *Gaussian Differential Privacy* (JRSS-B 2022):
G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu) (Def. 2.7) and mu-GDP holds iff
(eps, delta(eps))-DP holds for every eps >= 0 with
delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Cor. 2.13).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from mpmath import iv
from scipy.special import log_ndtr, ndtr, ndtri

from dpcurator.privacy import _rigor


def gdp_delta_float(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP in floats (Cor. 2.13): fast, not certified.

    The second term is evaluated in log space, so large eps neither overflows
    e^eps nor loses the difference to cancellation more than necessary.
    """
    if mu == 0:
        return 0.0
    if not math.isfinite(mu):
        return 1.0
    first = float(ndtr(-epsilon / mu + mu / 2))
    second = math.exp(min(epsilon + float(log_ndtr(-epsilon / mu - mu / 2)), 700.0))
    return min(1.0, max(0.0, first - second))


def gdp_delta_upper(mu_sq: Fraction, epsilon: Fraction) -> Fraction:
    """A proven upper bound on delta(eps) of mu-GDP, mu = sqrt(mu_sq), both exact.

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth & Su 2022,
    Cor. 2.13) grows with mu, so it is evaluated at a rational mu' >= sqrt(mu_sq), with
    Phi enclosed by :func:`dpcurator.privacy._rigor.ncdf` (interval arithmetic).
    """
    if mu_sq == 0:
        return Fraction(0)
    with _rigor.precision():
        mu_iv = iv.sqrt(_rigor.q(mu_sq))
        if not _rigor.finite(mu_iv):
            return Fraction(1)
        mu = _rigor.hi(mu_iv)
        a = -epsilon / mu + mu / 2
        b = -epsilon / mu - mu / 2
        if b <= -40:
            # e^eps phi(b) = phi(a) exactly, and Phi(b) >= phi(b) |b| / (1 + b^2) for b < 0
            # (the Mills-ratio lower bound): no e^eps of a huge eps is ever formed.
            second = _rigor.phi(a) * _rigor.q(-b / (1 + b * b))
        else:
            second = iv.exp(_rigor.q(epsilon)) * _rigor.ncdf(b)
        v = _rigor.ncdf(a) - second
        if not _rigor.finite(v):
            return Fraction(1)
        return min(Fraction(1), max(Fraction(0), _rigor.hi(v)))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP (Dong, Roth & Su 2022, Cor. 2.13), rounded up: certified.

    mu is read at the larger and eps at the smaller of its binary and decimal values.
    """
    if mu == 0:
        return 0.0
    up = gdp_delta_upper(_rigor.worst_high(mu) ** 2, _rigor.worst_low(epsilon))
    return min(1.0, _rigor.float_up(up))


def gdp_epsilon_float(mu: float, delta: float) -> float | None:
    """The eps >= 0 where the float delta(eps) of mu-GDP crosses delta (not certified)."""
    if mu == 0 or gdp_delta_float(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta_float(mu, hi) > delta:
        hi *= 2
        if hi > 1e300:
            return None
    from scipy.optimize import brentq  # imported when first needed: it slows every start-up

    return float(brentq(lambda e: gdp_delta_float(mu, e) - delta, 0.0, hi, xtol=1e-14, rtol=1e-14))


def gdp_epsilon_exact(mu_sq: Fraction, delta: Fraction) -> float | None:
    """The smallest float eps found with :func:`gdp_delta_upper` (mu_sq, eps) <= delta.

    delta(eps) is strictly decreasing in eps (Dong, Roth & Su 2022, Cor. 2.13); the float
    root is a candidate, stepped up by ulps until the interval check certifies it.
    """
    if mu_sq == 0:
        return 0.0
    try:
        mu = math.sqrt(float(mu_sq))  # for the candidate only
    except OverflowError:
        return None
    if not math.isfinite(mu):
        return None
    cand = gdp_epsilon_float(mu, float(delta))
    if cand is None:
        return None
    slope = _rigor.log_slope(lambda e: gdp_delta_float(mu, e), cand)
    return _rigor.certify_decreasing(
        cand, lambda e: gdp_delta_upper(mu_sq, _rigor.worst_low(e)), delta, slope, math.inf
    )


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest eps >= 0 with delta(eps) <= delta for mu-GDP, certified (rounded up).

    inf if no finite float eps is certified (mu too large).
    """
    out = gdp_epsilon_exact(_rigor.worst_high(mu) ** 2, _rigor.worst_low(delta))
    return math.inf if out is None else out


def gaussian_tradeoff(mu: float, alpha):  # type: ignore[no-untyped-def]
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu), vectorised (Dong, Roth & Su, Def. 2.7)."""
    return ndtr(ndtri(1 - alpha) - mu)


def mu_from_pure_float(epsilon: float) -> float:
    """-2 Phi^{-1}(1 / (1 + e^eps)) in floats (not certified)."""
    return -2.0 * float(ndtri(1.0 / (1.0 + math.exp(epsilon)))) if epsilon < 700 else math.inf


@lru_cache(maxsize=4096)
def mu_from_pure_exact(eps: Fraction) -> float:
    """mu of eps-DP for an exact eps, rounded up to a float (inf when eps >= 700).

    The float is certified: Phi(-mu/2) <= 1/(1 + e^eps) is checked in interval
    arithmetic, which is mu >= -2 Phi^{-1}(1/(1 + e^eps)).
    """
    if eps >= 700:
        return math.inf
    if eps == 0:
        return 0.0
    # For tiny eps, mu ~ sqrt(pi/2) eps, and 1/(1 + e^eps) differs from 1/2 by ~eps/4:
    # resolve that with extra bits.
    extra = max(0, -math.floor(math.log2(eps)))
    cand = mu_from_pure_float(float(eps))
    if eps < Fraction(1, 10**8) or cand <= 0:
        cand = 1.2533141373155003 * float(eps)  # sqrt(pi / 2) eps, first order

    def ok(m: float) -> bool:
        with _rigor.precision(_rigor.PREC + extra):
            p = 1 / (1 + iv.exp(_rigor.q(eps)))
            return _rigor.hi(_rigor.ncdf(-Fraction(m) / 2, 128 + extra)) <= _rigor.lo(p)

    out = _rigor.step_up(cand, ok)
    return math.inf if out is None else out


def mu_from_pure(epsilon: float) -> float:
    """The GDP parameter implied by eps-DP: mu = -2 Phi^{-1}(1 / (1 + e^eps)), rounded up.

    f_{eps,0} consists of two chords of the convex curve G_mu through its symmetric
    point alpha* = 1/(1+e^eps), where both equal 1/(1+e^eps); a convex function lies
    below its chords, so G_mu <= f_{eps,0} and eps-DP implies mu-GDP (Dong, Roth & Su
    2022, §2.2). The value equals 2 Phi^{-1}(e^eps/(1+e^eps)); the float returned is
    certified never to be below it (eps read at the larger of its two readings).
    """
    return mu_from_pure_exact(_rigor.worst_high(epsilon))
