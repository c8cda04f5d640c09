"""Costs in an additive currency -> noise (always at least as private), noisy counts/sums."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    SeededRandomSource,
    noise_for_cost,
    noisy_count,
    noisy_sum,
)
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.discrete_gaussian import effective_gdp_mu

positive = st.floats(min_value=1e-4, max_value=50, allow_nan=False, allow_infinity=False)
sensitivities = st.integers(min_value=1, max_value=1000)


def small(x: Fraction) -> bool:
    return x.numerator < 2**40 and x.denominator < 2**40


@given(positive, sensitivities)
@settings(max_examples=200, deadline=None)
def test_pure_dp_scale_is_never_smaller(eps, d):
    noise = noise_for_cost(PureDP(eps), d)
    assert isinstance(noise, DiscreteLaplaceNoise)
    exact = Fraction(d) / Fraction(eps)
    assert noise.scale >= exact
    assert noise.scale <= exact * (1 + Fraction(1, 2**26))
    assert small(noise.scale)
    assert noise.guarantee(d).epsilon <= eps


@given(positive, sensitivities)
@settings(max_examples=200, deadline=None)
def test_zcdp_sigma_is_never_smaller(rho, d):
    noise = noise_for_cost(ZCDP(rho), d)
    assert isinstance(noise, DiscreteGaussianNoise)
    exact_sq = Fraction(d * d) / (2 * Fraction(rho))
    assert noise.sigma**2 >= exact_sq
    assert noise.sigma**2 <= exact_sq * (1 + Fraction(1, 2**16))
    assert small(noise.sigma)
    assert noise.guarantee(d).rho <= rho


def test_decimal_costs_give_round_parameters():
    assert noise_for_cost(PureDP(0.1)).scale == 10  # float 0.1 > 1/10
    assert noise_for_cost(PureDP(0.5), 3).scale == 6
    assert noise_for_cost(ZCDP(0.5)).sigma == 1
    assert noise_for_cost(ZCDP(0.005)).sigma == 10  # float 0.005 > 1/200
    assert noise_for_cost(ZCDP(0.125), 2).sigma == 4
    # float 0.3 < 3/10, so 1/0.3 > 10/3 and 10/3 would be too little noise
    assert noise_for_cost(PureDP(0.3)).scale > Fraction(10, 3)


def test_gdp_uses_the_effective_mu():
    """sigma = 2 is not 0.5-GDP (docs/design.md §9): effective_gdp_mu(2) > 0.5."""
    assert effective_gdp_mu(2.0) > 0.5
    noise = noise_for_cost(GDP(0.5))
    assert noise.sigma > 2
    assert effective_gdp_mu(float(noise.sigma)) <= 0.5
    # the smallest sigma on its grid: one grid step less is not enough
    step = Fraction(1, noise.sigma.denominator)
    assert effective_gdp_mu(float(noise.sigma - step)) > 0.5


@pytest.mark.parametrize("mu,d", [(0.5, 1), (1.0, 1), (0.1, 1), (2.0, 3), (0.05, 7)])
def test_gdp_noise_meets_the_cost(mu, d):
    noise = noise_for_cost(GDP(mu), d)
    assert noise.sigma >= Fraction(d) / Fraction(mu)  # effective mu >= 1/sigma
    assert d * effective_gdp_mu(float(noise.sigma)) <= mu
    assert noise.gdp(d).mu <= mu
    # and not wastefully large: within 5% of d/mu for moderate sigma
    assert float(noise.sigma) <= 1.05 * d / mu + 0.2


def test_noisy_count_shapes_and_reproducibility():
    c = noisy_count(100, PureDP(1.0), rng=SeededRandomSource(5))
    assert isinstance(c, int)
    assert c == noisy_count(100, PureDP(1.0), rng=SeededRandomSource(5))
    hist = np.array([10, 20, 30, 0])
    out = noisy_count(hist, ZCDP(0.5), rng=SeededRandomSource(5))
    assert out.shape == (4,) and out.dtype == np.int64
    big = noisy_count(np.zeros((50, 40), dtype=np.int64), GDP(1.0), rng=SeededRandomSource(5))
    assert big.shape == (50, 40)
    assert noisy_count(7, PureDP(1.0)) is not None  # the CSPRNG path


def test_noisy_count_noise_has_the_right_spread():
    eps = 0.5
    out = noisy_count(np.zeros(200_000, dtype=np.int64), PureDP(eps), rng=SeededRandomSource(6))
    noise = DiscreteLaplaceNoise(2)
    se = out.std() / math.sqrt(out.size)
    assert abs(np.abs(out).mean() - noise.expected_abs()) < 5 * se
    out = noisy_count(
        np.zeros(200_000, dtype=np.int64), ZCDP(0.02), sensitivity=2, rng=SeededRandomSource(7)
    )
    assert abs(out.var() / DiscreteGaussianNoise(10).variance() - 1) < 0.02


def test_noisy_sum_sensitivity_is_the_largest_absolute_bound():
    rng = SeededRandomSource(8)
    out = noisy_sum(np.zeros(100_000, dtype=np.int64), PureDP(1.0), lower=5, upper=10, rng=rng)
    # sensitivity max(|5|, |10|) = 10, not the width 5
    assert abs(np.abs(out).mean() / DiscreteLaplaceNoise(10).expected_abs() - 1) < 0.03
    out = noisy_sum(np.zeros(100_000, dtype=np.int64), PureDP(1.0), lower=-3, upper=2, rng=rng)
    assert abs(np.abs(out).mean() / DiscreteLaplaceNoise(3).expected_abs() - 1) < 0.03


@pytest.mark.parametrize(
    "call",
    [
        lambda: noise_for_cost(ApproxDP(1.0, 1e-6)),
        lambda: noise_for_cost(PureDP(0.0)),
        lambda: noise_for_cost(ZCDP(0.0)),
        lambda: noise_for_cost(GDP(0.0)),
        lambda: noise_for_cost(1.0),
        lambda: noise_for_cost(PureDP(1.0), 0),
        lambda: noise_for_cost(PureDP(1.0), 1.5),
        lambda: noise_for_cost(PureDP(1.0), True),
        lambda: noisy_count(1.5, PureDP(1.0)),
        lambda: noisy_count([True], PureDP(1.0)),
        lambda: noisy_count("3", PureDP(1.0)),
        lambda: noisy_sum(3, PureDP(1.0), lower=2, upper=1),
        lambda: noisy_sum(3, PureDP(1.0), lower=0, upper=0),
        lambda: noisy_sum(3, PureDP(1.0), lower=0.5, upper=2),
    ],
)
def test_bad_costs_and_values_are_refused(call):
    with pytest.raises(InvalidParameter):
        call()


def test_gdp_beyond_the_effective_mu_range_is_refused_clearly():
    with pytest.raises(InvalidParameter, match="zCDP"):
        noise_for_cost(GDP(0.001), 1000)
