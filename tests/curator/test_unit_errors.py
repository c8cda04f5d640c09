"""Under a privacy unit of k rows a count's sensitivity is k, and every expected error,
variance and interval a workload's plan reports must be the noise actually added (scale
k/epsilon, sigma k/sqrt(2 rho)), not a row's (a reviewer found them about k times too
small, and ``--postprocess consistent`` intervals that missed the truth). The split of
the budget is the same for every k: the model variances share the factor k^2.

The expected errors are checked against the noise's own closed forms (discrete Laplace)
or a direct sum (discrete Gaussian), at the parameter each answer reports; coverage is
checked by a seeded simulation of the noise the curator reported adding, around the true
counts of the kept rows.
"""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.cli.release import noise_of, release_intervals
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.mechanisms.noisy import noise_for_cost
from dpcurator.planner import consistent, make_plan
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.consistency import consistency_system
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.queries import Schema, parse_workload

SCHEMA_DICT = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 3},
        {"name": "b", "type": "categorical", "values": ["p", "q", "r"]},
    ]
}
SCHEMA = Schema.from_dict(SCHEMA_DICT)
#: Overlapping lines of different sizes: the optimal split is solved, not closed-form.
WORKLOAD = "total\nhistogram(a)\nmarginal(a, b)\na <= 1\nb = 'p'"
KEY = bytes(range(32))
BUDGETS = [PureDP(1.0), ZCDP(0.5), ApproxDP(1.0, 1e-6), GDP(1.0)]


def laplace_abs(scale: float) -> float:
    """E|Y| of the discrete Laplace P(y) ~ q^|y|, q = e^(-1/scale): 2q / (1 - q^2)."""
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q * q)


def laplace_var(scale: float) -> float:
    """Var Y = 2q / (1 - q)^2."""
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q) ** 2


@functools.cache
def gaussian_moments(sigma: float) -> tuple[float, float]:
    """E|Y| and Var Y of the discrete Gaussian, summed directly over |y| <= 20 sigma + 2
    (the weights beyond are below e^-200 of the largest)."""
    m = math.ceil(20 * sigma) + 2
    y = np.arange(-m, m + 1, dtype=float)
    w = np.exp(-y * y / (2 * sigma * sigma))
    z = math.fsum(w)
    return math.fsum(np.abs(y) * w) / z, math.fsum(y * y * w) / z


def moments(name: str, parameter: float) -> tuple[float, float]:
    if name == "discrete_laplace":
        return laplace_abs(parameter), laplace_var(parameter)
    return gaussian_moments(parameter)


def table(seed: int = 3, units: int = 200) -> pd.DataFrame:
    """Units with 1 to 12 rows each, so that k = 5 drops some."""
    rng = random.Random(seed)
    rows = [
        (f"u{u}", rng.randint(0, 3), rng.choice("pqr"))
        for u in range(units)
        for _ in range(rng.randint(1, 12))
    ]
    return pd.DataFrame(rows, columns=["uid", "a", "b"])


def open_curator(df, budget, k, seed=11):
    return Curator.open(
        df,
        SCHEMA_DICT,
        budget=budget,
        privacy_unit=None if k is None else ("uid", k),
        unit_key=KEY,
        rng=SeededRandomSource(seed),
        allow_insecure=True,
    )


