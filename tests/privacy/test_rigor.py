"""Every figure called rigorous holds when its theorem is evaluated exactly.

Each reference below is the method's own theorem written out again, independently of
the implementation, and evaluated with 60-digit mpmath arithmetic on the exact values
of the parameters: both the binary value of each float and the decimal it prints as
(the implementation promises both). Assertions have NO tolerance.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import mp, mpf

from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.composition import compose
from dpcurator.privacy.events import Gaussian, Guaranteed, Laplace
from dpcurator.privacy.filters import largest_zcdp_within
from dpcurator.privacy.gaussian import gdp_epsilon, mu_from_pure
from dpcurator.privacy.optimal import optimal_epsilon
from dpcurator.privacy.zcdp import zcdp_epsilon

mp.dps = 60
FAST = settings(max_examples=30, deadline=None)


def readings(x: float) -> list[mpf]:
    """The exact binary value of a float and the decimal it prints as."""
    return [mpf(x), mpf(repr(x))]


def high(x: float) -> mpf:
    return max(readings(x))


def low(x: float) -> mpf:
    return min(readings(x))


# --- the theorems, in 60-digit arithmetic ------------------------------------------------


def kov33_delta(eps: mpf, delta: mpf, n: int, eps_prime: mpf) -> mpf:
    """KOV 2017 Thm 3.3: 1 - (1 - delta)^n (1 - sum_j C(n,j) max(0, e^{(n-j)eps} -
    e^{eps'} e^{j eps}) / (1 + e^eps)^n), every positive term summed (no truncation)."""
    e_inv, e_sq = mp.exp(-eps), mp.exp(2 * eps)
    a = mp.exp(n * eps - n * mp.log(1 + mp.exp(eps)))  # C(n,0) e^{n eps} / (1+e^eps)^n
    g = mp.exp(eps_prime - n * eps)  # e^{eps'} e^{j eps} / e^{(n-j) eps} at j = 0
    total = mpf(0)
    for j in range(n + 1):
        if (n - 2 * j) * eps <= eps_prime:
            break
        total += a * (1 - g)
        a = a * (n - j) / (j + 1) * e_inv
        g = g * e_sq
    return 1 - (1 - delta) ** n * (1 - total)


def gdp_exact_delta(mu: mpf, eps: mpf) -> mpf:
    """Dong, Roth & Su 2022, Cor. 2.13."""
    return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)


def cks_inf(rho: mpf, eps: mpf) -> mpf:
    """Canonne, Kamath & Steinke 2020, Cor. 13, minimised over alpha > 1.

    log delta(alpha) = (alpha-1)(alpha rho - eps) - log(alpha-1) + alpha log(1 - 1/alpha)
    has derivative (2 alpha - 1) rho - eps + log(1 - 1/alpha), increasing in alpha: its
    root is found by bisection on log(alpha - 1).
    """

    def deriv(t):
        alpha = 1 + mp.exp(t)
        return (2 * alpha - 1) * rho - eps + mp.log(1 - 1 / alpha)

    lo, hi = mpf(-200), mpf(200)
    if deriv(hi) < 0:
        t = hi
    elif deriv(lo) > 0:
        t = lo
    else:
        for _ in range(400):
            mid = (lo + hi) / 2
            if deriv(mid) < 0:
                lo = mid
            else:
                hi = mid
        t = (lo + hi) / 2
    alpha = 1 + mp.exp(t)
    log_d = (alpha - 1) * (alpha * rho - eps) - mp.log(alpha - 1) + alpha * mp.log(1 - 1 / alpha)
    return min(mpf(1), mp.exp(log_d))


def zcdp_exact_delta(rho: mpf, eps: mpf) -> mpf:
    """The tighter of Bun & Steinke 2016 Prop. 1.3 and CKS 2020 Cor. 13 at eps."""
    bs = mpf(1) if eps <= rho else mp.exp(-((eps - rho) ** 2) / (4 * rho))
    return min(bs, cks_inf(rho, eps))


def kov35_epsilon(eps: mpf, n: int, delta_i: mpf, target: mpf, *, with_sum: bool = True) -> mpf:
    """KOV 2017 Thm 3.5 (homogeneous): the certified eps at total delta = target
    (without its first term, n eps, when ``with_sum`` is False)."""
    slack = 1 - (1 - target) / (1 - delta_i) ** n
    s = n * eps * eps
    drift = n * eps * (mp.exp(eps) - 1) / (mp.exp(eps) + 1)
    return min(
        n * eps if with_sum else mp.inf,
        drift + mp.sqrt(2 * s * mp.log(mp.e + mp.sqrt(s) / slack)),
        drift + mp.sqrt(2 * s * mp.log(1 / slack)),
    )


def advanced_epsilon(eps: mpf, n: int, delta_i: mpf, target: mpf) -> mpf:
    """Dwork & Roth 2014, Thm 3.20: eps sqrt(2 n ln(1/d')) + n eps (e^eps - 1), d' = target - n delta_i."""
    slack = target - n * delta_i
    return eps * mp.sqrt(2 * n * mp.log(1 / slack)) + n * eps * (mp.exp(eps) - 1)


def mu_of_pure(eps: mpf) -> mpf:
    """-2 Phi^{-1}(1/(1 + e^eps)), Dong, Roth & Su 2022, §2.2."""
    p = 1 / (1 + mp.exp(eps))
    return -2 * mp.sqrt(2) * mp.erfinv(2 * p - 1)


# --- optimal composition (the review's cases first) ------------------------------------------

REVIEW_OPTIMAL = [
    (0.01, 100_000, 1e-5),
    (0.003, 100_000, 1e-6),
    (0.2, 3000, 1e-8),
    (0.02, 20_000, 1e-9),
    (1.36, 150, 1e-9),
]


@pytest.mark.parametrize("eps,n,target", REVIEW_OPTIMAL)
def test_optimal_epsilon_of_the_review_holds_exactly(eps, n, target):
    r = compose([Guaranteed(PureDP(eps), n)], delta=target, methods=["optimal"])["optimal"]
    # delta_n grows with eps and falls with eps': the worse readings bound the others
    assert kov33_delta(high(eps), mpf(0), n, low(r.epsilon)) <= low(target)
    # and it is tight: 1e-9 relative lower, the exact delta exceeds the target
    assert kov33_delta(mpf(eps), mpf(0), n, mpf(r.epsilon) * (1 - mpf("1e-9"))) > mpf(target)


def test_optimal_delta_at_epsilon_is_rounded_up():
    # --epsilon mode: 3000 x 0.2 at eps 60 used to report a delta below the exact one.
    r = compose([Guaranteed(PureDP(0.2), 3000)], epsilon=60.0, methods=["optimal"])["optimal"]
    exact = max(kov33_delta(e, mpf(0), 3000, low(60.0)) for e in readings(0.2))
    assert mpf(r.delta) >= exact and mpf(repr(r.delta)) >= exact
    assert mpf(r.delta) <= exact * (1 + mpf("1e-12"))


@FAST
@given(
    st.floats(0.005, 3.0),
    st.integers(1, 400),
    st.sampled_from([1e-3, 1e-6, 1e-9, 1e-12]),
    st.sampled_from([0.0, 1e-9, 1e-7]),
)
def test_optimal_epsilon_holds_exactly(eps, n, target, d):
    out = optimal_epsilon(eps, d, n, target)
    if out is None:
        assert 1 - (1 - high(d)) ** n >= low(target)
        return
    for e in readings(eps):
        for dd in readings(d):
            assert kov33_delta(e, dd, n, low(out)) <= low(target)


@FAST
@given(st.floats(0.005, 2.0), st.integers(1, 300), st.floats(0.0, 1.0))
def test_optimal_delta_mode_is_never_below_exact(eps, n, frac):
    at = frac * n * eps
    r = compose([Guaranteed(PureDP(eps), n)], epsilon=at, methods=["optimal"])["optimal"]
    exact = max(kov33_delta(e, mpf(0), n, low(at)) for e in readings(eps))
    assert min(readings(r.delta)) >= min(exact, mpf(1))


# --- Gaussian DP ------------------------------------------------------------------------


def test_gdp_single_gaussian_of_the_review_holds_exactly():
    r = compose([Gaussian(4.530877)], delta=1e-6, methods=["gdp"])["gdp"]
    for s in readings(4.530877):
        assert gdp_exact_delta(1 / s, low(r.epsilon)) <= low(1e-6)


@FAST
@given(st.floats(0.05, 50.0), st.sampled_from([1e-2, 1e-5, 1e-6, 1e-9, 1e-12]))
def test_gdp_epsilon_holds_exactly(sigma, target):
    r = compose([Gaussian(sigma)], delta=target, methods=["gdp"])
    if "gdp" not in r.methods:
        return
    eps = low(r["gdp"].epsilon)
    assert gdp_exact_delta(1 / low(sigma), eps) <= low(target)


@FAST
@given(st.floats(0.01, 20.0), st.sampled_from([1e-3, 1e-6, 1e-10]))
def test_gdp_epsilon_function_holds_exactly(mu, target):
    eps = gdp_epsilon(mu, target)
    assert gdp_exact_delta(high(mu), low(eps)) <= low(target)


@FAST
@given(st.floats(0.01, 30.0), st.floats(0.0, 20.0))
def test_gdp_delta_is_never_below_exact(mu, at):
    d = GDP(mu).delta_at(at)
    assert min(readings(d)) >= gdp_exact_delta(high(mu), low(at))


@FAST
@given(st.floats(1e-6, 20.0))
def test_mu_from_pure_is_never_below_exact(eps):
    assert mpf(mu_from_pure(eps)) >= mu_of_pure(high(eps))


@FAST
@given(st.floats(0.01, 1.5), st.integers(1, 200), st.sampled_from([1e-5, 1e-9]))
def test_gdp_of_pure_mechanisms_holds_exactly(eps, n, target):
    r = compose([Guaranteed(PureDP(eps), n)], delta=target, methods=["gdp"])["gdp"]
    mu = mp.sqrt(n) * mu_of_pure(high(eps))
    assert gdp_exact_delta(mu, low(r.epsilon)) <= low(target)


# --- zCDP -------------------------------------------------------------------------------


@FAST
@given(st.floats(1e-4, 50.0), st.sampled_from([1e-2, 1e-5, 1e-6, 1e-9, 1e-12]))
def test_zcdp_epsilon_holds_exactly(rho, target):
    eps = zcdp_epsilon(rho, target)
    assert zcdp_exact_delta(high(rho), low(eps)) <= low(target)


@FAST
@given(st.floats(0.05, 5.0), st.integers(1, 100), st.sampled_from([1e-5, 1e-9]))
def test_zcdp_of_gaussians_holds_exactly(sigma, n, target):
    r = compose([Gaussian(sigma, n)], delta=target, methods=["zcdp"])["zcdp"]
    rho = n / (2 * low(sigma) ** 2)
    assert zcdp_exact_delta(rho, low(r.epsilon)) <= low(target)


@FAST
@given(st.floats(1e-4, 50.0), st.floats(0.0, 60.0))
def test_zcdp_delta_is_never_below_exact(rho, at):
    d = ZCDP(rho).delta_at(at)
    assert min(readings(d)) >= zcdp_exact_delta(high(rho), low(at))


# --- (eps, delta) budget -> zCDP ---------------------------------------------------------


@pytest.mark.parametrize("eps,delta", [(3.0, 1e-5), (0.001, 1e-12), (1.0, 1e-6), (10.0, 1e-9)])
def test_largest_zcdp_within_of_the_review_meets_its_budget(eps, delta):
    rho = largest_zcdp_within(eps, delta).rho
    assert rho > 0
    assert zcdp_exact_delta(mpf(rho), low(eps)) <= low(delta)
    # and it is nearly the largest: 1e-9 more already overshoots
    assert zcdp_exact_delta(mpf(rho) * (1 + mpf("1e-9")), high(eps)) > high(delta)


@FAST
@given(st.floats(1e-3, 20.0), st.floats(1e-14, 0.1))
def test_largest_zcdp_within_meets_its_budget(eps, delta):
    rho = largest_zcdp_within(eps, delta).rho
    assert zcdp_exact_delta(mpf(rho), low(eps)) <= low(delta)


# --- closed forms --------------------------------------------------------------------------


@FAST
@given(
    st.floats(0.001, 2.0),
    st.integers(1, 5000),
    st.sampled_from([0.0, 1e-12, 1e-10]),
    st.sampled_from([1e-5, 1e-9]),
)
def test_basic_advanced_kov_hold_exactly(eps, n, d, target):
    r = compose(
        [Guaranteed(ApproxDP(eps, d), n)], delta=target, methods=["basic", "advanced", "kov"]
    )
    e, dd, t = high(eps), high(d), low(target)
    if "basic" in r.methods:  # rational: compared exactly (a decimal is not an exact mpf)
        got = min(Fraction(r["basic"].epsilon), Fraction(repr(r["basic"].epsilon)))
        assert got >= n * max(Fraction(eps), Fraction(repr(eps)))
        assert n * max(Fraction(d), Fraction(repr(d))) <= min(
            Fraction(target), Fraction(repr(target))
        )
    if "advanced" in r.methods:
        assert low(r["advanced"].epsilon) >= advanced_epsilon(e, n, dd, t)
    if "kov" in r.methods:
        # min(n eps, a, b) <= kov iff kov >= n eps (rational: compared exactly) or
        # kov >= min(a, b) (in 60 digits)
        k = r["kov"].epsilon
        exact_sum = min(Fraction(k), Fraction(repr(k))) >= n * max(
            Fraction(eps), Fraction(repr(eps))
        )
        assert exact_sum or low(k) >= kov35_epsilon(e, n, dd, t, with_sum=False)


def test_kov_zcdp_gdp_are_not_below_exact_on_a_grid():
    # the review found kov, zcdp and gdp up to 1.5e-14 relative below exact
    for eps in (0.01, 0.1, 0.5, 1.0):
        for n in (10, 1000, 100_000):
            for target in (1e-5, 1e-9):
                r = compose(
                    [Guaranteed(PureDP(eps), n)], delta=target, methods=["kov", "zcdp", "gdp"]
                )
                e, t = high(eps), low(target)
                assert low(r["kov"].epsilon) >= kov35_epsilon(e, n, mpf(0), t)
                assert zcdp_exact_delta(n * e * e / 2, low(r["zcdp"].epsilon)) <= t
                mu = mp.sqrt(n) * mu_of_pure(e)
                assert gdp_exact_delta(mu, low(r["gdp"].epsilon)) <= t


def test_basic_delta_at_epsilon_is_rounded_up():
    # 10^5 x 0.01 at eps 17.8559: basic's delta used to overflow
    r = compose([Guaranteed(PureDP(0.01), 100_000)], epsilon=17.8559)
    E = 100_000 * high(0.01)
    exact = (mp.exp(E) - mp.exp(low(17.8559))) / (1 + mp.exp(E))
    assert min(readings(r["basic"].delta)) >= exact
    assert r["optimal"].delta >= 1e-5  # eps 17.8559 is just below the optimum at 1e-5


def test_laplace_is_read_at_its_smaller_scale():
    r = compose([Laplace(3.0, 7)], delta=1e-6, methods=["basic", "optimal"])
    assert Fraction(r["basic"].epsilon) >= Fraction(7, 3)
    assert kov33_delta(1 / low(3.0), mpf(0), 7, low(r["optimal"].epsilon)) <= low(1e-6)


def test_certified_enclosure_contains_the_exact_value():
    from dpcurator.privacy.optimal import delta_rr_enclosure

    for eps, n, ep in [(0.01, 2000, 3.0), (1.36, 150, 187.6), (0.5, 41, 0.0), (2.0, 3, 1.0)]:
        lo, hi = delta_rr_enclosure(Fraction(eps), n, Fraction(ep))
        with mp.workdps(100):
            exact = kov33_delta(mpf(eps), mpf(0), n, mpf(ep))
            assert mpf(lo.numerator) / lo.denominator <= exact <= mpf(hi.numerator) / hi.denominator
