"""The planner: allocations, their order, feasibility (checked exactly), the guarantee,
and consistent post-processing."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from dpcurator.errors import BudgetExceeded, InvalidParameter
from dpcurator.planner import (
    OBJECTIVES,
    PlanBudget,
    compare_objectives,
    consistent,
    make_plan,
    optimal,
    round_down,
    sequential,
    uniform,
)
from dpcurator.planner.consistency import cells_matrix
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import exact
from dpcurator.queries import Query, Schema, max_overlap, parse_workload


def direct_plan(*args, **kw):
    """make_plan measuring the asked queries: these tests study the direct splits."""
    kw.setdefault("strategy", "direct")
    return make_plan(*args, **kw)


ROOT = Path(__file__).resolve().parents[2]
ADULT = Schema.load(ROOT / "examples" / "adult" / "schema.json")
SMALL = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 3},
            {"name": "b", "type": "categorical", "values": ["x", "y", "z"]},
            {"name": "c", "type": "integer", "min": 0, "max": 2},
        ]
    }
)
POINTS = list(itertools.product(range(4), range(3), range(3)))


def covers(q: Query, point: tuple[int, ...]) -> bool:
    names = ("a", "b", "c")
    return all(
        any(lo <= point[names.index(p.attribute.name)] < hi for lo, hi in p.coverage)
        for p in q.predicates
    )


def brute_max(queries, values, budget: PlanBudget) -> Fraction:
    """gamma_w by enumerating the small domain, in exact arithmetic, as the curator charges."""
    charged = [exact(v) ** 2 if budget.currency == "mu" else exact(v) for v in values]
    return max(
        sum((c for q, c in zip(queries, charged, strict=True) if covers(q, x)), Fraction(0))
        for x in POINTS
    )


@st.composite
def small_query(draw):
    covs = {}
    if draw(st.booleans()):
        lo = draw(st.integers(0, 3))
        covs["a"] = ((lo, draw(st.integers(lo + 1, 4))),)
    if draw(st.booleans()):
        vals = draw(st.sets(st.integers(0, 2), min_size=1, max_size=3))
        covs["b"] = tuple((v, v + 1) for v in sorted(vals))
    if draw(st.booleans()):
        lo = draw(st.integers(0, 2))
        covs["c"] = ((lo, draw(st.integers(lo + 1, 3))),)
    return covs


@st.composite
def small_workload(draw):
    covs = draw(st.lists(small_query(), min_size=1, max_size=7))
    qs = [Query.from_coverages(SMALL, dict(c), line=i + 1) for i, c in enumerate(covs)]
    weights = draw(st.lists(st.sampled_from([1.0, 0.5, 2.0]), min_size=len(qs), max_size=len(qs)))
    return qs, weights


BUDGETS = [PureDP(1.0), ZCDP(0.5), GDP(1.0), ApproxDP(1.0, 1e-6)]


def test_round_down_is_short_and_below() -> None:
    rng = np.random.default_rng(0)
    for x in np.exp(rng.uniform(-25, 5, 2000)):
        r = round_down(float(x))
        assert Fraction(repr(r)) <= Fraction(float(x))
        assert r >= x * (1 - 1e-5)
        assert len(repr(r).replace("0.", "").lstrip("0").split("e")[0].replace(".", "")) <= 6
    with pytest.raises(InvalidParameter):
        round_down(0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_workload(), st.sampled_from(BUDGETS))
def test_order_and_exact_feasibility(wq, guarantee) -> None:
    """optimal <= uniform <= sequential in expected squared error, and every plan's
    worst point stays within the budget in exact arithmetic (brute force)."""
    qs, w = wq
    plans = {
        a: direct_plan(qs, w, guarantee, a, time_limit=10)
        for a in ("sequential", "uniform", "optimal")
    }
    sq = plans["optimal"].expected_sq
    assert sq["optimal"] <= sq["uniform"] * (1 + 1e-9)
    assert sq["uniform"] <= sq["sequential"] * (1 + 1e-9)
    for p in plans.values():
        assert brute_max(qs, p.values, p.budget) <= Fraction(p.budget.amount)
        assert p.guarantee.within_budget
        if isinstance(guarantee, ApproxDP):
            assert p.guarantee.epsilon <= guarantee.epsilon


@settings(max_examples=25, deadline=None)
@given(small_workload(), st.sampled_from([PureDP(1.0), ZCDP(0.5)]))
def test_optimal_matches_brute_force_program(wq, guarantee) -> None:
    """Against the program with every point's constraint listed (SLSQP on log costs)."""
    qs, w = wq
    w = np.asarray(w)
    b = PlanBudget.of(guarantee)
    live = [i for i, q in enumerate(qs) if not q.is_empty]
    if not live:
        return
    A = np.array([[1.0 if covers(qs[i], x) else 0.0 for i in live] for x in POINTS])
    A = A[A.any(axis=1)]
    p, a = b.exponent, b.coefficient

    def f(u):
        return float(np.sum(w[live] * a * np.exp(-p * u)))

    cons = {"type": "ineq", "fun": lambda u: b.amount - A @ np.exp(u)}
    best = math.inf
    for start in (np.log(b.amount / len(live)), np.log(b.amount / 2)):
        r = minimize(
            f,
            np.full(len(live), start),
            constraints=[cons],
            method="SLSQP",
            options={"maxiter": 500, "ftol": 1e-14},
        )
        if r.success and np.all(A @ np.exp(r.x) <= b.amount * (1 + 1e-7)):
            best = min(best, r.fun)
    alloc = optimal(qs, w, b, groups=np.arange(len(qs)), time_limit=10)
    got = float(np.sum(w[live] * a / alloc.costs[live] ** p))
    if math.isfinite(best):
        assert got <= best * (1 + 2e-3)
    assert alloc.lower_bound <= got * (1 + 1e-9)


