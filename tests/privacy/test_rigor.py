"""Every figure called rigorous holds when its theorem is evaluated exactly.

Each reference below is the method's own theorem written out again, independently of
the implementation, and evaluated with (at least) 60-digit mpmath arithmetic on the exact
values of the parameters: both the binary value of each float and the decimal it prints
as (the implementation promises both). Assertions have NO tolerance, so every reference
is written to be accurate where it is used: no difference of nearly equal numbers at a
tiny delta (sums of positive terms, expm1 and log1p), or more digits where one is
unavoidable. Besides the random examples, deterministic tests check every method at the
boundaries of its theorem: eps' = k eps0, delta -> 0, k = 1 and huge k.
"""

from __future__ import annotations

import math
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


def readings(x: float) -> list[Fraction]:
    """The exact binary value of a float and the decimal it prints as, both exactly
    (an mpf of the decimal would already be rounded: at eps' = k eps0 that is the
    difference between a delta of 0 and one of 1e-63)."""
    return [Fraction(x), Fraction(repr(x))]


def high(x: float) -> Fraction:
    return max(readings(x))


def low(x: float) -> Fraction:
    return min(readings(x))


def rational(x: mpf | Fraction | int | float) -> Fraction:
    """``x`` as an exact rational (an mpf is a binary fraction: nothing is rounded)."""
    if isinstance(x, mpf):
        man, exp = x.man_exp
        return Fraction(man) * Fraction(2) ** exp
    return Fraction(x)


# --- the theorems, in 60-digit arithmetic ------------------------------------------------


#: Beyond this many positive terms, :func:`kov33_bounds` sums a window around the largest
#: term and bounds the rest (a geometric series on each side) instead of summing them all.
FULL_SUM = 20_000


def kov33_bounds(eps: mpf, delta: mpf, n: int, eps_prime: mpf) -> tuple[mpf, mpf]:
    """KOV 2017 Thm 3.3, written so that nothing cancels: lo <= delta_n(eps') <= hi.

    delta_n = 1 - (1 - delta)^n (1 - R) = D + (1 - D) R, with D = 1 - (1 - delta)^n
    = -expm1(n log1p(-delta)) and R = sum_{j < J} a_j (1 - g_j) (every term positive),
    a_j = C(n, j) e^{(n-j) eps} / (1 + e^eps)^n, 1 - g_j = -expm1(eps' - (n - 2j) eps).
    Every quantity is a sum of positive terms or an expm1/log1p, so its relative error
    stays near 10^-dps however small delta_n is (1 - (1 - delta)^n (1 - R) computed as
    written loses everything below 10^-dps: 0.2% of a delta of 1.5e-59 at 60 digits).

    Up to FULL_SUM positive terms, all are summed (lo == hi). Beyond, the terms of a
    window of +-40 standard deviations around the mode are summed and each side's rest is
    bounded by a geometric series (a_{j-1}/a_j = j e^eps / (n - j + 1) grows with j,
    a_{j+1}/a_j = (n - j) e^-eps / (j + 1) falls), added to hi only. The working
    precision grows with log10(n), which the log-gamma of the window's first term needs.
    """
    # eps and eps' exactly: which terms are positive, and how far each exponent
    # eps' - (n - 2j) eps is from 0, are decided in rationals
    q_eps, q_prime = rational(eps), rational(eps_prime)
    with mp.workdps(mp.dps + len(str(n))):
        lost = -mp.expm1(n * mp.log1p(-mpf(delta))) if delta else mpf(0)
        if q_eps == 0:
            return lost, lost
        # J = #{j >= 0 : (n - 2j) eps > eps'}: the positive terms
        big_j = min(n + 1, max(0, math.ceil((n * q_eps - q_prime) / (2 * q_eps))))
        if big_j == 0:
            return lost, lost
        p = 1 / (1 + mp.exp(q_eps))  # a_j = C(n, j) (1 - p)^(n - j) p^j
        if big_j <= FULL_SUM:
            first, last = 0, big_j - 1
        else:
            mode = int(mp.floor((n + 1) * p))
            width = int(40 * mp.sqrt(n * p * (1 - p))) + 40
            last = min(big_j - 1, mode + width)
            first = max(0, min(mode, last) - width)

        def log_a(j: int) -> mpf:
            return (
                mp.loggamma(n + 1)
                - mp.loggamma(j + 1)
                - mp.loggamma(n - j + 1)
                + (n - j) * mp.log1p(-p)
                + j * mp.log(p)
            )

        a_first = a_last = a = mp.exp(log_a(first))
        total = mpf(0)
        for j in range(first, last + 1):
            a_last = a
            total += a * -mp.expm1(q_prime - (n - 2 * j) * q_eps)
            a = a * (n - j) / (j + 1) * p / (1 - p)
        tail = mpf(0)
        if first > 0:
            r = first * (1 - p) / ((n - first + 1) * p)
            assert r < 1
            tail += a_first * r / (1 - r)
        if last < big_j - 1:
            r = (n - last) * p / ((last + 1) * (1 - p))
            assert r < 1
            tail += a_last * r / (1 - r)
        return lost + (1 - lost) * total, lost + (1 - lost) * (total + tail)


