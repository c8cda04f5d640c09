"""Means, variances and standard deviations from noisy clipped sums and counts.

Values are clipped to public integer bounds [L, U] (R = U - L > 0) and *centred* at the
midpoint, doubled to stay integer: y = 2 clip(v, L, U) - (L + U), an integer in [-R, R].
Per group, the curator releases with exact integer noise (Dwork & Roth 2014, Sec. 3.3;
the discrete Laplace and Gaussian of docs/design.md §9):

* N = the number of rows (sensitivity 1 under add/remove);
* S = sum of y (sensitivity R: one row adds or removes one y, |y| <= R; in the
  attribute's units that is (U - L)/2, half the max(|L|, |U|) of an uncentred sum whenever
  L >= 0);
* T = sum of (2 y^2 - R^2), for the variance only: each term lies in [-R^2, R^2]
  (sensitivity R^2). Centring the squares at R^2/2 halves their sensitivity, and the
  count's error then multiplies T/N, which is at most R^2 in size, not 2 R^2.

A privacy unit of k rows multiplies each sensitivity by k. The cost is split equally
between the measurements (the mean: half each, which minimises the largest first-order
error when the mean may be anywhere in [L, U]; the variance: a third each) and composed
in the budget's currency (Dwork & Roth 2014, Thm 3.16; Bun & Steinke 2016, Lemma 1.7;
Dong, Roth & Su 2022, Cor. 3.3). The estimates are post-processing (Dwork & Roth 2014,
Prop. 2.1): with N' = max(N, 1),

    mean = (L + U)/2 + S / (2 N'),   variance = ((T/N' + R^2)/2 - (S/N')^2) / 4,

clamped to [L, U] and [0, R^2/4]. This is the noisy sum over noisy count of Dwork & Roth
and Tumult/OpenDP; centring follows the practice of Biswas, Dong, Kamath & Ullman
(CoinPress, NeurIPS 2020, Sec. 2) of reducing the range around a known centre.

**Intervals.** Each noise lies within its exact half-width at level alpha/2 (the mean) or
alpha/3 (the variance) simultaneously with probability at least 1 - alpha (the union
bound); the interval is the range of the statistic over every (N, S, T) those allow, with
N >= 1 and |S| <= R N, computed in exact fractions and rounded outward. It covers the
statistic of the group's *clipped* values with probability at least 1 - alpha: a
rigorous interval, not an approximation. ``std_error`` is the first-order (delta-method)
standard deviation at the released values: an approximation.

**Small groups.** A group whose interval is the statistic's whole range ([L, U], [0,
R^2/4] or [0, R/2]) carries no information at that level: its noisy count is too small
(N + h_N < 1 at the least). Its estimate would be an artefact of the clamp (a clip bound,
typically), so the curator releases no value for it, only the flag and that interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcurator.mechanisms.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpcurator.mechanisms.randomness import RandomSource

__all__ = ["MOMENT_STATISTICS", "MomentsMechanism", "centred_sums", "sensitivities", "shares"]

Noise = DiscreteLaplaceNoise | DiscreteGaussianNoise

#: The statistics made from clipped sums and counts.
MOMENT_STATISTICS = ("mean", "variance", "stdev")


def shares(statistic: str) -> tuple[Fraction, ...]:
    """The part of the cost each measurement gets: (count, sum[, squares])."""
    if statistic == "mean":
        return (Fraction(1, 2), Fraction(1, 2))
    return (Fraction(1, 3), Fraction(1, 3), Fraction(1, 3))


def sensitivities(statistic: str, lower: int, upper: int, k: int = 1) -> tuple[int, ...]:
    """The add/remove sensitivities of (N, S[, T]) for a privacy unit of k rows."""
    r = upper - lower
    if statistic == "mean":
        return (k, k * r)
    return (k, k * r, k * r * r)


def centred_sums(
    n: int, total: int, squares: int | None, lower: int, upper: int
) -> tuple[int, int, int | None]:
    """(N, S, T) from a group's exact row count, sum of clipped values and sum of their
    squares, in exact integer arithmetic."""
    c = lower + upper
    r = upper - lower
    s = 2 * total - c * n
    if squares is None:
        return n, s, None
    y2 = 4 * squares - 4 * c * total + c * c * n
    return n, s, 2 * y2 - r * r * n


def _down(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def _up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _sqrt_down(x: Fraction) -> float:
    f = _down(x) if x > 0 else 0.0
    r = math.sqrt(f)
    while r > 0 and Fraction(r) ** 2 > x:
        r = math.nextafter(r, 0.0)
    return r


def _sqrt_up(x: Fraction) -> float:
    r = math.sqrt(_up(x))
    while Fraction(r) ** 2 < x:
        r = math.nextafter(r, math.inf)
    return r


def _ratio(lo: Fraction, hi: Fraction, n_lo: Fraction, n_hi: Fraction) -> tuple[Fraction, Fraction]:
    """The range of s / n over s in [lo, hi], n in [n_lo, n_hi] (n_lo > 0)."""
    low = lo / n_hi if lo >= 0 else lo / n_lo
    high = hi / n_lo if hi >= 0 else hi / n_hi
    return low, high


def _clamp(x: Fraction, a: Fraction, b: Fraction) -> Fraction:
    return min(max(x, a), b)


@dataclass(frozen=True)
class MomentsMechanism:
    """The noises of one mean, variance or standard deviation and how its estimate,
    interval and error are computed from the noisy (N, S[, T]) of a group."""

    statistic: str
    lower: int
    upper: int
    count: Noise
    total: Noise
    squares: Noise | None = None
    #: What ``lower``, ``upper`` and the sums are counted in: 1, or a float attribute's
    #: step (or a power of ten below it). Estimates, intervals and errors are given in
    #: the attribute's own units, scaled exactly before they are rounded outward.
    unit: Fraction = Fraction(1)

    @property
    def noises(self) -> tuple[Noise, ...]:
        return (self.count, self.total) + (() if self.squares is None else (self.squares,))

    def noisy(self, exact: Sequence[tuple[int, ...]], rng: RandomSource) -> list[tuple[int, ...]]:
        """(N, S[, T]) of every group plus independent exact noise, one draw each."""
        g = len(exact)
        draws = [np.atleast_1d(np.asarray(z.sample(size=g, rng=rng))) for z in self.noises]
        out = []
        for i, row in enumerate(exact):
            out.append(tuple(int(v) + int(d[i]) for v, d in zip(row, draws, strict=False)))
        return out

    def estimate(
        self, n: int, s: int, t: int | None = None, alpha: float = 0.05
    ) -> tuple[float, tuple[float, float], float]:
        """(value, rigorous 1 - alpha interval, first-order standard error)."""
        if self.statistic == "mean":
            return self._mean(n, s, alpha)
        assert t is not None
        value, (lo, hi), sd = self._variance(n, s, t, alpha)
        u2 = self.unit * self.unit
        value, lo, hi, sd = value * u2, lo * u2, hi * u2, sd * float(u2)
        if self.statistic == "variance":
            return _down(value), (_down(lo), _up(hi)), sd
        root = _sqrt_down(value)
        se = sd / (2 * root) if root > 0 else math.sqrt(sd)
        return root, (_sqrt_down(lo), _sqrt_up(hi)), se

    def _mean(self, n: int, s: int, alpha: float) -> tuple[float, tuple[float, float], float]:
        lo_v, hi_v = Fraction(self.lower), Fraction(self.upper)
        mid, half = (lo_v + hi_v) / 2, (hi_v - lo_v) / 2
        nn = Fraction(max(n, 1))
        value = _clamp(mid + Fraction(s) / (2 * nn), lo_v, hi_v)
        h_n = self.count.interval(alpha / 2)
        h_s = self.total.interval(alpha / 2)
        if n + h_n < 1:
            interval = (lo_v, hi_v)
        else:
            n_lo, n_hi = Fraction(max(1, n - h_n)), Fraction(n + h_n)
            a, b = _ratio(Fraction(s - h_s), Fraction(s + h_s), n_lo, n_hi)
            interval = (mid + _clamp(a / 2, -half, half), mid + _clamp(b / 2, -half, half))
        off = float(value - mid)
        var = (
            self.total.variance() / (4 * float(nn) ** 2)
            + off * off * self.count.variance() / float(nn) ** 2
        )
        u = self.unit
        return (
            float(value * u),
            (_down(interval[0] * u), _up(interval[1] * u)),
            math.sqrt(var) * float(u),
        )

    def _variance(
        self, n: int, s: int, t: int, alpha: float
    ) -> tuple[Fraction, tuple[Fraction, Fraction], float]:
        r2 = Fraction((self.upper - self.lower) ** 2)
        r = Fraction(self.upper - self.lower)
        nn = Fraction(max(n, 1))
        a, b = Fraction(s) / nn, Fraction(t) / nn
        vy = _clamp((b + r2) / 2 - a * a, Fraction(0), r2)
        assert self.squares is not None
        h_n, h_s, h_t = (z.interval(alpha / 3) for z in self.noises)
        if n + h_n < 1:
            interval = (Fraction(0), r2 / 4)
        else:
            n_lo, n_hi = Fraction(max(1, n - h_n)), Fraction(n + h_n)
            a_lo, a_hi = (
                _clamp(x, -r, r) for x in _ratio(Fraction(s - h_s), Fraction(s + h_s), n_lo, n_hi)
            )
            b_lo, b_hi = (
                _clamp(x, -r2, r2) for x in _ratio(Fraction(t - h_t), Fraction(t + h_t), n_lo, n_hi)
            )
            sq_lo = Fraction(0) if a_lo <= 0 <= a_hi else min(a_lo * a_lo, a_hi * a_hi)
            sq_hi = max(a_lo * a_lo, a_hi * a_hi)
            v_lo = _clamp((b_lo + r2) / 2 - sq_hi, Fraction(0), r2)
            v_hi = _clamp((b_hi + r2) / 2 - sq_lo, Fraction(0), r2)
            interval = (v_lo / 4, v_hi / 4)
        fn, fs, ft = float(nn), float(s), float(t)
        d_t = 1 / (2 * fn)
        d_s = -2 * fs / fn**2
        d_n = -ft / (2 * fn**2) + 2 * fs * fs / fn**3
        var = (
            d_t**2 * self.squares.variance()
            + d_s**2 * self.total.variance()
            + d_n**2 * self.count.variance()
        )
        return vy / 4, interval, math.sqrt(var) / 4

    def whole_range(self) -> tuple[float, float]:
        """Every value the statistic can take, rounded outward like its intervals:
        [L, U] (a mean), [0, R^2/4] (a variance), [0, R/2] (a standard deviation)."""
        u = self.unit
        if self.statistic == "mean":
            return _down(self.lower * u), _up(self.upper * u)
        r2 = Fraction((self.upper - self.lower) ** 2, 4) * u * u
        return 0.0, (_up(r2) if self.statistic == "variance" else _sqrt_up(r2))

    def informative(self, interval: tuple[float, float]) -> bool:
        """Whether a group's rigorous interval says anything: False when it is the
        statistic's whole range (a *small group*: its noisy count is too small for the
        data to narrow the statistic at all at that level, as whenever N plus the count
        noise's half-width is below 1). Post-processing of released values (Dwork & Roth
        2014, Prop. 2.1): deciding it costs nothing."""
        lo, hi = self.whole_range()
        return not (interval[0] <= lo and interval[1] >= hi)

    def error_scale(self) -> float:
        """The first-order standard error in a group of n rows is at most this over n,
        wherever the data lie within the bounds (the variance's, for a standard deviation)."""
        r = float(self.upper - self.lower)
        u = float(self.unit)
        if self.statistic == "mean":
            return math.sqrt(self.total.variance() / 4 + (r / 2) ** 2 * self.count.variance()) * u
        assert self.squares is not None
        return (
            math.sqrt(
                self.squares.variance() / 4
                + 4 * r * r * self.total.variance()
                + (2.5 * r * r) ** 2 * self.count.variance()
            )
            / 4
            * u
            * u
        )

    def __str__(self) -> str:
        names = ("count", "sum", "squares")
        return "; ".join(f"{w} {z}" for w, z in zip(names, self.noises, strict=False))