def test_marginals_closed_form() -> None:
    """k marginal tables with n_k cells: every point is in one cell of each, so the
    optimum gives table k a cost proportional to n_k^(1/3) (Laplace) or n_k^(1/2)
    (Gaussian): objective a S^3 / B^2 with S = sum n_k^(1/3), a (sum sqrt n_k)^2 / B."""
    wl = parse_workload(
        "marginal(sex, race)\nmarginal(education, income)\nhistogram(occupation)\nhistogram(income)",
        ADULT,
    )
    n = np.array([10, 32, 15, 2])  # sex x race, education x income, occupation, income
    for g, expected in (
        (PureDP(1.0), 2.0 * np.sum(n ** (1 / 3)) ** 3),
        (ZCDP(1.0), 0.5 * np.sum(np.sqrt(n)) ** 2),
    ):
        b = PlanBudget.of(g)
        o = optimal(wl.queries, wl.weights, b)
        assert o.objective == pytest.approx(expected, rel=1e-6)
        u = uniform(wl.queries, wl.weights, b)
        s = sequential(wl.queries, wl.weights, b)
        assert o.objective < u.objective < s.objective


def test_all_two_way_marginals_gain() -> None:
    attrs = [
        "workclass",
        "education",
        "marital-status",
        "occupation",
        "relationship",
        "race",
        "sex",
        "income",
    ]
    text = "\n".join(f"marginal({x}, {y})" for x, y in itertools.combinations(attrs, 2))
    wl = parse_workload(text, ADULT)
    p = direct_plan(wl.queries, wl.weights, PureDP(1.0), "optimal", objective="total")
    assert p.gamma == 28 and p.gamma_exact
    e = p.expected_abs
    assert e["sequential"] >= 10 * e["uniform"] and e["optimal"] < e["uniform"]
    r = max_overlap(wl.queries, weights=list(p.additive_costs()))
    assert r.exact and r.value <= 1.0
    # the default (per-table): every point is in one cell of each table, so each table
    # weighs the same and the optimum is the equal split, 1/28 a table
    d = direct_plan(wl.queries, wl.weights, PureDP(1.0), "optimal")
    assert d.objective == "per-table"
    assert np.allclose(d.values, 1 / 28, rtol=1e-5) and max(d.values) <= 1 / 28
    worst = {k: max(n.variance() for n in q.noises) for k, q in (("total", p), ("default", d))}
    assert worst["default"] < worst["total"] / 4


