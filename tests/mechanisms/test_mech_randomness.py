"""Random sources, exact uniform integers, and parameter validation of the samplers.

Statistical assertions use significance level 1e-4 each (about 10 here: false-alarm
rate about 0.1% for this file); they use the seeded source and are deterministic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    SeededRandomSource,
    SystemRandomSource,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    ensure_secure,
)
from dpcurator.mechanisms.randomness import random_bits, uniform_below

ALPHA = 1e-4


def test_sources_declare_whether_they_are_secure():
    assert SystemRandomSource().secure is True
    assert SeededRandomSource(1).secure is False
    assert ensure_secure(None).secure
    assert ensure_secure(SystemRandomSource()).secure
    with pytest.raises(InvalidParameter):
        ensure_secure(SeededRandomSource(1))
    assert ensure_secure(SeededRandomSource(1), allow_insecure=True).seed == 1


def test_seeded_source_is_reproducible():
    a = discrete_gaussian(3, 1000, rng=SeededRandomSource(9))
    b = discrete_gaussian(3, 1000, rng=SeededRandomSource(9))
    c = discrete_gaussian(3, 1000, rng=SeededRandomSource(10))
    assert (a == b).all() and not (a == c).all()


@pytest.mark.parametrize("bound", [2, 3, 7, 129, 200, 256, 1000, 65537, 10**9 + 7])
def test_uniform_below_is_uniform(bound):
    n = 300_000
    x = uniform_below(SeededRandomSource(bound), bound, n)
    assert x.dtype == np.int64 and x.min() >= 0 and x.max() < bound
    bins = min(bound, 64)
    # group values into `bins` classes of (nearly) equal size: v * bins // bound
    cls = (x * bins) // bound
    counts = np.bincount(cls, minlength=bins)
    sizes = np.bincount((np.arange(bound) * bins) // bound) if bound < 10**6 else None
    expected = n * (sizes / bound) if sizes is not None else np.full(bins, n / bins)
    assert stats.chisquare(counts, expected * counts.sum() / expected.sum()).pvalue > ALPHA


@pytest.mark.parametrize("bound", [2**63, 2**63 + 1, 3 * 2**70 + 5])
def test_uniform_below_large_bounds(bound):
    n = 50_000
    x = uniform_below(SeededRandomSource(1), bound, n)
    assert all(0 <= int(v) < bound for v in x)
    # the top bits are uniform: fraction below bound/2
    low = sum(1 for v in x if 2 * int(v) < bound)
    assert stats.binomtest(low, n, 0.5).pvalue > ALPHA


def test_uniform_below_modulo_bias_is_absent():
    """bound 3 with 8-bit words: 256 mod 3 = 1, so a biased sampler overweights 0."""
    n = 3_000_000
    x = uniform_below(SeededRandomSource(77), 3, n)
    counts = np.bincount(x, minlength=3)
    # a 1/256 bias (0.4%) in P(0) would give z = 0.0013 n / sqrt(n * 2/9) ~ 4.8 sigma
    assert stats.chisquare(counts).pvalue > ALPHA


def test_random_bits():
    b = random_bits(SeededRandomSource(3), 100_001)
    assert b.dtype == bool and b.size == 100_001
    assert stats.binomtest(int(b.sum()), b.size, 0.5).pvalue > ALPHA


def test_scalar_and_shaped_outputs():
    rng = SeededRandomSource(2)
    assert isinstance(discrete_laplace(3, rng=rng), int)
    assert isinstance(discrete_gaussian(3, rng=rng), int)
    assert isinstance(bernoulli_exp(Fraction(1, 2), rng=rng), bool)
    assert discrete_laplace(3, (4, 5), rng=rng).shape == (4, 5)
    assert discrete_gaussian(3, (2, 3), rng=rng).shape == (2, 3)
    assert discrete_laplace(3, 0, rng=rng).shape == (0,)
    assert discrete_gaussian(3, np.int64(7), rng=rng).shape == (7,)
    assert isinstance(DiscreteLaplaceNoise(2).sample(), int)


@pytest.mark.parametrize(
    "bad", [0, -1, 0.0, -0.5, math.nan, math.inf, -math.inf, True, "1", None, [1], 1j]
)
def test_bad_scale_and_sigma(bad):
    with pytest.raises(InvalidParameter):
        discrete_laplace(bad)
    with pytest.raises(InvalidParameter):
        discrete_gaussian(bad)
    with pytest.raises(InvalidParameter):
        DiscreteLaplaceNoise(bad)
    with pytest.raises(InvalidParameter):
        DiscreteGaussianNoise(bad)


@pytest.mark.parametrize("bad", [-1, 1.5, (2, -1), "3", True, [3]])
def test_bad_size(bad):
    with pytest.raises(InvalidParameter):
        discrete_laplace(1, bad)
    with pytest.raises(InvalidParameter):
        discrete_gaussian(1, bad)


def test_bad_gamma_alpha_rng_seed():
    with pytest.raises(InvalidParameter):
        bernoulli_exp(-1)
    with pytest.raises(InvalidParameter):
        bernoulli_exp(math.nan)
    for alpha in (0, 1, -0.1, 1.5, math.nan, "0.05"):
        with pytest.raises(InvalidParameter):
            DiscreteLaplaceNoise(1).interval(alpha)
        with pytest.raises(InvalidParameter):
            DiscreteGaussianNoise(1).interval(alpha)
    with pytest.raises(InvalidParameter):
        discrete_laplace(1, 10, rng=np.random.default_rng(0))
    for seed in (-1, 1.5, "x", True):
        with pytest.raises(InvalidParameter):
            SeededRandomSource(seed)
    with pytest.raises(InvalidParameter):
        uniform_below(SeededRandomSource(0), 0, 3)


def test_parameters_are_exact_rationals():
    assert DiscreteLaplaceNoise(0.3).scale == Fraction(0.3) != Fraction(3, 10)
    assert DiscreteGaussianNoise(Fraction(7, 3)).sigma == Fraction(7, 3)
    assert DiscreteLaplaceNoise(np.int32(4)).scale == 4
    assert DiscreteLaplaceNoise(10) == DiscreteLaplaceNoise(Fraction(10))
    with pytest.raises(AttributeError):
        DiscreteLaplaceNoise(1).scale = 2  # frozen
