"""Guarantees: validation, conversions against closed forms, group privacy."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.tradeoff import f_eps_delta, gaussian
from dpcurator.privacy.zcdp import zcdp_delta_bun_steinke, zcdp_delta_cks


@pytest.mark.parametrize(
    "make",
    [
        lambda: PureDP(float("nan")),
        lambda: PureDP(float("inf")),
        lambda: PureDP(-0.1),
        lambda: PureDP("1"),
        lambda: PureDP(True),
        lambda: ApproxDP(1.0, 1.0),
        lambda: ApproxDP(1.0, -1e-9),
        lambda: ApproxDP(1.0, float("nan")),
        lambda: ZCDP(-1),
        lambda: GDP(float("inf")),
    ],
)
def test_invalid_parameters_raise_one_line_value_error(make):
    with pytest.raises(InvalidParameter) as err:
        make()
    assert isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


def test_guarantees_are_frozen_values():
    g = PureDP(1.0)
    with pytest.raises(AttributeError):
        g.epsilon = 2.0  # type: ignore[misc]
    assert PureDP(1) == PureDP(1.0) and hash(PureDP(1)) == hash(PureDP(1.0))


def test_pure_to_zcdp_is_half_eps_squared():
    assert PureDP(0.3).to_zcdp() == ZCDP(0.045000000000000005) or math.isclose(
        PureDP(0.3).to_zcdp().rho, 0.045
    )


@settings(max_examples=30, deadline=None)
@given(st.floats(0.01, 8.0))
def test_pure_to_gdp_lies_below_f_eps_0_and_touches_at_the_symmetric_point(eps):
    mu = PureDP(eps).to_gdp().mu
    alpha = np.linspace(0, 1, 4001)
    assert np.all(gaussian(mu, alpha).beta <= f_eps_delta(eps, 0, alpha).beta + 1e-12)
    star = 1 / (1 + math.exp(eps))
    assert math.isclose(norm.cdf(norm.ppf(1 - star) - mu), star, rel_tol=1e-9)


def test_gdp_delta_reference_value():
    # Three Gaussians of sigma = sqrt(3) are 1-GDP; delta(1) from Dong, Roth & Su Cor. 2.13.
    expected = norm.cdf(-0.5) - math.e * norm.cdf(-1.5)
    assert math.isclose(GDP(1.0).delta_at(1.0), expected, rel_tol=1e-12)
    assert round(GDP(1.0).delta_at(1.0), 7) == 0.1269367


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 5.0), st.floats(1e-12, 0.5))
def test_gdp_epsilon_inverts_delta_on_the_safe_side(mu, delta):
    eps = GDP(mu).epsilon_at(delta)
    assert GDP(mu).delta_at(eps) <= delta
    if eps > 0:
        assert GDP(mu).delta_at(eps * (1 - 1e-9)) > delta * (1 - 1e-6)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.001, 20.0), st.floats(0.0, 50.0))
def test_zcdp_conversion_is_between_exact_gaussian_and_bun_steinke(rho, eps):
    # CKS is never looser than Bun & Steinke, and never tighter than the exact
    # Gaussian curve with mu = sqrt(2 rho), which meets rho-zCDP with equality.
    d = ZCDP(rho).delta_at(eps)
    assert d <= zcdp_delta_bun_steinke(rho, eps) + 1e-15
    assert d >= GDP(math.sqrt(2 * rho)).delta_at(eps) - 1e-12
    assert zcdp_delta_cks(rho, eps) >= GDP(math.sqrt(2 * rho)).delta_at(eps) - 1e-12


@settings(max_examples=30, deadline=None)
@given(st.floats(0.001, 20.0), st.floats(1e-12, 0.1))
def test_zcdp_epsilon_meets_delta_and_beats_closed_form(rho, delta):
    eps = ZCDP(rho).epsilon_at(delta)
    assert ZCDP(rho).delta_at(eps) <= delta
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1e-12


def test_conversions_agree_gaussian_to_zcdp_to_approx():
    mu = 0.8
    via_zcdp = GDP(mu).to_zcdp().to_approx(1e-6).epsilon
    exact = GDP(mu).to_approx(1e-6).epsilon
    assert exact <= via_zcdp  # the detour through zCDP can only lose
    assert GDP(mu).to_zcdp() == ZCDP(mu * mu / 2)


def test_group_privacy_closed_forms():
    assert PureDP(0.5).group(3) == PureDP(1.5)
    g = ApproxDP(0.5, 1e-6).group(3)
    assert math.isclose(g.epsilon, 1.5) and math.isclose(g.delta, 3 * math.exp(1.0) * 1e-6)
    assert ZCDP(0.1).group(3).rho == pytest.approx(0.9)
    assert GDP(0.5).group(4) == GDP(2.0)
    with pytest.raises(InvalidParameter, match="delta >= 1"):
        ApproxDP(2.0, 0.01).group(10)
    with pytest.raises(InvalidParameter):
        PureDP(1).group(0)
