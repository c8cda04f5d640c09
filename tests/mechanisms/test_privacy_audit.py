"""Empirical privacy audits: each mechanism run many times on neighbouring tables.

For every event E of a fixed family (chosen from the mechanism's public parameters, never
from the samples) the Clopper-Pearson bounds on P_D(E) and P_D'(E) give a lower
confidence bound on ln(P_D'(E) / P_D(E)) (pure DP) or on P_D'(E) - e^eps P_D(E)
(approximate DP), Bonferroni-corrected over the events at level 0.01. No lower bound may
exceed the claimed epsilon (or delta(eps)): beyond sampling error, the audit sees no more
privacy loss than claimed. Each audit also has a control: the same samples judged
against a claim that is too small must fail, so the audit has the power to see a loss.
Seeded sources make every run the same; the mechanisms are the ones the curator uses."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import beta

from dpcurator.mechanisms import SeededRandomSource, noise_for_cost
from dpcurator.mechanisms.moments import MomentsMechanism, centred_sums, sensitivities, shares
from dpcurator.mechanisms.quantile import quantile_mechanism, quantile_sensitivity, rank_scores
from dpcurator.privacy import ZCDP, PureDP

LEVEL = 0.01


def cp(hits: int, n: int, a: float) -> tuple[float, float]:
    """Clopper-Pearson bounds at two-sided level a."""
    lo = 0.0 if hits == 0 else float(beta.ppf(a / 2, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(beta.ppf(1 - a / 2, hits + 1, n - hits))
    return lo, hi


def pure_lower_bound(hits_d, hits_d2, n) -> float:
    """max over events and both directions of a lower confidence bound on the log ratio."""
    a = LEVEL / (2 * len(hits_d))
    best = -math.inf
    for x, y in zip(hits_d, hits_d2, strict=True):
        for p, q in ((x, y), (y, x)):
            lo, _ = cp(p, n, a)
            _, hi = cp(q, n, a)
            if lo > 0:
                best = max(best, math.log(lo / hi))
    return best


def approx_excess(hits_d, hits_d2, n, eps) -> float:
    """max over events and directions of a lower bound on P'(E) - e^eps P(E)."""
    a = LEVEL / (2 * len(hits_d))
    best = -math.inf
    for x, y in zip(hits_d, hits_d2, strict=True):
        for p, q in ((x, y), (y, x)):
            best = max(best, cp(p, n, a)[0] - math.exp(eps) * cp(q, n, a)[1])
    return best


# --- means and variances ----------------------------------------------------------------

LO, HI = 0, 10


def moments_runs(stat, noises, rows, runs, seed):
    """(runs, d) noisy (N, S[, T]) of a table whose clipped values are ``rows``."""
    m = MomentsMechanism(stat, LO, HI, *noises)
    exact = centred_sums(len(rows), sum(rows), sum(r * r for r in rows), LO, HI)
    exact = exact if stat != "mean" else exact[:2]
    return np.array(m.noisy([exact] * runs, SeededRandomSource(seed)), dtype=np.int64), exact


def tail_events(exact, steps):
    """Products of upper tails {X_i >= exact_i + s} over a grid of offsets per coordinate."""
    return [
        tuple(e + s for e, s in zip(exact, combo, strict=True))
        for combo in itertools.product(*steps)
    ]


def event_hits(samples, corners):
    return [int(np.all(samples >= np.array(c), axis=1).sum()) for c in corners]


def noises_for(stat, cost, guarantee):
    sens = sensitivities(stat, LO, HI)
    return [
        noise_for_cost(guarantee(float(cost * w)), s)
        for w, s in zip(shares(stat), sens, strict=True)
    ]


@pytest.mark.parametrize("stat", ["mean", "variance"])
def test_moments_are_pure_dp_as_claimed(stat):
    eps = Fraction(1)
    noises = noises_for(stat, eps, PureDP)
    d = [LO] * 8
    runs = 60_000
    a, exact = moments_runs(stat, noises, d, runs, 1)
    b, _exact2 = moments_runs(stat, noises, [*d, HI], runs, 2)  # one more row, at the far end
    r = HI - LO
    steps = [range(-1, 3), [-r, 0, r, 2 * r], [-r * r, 0, r * r, 2 * r * r]][: len(exact)]
    corners = tail_events(exact, steps)
    ha, hb = event_hits(a, corners), event_hits(b, corners)
    got = pure_lower_bound(ha, hb, runs)
    assert got <= float(eps)
    # control: the event {N >= N + 1, S >= S + R, ...} has ratio e^eps exactly, so a claim
    # of 0.6 epsilon is refuted by these very samples
    assert got > 0.6 * float(eps)


@pytest.mark.parametrize("stat", ["mean", "variance"])
def test_moments_are_zcdp_as_claimed(stat):
    rho = Fraction(1, 2)
    noises = noises_for(stat, rho, ZCDP)
    d = [LO] * 8
    runs = 60_000
    a, exact = moments_runs(stat, noises, d, runs, 3)
    b, _ = moments_runs(stat, noises, [*d, HI], runs, 4)
    r = HI - LO
    steps = [range(-1, 3), [-r, 0, r, 2 * r], [-r * r, 0, r * r, 2 * r * r]][: len(exact)]
    corners = tail_events(exact, steps)
    ha, hb = event_hits(a, corners), event_hits(b, corners)
    for eps in (0.25, 0.5, 1.0, 2.0):
        assert approx_excess(ha, hb, runs, eps) <= ZCDP(float(rho)).delta_at(eps)
    # control: the same samples are not 10 times more private
    assert any(
        approx_excess(ha, hb, runs, eps) > ZCDP(float(rho) / 10).delta_at(eps)
        for eps in (0.25, 0.5)
    )


# --- quantiles ----------------------------------------------------------------------------

SIZE = 10


def selections(mech, data, q, runs, seed):
    counts = np.bincount(np.asarray(data), minlength=SIZE)
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    s = rank_scores(below, counts, len(data), q)
    src = SeededRandomSource(seed)
    return np.bincount([mech.select(s, src) for _ in range(runs)], minlength=SIZE)


@pytest.mark.parametrize(
    "currency, amount",
    [("epsilon", Fraction(1)), ("rho", Fraction(1, 8)), ("mu", Fraction(1))],
)
def test_quantile_selection_is_pure_dp_as_claimed(currency, amount):
    q = Fraction(1, 2)
    mech = quantile_mechanism(currency, amount, quantile_sensitivity(q))
    d = [1, 2, 2, 4, 6, 8]
    runs = 5000
    for extra in (0, 9):  # add a row below or above the median
        a = selections(mech, d, q, runs, 5)
        b = selections(mech, [*d, extra], q, runs, 6)
        got = pure_lower_bound(a.tolist(), b.tolist(), runs)
        assert got <= float(mech.epsilon)  # every selection is epsilon-DP (rho, mu: implied)
    # control: the selection at 4 epsilon is seen to spend more than epsilon
    loud = quantile_mechanism("epsilon", 4 * mech.epsilon, quantile_sensitivity(q))
    a = selections(loud, d, q, runs, 7)
    b = selections(loud, [*d, 9], q, runs, 8)
    assert pure_lower_bound(a.tolist(), b.tolist(), runs) > float(mech.epsilon)