def per_table_error(plan, allocation: str) -> float:
    """The per-table objective of one of ``plan``'s allocations, from scratch: the sum
    over workload lines of the mean exact variance of the line's answers (as charged)."""
    b = plan.budget
    var = [b.noise(b.value(float(c))).variance() for c in plan.allocations[allocation].costs]
    lines: dict[int, list[float]] = {}
    for q, v in zip(plan.queries, var, strict=True):
        lines.setdefault(q.line, []).append(v)
    return math.fsum(math.fsum(v) / len(v) for v in lines.values())


def test_guarantees_by_budget_kind() -> None:
    wl = parse_workload((ROOT / "examples" / "adult" / "mixture.txt").read_text(), ADULT)
    for g in BUDGETS:
        p = direct_plan(wl.queries, wl.weights, g, "optimal")  # per-table
        fin = p.guarantee
        assert fin.within_budget and fin.certified
        if isinstance(g, PureDP):
            assert fin.epsilon <= 1.0
        elif isinstance(g, ZCDP):
            assert fin.rho <= 0.5
        elif isinstance(g, GDP):
            assert fin.mu <= 1.0
        else:
            assert fin.epsilon <= 1.0 and fin.delta == 1e-6
            alt = p.alternative
            assert alt is not None and alt["epsilon_per_query"] >= 1.0 / p.gamma * (1 - 1e-5)
        # per-table is never worse than uniform on its own objective (here every line
        # covers each point once, so they coincide), and both beat sequential
        assert per_table_error(p, "optimal") <= per_table_error(p, "uniform") * (1 + 1e-5)
        assert per_table_error(p, "uniform") < per_table_error(p, "sequential") / 10
        assert p.expected_abs["uniform"] < p.expected_abs["sequential"]
        t = direct_plan(wl.queries, wl.weights, g, "optimal", objective="total")
        assert t.guarantee.within_budget and t.guarantee.certified
        assert t.expected_abs["optimal"] < t.expected_abs["uniform"]


def test_available_budget_and_refusal() -> None:
    wl = parse_workload("histogram(sex)\ntotal", ADULT)
    p = direct_plan(wl.queries, wl.weights, PureDP(1.0), "uniform", available=0.5)
    assert sum(p.values[:1]) + p.values[-1] <= 0.5
    with pytest.raises(BudgetExceeded):
        direct_plan(wl.queries, wl.weights, PureDP(1.0), "uniform", available=1e-12)
    with pytest.raises(InvalidParameter):
        direct_plan(wl.queries, wl.weights, PureDP(1.0), "best")
    with pytest.raises(InvalidParameter):
        direct_plan([], None, PureDP(1.0))


def test_consistent_total_equals_breakdowns() -> None:
    wl = parse_workload("total\nhistogram(sex)\nmarginal(sex, income)\nhistogram(income)", ADULT)
    rng = np.random.default_rng(3)
    y = rng.normal(100, 10, len(wl))
    v = rng.uniform(1, 5, len(wl))
    c = consistent(wl.queries, y, v)
    # total; sex (2 values); sex x income (4 cells); income (2)
    assert c[0] == pytest.approx(c[1:3].sum(), abs=1e-6)
    assert c[0] == pytest.approx(c[3:7].sum(), abs=1e-6)
    assert c[0] == pytest.approx(c[7:9].sum(), abs=1e-6)
    # a projection: applying it again changes nothing
    assert consistent(wl.queries, c, v) == pytest.approx(c, abs=1e-6)
    # already consistent answers are kept
    truth = np.array([10.0, 6, 4, 3, 3, 1, 3, 4, 6])
    assert consistent(wl.queries, truth, v) == pytest.approx(truth, abs=1e-6)


def test_consistent_too_many_cells() -> None:
    big = Schema.from_dict(
        {
            "attributes": [
                {"name": f"x{i}", "type": "integer", "min": 0, "max": 99} for i in range(4)
            ]
        }
    )
    wl = parse_workload("marginal(x0, x1)\nmarginal(x2, x3)", big)
    with pytest.raises(InvalidParameter, match="cells"):
        cells_matrix(wl.queries)


