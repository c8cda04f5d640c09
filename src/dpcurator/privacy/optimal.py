"""Exact optimal composition of n homogeneous (eps, delta)-DP mechanisms, certified.

Kairouz, Oh & Viswanath, *The Composition Theorem for Differential Privacy*
(IEEE Trans. IT 2017), Thm 3.3: the n-fold composition of (eps, delta)-DP mechanisms is
dominated by that of randomized response, so it is (eps', delta_n(eps'))-DP with

    delta_n(eps') = 1 - (1 - delta)^n (1 - delta_RR(eps')),
    delta_RR(eps') = sum_j C(n, j) max(0, e^{(n-j) eps} - e^{eps'} e^{j eps}) / (1 + e^eps)^n,

the hockey-stick divergence of n-fold randomized response, and no smaller delta holds
for all such mechanisms (Thm 3.3 states it at eps' = (n - 2i) eps; between those points
it is the same divergence, which is the exact privacy profile of the dominating pair).

Two evaluations:

- :func:`log_delta_rr` in floats and log space, over the window of j where the terms
  are not negligible: fast, about 1e-11 relative at n = 10^5, used to *find* eps';
- :func:`delta_rr_enclosure`, a proven enclosure of delta_RR: exact integer fixed-point
  arithmetic with directed rounding over a window of terms, plus a geometric bound on
  every dropped term (their ratios are monotone). :func:`optimal_epsilon` returns an
  eps' at which this enclosure's upper end is within the target, so the figure is
  certified, not estimated.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
from mpmath import iv
from scipy.special import betaln, logsumexp

from dpcurator.privacy import _rigor

#: Largest number of runs the certified evaluation accepts: its cost grows like sqrt(n)
#: (about 0.1 s at 10^7); beyond it the method is left out rather than slow.
MAX_RUNS = 10**7
#: Largest per-run epsilon: beyond it e^eps has no useful float and composition is moot.
MAX_EPSILON = 700.0

#: Fixed-point fraction bits of the certified evaluation.
_BITS = 192
#: Terms are summed until the bound on all dropped ones is below 2^-_DROP of the sum.
_DROP = 96


def applies(epsilon: float | Fraction, n: int) -> bool:
    """Whether this module evaluates (and certifies) n runs of this epsilon."""
    return 1 <= n <= MAX_RUNS and 0 <= epsilon <= MAX_EPSILON


def _positive_terms(eps: Fraction, n: int, eps_prime: Fraction) -> int:
    """J = #{j >= 0 : (n - 2j) eps > eps'}: the terms of delta_RR that are positive."""
    if eps == 0:
        return 0
    t = (n * eps - eps_prime) / (2 * eps)  # j < t
    if t <= 0:
        return 0
    return min(n + 1, math.ceil(t))


def _mode(epsilon: float, n: int) -> int:
    """The j maximising C(n, j) e^{-j eps} (approximately; only used to place the window)."""
    return min(n, max(0, math.floor((n + 1) / (1 + math.exp(min(epsilon, 700.0))))))


def _spread(epsilon: float, n: int) -> float:
    """Standard deviation of Binomial(n, 1 / (1 + e^eps)), the shape of the terms."""
    p = 1 / (1 + math.exp(min(epsilon, 700.0)))
    return math.sqrt(n * p * (1 - p))


# --- fast float evaluation (to find candidates) -------------------------------------------


