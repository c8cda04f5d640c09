"""From a privacy cost in an additive currency to exact noise, and noisy counts and sums.

The curator spends budgets in additive currencies (docs/design.md §5): epsilon (pure DP),
rho (zCDP) or mu (Gaussian DP, adding mu^2). For a query of integer sensitivity Delta
(1 for a count under add/remove-one-row; max(|lower|, |upper|) for a sum clipped to
[lower, upper]):

* ``PureDP(eps)``  -> discrete Laplace, scale = Delta / eps;
* ``ZCDP(rho)``    -> discrete Gaussian, sigma = Delta / sqrt(2 rho);
* ``GDP(mu)``      -> the discrete Gaussian with the smallest sigma (on a fine grid) whose
  *effective* mu, ``Delta * effective_gdp_mu(sigma)``, is at most mu (docs/design.md §9).

The samplers take exact rationals. The real-valued ideal parameter is replaced by a
rational with a small numerator and denominator (so that sampling stays in fast
``int64`` arithmetic) that is **never smaller** than it: rounding always adds noise,
so the noise is always at least as private as the cost says. A "decimal" reading of the
cost is tried first (``eps = 0.1`` gives scale exactly 10, because the float 0.1 is
slightly larger than 1/10), then rounding up on a grid of 2^-k with about 30
significant bits for the Laplace scale and 20 for sigma.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.noise import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    Noise,
    _check_sensitivity,
)
from dpcurator.mechanisms.randomness import RandomSource

__all__ = [
    "MAX_NOISE_PARAMETER",
    "MIN_NOISE_PARAMETER",
    "noise_for_cost",
    "noisy_count",
    "noisy_sum",
    "scientific",
]

#: The largest noise scale or sigma drawn (2^53, about 9.0e15). Draws then stay far
#: inside int64 (a draw beyond 40 scales has probability below e^-40), and an answer
#: with more noise than this carries no information about any real table.
MAX_NOISE_PARAMETER = 2**53
#: Below this scale or sigma (2^-30) the noise is 0 with probability 1 - 1e-300000000:
#: smaller ideal parameters are raised to it. Raising a noise parameter only adds
#: privacy, so the cost is still never exceeded, and the samplers' exact rationals stay
#: small.
MIN_NOISE_PARAMETER = Fraction(1, 2**30)

_SCALE_BITS = 30
_SIGMA_BITS = 20


def _small(x: Fraction, bits: int) -> bool:
    return x.numerator < (1 << (bits + 2)) and x.denominator < (1 << (bits + 2))


def _grid_exponent(x: Fraction, bits: int) -> int:
    """k >= 0 such that x * 2^k has about ``bits`` bits before the binary point."""
    log2 = x.numerator.bit_length() - x.denominator.bit_length()  # floor(log2 x) or one more
    return max(0, bits - log2)


def _round_up(x: Fraction, bits: int) -> Fraction:
    """x itself if its numerator and denominator are small, else the next multiple of
    2^-k above it, with k chosen so that the result has about ``bits`` significant bits."""
    if _small(x, bits):
        return x
    k = _grid_exponent(x, bits)
    return Fraction(math.ceil(x * (1 << k)), 1 << k)


def _decimal(value: float) -> Fraction:
    """The shortest decimal that reads back as ``value`` (e.g. 1/10 for 0.1)."""
    return Fraction(repr(float(value)))


def _ceil_sqrt(x: Fraction) -> int:
    """The smallest integer N with N^2 >= x, for a rational x >= 0."""
    p, q = x.numerator, x.denominator
    n = math.isqrt(p // q)
    while n * n * q < p:
        n += 1
    return n


def _exact_sqrt(x: Fraction) -> Fraction | None:
    """sqrt(x) when it is rational, else None."""
    p, q = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if p * p == x.numerator and q * q == x.denominator:
        return Fraction(p, q)
    return None


def laplace_scale_for(epsilon: float, sensitivity: int = 1) -> Fraction:
    """A small rational scale >= sensitivity / epsilon."""
    eps = Fraction(epsilon)
    exact = sensitivity / eps
    dec = _decimal(epsilon)
    if dec > 0:
        candidate = sensitivity / dec
        if candidate >= exact and _small(candidate, _SCALE_BITS):
            return candidate
    return _round_up(exact, _SCALE_BITS)


def gaussian_sigma_for_zcdp(rho: float, sensitivity: int = 1) -> Fraction:
    """A small rational sigma >= sensitivity / sqrt(2 rho)."""
    exact_sq = Fraction(sensitivity * sensitivity) / (2 * Fraction(rho))
    dec = _decimal(rho)
    if 0 < dec <= Fraction(rho):
        root = _exact_sqrt(Fraction(sensitivity * sensitivity) / (2 * dec))
        if root is not None and root * root >= exact_sq and _small(root, _SIGMA_BITS):
            return root
    k = max(
        0, _SIGMA_BITS - (exact_sq.numerator.bit_length() - exact_sq.denominator.bit_length()) // 2
    )
    return Fraction(_ceil_sqrt(exact_sq * (1 << (2 * k))), 1 << k)


@lru_cache(maxsize=256)
def gaussian_sigma_for_gdp(mu: float, sensitivity: int = 1) -> Fraction:
    """The smallest sigma on a 2^-k grid with sensitivity * effective_gdp_mu(sigma) <= mu.

    effective_gdp_mu is decreasing in sigma and at least 1/sigma, so the answer lies
    above sensitivity / mu; it is found by doubling, then bisection over the grid.
    """
    from dpcurator.privacy.discrete_gaussian import MAX_SIGMA, effective_gdp_mu

    def ok(n: int) -> bool:
        return sensitivity * effective_gdp_mu(n / (1 << k)) <= mu

    base = Fraction(sensitivity) / Fraction(mu)
    if base >= MAX_SIGMA:
        raise InvalidParameter(
            f"a GDP cost mu={mu} at sensitivity {sensitivity} needs a discrete Gaussian with "
            f"sigma > {MAX_SIGMA:g}, beyond effective_gdp_mu's range; charge it in zCDP instead"
        )
    k = _grid_exponent(base, _SIGMA_BITS)
    lo = math.floor(base * (1 << k))  # sigma = lo / 2^k <= base: never enough (or exactly 1/sigma)
    lo = max(lo, 1)
    # effective mu exceeds 1/sigma by about 0.04/sigma^3 (1% at sigma = 2, 4e-8 at 1000):
    # start just above 1/mu and double, so that large sigmas need only a few evaluations
    step = max(1, lo >> 18)
    hi = lo + step
    while not ok(hi):
        lo, step = hi, step * 2
        hi = lo + step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return Fraction(hi, 1 << k)


def noise_for_cost(cost: object, sensitivity: int = 1) -> Noise:
    """The exact noise that spends ``cost`` on an integer query of the given sensitivity.

    ``cost`` is a :class:`~dpcurator.privacy.PureDP`, :class:`~dpcurator.privacy.ZCDP` or
    :class:`~dpcurator.privacy.GDP` with a positive parameter. The noise is never less
    private than the cost (see the module docstring).
    """
    from dpcurator.privacy import GDP, ZCDP, PureDP

    d = _check_sensitivity(sensitivity)
    cost = _within_noise_range(cost, d)
    if isinstance(cost, PureDP):
        if not cost.epsilon > 0:
            raise InvalidParameter("a pure-DP cost needs epsilon > 0 (epsilon = 0 allows no noise)")
        return DiscreteLaplaceNoise(laplace_scale_for(cost.epsilon, d))
    if isinstance(cost, ZCDP):
        if not cost.rho > 0:
            raise InvalidParameter("a zCDP cost needs rho > 0 (rho = 0 allows no noise)")
        return DiscreteGaussianNoise(gaussian_sigma_for_zcdp(cost.rho, d))
    if isinstance(cost, GDP):
        if not cost.mu > 0:
            raise InvalidParameter("a Gaussian-DP cost needs mu > 0 (mu = 0 allows no noise)")
        return DiscreteGaussianNoise(gaussian_sigma_for_gdp(cost.mu, d))
    raise InvalidParameter(
        "noise needs a cost in an additive currency: PureDP, ZCDP or GDP, "
        f"got {type(cost).__name__} (convert (eps, delta) budgets to zCDP or GDP first)"
    )


def scientific(x: Fraction) -> str:
    """x in 3 significant digits, however large (no float overflow)."""
    return f"{Decimal(x.numerator) / Decimal(x.denominator):.3g}"


def _within_noise_range(cost: object, sensitivity: int) -> object:
    """Refuse a cost that needs more noise than :data:`MAX_NOISE_PARAMETER`; raise the
    noise of one that needs less than :data:`MIN_NOISE_PARAMETER` to it (which lowers
    the privacy spent, never raises it)."""
    from dpcurator.privacy import GDP, ZCDP, PureDP

    if isinstance(cost, PureDP) and cost.epsilon > 0:
        ideal = sensitivity / Fraction(cost.epsilon)
        name, value = "scale", ideal
    elif isinstance(cost, ZCDP) and cost.rho > 0:
        sq = Fraction(sensitivity * sensitivity) / (2 * Fraction(cost.rho))
        ideal = Fraction(math.isqrt(sq.numerator // sq.denominator))  # floor(sigma), near enough
        name, value = "sigma", sq
    elif isinstance(cost, GDP) and cost.mu > 0:
        ideal = sensitivity / Fraction(cost.mu)
        name, value = "sigma", ideal
    else:
        return cost  # noise_for_cost explains what is wrong
    if ideal > MAX_NOISE_PARAMETER:
        what = {"scale": "epsilon", "sigma": "rho" if isinstance(cost, ZCDP) else "mu"}[name]
        given = getattr(cost, what)
        shown = sensitivity if sensitivity < 10**15 else scientific(Fraction(sensitivity))
        raise InvalidParameter(
            f"{what}={given:g} at sensitivity {shown} needs noise of {name} "
            f"{scientific(ideal)}, beyond the largest supported {scientific(Fraction(MAX_NOISE_PARAMETER))}: "
            f"such an answer would be pure noise; spend more {what} on it"
        )
    if isinstance(cost, ZCDP):
        if value < MIN_NOISE_PARAMETER**2:
            return ZCDP(float(Fraction(sensitivity * sensitivity) / (2 * MIN_NOISE_PARAMETER**2)))
    elif value < MIN_NOISE_PARAMETER:
        param = float(sensitivity / MIN_NOISE_PARAMETER)
        return PureDP(param) if isinstance(cost, PureDP) else GDP(param)
    return cost


def _check_integers(value: object, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidParameter(f"{name} must be an integer or an array of integers")
    return arr.astype(np.int64)


def noisy_count(
    count: object,
    cost: object,
    *,
    sensitivity: int = 1,
    rng: RandomSource | None = None,
) -> object:
    """``count`` plus exact noise for ``cost``; one independent draw per count.

    ``count`` is an integer or an integer array (for example a histogram, whose bins
    are disjoint counts). Returns an int or an ``int64`` array.
    """
    noise = noise_for_cost(cost, sensitivity)
    arr = _check_integers(count, "count")
    if arr.ndim == 0:
        return int(arr) + int(noise.sample(None, rng))
    return arr + noise.sample(arr.shape, rng)


def noisy_sum(
    total: object,
    cost: object,
    *,
    lower: int,
    upper: int,
    rng: RandomSource | None = None,
) -> object:
    """A sum of values clipped to the public integer range [lower, upper], plus noise.

    Under add/remove-one-row neighbours one row moves the sum by at most
    max(|lower|, |upper|), which is the sensitivity used (not upper - lower, which is
    the replace-one sensitivity and is too small when 0 is outside the range).
    """
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise InvalidParameter(f"{name} must be an integer clipping bound, got {v!r}")
    if lower > upper:
        raise InvalidParameter(f"lower must be <= upper, got [{lower}, {upper}]")
    sensitivity = max(abs(int(lower)), abs(int(upper)))
    if sensitivity == 0:
        raise InvalidParameter("clipping range [0, 0] makes every sum 0: nothing to release")
    return noisy_count(total, cost, sensitivity=sensitivity, rng=rng)
