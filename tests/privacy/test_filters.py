"""Privacy filters in the three additive currencies."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator.errors import BudgetExceeded, InvalidParameter
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import (
    filter_for,
    gdp_filter,
    largest_zcdp_within,
    pure_filter,
    zcdp_filter,
)


def test_third_query_of_0_4_is_refused_within_1_0():
    f = pure_filter(PureDP(1.0))
    f.spend(0.4)
    f.spend(0.4)
    with pytest.raises(BudgetExceeded, match="remaining"):
        f.spend(0.4)
    assert float(f.spent) == pytest.approx(0.8)  # the refusal charged nothing


def test_decimal_costs_spend_the_budget_exactly():
    f = pure_filter(1.0)
    for c in (0.4, 0.4, 0.2):
        f.spend(c)
    assert f.remaining == 0
    assert not f.can_spend(1e-12)


@given(st.lists(st.floats(0.0, 0.5), max_size=30))
def test_total_never_exceeds_budget(costs):
    f = zcdp_filter(ZCDP(1.0))
    for c in costs:
        if f.can_spend(c):
            f.spend(c)
        else:
            with pytest.raises(BudgetExceeded):
                f.spend(c)
    assert f.spent <= f.budget


def test_gdp_filter_adds_mu_squared():
    f = gdp_filter(GDP(1.0))
    f.spend(0.6)
    f.spend(0.8)  # sqrt(0.6^2 + 0.8^2) = 1, exactly in decimal
    assert f.remaining == 0
    assert not f.can_spend(1e-9)


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -0.1, "x"])
def test_bad_costs_raise_and_charge_nothing(cost):
    f = pure_filter(1.0)
    with pytest.raises(InvalidParameter):
        f.spend(cost)
    assert f.spent == 0


def test_approx_budget_is_enforced_as_largest_zcdp():
    rho = largest_zcdp_within(1.0, 1e-6).rho
    assert ZCDP(rho).delta_at(1.0) <= 1e-6
    assert ZCDP(rho * 1.001).delta_at(1.0) > 1e-6
    f = filter_for(ApproxDP(1.0, 1e-6))
    assert f.currency == "rho" and math.isclose(float(f.budget), rho)
    with pytest.raises(InvalidParameter):
        largest_zcdp_within(1.0, 0.0)