def log_delta_rr(epsilon: float, n: int, eps_prime: float) -> float:
    """log delta_RR(eps') of KOV Thm 3.3 in floats (-inf when it is 0); not certified.

    Only terms within ~40 standard deviations of the largest are summed: the rest are
    below e^-800 of it and vanish in double precision.
    """
    if epsilon == 0:
        return -math.inf
    j_stop = min(n + 1, math.ceil((n * epsilon - eps_prime) / (2 * epsilon)))
    if j_stop <= 0:
        return -math.inf
    peak = min(j_stop - 1, _mode(epsilon, n))
    width = math.ceil(40 * _spread(epsilon, n)) + 40
    j = np.arange(max(0, peak - width), min(j_stop, peak + width + 1), dtype=np.float64)
    # log C(n, j) = -log(n + 1) - log B(n - j + 1, j + 1), without cancellation.
    base = (
        -math.log(n + 1)
        - betaln(n - j + 1, j + 1)
        + (n - j) * epsilon
        - n * float(np.logaddexp(0.0, epsilon))
    )
    # log(1 - e^x) with x = eps' - (n - 2j) eps < 0, evaluated stably.
    x = np.minimum(eps_prime - (n - 2 * j) * epsilon, 0.0)
    with np.errstate(divide="ignore"):
        factor = np.where(x > -math.log(2), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    return float(logsumexp(base + factor))


def optimal_delta_float(epsilon: float, delta: float, n: int, eps_prime: float) -> float:
    """delta_n(eps') in floats: fast, about 1e-11 relative, not certified."""
    rr = math.exp(min(log_delta_rr(epsilon, n, eps_prime), 0.0))
    if delta == 0:
        return rr
    if rr >= 1:
        return 1.0
    return -math.expm1(n * math.log1p(-delta) + math.log1p(-rr))


# --- certified evaluation -------------------------------------------------------------------


def delta_rr_enclosure(eps: Fraction, n: int, eps_prime: Fraction) -> tuple[Fraction, Fraction]:
    """Exact rationals lo <= delta_RR(eps') <= hi for the exact eps, n and eps'.

    With a_j = C(n, j) e^{(n-j) eps} / (1 + e^eps)^n and g_j = e^{eps' - (n-2j) eps},
    delta_RR = sum_{j < J} a_j (1 - g_j) where J counts the j with g_j < 1. Starting at
    s = min(J - 1, mode), each a_j / a_s and g_j is carried as a pair of integers scaled
    by 2^_BITS, rounded down for the lower and up for the upper end, through the exact
    ratios a_{j-1}/a_j = j e^eps / (n - j + 1) and g_{j-1}/g_j = e^{-2 eps} (and their
    inverses going up); e^{+-eps}, e^{+-2eps}, a_s and g_s are enclosed by mpmath.iv.

    The ratio a_{j-1}/a_j grows with j, so once it is r < 1 at the lowest summed j, every
    dropped term below adds at most a_j r / (1 - r) in total (a geometric series); going
    up, a_{j+1}/a_j = (n - j) e^{-eps} / (j + 1) falls with j, likewise. Those bounds are
    added to the upper end only (each dropped term a_j (1 - g_j) lies in [0, a_j]).
    """
    big_j = _positive_terms(eps, n, eps_prime)
    if big_j == 0:
        return Fraction(0), Fraction(0)
    one = 1 << _BITS
    fe = float(eps)
    s = min(big_j - 1, _mode(fe, n))
    with _rigor.precision():
        e_iv = _rigor.q(eps)
        e_lo, e_hi = _rigor.fixed(iv.exp(e_iv), _BITS)
        ei_lo, ei_hi = _rigor.fixed(iv.exp(-e_iv), _BITS)
        f_lo, f_hi = _rigor.fixed(iv.exp(-2 * e_iv), _BITS)  # g_{j-1} / g_j
        h_lo, h_hi = _rigor.fixed(iv.exp(2 * e_iv), _BITS)  # g_{j+1} / g_j
        log_a = (
            iv.loggamma(iv.mpf(n + 1))
            - iv.loggamma(iv.mpf(s + 1))
            - iv.loggamma(iv.mpf(n - s + 1))
            + (n - s) * e_iv
            - n * iv.log(1 + iv.exp(e_iv))
        )
        a_s = iv.exp(log_a)
        g_s = iv.exp(_rigor.q(eps_prime - (n - 2 * s) * eps))
        a_s_lo, a_s_hi = _rigor.lo(a_s), _rigor.hi(a_s)
        g_lo, g_hi = _rigor.fixed(g_s, _BITS)

    def term(a_lo: int, a_hi: int, gl: int, gh: int) -> tuple[int, int]:
        t_hi = -((-a_hi * max(0, one - gl)) >> _BITS)
        t_lo = (a_lo * max(0, one - gh)) >> _BITS
        return t_lo, t_hi

    s_lo, s_hi = term(one, one, g_lo, g_hi)
    # Downwards from s.
    a_lo, a_hi, gl, gh = one, one, g_lo, g_hi
    j = s
    while j > 0:
        den = (n - j + 1) << _BITS
        num_hi = j * e_hi
        if num_hi < den:  # r = a_{j-1}/a_j bound < 1: can the rest be dropped?
            tail = -((-a_hi * num_hi) // (den - num_hi))
            if tail << _DROP <= s_lo:
                s_hi += tail
                break
        a_hi = -((-a_hi * num_hi) // den)
        a_lo = (a_lo * j * e_lo) // den
        gh = -((-gh * f_hi) >> _BITS)
        gl = (gl * f_lo) >> _BITS
        j -= 1
        t_lo, t_hi = term(a_lo, a_hi, gl, gh)
        s_lo += t_lo
        s_hi += t_hi
    # Upwards from s (only when the mode lies below the last positive term).
    a_lo, a_hi, gl, gh = one, one, g_lo, g_hi
    j = s
    while j < big_j - 1:
        den = (j + 1) << _BITS
        num_hi = (n - j) * ei_hi
        if num_hi < den:
            tail = -((-a_hi * num_hi) // (den - num_hi))
            if tail << _DROP <= s_lo:
                s_hi += tail
                break
        a_hi = -((-a_hi * num_hi) // den)
        a_lo = (a_lo * (n - j) * ei_lo) // den
        gh = -((-gh * h_hi) >> _BITS)
        gl = (gl * h_lo) >> _BITS
        j += 1
        t_lo, t_hi = term(a_lo, a_hi, gl, gh)
        s_lo += t_lo
        s_hi += t_hi
    return a_s_lo * Fraction(s_lo, one), a_s_hi * Fraction(s_hi, one)


def delta_enclosure(
    eps: Fraction, delta: Fraction, n: int, eps_prime: Fraction
) -> tuple[Fraction, Fraction]:
    """Exact rationals enclosing delta_n(eps') = 1 - (1 - delta)^n (1 - delta_RR(eps'))."""
    rr_lo, rr_hi = delta_rr_enclosure(eps, n, eps_prime)
    if delta == 0:
        return rr_lo, rr_hi
    exact = _rigor.exact_powers([(1 - delta, n)])
    if exact is not None:
        k_lo = k_hi = exact
    else:
        with _rigor.precision():
            keep = _rigor.q(1 - delta) ** n
            k_lo, k_hi = _rigor.lo(keep), _rigor.hi(keep)
    return 1 - k_hi * (1 - rr_lo), 1 - k_lo * (1 - rr_hi)


@lru_cache(maxsize=256)
def _floor_hi(delta: Fraction, n: int) -> Fraction:
    """Upper end of 1 - (1 - delta)^n, the delta_n that no eps' removes."""
    if delta == 0:
        return Fraction(0)
    exact = _rigor.exact_powers([(1 - delta, n)])
    if exact is not None:
        return 1 - exact
    with _rigor.precision():
        return 1 - _rigor.lo(_rigor.q(1 - delta) ** n)


def optimal_delta_exact(eps: Fraction, delta: Fraction, n: int, eps_prime: float) -> float:
    """delta_n(eps') for exact eps and delta, rounded up to a float: certified to hold.

    eps' is read at the smaller of its binary and decimal values (smaller is worse).
    """
    _, up = delta_enclosure(eps, delta, n, _rigor.worst_low(eps_prime))
    return min(1.0, _rigor.float_up(up))


def optimal_delta(epsilon: float, delta: float, n: int, eps_prime: float) -> float:
    """delta_n(eps') of KOV Thm 3.3, rounded up to a float: certified to hold.

    epsilon and delta are read at the larger of their binary and decimal values.
    """
    return optimal_delta_exact(_rigor.worst_high(epsilon), _rigor.worst_high(delta), n, eps_prime)


def optimal_epsilon(epsilon: float, delta: float, n: int, target_delta: float) -> float | None:
    """The smallest float eps' found whose certified delta_n(eps') is <= target_delta
    (KOV Thm 3.3), or None if there is none (or n, epsilon are beyond :func:`applies`).

    epsilon and delta are read at the larger, target_delta at the smaller of their binary
    and decimal values.
    """
    return optimal_epsilon_exact(
        _rigor.worst_high(epsilon), _rigor.worst_high(delta), n, target_delta
    )


def optimal_epsilon_exact(eps: Fraction, d: Fraction, n: int, target_delta: float) -> float | None:
    """:func:`optimal_epsilon` for exact eps and delta.

    A float root of :func:`optimal_delta_float` is the candidate; the enclosure
    (:func:`delta_enclosure`) then decides, and the candidate is moved up (a Newton step
    on the certified shortfall, doubled until it passes) and back down by regula falsi
    (:func:`dpcurator.privacy._rigor.certify_decreasing`). The result is within about
    1e-13 relative of the exact optimum and never below it.
    """
    if not applies(eps, n):
        return None
    fe, fd = float(eps), float(d)
    target = _rigor.worst_low(target_delta)
    if _floor_hi(d, n) > target:  # at most the target is enough (equality: eps' = n eps)
        return None

    def upper(x: float) -> Fraction:
        return delta_enclosure(eps, d, n, _rigor.worst_low(x))[1]

    if upper(0.0) <= target:
        return 0.0
    hi = _rigor.float_up(n * eps)
    if upper(hi) > target:  # only when the floor is within rounding of the target
        return None

    def gap(x: float) -> float:
        return optimal_delta_float(fe, fd, n, x) - float(target)

    if gap(hi) >= 0:  # the target is the floor (up to rounding): only n eps reaches it
        return hi
    if gap(0.0) <= 0:  # the float says 0 works but the certificate does not: start low
        cand = 0.0
    else:
        from scipy.optimize import brentq  # imported when first needed: it slows start-up

        cand = float(brentq(gap, 0.0, hi, xtol=1e-15, rtol=8.9e-16, maxiter=500))
    slope = _rigor.log_slope(lambda x: optimal_delta_float(fe, fd, n, x), cand)
    out = _rigor.certify_decreasing(cand, upper, target, slope, hi)
    return hi if out is None else out
