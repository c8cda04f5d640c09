"""The quantile score, its sensitivity (brute force over neighbours), the calibration of
each currency (exact and certified), and the rank-error bound (against mpmath)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.mechanisms.quantile import (
    QuantileMechanism,
    quantile_fraction,
    quantile_mechanism,
    quantile_sensitivity,
    rank_scores,
)
from dpcurator.privacy.gaussian import mu_from_pure_exact


def scores_of(data, size, q):
    counts = np.bincount(np.asarray(data, int), minlength=size)
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return rank_scores(below, counts, len(data), q)


def brute(data, size, q):
    """b * distance from q n to [L, L + E] by the definition, in fractions."""
    n = len(data)
    out = []
    for c in range(size):
        lo = sum(1 for x in data if x < c)
        hi = lo + sum(1 for x in data if x == c)
        t = q * n
        out.append(q.denominator * max(Fraction(0), t - hi, lo - t))
    return out


qs = st.sampled_from(
    [
        Fraction(1, 2),
        Fraction(1, 4),
        Fraction(3, 4),
        Fraction(1, 10),
        Fraction(0),
        Fraction(1),
        Fraction(333, 1000),
    ]
)


@given(st.lists(st.integers(0, 7), max_size=25), qs)
def test_scores_match_the_definition(data, q):
    assert scores_of(data, 8, q).tolist() == brute(data, 8, q)


@given(st.lists(st.integers(0, 7), max_size=25), qs, st.integers(0, 7))
def test_sensitivity_holds_for_every_neighbour(data, q, row):
    s = scores_of(data, 8, q)
    delta = quantile_sensitivity(q)
    for other in (
        [*data, row],
        [x for i, x in enumerate(data) if i != data.index(row)] if row in data else data,
    ):
        assert np.abs(scores_of(other, 8, q) - s).max() <= delta
    # never above OpenDP's score |(1 - q) L - q G| (times b), the claim of the docs
    n = len(data)
    counts = np.bincount(np.asarray(data, int), minlength=8)
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    above = n - below - counts
    theirs = np.abs((q.denominator - q.numerator) * below - q.numerator * above)
    assert (s <= theirs).all()


def test_sensitivity_is_attained():
    q = Fraction(1, 4)
    base = [0, 1, 2, 3]
    worst = max(
        int(np.abs(scores_of([*base, r], 6, q) - scores_of(base, 6, q)).max()) for r in range(6)
    )
    assert worst == quantile_sensitivity(q) == 3
    assert quantile_sensitivity(q, 5) == 15


@pytest.mark.parametrize(
    "q, want",
    [
        (0.25, Fraction(1, 4)),
        (0.5, Fraction(1, 2)),
        (0, Fraction(0)),
        (1, Fraction(1)),
        (0.123456, Fraction(123456, 10**6)),
    ],
)
def test_quantile_fraction(q, want):
    assert quantile_fraction(q) == want


@pytest.mark.parametrize(
    "q", [-0.1, 1.5, float("nan"), float("inf"), True, "0.5", 0.1234567, None, 5e-324, 1e400]
)
def test_bad_quantiles_are_refused(q):
    with pytest.raises(InvalidParameter):
        quantile_fraction(q)


@pytest.mark.parametrize(
    "rho", [Fraction(1, 100), Fraction(1, 8), Fraction(7, 3), Fraction(1, 10**9)]
)
def test_rho_calibration_is_exact(rho):
    m = quantile_mechanism("rho", rho, 1)
    assert m.name == "exponential_mechanism"
    assert m.epsilon**2 / 8 <= rho  # Cesar & Rogers: the exponential mechanism is eps^2/8-zCDP
    assert m.epsilon > math.sqrt(8 * rho) * (1 - 1e-8)


@pytest.mark.parametrize(
    "mu_sq", [Fraction(1, 100), Fraction(1), Fraction(9, 4), Fraction(1, 10**6)]
)
def test_mu_calibration_is_certified(mu_sq):
    m = quantile_mechanism("mu", mu_sq, 2)
    assert m.name == "permute_and_flip" and m.sensitivity == 2
    assert Fraction(mu_from_pure_exact(m.epsilon)) ** 2 <= mu_sq
    # and not far from the largest epsilon: mu(eps) = 2 Phi^-1(e^eps / (1 + e^eps))
    with mpmath.workdps(40):
        mu = mpmath.sqrt(mpmath.mpf(mu_sq.numerator) / mu_sq.denominator)
        best = mpmath.log(mpmath.ncdf(mu / 2) / mpmath.ncdf(-mu / 2))
        assert float(m.epsilon) > float(best) * (1 - 1e-6)


def test_epsilon_is_taken_as_given():
    m = quantile_mechanism("epsilon", Fraction(1, 10), 1)
    assert (m.name, m.epsilon, m.rate) == ("permute_and_flip", Fraction(1, 10), Fraction(1, 20))
    assert str(m) == "PermuteAndFlip(epsilon=1/10, sensitivity=1)"
    with pytest.raises(InvalidParameter):
        quantile_mechanism("euros", Fraction(1), 1)


@pytest.mark.parametrize("eps", [Fraction(1, 10), Fraction(1), Fraction(10)])
@pytest.mark.parametrize("m_cands", [2, 74, 10**6])
def test_rank_error_bound_against_mpmath(eps, m_cands):
    q = Fraction(1, 2)
    mech = QuantileMechanism("permute_and_flip", eps, quantile_sensitivity(q))
    beta = Fraction(1, 20)
    t = mech.rank_error_bound(m_cands, q, beta)
    x = mech.rate * q.denominator
    with mpmath.workdps(50):
        tail = lambda r: m_cands * mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator * r)  # noqa: E731
        assert tail(t) <= mpmath.mpf(1) / 20
        assert t == 0 or tail(t - 1) > mpmath.mpf(1) / 20  # the smallest such t


def test_rank_errors_stay_within_the_bound():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 60, 500)
    q = Fraction(1, 4)
    s = scores_of(data, 60, q)
    src = SeededRandomSource(2)
    for mech in (
        quantile_mechanism("epsilon", Fraction(1, 2), quantile_sensitivity(q)),
        quantile_mechanism("rho", Fraction(1, 32), quantile_sensitivity(q)),
    ):
        t = mech.rank_error_bound(60, q, Fraction(1, 20))
        errs = [s[mech.select(s, src)] / q.denominator for _ in range(400)]
        assert np.mean(np.array(errs) <= t) >= 0.95
        assert np.mean(errs) <= mech.expected_rank_error(60, q)


@pytest.mark.parametrize(
    "eps", [Fraction(1, 10**15), Fraction(1e-15), Fraction(3, 10**14), Fraction(10**300)]
)
def test_rank_error_bound_at_extreme_rates_is_quick_and_certified(eps):
    """A tiny rate once stepped t += 1 from a float guess, each step adding only x to the
    exponent: the search now doubles and bisects. The bound holds (mpmath at 60 digits)
    and is the smallest t to within the series' certification (1e-12 relative)."""
    q = Fraction(1, 2)
    mech = quantile_mechanism("epsilon", eps, quantile_sensitivity(q), q.denominator)
    t = mech.rank_error_bound(1000, q, Fraction(1, 20))
    x = mech.rate * q.denominator
    with mpmath.workdps(60):
        rate = mpmath.mpf(x.numerator) / x.denominator
        assert mpmath.exp(rate * t) >= 20000
        assert t == 0 or mpmath.exp(rate * (t - 1)) < 20000 * (1 + mpmath.mpf(10) ** -11)


@pytest.mark.parametrize("currency", ["epsilon", "rho", "mu"])
@pytest.mark.parametrize("amount", [Fraction(1e-40), Fraction(1e-320), Fraction(1, 10**400)])
def test_a_selection_beyond_the_noise_range_is_refused(currency, amount):
    with pytest.raises(InvalidParameter, match=r"beyond the largest supported|too small"):
        quantile_mechanism(currency, amount, 1, 2)


@pytest.mark.parametrize(
    "q, want",
    [(np.float64(0.25), Fraction(1, 4)), (np.float32(0.5), Fraction(1, 2)), (np.int64(1), 1)],
)
def test_numpy_quantiles_are_read_as_their_value(q, want):
    assert quantile_fraction(q) == want