def test_objectives_per_table_and_max() -> None:
    """per-table: each workload line weighs the same, so a small table no longer starves
    next to a big one; max: the largest expected error is the equal split's, and no
    other allocation has a smaller largest error."""
    wl = parse_workload("marginal(sex, income)\nmarginal(education, occupation)", ADULT)
    small = np.array([q.line == 1 for q in wl.queries])
    plans = {
        o: direct_plan(wl.queries, wl.weights, PureDP(1.0), "optimal", objective=o)
        for o in ("total", "per-table", "max")
    }
    cost = {o: np.array(p.values) for o, p in plans.items()}
    assert cost["per-table"][small].min() > cost["total"][small].max()
    for p in plans.values():
        assert p.guarantee.within_budget
    worst = {o: max(n.expected_abs() for n in p.noises) for o, p in plans.items()}
    assert worst["max"] <= worst["total"] and worst["max"] <= worst["per-table"]
    assert len(set(cost["max"].round(12))) == 1  # the equal split
    # symmetric tables (every point in one cell of each): per-table is the equal split
    sym = parse_workload("marginal(sex, race)\nmarginal(education, income)", ADULT)
    p = direct_plan(sym.queries, sym.weights, PureDP(1.0), "optimal", objective="per-table")
    assert np.ptp(np.array(p.values)) < 1e-6 * max(p.values)
    with pytest.raises(InvalidParameter, match="objective"):
        direct_plan(sym.queries, sym.weights, PureDP(1.0), "optimal", objective="fair")


# --- the per-table objective (the default) --------------------------------------------------

#: Workload lines on the small domain: tables (one cell per point) and single queries.
LINES = [
    "histogram(a)",
    "histogram(b)",
    "histogram(c)",
    "marginal(a, b)",
    "marginal(b, c)",
    "a < 2",
    "a >= 2",
    "b = 'x'",
    "c >= 1",
    "a >= 1 AND c < 2",
    "b != 'z' AND a < 3",
    "total",
]


def line_errors(plan, line_ids) -> float:
    """sum over ``line_ids`` of the mean model variance a / c^p of the line's answers,
    from the costs as charged."""
    b = plan.budget
    per_line: dict[int, list[float]] = {}
    for q, c in zip(plan.queries, plan.additive_costs(), strict=True):
        per_line.setdefault(q.line, []).append(b.coefficient / c**b.exponent)
    return math.fsum(math.fsum(per_line[ln]) / len(per_line[ln]) for ln in line_ids)


def test_default_objective_is_per_table() -> None:
    wl = parse_workload("marginal(a, b)\nhistogram(c)\na < 2", SMALL)
    default = direct_plan(wl.queries, wl.weights, PureDP(1.0))
    assert default.objective == "per-table" and default.allocation.name == "optimal"
    per = direct_plan(wl.queries, wl.weights, PureDP(1.0), objective="per-table")
    total = direct_plan(wl.queries, wl.weights, PureDP(1.0), objective="total")
    assert default.values == per.values
    # the lines cover every point of a < 2 once each: per-table is the equal split,
    # total gives the 12-cell table more than the 1-query line
    assert np.allclose(default.values, 1 / 3, rtol=1e-5)
    assert total.values[0] > 1.5 * total.values[-1]
    assert OBJECTIVES == ("total", "per-table", "max")


@pytest.mark.parametrize("guarantee", [PureDP(1.0), ZCDP(0.5)])
def test_per_table_closed_form(guarantee) -> None:
    """Lines "a < 2", "a >= 2" (one query each) and a table T: the points a < 2 hold
    the first and T, the others the second and T. per-table minimises x^-p + x^-p +
    (B - x)^-p (T's cells all cost the same): x / (B - x) = 2^(1/(p+1)), whatever T's
    cell count, while total weighs T by its n cells: x / (B - x) = (2/n)^(1/(p+1)).
    Swapping histogram(b) (3 cells) for the single query b = 'x' changes nothing for
    per-table (each line weighs the same), but changes total."""
    b = PlanBudget.of(guarantee)
    B, p = b.amount, b.exponent
    for table, n in (("histogram(b)", 3), ("b = 'x'", 1), ("marginal(b, c)", 9)):
        wl = parse_workload(f"a < 2\na >= 2\n{table}", SMALL)
        assert len(wl) == 2 + n
        for objective, ratio in (("per-table", 2.0), ("total", 2.0 / n)):
            plan = direct_plan(wl.queries, wl.weights, guarantee, objective=objective)
            x = B * ratio ** (1 / (p + 1)) / (1 + ratio ** (1 / (p + 1)))
            c = plan.additive_costs()
            assert c[0] == pytest.approx(x, rel=1e-4) and c[1] == pytest.approx(x, rel=1e-4)
            assert c[2:] == pytest.approx(B - x, rel=1e-4)
            assert brute_max(wl.queries, plan.values, plan.budget) <= Fraction(B)
            gap = plan.allocation.objective / plan.allocation.lower_bound - 1
            assert -1e-9 <= gap <= 1e-4