def kov33_upper(eps: mpf, delta: mpf, n: int, eps_prime: mpf) -> mpf:
    """An upper bound on KOV 2017 Thm 3.3's delta (exact up to FULL_SUM terms): what a
    claim "delta_n(eps') <= target" is checked against."""
    return kov33_bounds(eps, delta, n, eps_prime)[1]


def kov33_lower(eps: mpf, delta: mpf, n: int, eps_prime: mpf) -> mpf:
    """A lower bound on it: what a claim "delta >= delta_n(eps')" is checked against."""
    return kov33_bounds(eps, delta, n, eps_prime)[0]


def gdp_exact_delta(mu: mpf, eps: mpf) -> mpf:
    """Dong, Roth & Su 2022, Cor. 2.13: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

    The two terms nearly cancel when eps/mu is large (their ratio tends to 1): the
    precision is raised by the digits the difference loses, so that the result keeps
    about 40 correct digits whatever its size."""

    def terms() -> tuple[mpf, mpf]:
        return mp.ncdf(-eps / mu + mu / 2), mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)

    a, b = terms()
    if a <= b:
        return mpf(0)
    lost = int(mp.ceil(mp.log10(a / (a - b))))
    if lost > mp.dps - 40:
        with mp.workdps(lost + 60):
            a, b = terms()
            return +(a - b)
    return a - b


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
    slack = -mp.expm1(mp.log1p(-target) - n * mp.log1p(-delta_i))  # 1 - (1-t)/(1-d)^n
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


def basic_delta(total: mpf, eps_prime: mpf) -> mpf:
    """The exact delta of one (total, 0)-DP mechanism at eps' (KOV 2017 Thm 3.3, n = 1):
    max(0, e^total - e^eps') / (1 + e^total), as -expm1(eps' - total) / (1 + e^-total)."""
    if eps_prime >= total:
        return mpf(0)
    return -mp.expm1(eps_prime - total) / (1 + mp.exp(-total))


def mu_of_pure(eps: mpf) -> mpf:
    """-2 Phi^{-1}(1/(1 + e^eps)), Dong, Roth & Su 2022, §2.2. With p = 1/(1 + e^eps),
    Phi^{-1}(p) = sqrt(2) erfinv(2p - 1) and 2p - 1 = -tanh(eps/2), written so that a tiny
    eps loses nothing to 2p - 1."""
    return 2 * mp.sqrt(2) * mp.erfinv(mp.tanh(eps / 2))


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
    assert kov33_upper(high(eps), mpf(0), n, low(r.epsilon)) <= low(target)
    # and it is tight: 1e-9 relative lower, the exact delta exceeds the target
    assert kov33_lower(mpf(eps), mpf(0), n, mpf(r.epsilon) * (1 - mpf("1e-9"))) > mpf(target)


