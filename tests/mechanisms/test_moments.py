"""Means and variances from centred clipped sums: exact transforms, sensitivities, the
estimates with negligible noise, and the coverage of the rigorous intervals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise, SeededRandomSource
from dpcurator.mechanisms.moments import MomentsMechanism, centred_sums, sensitivities, shares

bounds = st.tuples(st.integers(-(10**6), 10**6), st.integers(1, 10**6)).map(
    lambda t: (t[0], t[0] + t[1])
)


@given(bounds, st.lists(st.integers(-(10**7), 10**7), max_size=40), st.integers(-(10**7), 10**7))
def test_centred_sums_and_their_sensitivities(b, values, extra):
    lo, hi = b
    clip = [min(max(v, lo), hi) for v in values]
    n, s, t = centred_sums(len(clip), sum(clip), sum(c * c for c in clip), lo, hi)
    y = [2 * c - (lo + hi) for c in clip]
    r = hi - lo
    assert (n, s, t) == (len(y), sum(y), sum(2 * v * v - r * r for v in y))
    # one row more: N moves by 1, S by at most R, T by at most R^2 (the sensitivities)
    c = min(max(extra, lo), hi)
    n2, s2, t2 = centred_sums(
        len(clip) + 1, sum(clip) + c, sum(x * x for x in clip) + c * c, lo, hi
    )
    dn, ds, dt = sensitivities("variance", lo, hi)
    assert abs(n2 - n) <= dn and abs(s2 - s) <= ds and abs(t2 - t) <= dt
    assert sensitivities("mean", lo, hi, k=3) == (3, 3 * r)
    assert sum(shares("mean")) == sum(shares("variance")) == 1


def tiny(k: int = 1):
    return DiscreteLaplaceNoise(Fraction(1, 10**6))


@given(bounds, st.lists(st.integers(-(10**7), 10**7), min_size=1, max_size=60))
def test_estimates_are_the_clipped_statistics(b, values):
    lo, hi = b
    clip = np.array([min(max(v, lo), hi) for v in values], dtype=object)
    exact = centred_sums(len(clip), int(clip.sum()), int((clip * clip).sum()), lo, hi)
    rng = SeededRandomSource(1)
    mean = float(sum(Fraction(int(c)) for c in clip) / len(clip))
    var = float(
        sum((Fraction(int(c)) - Fraction(sum(int(c) for c in clip), len(clip))) ** 2 for c in clip)
        / len(clip)
    )
    for stat, want in (("mean", mean), ("variance", var), ("stdev", var**0.5)):
        m = MomentsMechanism(stat, lo, hi, tiny(), tiny(), None if stat == "mean" else tiny())
        (noisy,) = m.noisy([exact if stat != "mean" else exact[:2]], rng)
        assert noisy == (exact if stat != "mean" else exact[:2])  # the noise is 0 here
        value, (low, high), se = m.estimate(*noisy)
        assert value == pytest.approx(want, rel=1e-9, abs=1e-9 * (hi - lo) ** 2)
        assert low <= value <= high
        assert se < 1e-3 * max(1.0, (hi - lo) ** 2)


def test_empty_group_gives_the_whole_range():
    m = MomentsMechanism("mean", 0, 10, tiny(), tiny())
    v, iv, _ = m.estimate(-5, 3)
    assert 0 <= v <= 10 and iv == (0.0, 10.0)
    m = MomentsMechanism("variance", 0, 10, tiny(), tiny(), tiny())
    v, iv, _ = m.estimate(-5, 3, 7)
    assert 0 <= v <= 25 and iv == (0.0, 25.0)


@pytest.mark.parametrize("stat", ["mean", "variance", "stdev"])
@pytest.mark.parametrize("gauss", [False, True])
def test_intervals_cover_the_clipped_statistic(stat, gauss):
    rng = np.random.default_rng(4)
    values = rng.integers(-20, 130, 40)
    lo, hi = 0, 100
    clip = np.clip(values, lo, hi)
    n, s, t = centred_sums(len(clip), int(clip.sum()), int((clip**2).sum()), lo, hi)
    truth = {"mean": clip.mean(), "variance": clip.var(), "stdev": clip.std()}[stat]

    def noise(sens):
        return (
            DiscreteGaussianNoise(Fraction(sens, 2))
            if gauss
            else DiscreteLaplaceNoise(Fraction(sens, 1))
        )

    sens = sensitivities(stat, lo, hi)
    m = MomentsMechanism(stat, lo, hi, *(noise(x) for x in sens))
    src = SeededRandomSource(8)
    runs = 800
    exact = [(n, s) if stat == "mean" else (n, s, t)] * runs
    hits = 0
    for row in m.noisy(exact, src):
        _, (low, high), _ = m.estimate(*row)
        hits += low <= truth <= high
    assert hits / runs >= 0.95  # the union bound makes it conservative


def test_error_scale_bounds_the_first_order_error():
    m = MomentsMechanism("mean", 0, 100, DiscreteLaplaceNoise(2), DiscreteLaplaceNoise(200))
    for n, s in ((1000, 0), (1000, 100_000), (1000, -100_000), (50, 4000)):
        _, _, se = m.estimate(n, s)
        assert se * n <= m.error_scale() * (1 + 1e-12)
    assert str(m) == "count DiscreteLaplace(scale=2); sum DiscreteLaplace(scale=200)"
