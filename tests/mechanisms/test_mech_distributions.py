"""Statistical tests of the exact samplers against their exact pmfs.

Every test here is a hypothesis test at a fixed significance level ALPHA = 1e-4: a
correct sampler fails any one of them with probability at most 1e-4 (up to the
chi-square approximation, made reliable by pooling bins to an expected count >= 5).
There are about 40 such tests in this file, so the false-alarm rate of the whole
family is below 0.4% (Bonferroni). The seeded source makes CI deterministic: with
the seeds below the tests pass, and a change that alters the distribution is still
caught with high power (10^6 draws per distribution). Tests marked ``csprng`` use the
operating system's CSPRNG and are therefore random, with the same 1e-4 false-alarm rate.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcurator.mechanisms import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    SeededRandomSource,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
)

ALPHA = 1e-4
N = 1_000_000

LAPLACE_SCALES = [0.3, 1, Fraction(7, 3), 10, 1000]
GAUSSIAN_SIGMAS = [0.5, 1, 10, 1000]


def pooled_chisquare(samples: np.ndarray, pmf, lo: int, hi: int) -> float:
    """p-value of a chi-square test of ``samples`` against ``pmf`` on the integers.

    Values below ``lo`` and above ``hi`` are folded into the end bins (with their
    probability mass), then adjacent bins are merged until each expects >= 5 draws.
    """
    n = samples.size
    ks = np.arange(lo, hi + 1)
    probs = np.asarray(pmf(ks), dtype=np.float64)
    inside = probs.sum()
    # mass outside [lo, hi], split between the ends in proportion (symmetric pmfs)
    outside = max(0.0, 1.0 - inside)
    probs[0] += outside / 2
    probs[-1] += outside / 2
    counts = np.bincount(np.clip(samples, lo, hi) - lo, minlength=ks.size).astype(np.float64)
    exp_counts = probs * n
    obs, exp = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(counts, exp_counts, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        obs[-1] += acc_o
        exp[-1] += acc_e
    obs_a, exp_a = np.array(obs), np.array(exp)
    exp_a *= obs_a.sum() / exp_a.sum()  # normalise the float round-off
    return float(stats.chisquare(obs_a, exp_a).pvalue)


def window(noise) -> tuple[int, int]:
    h = noise.interval(1e-9)
    return -h, h


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_goodness_of_fit(scale):
    noise = DiscreteLaplaceNoise(scale)
    x = discrete_laplace(scale, N, rng=SeededRandomSource(11))
    assert x.dtype == np.int64 and x.shape == (N,)
    lo, hi = window(noise)
    assert pooled_chisquare(x, noise.pmf, lo, hi) > ALPHA


@pytest.mark.parametrize("sigma", GAUSSIAN_SIGMAS, ids=str)
def test_discrete_gaussian_goodness_of_fit(sigma):
    noise = DiscreteGaussianNoise(sigma)
    x = discrete_gaussian(sigma, N, rng=SeededRandomSource(12))
    assert x.dtype == np.int64 and x.shape == (N,)
    lo, hi = window(noise)
    assert pooled_chisquare(x, noise.pmf, lo, hi) > ALPHA


def test_goodness_of_fit_with_the_csprng():
    """The default (secure, random) source; false-alarm rate 1e-4 per assertion."""
    for noise in (DiscreteLaplaceNoise(10), DiscreteGaussianNoise(Fraction(7, 2))):
        x = noise.sample(200_000)
        lo, hi = window(noise)
        assert pooled_chisquare(x, noise.pmf, lo, hi) > ALPHA


@pytest.mark.parametrize(
    "scale",
    # numerators/denominators beyond 64 bits: the Python-integer (object) path
    [Fraction(10**20 + 7, 10**19 + 3), Fraction(10**19 + 1, 3 * 10**19 + 7), 2.0**70],
    ids=["big-rational", "big-denominator", "huge"],
)
def test_discrete_laplace_big_integer_path(scale):
    noise = DiscreteLaplaceNoise(scale)
    x = np.asarray(discrete_laplace(scale, 50_000, rng=SeededRandomSource(13)))
    if float(scale) > 1e15:  # compare |x| / scale with Exp(1) through the pmf's tail
        h = noise.interval(0.5)
        frac = np.mean(np.abs(x.astype(float)) > h)
        assert stats.binomtest(int(frac * x.size), x.size, noise.tail(h)).pvalue > ALPHA
        return
    lo, hi = window(noise)
    assert pooled_chisquare(x.astype(np.int64), noise.pmf, lo, hi) > ALPHA


def test_tiny_scale_gives_zero():
    """Scale 1e-5 (a float with a 2^69 denominator): P(Y != 0) is about 2 e^-100000."""
    assert not np.asarray(discrete_laplace(1e-5, 10_000, rng=SeededRandomSource(15))).any()
    assert not discrete_gaussian(1e-5, 1000, rng=SeededRandomSource(15)).any()


@pytest.mark.parametrize("sigma", [1.1, Fraction(10**20 + 7, 10**19 + 3), Fraction(1, 3)], ids=str)
def test_discrete_gaussian_big_integer_path(sigma):
    """sigma = 1.1 is 2476979795053773 / 2^51: sigma^2 needs more than 64 bits."""
    noise = DiscreteGaussianNoise(sigma)
    x = discrete_gaussian(sigma, 40_000, rng=SeededRandomSource(14))
    lo, hi = window(noise)
    assert pooled_chisquare(x, noise.pmf, lo, hi) > ALPHA


@pytest.mark.parametrize(
    "noise",
    [DiscreteLaplaceNoise(10), DiscreteLaplaceNoise(0.3), DiscreteGaussianNoise(10)],
    ids=str,
)
def test_symmetry(noise):
    """Positive and negative draws are equally likely, and mirror-image bins agree."""
    x = noise.sample(N, SeededRandomSource(21))
    pos, neg = int((x > 0).sum()), int((x < 0).sum())
    assert stats.binomtest(pos, pos + neg, 0.5).pvalue > ALPHA
    # chi-square of the counts of k against the counts of -k, k = 1..h
    h = noise.interval(1e-3)
    c = np.bincount(np.clip(x, -h, h) + h, minlength=2 * h + 1)
    left, right = c[:h][::-1], c[h + 1 :]
    keep = (left + right) >= 10
    t = ((left - right)[keep] ** 2 / (left + right)[keep]).sum()
    assert stats.chi2.sf(t, keep.sum()) > ALPHA


@pytest.mark.parametrize(
    "noise",
    [
        DiscreteLaplaceNoise(1),
        DiscreteLaplaceNoise(1000),
        DiscreteGaussianNoise(1),
        DiscreteGaussianNoise(1000),
    ],
    ids=str,
)
def test_tail_frequencies(noise):
    """P(|Y| > h) at the 90%, 99% and 99.99% interval half-widths, by binomial tests."""
    x = np.abs(noise.sample(N, SeededRandomSource(31)))
    for level in (0.1, 0.01, 1e-4):
        h = noise.interval(level)
        p = noise.tail(h)
        assert p <= level
        observed = int((x > h).sum())
        assert stats.binomtest(observed, x.size, p).pvalue > ALPHA


@pytest.mark.parametrize(
    "gamma",
    [
        0,
        Fraction(1, 10),
        Fraction(1, 3),
        0.5,
        1,
        Fraction(3, 2),
        Fraction(7, 3),
        4,
        Fraction(10**20 + 1, 10**20),  # beyond 64 bits
    ],
    ids=str,
)
def test_bernoulli_exp(gamma):
    n = 400_000
    x = bernoulli_exp(gamma, n, rng=SeededRandomSource(41))
    assert x.dtype == bool and x.shape == (n,)
    p = math.exp(-float(Fraction(gamma)))
    if p == 1.0:
        assert x.all()
        return
    assert stats.binomtest(int(x.sum()), n, p).pvalue > ALPHA


def test_bernoulli_exp_large_gamma_is_rare():
    x = bernoulli_exp(30, 100_000, rng=SeededRandomSource(42))
    assert not x.any()  # P(any) < 1e5 * e^-30 < 1e-8
    assert bernoulli_exp(0) is True


def test_bernoulli_exp1_via_factorial_thresholds():
    """The one-draw Bernoulli(exp(-1)) (12! thresholds) against Algorithm 1 rounds."""
    from dpcurator.mechanisms.samplers import _bernoulli_exp1, _bernoulli_exp_fraction

    rng = SeededRandomSource(43)
    n = 1_000_000
    a = _bernoulli_exp1(rng, n)
    b = _bernoulli_exp_fraction(rng, np.ones(n, dtype=np.int64), 1)
    p = math.exp(-1)
    assert stats.binomtest(int(a.sum()), n, p).pvalue > ALPHA
    assert stats.binomtest(int(b.sum()), n, p).pvalue > ALPHA


def test_geometric_exp1():
    from dpcurator.mechanisms.samplers import _geometric_exp1

    v = _geometric_exp1(SeededRandomSource(44), N)
    q = math.exp(-1)
    hi = 15

    def pmf(k):
        return (1 - q) * q ** np.asarray(k, dtype=float)

    counts = np.bincount(np.minimum(v, hi), minlength=hi + 1)
    probs = pmf(np.arange(hi + 1))
    probs[-1] = q**hi
    keep = probs * N >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(probs[keep], probs[~keep].sum()) * N
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > ALPHA


def test_empirical_moments_match_accuracy():
    """Sample mean of |Y| and of Y^2 within 5 standard errors of expected_abs/variance."""
    for noise in (DiscreteLaplaceNoise(Fraction(7, 3)), DiscreteGaussianNoise(0.5)):
        x = noise.sample(N, SeededRandomSource(51)).astype(float)
        for stat, expected in ((np.abs(x), noise.expected_abs()), (x * x, noise.variance())):
            se = stat.std() / math.sqrt(N)
            assert abs(stat.mean() - expected) < 5 * se


def test_the_tests_have_power():
    """A 3% error in the scale, or sigma, is detected (so passing means something)."""
    x = discrete_laplace(10, N, rng=SeededRandomSource(61))
    wrong = DiscreteLaplaceNoise(Fraction(103, 10))
    assert pooled_chisquare(x, wrong.pmf, *window(wrong)) < ALPHA
    y = discrete_gaussian(10, N, rng=SeededRandomSource(62))
    wrong_g = DiscreteGaussianNoise(Fraction(103, 10))
    assert pooled_chisquare(y, wrong_g.pmf, *window(wrong_g)) < ALPHA