def test_optimal_delta_at_epsilon_is_rounded_up():
    # --epsilon mode: 3000 x 0.2 at eps 60 used to report a delta below the exact one.
    r = compose([Guaranteed(PureDP(0.2), 3000)], epsilon=60.0, methods=["optimal"])["optimal"]
    exact = max(kov33_lower(e, mpf(0), 3000, low(60.0)) for e in readings(0.2))
    assert mpf(r.delta) >= exact and mpf(repr(r.delta)) >= exact
    most = max(kov33_upper(e, mpf(0), 3000, low(60.0)) for e in readings(0.2))
    assert mpf(r.delta) <= most * (1 + mpf("1e-12"))


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
        assert -mp.expm1(n * mp.log1p(-high(d))) >= low(target)  # 1 - (1 - d)^n
        return
    for e in readings(eps):
        for dd in readings(d):
            assert kov33_upper(e, dd, n, low(out)) <= low(target)


@FAST
@given(st.floats(0.005, 2.0), st.integers(1, 300), st.floats(0.0, 1.0))
def test_optimal_delta_mode_is_never_below_exact(eps, n, frac):
    at = frac * n * eps
    r = compose([Guaranteed(PureDP(eps), n)], epsilon=at, methods=["optimal"])["optimal"]
    exact = max(kov33_lower(e, mpf(0), n, low(at)) for e in readings(eps))
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
    exact = basic_delta(100_000 * high(0.01), low(17.8559))
    assert min(readings(r["basic"].delta)) >= exact
    assert r["optimal"].delta >= 1e-5  # eps 17.8559 is just below the optimum at 1e-5


def test_laplace_is_read_at_its_smaller_scale():
    r = compose([Laplace(3.0, 7)], delta=1e-6, methods=["basic", "optimal"])
    assert Fraction(r["basic"].epsilon) >= Fraction(7, 3)
    assert kov33_upper(1 / low(3.0), mpf(0), 7, low(r["optimal"].epsilon)) <= low(1e-6)


def test_certified_enclosure_contains_the_exact_value():
    from dpcurator.privacy.optimal import delta_rr_enclosure

    for eps, n, ep in [(0.01, 2000, 3.0), (1.36, 150, 187.6), (0.5, 41, 0.0), (2.0, 3, 1.0)]:
        lo, hi = delta_rr_enclosure(Fraction(eps), n, Fraction(ep))
        with mp.workdps(100):
            below, above = kov33_bounds(mpf(eps), mpf(0), n, mpf(ep))
            assert mpf(lo.numerator) / lo.denominator <= below
            assert above <= mpf(hi.numerator) / hi.denominator


# --- the boundaries of the theorems, deterministically ------------------------------------
#
# The random tests above may or may not draw these; CI must not depend on it.

#: (eps0, k): k pure eps0-DP mechanisms read at eps' = k eps0 (the float product, whose
#: delta is 0 or a single tiny term) and one float below it.
AT_K_EPS0 = [
    (0.4652806590771827, 208),  # a random example drew it once: delta = 1.5e-59
    (0.5, 8),  # k eps0 exact in binary: delta = 0 exactly
    (0.1, 100),
    (0.3, 7),
    (0.01, 1000),
    (2.0, 3),
    (0.7, 1),
]


