"""Accuracy of the discrete noise (interval, E|Y|, variance) against direct summation.

The reference values here are computed independently of the library: the pmf is
summed term by term with math.fsum over a window wide enough that the remaining mass
is below 1e-300.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise

ALPHAS = [0.5, 0.1, 0.05, 0.01, 1e-3, 1e-6, 1e-12]


def reference(weight, top):
    """(pmf(k) for k in 0..top, Z) from unnormalised weights, by direct summation."""
    w = [weight(k) for k in range(top + 1)]
    z = w[0] + 2 * math.fsum(w[1:])
    return [x / z for x in w], z


def ref_interval(p, alpha):
    """Smallest h with P(|Y| > h) <= alpha, the tail summed from its small end."""
    tails = [0.0] * (len(p) + 1)
    for k in range(len(p) - 1, -1, -1):
        tails[k] = tails[k + 1] + 2 * p[k]
    # tails[h + 1] = P(|Y| > h)
    for h in range(len(p)):
        if tails[h + 1] <= alpha:
            return h
    raise AssertionError("window too small")


def ref_moments(p):
    e_abs = 2 * math.fsum(k * p[k] for k in range(1, len(p)))
    var = 2 * math.fsum(k * k * p[k] for k in range(1, len(p)))
    return e_abs, var


@pytest.mark.parametrize("scale", [0.3, 1, Fraction(7, 3), 10, 1000], ids=str)
def test_discrete_laplace_accuracy(scale):
    noise = DiscreteLaplaceNoise(scale)
    t = float(Fraction(scale))
    top = math.ceil(800 * t) + 10
    p, _ = reference(lambda k: math.exp(-k / t), top)
    for alpha in ALPHAS:
        assert noise.interval(alpha) == ref_interval(p, alpha), alpha
    e_abs, var = ref_moments(p)
    assert noise.expected_abs() == pytest.approx(e_abs, rel=1e-10)
    assert noise.variance() == pytest.approx(var, rel=1e-10)
    assert noise.pmf(3) == pytest.approx(p[3], rel=1e-12)
    assert noise.pmf(-3) == noise.pmf(3)


@pytest.mark.parametrize("sigma", [0.5, 1, Fraction(7, 3), 10, 1000], ids=str)
def test_discrete_gaussian_accuracy(sigma):
    noise = DiscreteGaussianNoise(sigma)
    s = float(Fraction(sigma))
    top = math.ceil(40 * s) + 10
    p, _ = reference(lambda k: math.exp(-k * k / (2 * s * s)), top)
    for alpha in ALPHAS:
        assert noise.interval(alpha) == ref_interval(p, alpha), alpha
    e_abs, var = ref_moments(p)
    assert noise.expected_abs() == pytest.approx(e_abs, rel=1e-10)
    assert noise.variance() == pytest.approx(var, rel=1e-10)
    assert noise.pmf(2) == pytest.approx(p[2], rel=1e-12)


def test_discrete_versus_continuous_values():
    """Sanity: large sigma approaches the continuous values; small sigma does not."""
    g = DiscreteGaussianNoise(1000)
    assert g.variance() == pytest.approx(1000**2, rel=1e-12)
    assert g.expected_abs() == pytest.approx(1000 * math.sqrt(2 / math.pi), rel=1e-6)
    assert DiscreteGaussianNoise(0.5).variance() < 0.25
    lap = DiscreteLaplaceNoise(1000)
    assert lap.expected_abs() == pytest.approx(1000, rel=1e-6)
    assert DiscreteLaplaceNoise(1).expected_abs() < 1
    # interval at 95% for the discrete Gaussian with sigma = 1000 is about 1.96 sigma
    assert abs(g.interval(0.05) - 1960) <= 1


def test_interval_edge_cases():
    assert DiscreteLaplaceNoise(Fraction(1, 100)).interval(0.05) == 0
    assert DiscreteGaussianNoise(Fraction(1, 10)).interval(0.05) == 0
    assert DiscreteLaplaceNoise(10).tail(DiscreteLaplaceNoise(10).interval(0.05)) <= 0.05
    assert DiscreteGaussianNoise(10).tail(DiscreteGaussianNoise(10).interval(0.05)) <= 0.05


def test_large_sigma_asymptotic_sums_agree_with_summation(monkeypatch):
    """Above LARGE_SIGMA the sums use Poisson/Euler-Maclaurin; check them at one sigma."""
    import dpcurator.mechanisms.noise as noise_mod

    # a sigma far beyond summation is instant
    huge = DiscreteGaussianNoise(7 * 10**9)
    assert huge.interval(0.05) == pytest.approx(1.959964 * 7e9, rel=1e-6)
    sigma = 123457
    fast = DiscreteGaussianNoise(sigma)
    assert sigma > noise_mod.LARGE_SIGMA
    got = [fast.interval(a) for a in (0.5, 0.05, 1e-6, 1e-12)]
    got_m = (fast.expected_abs(), fast.variance(), fast.tail(200_000))
    monkeypatch.setattr(noise_mod, "LARGE_SIGMA", 1e12)
    noise_mod._dg_sums.cache_clear()
    try:
        slow = DiscreteGaussianNoise(sigma)
        assert got == [slow.interval(a) for a in (0.5, 0.05, 1e-6, 1e-12)]
        want = (slow.expected_abs(), slow.variance(), slow.tail(200_000))
        assert got_m == pytest.approx(want, rel=1e-12)
    finally:
        noise_mod._dg_sums.cache_clear()
