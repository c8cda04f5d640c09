"""Exact private selection: permute-and-flip and the exponential mechanism.

Both choose one of M candidates from their integer *gaps* g_i = s_i - min_j s_j >= 0
(scores, lower is better) at a rational *rate* eta (the privacy parameter over twice the
scores' sensitivity, see :mod:`dpcurator.mechanisms.quantile`):

* **permute-and-flip** (McKenna & Sheldon, NeurIPS 2020, Alg. 1): visit the candidates in
  a uniformly random order and return the first whose coin, of probability
  exp(-eta g_i), succeeds. It is (2 eta Delta)-DP for scores of sensitivity Delta
  (McKenna & Sheldon 2020, Thm 1), and its expected gap is never larger than the
  exponential mechanism's at the same epsilon (McKenna & Sheldon 2020). It equals
  report-noisy-max with exponential noise (Ding, Kifer, Saghaian, Steinke, Wang, Xiao &
  Zhang 2021).
* **the exponential mechanism** (McSherry & Talwar, FOCS 2007): P(i) proportional to
  exp(-eta g_i); (2 eta Delta)-DP (Dwork & Roth 2014, Thm 3.10) and (2 eta Delta)-bounded
  range (Dong, Durfee & Rogers 2020, Prop. 2), hence (2 eta Delta)^2/8-zCDP (Cesar &
  Rogers 2021, Lemma 3.2), which is why zCDP budgets use it.

Exactness (docs/design.md §9: no floating-point number decides a sample):

* Permute-and-flip flips every coin at once with the exact Bernoulli(exp(-gamma))
  sampler (Canonne, Kamath & Steinke 2020, Alg. 1) and returns a uniformly chosen
  success: the coins do not depend on the order, so the first success of a uniformly
  random order is uniform among the successes.
* The exponential mechanism is sampled by rejection from an envelope with integer
  exponents: candidate i sits on *level* j_i = floor(eta g_i) (levels past
  :data:`LEVEL_CAP` merged into the last), a level is drawn with probability
  proportional to M_j e^{-j} (M_j its candidates) by inversion of a lazily generated
  uniform against certified integer enclosures of e^{-j}, a candidate of the level
  uniformly, and it is kept with probability exp(-(eta g_i - j)) >= 1/e (exact
  Bernoulli again). Inversion decides only when the enclosures separate the uniform
  from every boundary, refining both otherwise, so the level has exactly the stated law;
  rejection then gives exactly P(i) proportional to exp(-eta g_i).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.randomness import INT64_LIMIT, RandomSource, uniform_below
from dpcurator.mechanisms.samplers import bernoulli_exp_many

__all__ = ["LEVEL_CAP", "exponential_mechanism", "permute_and_flip"]

#: Levels past this (weights below e^-LEVEL_CAP times the best) share one envelope level.
LEVEL_CAP = 96


def _checked(gaps: object, rate: object) -> tuple[np.ndarray, Fraction]:
    g = np.asarray(gaps)
    if g.ndim != 1 or g.size == 0:
        raise InvalidParameter("selection needs a non-empty 1-d array of integer gaps")
    if g.dtype != object and not np.issubdtype(g.dtype, np.integer):
        raise InvalidParameter("gaps must be integers")
    if g.dtype == object and not all(isinstance(x, int) for x in g.tolist()):
        raise InvalidParameter("gaps must be integers")
    if g.min() != 0:
        raise InvalidParameter("gaps must be >= 0 with a best candidate at gap 0")
    if isinstance(rate, bool) or not isinstance(rate, Fraction | int) or rate <= 0:
        raise InvalidParameter(f"rate must be a positive Fraction, got {rate!r}")
    return g, Fraction(rate)


def _exponents(g: np.ndarray, rate: Fraction) -> np.ndarray:
    """rate.numerator * g, in int64 when it fits, else as Python integers."""
    a = rate.numerator
    if g.dtype != object and int(g.max()) * a < INT64_LIMIT:
        return g.astype(np.int64) * a
    return g.astype(object) * a


def permute_and_flip(gaps: object, rate: object, rng: RandomSource) -> int:
    """The index permute-and-flip selects: coins exp(-rate * gap), a uniform success."""
    g, r = _checked(gaps, rate)
    coins = bernoulli_exp_many(_exponents(g, r), r.denominator, rng)
    wins = np.flatnonzero(coins)  # the best candidate's coin (gap 0) always succeeds
    return int(wins[int(uniform_below(rng, wins.size, 1)[0])])


def exponential_mechanism(gaps: object, rate: object, rng: RandomSource) -> int:
    """The index drawn with probability proportional to exp(-rate * gap), exactly."""
    g, r = _checked(gaps, rate)
    n = _exponents(g, r)
    d = r.denominator
    level = np.minimum(n // d, LEVEL_CAP)
    level = np.asarray(level, dtype=np.int64)
    order = np.argsort(level, kind="stable")
    counts = np.bincount(level, minlength=LEVEL_CAP + 1)
    starts = np.concatenate(([0], np.cumsum(counts)))
    sizes = [int(c) for c in counts]
    while True:
        j = _level(sizes, rng)
        pick = order[starts[j] + int(uniform_below(rng, sizes[j], 1)[0])]
        rest = np.asarray([n[pick] - j * d], dtype=object if n.dtype == object else np.int64)
        if bernoulli_exp_many(rest, d, rng)[0]:
            return int(pick)


# --- levels: P(j) proportional to M_j e^{-j}, by exact inversion ---------------------------


@lru_cache(maxsize=16)
def _e_inverse(bits: int) -> tuple[int, int]:
    """floor and ceil of 2^bits / e, from the alternating series of e^{-1}: consecutive
    partial sums enclose it and differ by 1/(k+1)!."""
    lo = hi = Fraction(0)
    term, k, s = Fraction(1), 0, Fraction(0)
    while True:
        s += term
        k += 1
        term = -term / k
        if abs(term) * 2 ** (bits + 2) < 1:
            lo, hi = min(s, s + term), max(s, s + term)
            break
    return math.floor(lo * 2**bits), math.ceil(hi * 2**bits)


@lru_cache(maxsize=16)
def _powers(bits: int, top: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Integers lo_j <= 2^bits e^{-j} <= hi_j for j = 0..top (rounded outward each step)."""
    a_lo, a_hi = _e_inverse(bits)
    lo, hi = [1 << bits], [1 << bits]
    for _ in range(top):
        lo.append((lo[-1] * a_lo) >> bits)
        hi.append(-((-hi[-1] * a_hi) >> bits))
    return tuple(lo), tuple(hi)