@pytest.mark.parametrize("eps,n", AT_K_EPS0)
def test_every_delta_at_k_eps0_holds_exactly(eps, n):
    for at in (n * eps, math.nextafter(n * eps, 0.0)):
        r = compose([Guaranteed(PureDP(eps), n)], epsilon=at)
        opt = max(kov33_lower(e, mpf(0), n, low(at)) for e in readings(eps))
        assert min(readings(r["optimal"].delta)) >= opt
        assert min(readings(r["basic"].delta)) >= basic_delta(n * high(eps), low(at))
        assert min(readings(r["zcdp"].delta)) >= zcdp_exact_delta(n * high(eps) ** 2 / 2, low(at))
        mu = mp.sqrt(n) * mu_of_pure(high(eps))
        assert min(readings(r["gdp"].delta)) >= gdp_exact_delta(mu, low(at))
    # eps0 and k eps0 exact in binary and in decimal: eps' = k eps0 exactly, where
    # KOV Thm 3.3 (i = 0) leaves nothing: delta = 0
    if len({*readings(eps), *(r / n for r in readings(n * eps))}) == 1:
        r = compose([Guaranteed(PureDP(eps), n)], epsilon=n * eps, methods=["optimal"])
        assert r["optimal"].delta == 0.0


#: delta -> 0 (down to the smallest float), k = 1 and huge k, for every rigorous method.
BOUNDARY_TARGETS = [1e-6, 1e-300, 5e-324]


@pytest.mark.parametrize("target", BOUNDARY_TARGETS)
@pytest.mark.parametrize("eps,n", [(0.1, 1), (1.0, 1), (0.1, 2), (1e-4, 10**9), (1e-6, 10**12)])
def test_every_epsilon_at_the_boundaries_holds_exactly(eps, n, target):
    r = compose([Guaranteed(PureDP(eps), n)], delta=target)
    e, t = high(eps), low(target)
    assert {"basic", "advanced", "kov", "zcdp", "gdp"} <= set(r.methods)
    basic = min(Fraction(r["basic"].epsilon), Fraction(repr(r["basic"].epsilon)))
    assert basic >= n * max(Fraction(eps), Fraction(repr(eps)))
    assert low(r["advanced"].epsilon) >= advanced_epsilon(e, n, mpf(0), t)
    kov = r["kov"].epsilon
    assert min(Fraction(kov), Fraction(repr(kov))) >= n * max(
        Fraction(eps), Fraction(repr(eps))
    ) or low(kov) >= kov35_epsilon(e, n, mpf(0), t, with_sum=False)
    assert zcdp_exact_delta(n * e * e / 2, low(r["zcdp"].epsilon)) <= t
    assert gdp_exact_delta(mp.sqrt(n) * mu_of_pure(e), low(r["gdp"].epsilon)) <= t
    if n <= 2:
        assert kov33_upper(e, mpf(0), n, low(r["optimal"].epsilon)) <= t


@pytest.mark.parametrize("eps", [0.05, 1.0, 3.0])
@pytest.mark.parametrize("target", [1e-3, 1e-9, 1e-300, 5e-324])
def test_optimal_of_one_mechanism_is_its_closed_form(eps, target):
    # k = 1: delta(eps') = -expm1(eps' - eps) / (1 + e^-eps), so the optimum is
    # eps' = eps + log1p(-delta (1 + e^-eps)), rounded up to a float
    out = optimal_epsilon(eps, 0.0, 1, target)
    assert out is not None
    for e in readings(eps):
        assert basic_delta(e, low(out)) <= low(target)
    best = mpf(eps) + mp.log1p(-mpf(target) * (1 + mp.exp(-mpf(eps))))
    assert mpf(out) >= best
    assert mpf(out) <= best + mpf(eps) * mpf("1e-13") + mpf(2) ** -1070


@pytest.mark.parametrize(
    "eps,n,target", [(0.001, 10**6, 1e-9), (0.001, 10**7, 1e-6), (0.01, 10**5, 5e-324)]
)
def test_optimal_epsilon_at_huge_k_holds_exactly(eps, n, target):
    # up to MAX_RUNS = 10^7 mechanisms: the reference sums a window of terms and bounds
    # the rest, and the claim must hold against that bound
    out = optimal_epsilon(eps, 0.0, n, target)
    assert out is not None
    assert kov33_upper(high(eps), mpf(0), n, low(out)) <= low(target)
    if target >= 1e-9:  # and it is tight
        assert kov33_lower(mpf(eps), mpf(0), n, mpf(out) * (1 - mpf("1e-9"))) > mpf(target)
