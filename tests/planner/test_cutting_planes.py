"""The optimal split's cutting-plane search (planner/allocation.py::optimal): the same
optimum whichever way violated points are found (the float segment grid, or the exact
overlap solver's witness), a dual bound below the program with every point's constraint
listed, and a plan certified by the exact solver even when the search is misled."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.planner import PlanBudget, allocation, barrier, cuts, optimal, uniform
from dpcurator.privacy import ZCDP, PureDP
from dpcurator.queries import BooleanQuery, Query, Schema
from dpcurator.queries.overlap import dense

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 4},
            {"name": "b", "type": "categorical", "values": ["x", "y", "z"]},
            {"name": "c", "type": "integer", "min": 0, "max": 3},
        ]
    }
)
NAMES = ("a", "b", "c")
POINTS = list(itertools.product(range(5), range(3), range(4)))


def covers(q, point) -> bool:
    return q.covers({n: SCHEMA.attribute(n).value(v) for n, v in zip(NAMES, point, strict=True)})


@st.composite
def box(draw):
    covs = {}
    for name, size in (("a", 5), ("b", 3), ("c", 4)):
        if draw(st.booleans()):
            lo = draw(st.integers(0, size - 1))
            covs[name] = ((lo, draw(st.integers(lo + 1, size))),)
    return covs


@st.composite
def workload(draw):
    """Boxes and a few unions of boxes, on lines of one to three queries."""
    qs = []
    for line in range(1, draw(st.integers(2, 7)) + 1):
        for _ in range(draw(st.integers(1, 3))):
            parts = draw(st.lists(box(), min_size=1, max_size=2))
            q = BooleanQuery.from_boxes(SCHEMA, parts, line=line)
            qs.append(q)
    return qs


def exact_max_load(qs, costs) -> Fraction:
    """gamma_w of the costs by enumerating every point, in exact arithmetic."""
    return max(
        sum(
            (Fraction(float(c)) for q, c in zip(qs, costs, strict=True) if covers(q, x)),
            Fraction(0),
        )
        for x in POINTS
    )


def program_optimum(qs, w, budget: PlanBudget) -> float:
    """The program with every point's constraint listed, one cost per line, solved to
    a relative gap of 1e-10 (its value is an upper bound on the optimum)."""
    g = allocation.groups_of(qs)
    live = np.zeros(g.max() + 1, bool)
    np.logical_or.at(live, g, [not q.is_empty for q in qs])
    rows = []
    for x in POINTS:
        row = np.zeros(len(live))
        for i, q in enumerate(qs):
            if covers(q, x):
                row[g[i]] += 1
        if row.any():
            rows.append(row[live])
    B = budget.amount * (1 - allocation.SAFETY)
    p, a = budget.exponent, budget.coefficient
    K = np.zeros(len(live))
    np.add.at(K, g, np.asarray(w) * a / B**p)
    R = np.array(rows)
    start = np.full(int(live.sum()), 0.5 / R.sum(axis=1).max())
    return barrier.solve(K[live], p, R, start, rel_gap=1e-10).value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload(), st.sampled_from([PureDP(1.0), ZCDP(0.5)]))
def test_grid_and_witness_searches_agree_with_the_full_program(qs, g) -> None:
    b = PlanBudget.of(g)
    w = np.ones(len(qs))
    if all(q.is_empty for q in qs):
        return
    best = program_optimum(qs, w, b)
    got = {}
    for limit in (cuts.GRID_LIMIT, 0):  # 0: no grid, the exact solver's witness
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cuts, "GRID_LIMIT", limit)
            a = optimal(qs, w, b, time_limit=10)
        assert exact_max_load(qs, a.costs) <= Fraction(b.amount)
        assert a.exact
        assert a.lower_bound <= best * (1 + 1e-9)
        assert a.objective <= best * (1 + 1e-4) and a.objective >= a.lower_bound
        got[limit] = a.objective
    assert got[0] == pytest.approx(got[cuts.GRID_LIMIT], rel=2e-4)


@pytest.mark.parametrize("g", [PureDP(1.0), ZCDP(0.5)])
@pytest.mark.parametrize("factor", [0.5, 0.9, 1.5])
def test_a_misleading_grid_never_makes_an_infeasible_plan(monkeypatch, g, factor) -> None:
    """The grid's loads only steer the search: scaled wrong (as float error could, far
    more), the plan is still certified by the exact solver, within the budget at every
    point, and the dual bound (independent of the grid) stays below the optimum."""
    qs = [
        Query.from_coverages(SCHEMA, {"a": ((0, k + 1),), "c": ((k % 4, 4),)}, line=k + 1)
        for k in range(5)
    ] + [Query.from_coverages(SCHEMA, {"b": ((1, 3),)}, line=6)]
    w = np.ones(len(qs))
    b = PlanBudget.of(g)
    best = program_optimum(qs, w, b)
    true_loads = dense.SegmentGrid.loads
    monkeypatch.setattr(
        dense.SegmentGrid, "loads", lambda self, weights: factor * true_loads(self, weights)
    )
    a = optimal(qs, w, b, time_limit=10, start=uniform(qs, w, b))
    assert exact_max_load(qs, a.costs) <= Fraction(b.amount)
    assert a.exact and a.lower_bound <= best * (1 + 1e-9)
    assert a.objective >= best * (1 - 1e-9)


def test_ranges_example_is_solved_in_few_rounds() -> None:
    """The shipped 100 range queries on three attributes: the grid finds many cuts a
    round (the search needed 37 rounds with one cut each)."""
    from pathlib import Path

    from dpcurator.queries import parse_workload

    root = Path(__file__).resolve().parents[2]
    schema = Schema.load(root / "examples" / "adult" / "schema.json")
    wl = parse_workload(root / "examples" / "adult" / "ranges.txt", schema)
    a = optimal(wl.queries, wl.weights, PlanBudget.of(PureDP(1.0)))
    assert a.exact and a.rounds <= 15
    assert 0 <= a.objective / a.lower_bound - 1 <= 1e-4


@st.composite
def boxes(draw):
    """Queries of one box each (some empty), on one to three attributes."""
    qs = []
    for line in range(1, draw(st.integers(2, 9)) + 1):
        covs = draw(box())
        if draw(st.integers(0, 9)) == 0:
            covs = {"a": ()}  # a contradiction: covers nothing
        qs.append(Query.from_coverages(SCHEMA, covs, line=line))
    return qs


@settings(max_examples=60, deadline=None)
@given(boxes(), st.lists(st.floats(0, 1), min_size=9, max_size=9), st.floats(0, 1.5))
def test_cliques_are_sets_of_points(qs, raw, floor) -> None:
    """Boxes meet exactly when they share a point, and every clique cut is within one
    point's set of queries (Helly for boxes): its constraint is one of the program's."""
    meet = cuts._box_intersections(qs)
    assert meet is not None
    for i, j in itertools.product(range(len(qs)), repeat=2):
        assert meet[i, j] == any(covers(qs[i], x) and covers(qs[j], x) for x in POINTS)
    costs = np.array(raw[: len(qs)])
    load, sets = cuts._cliques(meet, costs, floor, slack=1e-6)
    assert load <= float(exact_max_load(qs, costs)) * (1 + 1e-12)
    for s in sets:
        assert s.any() and any(all(covers(q, x) for q in np.array(qs)[s]) for x in POINTS)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxes(), st.sampled_from([PureDP(1.0), ZCDP(0.5)]))
def test_clique_search_agrees_with_the_full_program(qs, g) -> None:
    """Without the grid, boxes are cut by cliques: the same certified optimum."""
    b = PlanBudget.of(g)
    w = np.ones(len(qs))
    if all(q.is_empty for q in qs):
        return
    best = program_optimum(qs, w, b)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuts, "GRID_LIMIT", 0)
        a = optimal(qs, w, b, time_limit=10)
    assert exact_max_load(qs, a.costs) <= Fraction(b.amount)
    assert a.exact and a.lower_bound <= best * (1 + 1e-9)
    live = np.array([not q.is_empty for q in qs])  # an empty query's term is free
    got = allocation._objective(a.costs[live], w[live], b)
    assert best * (1 - 1e-9) <= got <= best * (1 + 1e-4)


def test_a_request_deadline_stops_the_search() -> None:
    """Past a request's deadline the clique search and the rounds stop with Undecided
    (planning comes before any charge: nothing is charged)."""
    import time

    from dpcurator import deadlines
    from dpcurator.errors import Undecided

    qs = [
        Query.from_coverages(SCHEMA, {"a": ((k % 5, 5),), "c": ((0, k % 4 + 1),)}, line=k + 1)
        for k in range(8)
    ]
    meet = cuts._box_intersections(qs)
    assert meet is not None
    with deadlines.within(deadlines.Deadline.after(1e-6)):
        time.sleep(0.01)
        with pytest.raises(Undecided):
            cuts._cliques(meet, np.ones(len(qs)), 0.0, 1e-6)
        with pytest.raises(Undecided):
            optimal(qs, np.ones(len(qs)), PlanBudget.of(PureDP(1.0)))


def test_large_workloads_are_not_cut_by_cliques(monkeypatch) -> None:
    """Beyond CLIQUE_QUERIES the intersection graph (n^2 bytes) is not built."""
    monkeypatch.setattr(cuts, "GRID_LIMIT", 0)
    qs = [Query.from_coverages(SCHEMA, {"a": ((0, k % 5 + 1),)}, line=k + 1) for k in range(6)]
    assert cuts.Separator(qs, 1e-6).meet is not None
    monkeypatch.setattr(cuts, "CLIQUE_QUERIES", 5)
    assert cuts.Separator(qs, 1e-6).meet is None