@st.composite
def line_workload(draw):
    lines = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=5, unique=True))
    return parse_workload("\n".join(lines), SMALL)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line_workload(), st.sampled_from([PureDP(1.0), ZCDP(0.5)]))
def test_per_table_matches_brute_force(wl, guarantee) -> None:
    """The default plan against the per-table program with every point's constraint
    listed (one cost per line, SLSQP on log costs): each line's mean error counts once."""
    b = PlanBudget.of(guarantee)
    qs = wl.queries
    plan = direct_plan(qs, wl.weights, guarantee, time_limit=10)
    assert plan.objective == "per-table"
    line_ids = sorted({q.line for q in qs if not q.is_empty})
    if not line_ids:
        return
    # A[x, l]: how many of line l's queries cover point x
    A = np.array(
        [[sum(1 for q in qs if q.line == ln and covers(q, x)) for ln in line_ids] for x in POINTS],
        float,
    )
    A = A[A.any(axis=1)]
    p, a = b.exponent, b.coefficient

    def f(u):
        return float(np.sum(a * np.exp(-p * u)))  # each line: one cost, its mean error

    cons = {"type": "ineq", "fun": lambda u: b.amount - A @ np.exp(u)}
    best = math.inf
    for start in (np.log(b.amount / len(line_ids)), np.log(b.amount / 2)):
        r = minimize(
            f,
            np.full(len(line_ids), start),
            constraints=[cons],
            method="SLSQP",
            options={"maxiter": 500, "ftol": 1e-14},
        )
        if r.success and np.all(A @ np.exp(r.x) <= b.amount * (1 + 1e-7)):
            best = min(best, r.fun)
    got = line_errors(plan, line_ids)
    if math.isfinite(best):
        assert got <= best * (1 + 2e-3)
    assert brute_max(qs, plan.values, plan.budget) <= Fraction(b.amount)
    # and it is the best of the three objectives on its own measure
    total = direct_plan(qs, wl.weights, guarantee, objective="total", time_limit=10)
    got_total = line_errors(total, line_ids)
    assert got <= got_total * (1 + 1e-4)


def test_compare_objectives_each_best_on_its_own_measure() -> None:
    """compare_objectives: sequential, uniform, then optimal for total, per-table and max;
    each objective's allocation is the best (of these) on its own measure."""
    wl = parse_workload(
        "marginal(sex, income)\nmarginal(education, occupation)\nage < 30\nage >= 30",
        ADULT,
    )
    plan = direct_plan(wl.queries, wl.weights, PureDP(1.0))
    es = compare_objectives(plan)
    assert [e.label for e in es] == [
        "sequential",
        "uniform",
        "optimal (total)",
        "optimal (per-table)",
        "optimal (max)",
    ]
    by = {e.label: e for e in es}
    measure = {"total": "total", "per-table": "per_table", "max": "worst"}
    for o, attr in measure.items():
        mine = getattr(by[f"optimal ({o})"], attr)
        for e in es:
            assert mine <= getattr(e, attr) * (1 + 1e-4), (o, e.label)
    # the plan's own allocation is reused, the variances are the exact discrete ones
    per = by["optimal (per-table)"]
    assert list(per.variances) == [n.variance() for n in plan.noises]
    assert per.line(1) == pytest.approx(per.variances[0])
    assert per.per_table == pytest.approx(per_table_error(plan, "optimal") / 4)
    assert by["optimal (max)"].gap == 0.0 and 0 <= per.gap <= 1e-4
    # total starves the small table, per-table does not
    assert by["optimal (total)"].line(1) > 2 * per.line(1)
    d = per.to_dict(1)
    assert d["objective"] == "per-table" and d["line_squared_error"] == per.line(1)