def _word(rng: RandomSource) -> int:
    """64 uniform random bits."""
    return int(rng.words(1, np.dtype("<u8"))[0])


def _level(sizes: list[int], rng: RandomSource) -> int:
    """j with probability M_j e^{-j} / sum_k M_k e^{-k} (``sizes`` = M_j), exactly.

    A uniform U in [0, 1) is known to ``t`` bits: U in [u/2^t, (u+1)/2^t). Level j is
    returned once it is certain that C_{j-1} <= U W < C_j (C the cumulative weights, W
    their total), using enclosures of the weights at ``bits`` of precision; otherwise U
    gets 64 more bits and the enclosures 64 more bits of precision.
    """
    bits, t = 64 + max(sizes).bit_length(), 64
    u = _word(rng)
    while True:
        lo, hi = _powers(bits, len(sizes) - 1)
        c_lo, c_hi = [], []
        acc_lo = acc_hi = 0
        for m, a, b in zip(sizes, lo, hi, strict=True):
            acc_lo += m * a
            acc_hi += m * b
            c_lo.append(acc_lo)
            c_hi.append(acc_hi)
        w_lo, w_hi = c_lo[-1], c_hi[-1]
        floor_uw = u * w_lo  # U W >= u W_lo / 2^t
        j = 0
        while j < len(sizes) and (c_hi[j] << t) <= floor_uw:
            j += 1  # certainly C_j <= U W
        if j < len(sizes) and (u + 1) * w_hi <= (c_lo[j] << t):
            return j  # certainly U W < C_j
        u = (u << 64) | _word(rng)
        t += 64
        bits += 64
