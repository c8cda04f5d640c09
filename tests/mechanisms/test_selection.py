"""Exact selection: permute-and-flip and the exponential mechanism have exactly their laws.

Oracles: the exponential mechanism's probabilities exp(-eta g_i) / Z and permute-and-flip's
(every subset of coins enumerated), both in mpmath at 50 digits; samples from a seeded
source compared with a chi-square test at a fixed seed (deterministic)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy.stats import chisquare

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.mechanisms.selection import (
    LEVEL_CAP,
    _level,
    _powers,
    exponential_mechanism,
    permute_and_flip,
)

mpmath.mp.dps = 50


def em_law(gaps, rate):
    w = [mpmath.exp(-mpmath.mpf(rate.numerator) * g / rate.denominator) for g in gaps]
    z = mpmath.fsum(w)
    return [float(x / z) for x in w]


def pf_law(gaps, rate):
    """P(i) = sum over coin outcomes where i succeeds of P(outcome) / #successes."""
    p = [mpmath.exp(-mpmath.mpf(rate.numerator) * g / rate.denominator) for g in gaps]
    out = [mpmath.mpf(0)] * len(gaps)
    for bits in itertools.product((0, 1), repeat=len(gaps)):
        if not any(bits):
            continue
        pr = mpmath.fprod(pi if b else 1 - pi for pi, b in zip(p, bits, strict=True))
        k = sum(bits)
        for i, b in enumerate(bits):
            if b:
                out[i] += pr / k
    return [float(x) for x in out]


def frequencies(draw, m, n):
    counts = np.zeros(m, int)
    for _ in range(n):
        counts[draw()] += 1
    return counts


@pytest.mark.parametrize(
    "gaps, rate",
    [
        ([0, 1, 2, 3, 5], Fraction(1, 2)),
        ([3, 0, 0, 1, 7, 2], Fraction(3, 4)),
        ([0, 10, 1, 4], Fraction(1, 10)),
    ],
)
def test_permute_and_flip_has_its_exact_law(gaps, rate):
    rng = SeededRandomSource(11)
    n = 5_000
    counts = frequencies(lambda: permute_and_flip(np.array(gaps), rate, rng), len(gaps), n)
    law = np.array(pf_law(gaps, rate))
    keep = law * n >= 5
    assert counts[~keep].sum() <= 10
    assert chisquare(counts[keep], law[keep] / law[keep].sum() * counts[keep].sum()).pvalue > 1e-4


@pytest.mark.parametrize(
    "gaps, rate",
    [
        ([0, 1, 2, 3, 5], Fraction(1, 2)),
        ([3, 0, 0, 1, 7, 2, 2, 2], Fraction(3, 4)),
        ([0, 10, 1, 4, 4, 9], Fraction(1, 10)),
        ([0, 1], Fraction(7, 3)),  # levels 0 and 2: a non-trivial fraction is rejected
    ],
)
def test_exponential_mechanism_has_its_exact_law(gaps, rate):
    rng = SeededRandomSource(12)
    n = 5_000
    counts = frequencies(lambda: exponential_mechanism(np.array(gaps), rate, rng), len(gaps), n)
    law = np.array(em_law(gaps, rate))
    keep = law * n >= 5
    assert counts[~keep].sum() <= 10
    assert chisquare(counts[keep], law[keep] / law[keep].sum() * counts[keep].sum()).pvalue > 1e-4


def test_level_sampler_has_its_exact_law():
    sizes = [1, 0, 5, 30, 0, 200, 1000]
    w = [m * mpmath.exp(-j) for j, m in enumerate(sizes)]
    law = np.array([float(x / mpmath.fsum(w)) for x in w])
    rng = SeededRandomSource(3)
    counts = np.bincount([_level(sizes, rng) for _ in range(8_000)], minlength=len(sizes))
    assert counts[1] == counts[4] == 0
    keep = law > 0
    assert chisquare(counts[keep], law[keep] * counts.sum()).pvalue > 1e-4


@pytest.mark.parametrize("bits", [64, 128, 256])
def test_powers_enclose_exp_exactly(bits):
    lo, hi = _powers(bits, LEVEL_CAP)
    with mpmath.workdps(bits // 3 + 60):
        for j, (a, b) in enumerate(zip(lo, hi, strict=True)):
            exact = mpmath.mpf(2) ** bits * mpmath.exp(-j)
            assert a <= exact <= b
            assert b - a <= j + 1  # one unit lost per multiplication at most


def test_huge_gaps_and_object_integers():
    rng = SeededRandomSource(5)
    gaps = np.array([0, 10**30, 2**70, 5], dtype=object)
    for _ in range(200):
        assert exponential_mechanism(gaps, Fraction(1, 3), rng) in (0, 3)
        assert permute_and_flip(gaps, Fraction(1, 3), rng) in (0, 3)
    # past the level cap every candidate still has its (tiny) chance: only 0 and 1 here
    far = np.array([0, LEVEL_CAP * 4], dtype=np.int64)
    assert {exponential_mechanism(far, Fraction(1), rng) for _ in range(100)} == {0}


@pytest.mark.parametrize(
    "gaps, rate",
    [
        ([], Fraction(1)),
        ([1, 2], Fraction(1)),  # no best candidate at gap 0
        ([0, -1], Fraction(1)),
        ([0.0, 1.0], Fraction(1)),
        ([0, 1], Fraction(0)),
        ([0, 1], 0.5),
        ([0, 1], True),
    ],
)
def test_bad_arguments_are_refused(gaps, rate):
    rng = SeededRandomSource(0)
    for f in (exponential_mechanism, permute_and_flip):
        with pytest.raises(InvalidParameter):
            f(np.array(gaps), rate, rng)
