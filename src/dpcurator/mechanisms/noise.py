"""Noise descriptions: the discrete Laplace and discrete Gaussian, with their exact accuracy.

A noise description is an immutable value that knows how to sample itself exactly
(:mod:`dpcurator.mechanisms.samplers`), what privacy it gives for a given integer
sensitivity, and how accurate it is: the two-sided interval half-width at level
1 - alpha, E|Y| and Var Y, all computed from the *discrete* distributions (closed forms
for the discrete Laplace; summation of the pmf, with the normalising constant also
summed, for the discrete Gaussian), never from their continuous approximations.

Accuracy numbers are floats: they describe the noise, they never decide a sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.randomness import RandomSource
from dpcurator.mechanisms.samplers import discrete_gaussian, discrete_laplace, exact_rational

__all__ = ["DiscreteGaussianNoise", "DiscreteLaplaceNoise", "Noise"]


def _check_alpha(alpha: object) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating | Fraction):
        raise InvalidParameter(f"alpha must be a number in (0, 1), got {alpha!r}")
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise InvalidParameter(f"alpha must be in (0, 1), got {alpha!r}")
    return a


def _check_sensitivity(sensitivity: object) -> int:
    if (
        isinstance(sensitivity, bool)
        or not isinstance(sensitivity, int | np.integer)
        or sensitivity < 1
    ):
        raise InvalidParameter(
            f"sensitivity must be a positive integer (integer-valued queries), got {sensitivity!r}"
        )
    return int(sensitivity)


def float_up(x: Fraction) -> float:
    """The smallest float >= x (for reporting privacy costs on the safe side)."""
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


# --------------------------------------------------------------------------- Laplace


@dataclass(frozen=True)
class DiscreteLaplaceNoise:
    """The discrete Laplace distribution: P(k) = (1-p)/(1+p) p^|k|, p = exp(-1/scale).

    ``scale`` is an exact rational. Added to an integer query of sensitivity Delta it
    gives (Delta / scale)-DP.
    """

    scale: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", exact_rational(self.scale, "scale"))

    @property
    def _p(self) -> float:
        return math.exp(-1.0 / float(self.scale))

    @property
    def _one_minus_p(self) -> float:
        return -math.expm1(-1.0 / float(self.scale))

    def sample(self, size: object = None, rng: RandomSource | None = None) -> object:
        """Exact draws (see :func:`~dpcurator.mechanisms.samplers.discrete_laplace`)."""
        return discrete_laplace(self.scale, size, rng)

    def pmf(self, k: object) -> object:
        """P(Y = k) for an integer or an integer array."""
        p, q = self._p, self._one_minus_p
        kk = np.abs(np.asarray(k, dtype=np.float64))
        out = q / (1.0 + p) * np.exp(-kk / float(self.scale))
        return float(out) if np.ndim(out) == 0 else out

    def tail(self, h: int) -> float:
        """P(|Y| > h) = 2 p^(h+1) / (1 + p) for an integer h >= 0."""
        p = self._p
        return min(1.0, math.exp(math.log(2.0) - (h + 1) / float(self.scale) - math.log1p(p)))

    def interval(self, alpha: float = 0.05) -> int:
        """The smallest integer h >= 0 with P(|Y| <= h) >= 1 - alpha."""
        a = _check_alpha(alpha)
        p = self._p
        guess = float(self.scale) * (math.log(2.0 / a) - math.log1p(p)) - 1.0
        h = max(0, math.ceil(guess))
        # The closed form is off by float rounding only (a few units at scale 2^53):
        # a bounded correction, so that no scale can make this loop long.
        for _ in range(64):
            if h > 0 and self.tail(h - 1) <= a:
                h -= 1
            elif self.tail(h) > a:
                h += 1
            else:
                break
        return h

    def expected_abs(self) -> float:
        """E|Y| = 2p / (1 - p^2)."""
        p, q = self._p, self._one_minus_p
        return 2.0 * p / (q * (1.0 + p))

    def variance(self) -> float:
        """Var Y = E Y^2 = 2p / (1 - p)^2."""
        p, q = self._p, self._one_minus_p
        return 2.0 * p / (q * q)

    def std(self) -> float:
        return math.sqrt(self.variance())

    def guarantee(self, sensitivity: int = 1) -> object:
        """(sensitivity / scale)-DP, as a :class:`~dpcurator.privacy.PureDP` (rounded up)."""
        from dpcurator.privacy import PureDP

        return PureDP(float_up(_check_sensitivity(sensitivity) / self.scale))

    def __str__(self) -> str:
        return f"DiscreteLaplace(scale={self.scale})"


# --------------------------------------------------------------------------- Gaussian

#: exp(-x) underflows to 0 for x > 745.2, so terms beyond sigma * sqrt(2 * 746) vanish.
_DG_SIGMAS = math.sqrt(2.0 * 746.0)
_CHUNK = 1 << 20


def _dg_chunks(sigma: float, start: int = 0):
    """Yield (k, w) chunks with w = exp(-k^2 / (2 sigma^2)) for k = start .. K."""
    top = math.ceil(_DG_SIGMAS * sigma) + 1
    two_s2 = 2.0 * sigma * sigma
    for lo in range(start, top + 1, _CHUNK):
        k = np.arange(lo, min(top + 1, lo + _CHUNK), dtype=np.float64)
        yield k, np.exp(-(k * k) / two_s2)


#: Above this sigma the sums are evaluated by Poisson / Euler-Maclaurin summation
#: instead of term by term (whose cost grows like sigma).
LARGE_SIGMA = 1.0e5


def _dg_tail_large(sigma: float, m: int) -> float:
    """S(m) = sum_{k >= m} w(k) for large sigma, by Euler-Maclaurin summation.

    S(m) = integral_m^inf w + w(m)/2 - w1(m)/12 + w3(m)/720 - ..., where wj is the j-th
    derivative; w1(m) = -(m/sigma^2) w(m), and the next term is below w(m) / sigma^3,
    i.e. below 1e-15 relative to the tail for sigma > 1e5.
    """
    from scipy.special import erfc

    w = math.exp(-(m * m) / (2.0 * sigma * sigma))
    integral = sigma * math.sqrt(math.pi / 2.0) * float(erfc(m / (sigma * math.sqrt(2.0))))
    return integral + w / 2.0 + m * w / (12.0 * sigma * sigma)


@lru_cache(maxsize=256)
def _dg_sums(sigma: Fraction) -> tuple[float, float, float]:
    """(Z, sum |k| w, sum k^2 w) over all integers k.

    By summation of the weights; for sigma > LARGE_SIGMA by Poisson summation
    (Z = sigma sqrt(2 pi) and E Y^2 = sigma^2 up to terms in exp(-2 pi^2 sigma^2)) and
    Euler-Maclaurin (sum_{k>=1} k w(k) = sigma^2 - 1/12 + O(1/sigma^2)).
    """
    s = float(sigma)
    if s > LARGE_SIGMA:
        z = s * math.sqrt(2.0 * math.pi)
        return z, 2.0 * (s * s - 1.0 / 12.0), s * s * z
    z, m1, m2 = [1.0], [], []
    for k, w in _dg_chunks(s, 1):
        z.append(2.0 * float(w.sum()))
        m1.append(2.0 * float((k * w).sum()))
        m2.append(2.0 * float((k * k * w).sum()))
    return math.fsum(z), math.fsum(m1), math.fsum(m2)


@dataclass(frozen=True)
class DiscreteGaussianNoise:
    """The discrete Gaussian N_Z(0, sigma^2): P(k) = exp(-k^2 / (2 sigma^2)) / Z.

    ``sigma`` is an exact rational. Added to an integer query of sensitivity Delta it
    gives (Delta^2 / (2 sigma^2))-zCDP (Canonne, Kamath & Steinke 2020, Thm 4), and
    mu-GDP with mu = Delta * effective_gdp_mu(sigma) (docs/design.md §9; group privacy of GDP
    for Delta > 1). Note that sigma^2 is the variance of the *continuous* Gaussian
    with the same shape; the discrete one's variance is slightly smaller
    (:meth:`variance`).
    """

    sigma: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", exact_rational(self.sigma, "sigma"))

    def sample(self, size: object = None, rng: RandomSource | None = None) -> object:
        """Exact draws (see :func:`~dpcurator.mechanisms.samplers.discrete_gaussian`)."""
        return discrete_gaussian(self.sigma, size, rng)

    def pmf(self, k: object) -> object:
        """P(Y = k) for an integer or an integer array."""
        s = float(self.sigma)
        z = _dg_sums(self.sigma)[0]
        kk = np.asarray(k, dtype=np.float64)
        out = np.exp(-(kk * kk) / (2.0 * s * s)) / z
        return float(out) if np.ndim(out) == 0 else out

    def tail(self, h: int) -> float:
        """P(|Y| > h) for an integer h >= 0, by summation from the small end."""
        s = float(self.sigma)
        z = _dg_sums(self.sigma)[0]
        if s > LARGE_SIGMA:
            return min(1.0, 2.0 * _dg_tail_large(s, h + 1) / z)
        parts = [2.0 * float(w.sum()) for _, w in _dg_chunks(s, h + 1)]
        return min(1.0, math.fsum(parts) / z)

    def interval(self, alpha: float = 0.05) -> int:
        """The smallest integer h >= 0 with P(|Y| <= h) >= 1 - alpha.

        One pass over the weights from the far tail inwards: the tail sums
        S(m) = sum_{k >= m} w(k) are accumulated from their small end, so they are
        accurate even for tiny alpha; the answer is the largest m >= 1 with
        2 S(m) / Z > alpha (then P(|Y| > m - 1) > alpha but P(|Y| > m) <= alpha), or 0.
        """
        a = _check_alpha(alpha)
        s = float(self.sigma)
        z = _dg_sums(self.sigma)[0]
        threshold = a * z / 2.0
        if s > LARGE_SIGMA:  # bisection on the monotone tail
            lo, hi = 0, math.ceil(_DG_SIGMAS * s) + 1
            while lo < hi:
                mid = (lo + hi) // 2
                if self.tail(mid) <= a:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        chunks = list(_dg_chunks(s, 1))
        carry = 0.0
        for k, w in reversed(chunks):
            suffix = np.cumsum(w[::-1])[::-1] + carry  # S(k[i])
            above = np.flatnonzero(suffix > threshold)
            if above.size:
                return int(k[above[-1]])
            carry = float(suffix[0])
        return 0

    def expected_abs(self) -> float:
        """E|Y| = sum |k| w(k) / Z."""
        z, m1, _ = _dg_sums(self.sigma)
        return m1 / z

    def variance(self) -> float:
        """Var Y = E Y^2 = sum k^2 w(k) / Z."""
        z, _, m2 = _dg_sums(self.sigma)
        return m2 / z

    def std(self) -> float:
        return math.sqrt(self.variance())

    def guarantee(self, sensitivity: int = 1) -> object:
        """(Delta^2 / (2 sigma^2))-zCDP, as a :class:`~dpcurator.privacy.ZCDP` (rounded up)."""
        from dpcurator.privacy import ZCDP

        d = _check_sensitivity(sensitivity)
        return ZCDP(float_up(Fraction(d * d) / (2 * self.sigma * self.sigma)))

    def gdp(self, sensitivity: int = 1) -> object:
        """mu-GDP with mu = Delta * effective_gdp_mu(sigma) (docs/design.md §9; Dong, Roth & Su
        2022, Thm 2.14 for a shift of Delta as Delta unit shifts)."""
        from dpcurator.privacy import GDP
        from dpcurator.privacy.discrete_gaussian import effective_gdp_mu

        d = _check_sensitivity(sensitivity)
        return GDP(d * effective_gdp_mu(float(self.sigma)))

    def __str__(self) -> str:
        return f"DiscreteGaussian(sigma={self.sigma})"


Noise = DiscreteLaplaceNoise | DiscreteGaussianNoise