@pytest.mark.parametrize("guarantee", BUDGETS, ids=lambda g: type(g).__name__)
def test_a_plan_at_sensitivity_k_has_the_noise_added_and_the_same_split(guarantee):
    wl = parse_workload(WORKLOAD, SCHEMA)
    # auto would pick another strategy at k = 1, and skip the direct split's solve
    one = make_plan(wl.queries, wl.weights, guarantee, strategy="direct")
    k = 50
    many = make_plan(wl.queries, wl.weights, guarantee, sensitivity=k)
    # the split: the same numbers, every allocation
    assert many.values == one.values
    assert many.allocations.keys() == one.allocations.keys()
    for name, a in one.allocations.items():
        assert np.array_equal(many.allocations[name].costs, a.costs), name
    # the noise: the one the curator adds at sensitivity k
    budget = PlanBudget.of(guarantee, k)
    for v, n in zip(many.values, many.noises, strict=True):
        assert n == noise_for_cost(budget.cost_guarantee(v), k)
    # the figures: each allocation's sum of the exact moments of its noises, about k
    # times the per-row figures (the discrete noises are not exactly homogeneous)
    for name, a in many.allocations.items():
        want_abs = want_sq = 0.0
        for c in a.costs:
            n = noise_for_cost(budget.cost_guarantee(budget.value(float(c))), k)
            param = float(getattr(n, "scale", getattr(n, "sigma", 0)))
            m_abs, m_var = moments(
                "discrete_laplace" if hasattr(n, "scale") else "discrete_gaussian", param
            )
            want_abs += m_abs
            want_sq += m_var
        assert many.expected_abs[name] == pytest.approx(want_abs, rel=1e-9), name
        assert many.expected_sq[name] == pytest.approx(want_sq, rel=1e-9), name
        assert many.expected_abs[name] == pytest.approx(k * one.expected_abs[name], rel=0.03)
        assert many.expected_sq[name] == pytest.approx(k * k * one.expected_sq[name], rel=0.06)
    assert many.answer_variances() == pytest.approx(k * k * one.answer_variances(), rel=0.06)
    assert many.guarantee.within_budget


def test_the_approx_guarantee_at_sensitivity_k_reads_the_noise_at_sensitivity_k():
    """The accountants' discrete Gaussian is a sensitivity-1 count's: at sensitivity k the
    planned epsilon comes from zCDP and k times each noise's effective GDP mu, never from
    the larger sigma taken as a row's noise (which would claim far too little)."""
    wl = parse_workload(WORKLOAD, SCHEMA)
    g = ApproxDP(1.0, 1e-6)
    many = make_plan(wl.queries, wl.weights, g, sensitivity=20)
    one = make_plan(wl.queries, wl.weights, g, strategy="direct")
    # the same per-unit costs: the same guarantee, to within the noises' rounding
    assert many.guarantee.epsilon == pytest.approx(one.guarantee.epsilon, rel=1e-2)
    assert many.guarantee.epsilon <= 1.0
    assert "gdp: mu = " in many.guarantee.theorem
    assert "20 times the effective mu" in many.guarantee.theorem


def test_non_direct_strategies_are_refused_at_sensitivity_k():
    wl = parse_workload(WORKLOAD, SCHEMA)
    with pytest.raises(Exception, match="one row per person"):
        make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="identity", sensitivity=3)
    auto = make_plan(wl.queries, wl.weights, PureDP(1.0), sensitivity=3)
    assert auto.strategy is None and [c.name for c in auto.candidates] == ["direct"]


@pytest.mark.parametrize("budget", [PureDP(1.0), ZCDP(0.5)], ids=["laplace", "gaussian"])
def test_release_workload_under_a_unit_reports_the_noise_it_added(budget):
    df, k = table(), 5
    with open_curator(df, budget, k) as cur:
        plan, answers = cur.release_workload(WORKLOAD)
    with open_curator(df, budget, None) as cur:
        row_plan, _ = cur.release_workload(WORKLOAD, strategy="direct")
    assert plan.budget.sensitivity == k and row_plan.budget.sensitivity == 1
    total_abs = total_var = 0.0
    for a, n in zip(answers, plan.noises, strict=True):
        assert a.noise_parameter == float(getattr(n, "scale", getattr(n, "sigma", 0)))
        m_abs, m_var = moments(a.noise, a.noise_parameter)
        assert n.expected_abs() == pytest.approx(m_abs, rel=1e-9)
        total_abs += m_abs
        total_var += m_var
    assert plan.expected_abs[plan.allocation.name] == pytest.approx(total_abs, rel=1e-9)
    assert plan.expected_sq[plan.allocation.name] == pytest.approx(total_var, rel=1e-9)
    assert plan.values == row_plan.values  # the same split
    name = plan.allocation.name
    assert plan.expected_abs[name] == pytest.approx(k * row_plan.expected_abs[name], rel=0.03)


