"""Composition: closed forms, reference values from other libraries, and properties."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.bounds import approx_profile
from dpcurator.privacy.composition import METHODS, compose
from dpcurator.privacy.discrete_gaussian import dgauss_delta, effective_gdp_mu
from dpcurator.privacy.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Guaranteed,
    Laplace,
)
from dpcurator.privacy.optimal import optimal_delta, optimal_epsilon

RIGOROUS_NATIVE = ("basic", "advanced", "kov", "optimal")


def pure(eps, n):
    return Guaranteed(PureDP(eps), n)


def test_kov_reference_value_from_diffprivlib():
    # diffprivlib's test suite: 700 mechanisms of eps = 2^-9, slack 2^-25.
    r = compose([pure(2**-9, 700)], delta=2**-25)
    assert r["kov"].epsilon == pytest.approx(0.27832280615743646, rel=1e-12)


def test_three_gaussians_are_one_gdp():
    r = compose([Gaussian(math.sqrt(3), 3)], epsilon=1.0)
    assert r["gdp"].delta == pytest.approx(0.1269367, abs=5e-8)
    # PLD of the same Gaussians is pessimistic but tight.
    assert r["pld"].delta >= r["gdp"].delta - 1e-9
    assert r["pld"].delta == pytest.approx(r["gdp"].delta, abs=1e-4)


def test_example_best_is_optimal():
    r = compose([pure(0.1, 100)], delta=1e-5)
    assert r.best.method == "optimal"
    assert round(r.best.epsilon, 4) == 4.3068
    assert r["basic"].epsilon == pytest.approx(10.0)
    dr320 = 100 * 0.1 * math.expm1(0.1) + 0.1 * math.sqrt(2 * 100 * math.log(1e5))
    assert r["advanced"].epsilon == pytest.approx(dr320, rel=1e-12)
    assert not r["clt"].rigorous and r.best.method != "clt"


def _exact_delta_rr(eps, n, eps_prime):
    """KOV Thm 3.3 summed directly with exact binomials (small n only)."""
    total = math.fsum(
        math.comb(n, j) * max(0.0, math.exp((n - j) * eps) - math.exp(eps_prime + j * eps))
        for j in range(n + 1)
    )
    return total / (1 + math.exp(eps)) ** n


@pytest.mark.parametrize("eps,n", [(0.1, 10), (0.5, 25), (1.0, 7), (2.0, 3)])
@pytest.mark.parametrize("frac", [0.0, 0.2, 0.5, 0.9])
def test_optimal_matches_direct_sum(eps, n, frac):
    ep = frac * n * eps
    assert optimal_delta(eps, 0.0, n, ep) == pytest.approx(_exact_delta_rr(eps, n, ep), rel=1e-10)


@given(st.floats(0.01, 3.0), st.floats(0.0, 1.0))
def test_optimal_single_mechanism_is_its_own_profile(eps, frac):
    # one eps-DP mechanism at eps' <= eps: (e^eps - e^eps') / (1 + e^eps), written with
    # expm1 so that it keeps its relative accuracy as eps' nears eps and delta nears 0
    at = frac * eps
    exact = -math.expm1(at - eps) / (1 + math.exp(-eps))
    assert optimal_delta(eps, 0.0, 1, at) == pytest.approx(exact, rel=1e-9)
    assert approx_profile(eps, 0.0, at) == pytest.approx(exact, rel=1e-9, abs=1e-15)


def test_optimal_at_100000_is_fast_enough_to_run_in_tests():
    eps = optimal_epsilon(0.01, 0.0, 100_000, 1e-5)
    assert optimal_delta(0.01, 0.0, 100_000, eps) <= 1e-5
    assert optimal_delta(0.01, 0.0, 100_000, eps * (1 - 1e-9)) > 1e-5


@settings(max_examples=20, deadline=None)
@given(st.floats(0.01, 2.0), st.integers(1, 300), st.sampled_from([1e-3, 1e-6, 1e-9]))
def test_every_rigorous_bound_is_at_least_the_optimum(eps, n, delta):
    r = compose([pure(eps, n)], delta=delta)
    opt = r["optimal"].epsilon
    for name, res in r.methods.items():
        if res.rigorous:
            # PLD included: its slack (pld.numerical_slack) covers the FFT's lost mass; what
            # remains is dp-accounting's floating-point root finding, ~1e-12 relative.
            tol = 1e-9 * opt if name == "pld" else 1e-12
            assert res.epsilon >= opt - tol, name
    assert opt <= r["advanced"].epsilon + 1e-12
    assert opt <= r["kov"].epsilon + 1e-12


@settings(max_examples=30, deadline=None)
@given(st.floats(0.01, 1.0), st.integers(1, 200), st.floats(1.01, 3.0))
def test_epsilon_is_monotone_in_count_and_per_mechanism_epsilon(eps, n, factor):
    base = compose([pure(eps, n)], delta=1e-6, methods=RIGOROUS_NATIVE)
    more = compose([pure(eps, n + 1)], delta=1e-6, methods=RIGOROUS_NATIVE)
    bigger = compose([pure(eps * factor, n)], delta=1e-6, methods=RIGOROUS_NATIVE)
    looser = compose([pure(eps, n)], delta=1e-3, methods=RIGOROUS_NATIVE)
    for m in RIGOROUS_NATIVE:
        assert more[m].epsilon >= base[m].epsilon - 1e-12
        assert bigger[m].epsilon >= base[m].epsilon - 1e-12
        assert looser[m].epsilon <= base[m].epsilon + 1e-12


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 1.0), st.integers(1, 100), st.sampled_from([1e-4, 1e-7]))
def test_delta_mode_and_epsilon_mode_agree(eps, n, delta):
    r = compose([pure(eps, n)], delta=delta)
    for name, res in r.methods.items():
        if name == "basic":
            continue  # basic's epsilon does not depend on delta
        back = compose([pure(eps, n)], epsilon=res.epsilon, methods=[name])[name]
        assert back.delta <= delta * (1 + 1e-6), name


def test_heterogeneous_mixture_uses_closed_forms():
    events = [pure(0.1, 10), Guaranteed(ApproxDP(0.5, 1e-7), 4)]
    r = compose(events, delta=1e-5)
    assert "optimal" not in r.methods  # not homogeneous
    assert r["basic"].epsilon == pytest.approx(3.0)
    s2 = 10 * 0.01 + 4 * 0.25
    drift = 10 * 0.1 * math.expm1(0.1) + 4 * 0.5 * math.expm1(0.5)
    adv = math.sqrt(2 * math.log(1 / (1e-5 - 4e-7)) * s2) + drift
    assert r["advanced"].epsilon == pytest.approx(adv, rel=1e-12)
    assert "heterogeneous" in r["advanced"].theorem
    assert "zcdp" not in r.methods and "gdp" not in r.methods  # delta > 0 events


def test_delta_budget_already_spent_leaves_method_out():
    r = compose([Guaranteed(ApproxDP(0.1, 1e-3), 10)], delta=1e-3)
    for m in RIGOROUS_NATIVE:
        assert m not in r.methods


def test_laplace_pld_is_tighter_than_worst_case_eps_dp():
    r = compose([Laplace(10.0, 50)], delta=1e-6)
    assert r["pld"].epsilon < r["optimal"].epsilon
    # The discrete Laplace's privacy loss is exactly +-1/scale: it *is* the worst case
    # of (1/scale)-DP, so its PLD matches optimal composition.
    d = compose([DiscreteLaplace(10.0, 50)], delta=1e-6)
    assert d["optimal"].epsilon <= d["pld"].epsilon <= d["optimal"].epsilon * (1 + 1e-6)


def test_discrete_gaussian_uses_effective_mu_and_exact_zcdp():
    r = compose([DiscreteGaussian(2.0)], epsilon=1.0)
    assert r["gdp"].delta == pytest.approx(GDP(effective_gdp_mu(2.0)).delta_at(1.0))
    assert r["gdp"].delta >= dgauss_delta(2.0, 1.0)  # GDP accounting is an upper bound
    assert r["pld"].delta >= dgauss_delta(2.0, 1.0) - 1e-9
    assert r["zcdp"].delta == pytest.approx(ZCDP(1 / 8).delta_at(1.0))


def test_zcdp_event_has_no_pld_or_gdp():
    r = compose([Guaranteed(ZCDP(0.1), 3), Gaussian(5.0)], delta=1e-6)
    assert set(r.methods) == {"zcdp"}
    assert r["zcdp"].epsilon == pytest.approx(ZCDP(0.3 + 1 / 50).epsilon_at(1e-6))


def test_bare_guarantees_are_single_runs():
    a = compose([PureDP(0.2), PureDP(0.2)], delta=1e-6)
    b = compose([pure(0.2, 2)], delta=1e-6)
    assert a["basic"].epsilon == b["basic"].epsilon == pytest.approx(0.4)


def test_methods_report_is_in_canonical_order():
    r = compose([pure(0.5, 4)], delta=1e-6)
    assert list(r.methods) == [m for m in METHODS if m in r.methods]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"delta": 1e-5, "epsilon": 1.0},
        {"delta": 0.0},
        {"delta": 1.0},
        {"epsilon": -1.0},
        {"delta": float("nan")},
    ],
)
def test_bad_targets(kwargs):
    with pytest.raises(InvalidParameter):
        compose([pure(0.1, 2)], **kwargs)


def test_bad_events_and_methods():
    with pytest.raises(InvalidParameter):
        compose([], delta=1e-5)
    with pytest.raises(InvalidParameter):
        compose([0.1], delta=1e-5)
    with pytest.raises(InvalidParameter, match="unknown method"):
        compose([pure(0.1, 2)], delta=1e-5, methods=["magic"])
    with pytest.raises(InvalidParameter):
        Laplace(0.0)
    with pytest.raises(InvalidParameter):
        Gaussian(1.0, count=0)