def truth(df: pd.DataFrame, k: int, queries) -> np.ndarray:
    """The true counts of the kept rows: a release at so large an epsilon that the
    discrete Laplace of scale k / 1e7 is 0 but with probability below e^-(2 * 10^6)."""
    with open_curator(df, PureDP(1e9), k) as cur:
        exact = cur.release(list(queries), [1e7] * len(queries))
    return np.array([a.value for a in exact], float)


@pytest.mark.parametrize(
    ("budget", "low", "high"),
    [(ZCDP(0.05), 0.94, 0.96), (PureDP(0.3), 0.93, 0.97)],
    ids=["gaussian", "laplace"],
)
def test_consistent_intervals_under_a_unit_cover_the_kept_rows_at_the_nominal_rate(
    budget, low, high
):
    """``--postprocess consistent`` at 95%: the interval is the consistent answer +- the
    half-width :func:`release_intervals` gives. Redraw the noise each answer reports (its
    name and parameter: what was added) 20,000 times; the consistent answers are linear
    in the noisy ones and the true counts of the kept rows are consistent already, so
    each draw's consistent answer is the truth plus P z, P the projection (its columns:
    the consistent answers of unit vectors). Count how often |P z| is within the
    half-width. With the per-row noise's variances it was about a third at k = 5."""
    df, k, draws = table(), 5, 20_000
    with open_curator(df, budget, k) as cur:
        plan, answers = cur.release_workload(WORKLOAD)
    system = consistency_system(plan.queries)
    rel = release_intervals(plan, answers, ["consistent"], 0.95, system)
    half = (rel.high - rel.low) / 2
    true = truth(df, k, plan.queries)
    # the truth is consistent: the projection leaves it as it is
    var = np.ones(len(answers))
    assert consistent(plan.queries, true, var, system) == pytest.approx(true, abs=1e-6)
    # P, with the variances release_intervals weighs by (those of the noise added)
    var = np.array([moments(a.noise, a.noise_parameter)[1] for a in answers])
    basis = np.eye(len(answers))
    proj = np.column_stack([consistent(plan.queries, e, var, system) for e in basis])
    assert np.allclose(
        consistent(plan.queries, np.array([a.value for a in answers], float), var, system),
        rel.values,
    )
    rng = SeededRandomSource(2024)
    z = np.array(
        [
            np.asarray(noise_of(a.noise, a.noise_parameter).sample(size=draws, rng=rng))
            for a in answers
        ],
        float,
    )
    rate = (np.abs(proj @ z) <= half[:, None]).mean(axis=1)
    assert low <= rate.mean() <= high, rate.mean()
    assert rate.min() >= low - 0.03, rate


def test_the_service_release_under_a_unit_reports_the_noise_it_added():
    """``/v1/release``: the direct candidate's squared errors are the answers' noises'
    (each answer says its noise), not the per-row ones."""
    from fastapi.testclient import TestClient

    from dpcurator.service import create_app
    from dpcurator.service.limits import Limits

    k = 5
    with open_curator(table(), PureDP(1.0), k) as cur:
        token = cur.add_analyst("ann")
        app = create_app(cur, Limits(requests_per_second=1000, burst=1000))
        with TestClient(app) as client:
            r = client.post(
                "/v1/release",
                json={"workload": WORKLOAD, "epsilon": 0.5},
                headers={"Authorization": f"Bearer {token}"},
            )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["strategy"] == "direct"
    (direct,) = out["strategies"]
    variances = [laplace_var(a["noise"]["parameter"]) for a in out["answers"]]
    assert all(
        a["noise"]["parameter"] == pytest.approx(k / a["cost"]["amount"], rel=1e-5)
        for a in out["answers"]
    )
    assert direct["total_squared_error"] == pytest.approx(math.fsum(variances), rel=1e-9)
    assert direct["worst_answer_squared_error"] == pytest.approx(max(variances), rel=1e-9)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3", None, float("inf")])
def test_a_sensitivity_that_is_no_positive_integer_is_refused(bad):
    wl = parse_workload(WORKLOAD, SCHEMA)
    from dpcurator.errors import InvalidParameter

    with pytest.raises(InvalidParameter, match=r"sensitivity must be a positive integer"):
        make_plan(wl.queries, wl.weights, PureDP(1.0), sensitivity=bad)
