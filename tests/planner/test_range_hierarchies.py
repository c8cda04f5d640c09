"""Range hierarchies with per-node costs (planner/strategies/blocks.py and the tree
strategy): the two-level dynamic program against brute force over every partition with a
dense least-squares objective, per-point charges against brute force over the domain in
exact fractions (each measurement charged on its region only), the node estimator against
a dense least-squares solve, and the reported variances against simulation."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.planner import make_plan
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import blocks as bl
from dpcurator.planner.strategies import ranges as rg
from dpcurator.planner.strategies.costs import precision
from dpcurator.planner.strategies.domain import atom_domain
from dpcurator.privacy import GDP, ZCDP, PureDP
from dpcurator.privacy.filters import exact
from dpcurator.queries import Query, Schema, parse_workload_text

AGES = Schema.from_dict({"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 39}]})
ALL_RANGES = "\n".join(f"age BETWEEN {a} AND {b}" for a in range(40) for b in range(a, 40))


def dense_objective(om: np.ndarray, blocks, costs, budget: float, currency: str) -> float:
    """tr(Omega X^-1) with X built densely from every node of the two-level hierarchy."""
    d = om.shape[0]
    seg_cost = np.full(d, budget)
    rows, prec = [], []
    for (s, e), c in zip(blocks, costs, strict=True):
        seg_cost[s:e] = budget - c
        row = np.zeros(d)
        row[s:e] = 1.0
        rows.append(row)
        prec.append(precision(np.array([c]), currency)[0])
    a = np.vstack([np.eye(d), *rows]) if rows else np.eye(d)
    w = np.concatenate([precision(seg_cost, currency), prec])
    return float(np.trace(om @ np.linalg.inv((a.T * w) @ a)))


def partitions(d: int):
    """Every partition of range(d) into runs, as [start, end) blocks of size >= 2."""
    for cuts in itertools.product([0, 1], repeat=d - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [d]
        yield [(s, e) for s, e in itertools.pairwise(bounds) if e - s >= 2]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 7),
    st.integers(0, 2**32 - 1),
    st.sampled_from([("epsilon", 1.0), ("epsilon", 0.3), ("rho", 0.5), ("mu", 2.0)]),
)
def test_two_level_dp_is_the_family_optimum(d, seed, cur_budget):
    """Against every partition into blocks, each block's cost minimised on its own by a
    bounded scalar search of the dense objective (the family is separable by blocks)."""
    currency, budget = cur_budget
    rng = np.random.default_rng(seed)
    w = np.zeros((int(rng.integers(1, 12)), d))
    for row in w:  # random weighted ranges
        s = int(rng.integers(0, d))
        row[s : int(rng.integers(s + 1, d + 1))] = 1.0
    om = (w * rng.uniform(0.1, 3.0, len(w))[:, None]).T @ w + 1e-3 * np.eye(d)
    got = bl.optimal_two_level(om, budget, currency)
    mine = dense_objective(om, got.blocks, got.costs, budget, currency)
    assert mine == pytest.approx(got.objective, rel=1e-9)
    best = np.inf
    for blocks in partitions(d):
        costs = []
        for s, e in blocks:
            sub = np.zeros_like(om)
            sub[s:e, s:e] = om[s:e, s:e]

            def f(c, s=s, e=e, sub=sub):
                return dense_objective(sub, [(s, e)], [c], budget, currency)

            r = minimize_scalar(
                f, bounds=(0.0, budget * (1 - 1e-9)), method="bounded", options={"xatol": 1e-12}
            )
            costs.append(r.x if r.fun < f(0.0) else 0.0)
        best = min(best, dense_objective(om, blocks, costs, budget, currency))
    assert got.objective <= best * (1 + 1e-7)
    assert got.objective >= best * (1 - 1e-7)


def test_all_ages_two_level_beats_every_tree():
    """All 820 ranges of 40 ages at epsilon = 1: the chosen hierarchy is the two-level
    one, better than every b-ary tree with per-level costs and the histogram (and the
    weighted p-Identity rows better still, so ``auto`` picks them)."""
    wl = parse_workload_text(ALL_RANGES, AGES)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="total")
    tree = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="total", strategy="tree")
    assert "two levels" in tree.strategy.detail
    by = {c.name: c.objective for c in plan.candidates}
    assert by["tree"] < by["identity"] and by["tree"] < by["marginals"]
    assert plan.strategy_name == "p-identity" and by["p-identity"] < by["tree"]


@pytest.mark.parametrize("guarantee", [PureDP(1.0), PureDP(0.4), ZCDP(0.5), GDP(1.0)])
def test_per_point_charges_with_regions_brute_force(guarantee):
    """Each measurement's cells are disjoint, their union is its region, and at every
    point the exact costs of the measurements whose region covers it sum to at most the
    budget (what the curator's filter charges)."""
    wl = parse_workload_text(ALL_RANGES, AGES)
    plan = make_plan(wl.queries, wl.weights, guarantee, strategy="tree", objective="total")
    sp = plan.strategy
    budget = PlanBudget.of(guarantee)
    regional = False
    for age in range(40):
        point = {"age": age}
        loss = Fraction(0)
        for m in sp.measurements:
            inside = sum(Query.from_coverages(AGES, c).covers(point) for c in m.cells)
            region = Query.from_coverages(AGES, dict(m.region))
            assert inside == region.covers(point)  # disjoint cells, their union the region
            if region.covers(point):
                v = exact(m.value)
                loss += v * v if budget.currency == "mu" else v
            regional |= bool(m.region)
        assert loss <= Fraction(budget.amount)
    assert plan.guarantee.within_budget and plan.guarantee.certified
    if isinstance(guarantee, PureDP) and guarantee.epsilon == 1.0:
        assert regional  # the two-level hierarchy: charges on parts of the domain


def test_node_estimator_matches_dense_least_squares():
    """The answers and variances of a two-level plan (overlapping nodes) against a dense
    weighted least-squares solve over the segments."""
    wl = parse_workload_text(ALL_RANGES + "\nage = 3 OR age = 30", AGES)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="tree", objective="total")
    sp = plan.strategy
    rows, wt = [], []
    for m in sp.measurements:
        for c in m.cells:
            ((lo, hi),) = c["age"]
            row = np.zeros(40)
            row[lo:hi] = 1.0
            rows.append(row)
            wt.append(1.0 / m.noise.variance())
    a, wt = np.array(rows), np.array(wt)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, 40).astype(float)
    y = a @ x + rng.normal(0, 3, len(a))
    xhat = np.linalg.solve((a.T * wt) @ a, a.T @ (wt * y))
    dom = atom_domain(wl.queries, merge=False)
    model = rg.range_model(dom, ())
    dense_w = np.array([model.queries[k] if k >= 0 else np.zeros(40) for k in model.profile_of])
    arrays, start = [], 0
    for m in sp.measurements:
        arrays.append(y[start : start + len(m.cells)])
        start += len(m.cells)
    np.testing.assert_allclose(sp.reconstruct(arrays), dense_w @ xhat, rtol=1e-9, atol=1e-9)
    cov = np.linalg.inv((a.T * wt) @ a)
    want = np.einsum("ij,jk,ik->i", dense_w, cov, dense_w)
    np.testing.assert_allclose(sp.variances, want, rtol=1e-9)


def test_two_level_variances_match_simulation():
    """3,000 simulated releases with the exact discrete noise (seeded): every answer's
    mean squared error, and their total, within 5 standard errors of the reported
    variance (the standard error estimated from the same draws: a Laplace error's square
    has a heavy tail, so a fixed 10% would be too tight for some of 820 answers and too
    loose for their total)."""
    wl = parse_workload_text(ALL_RANGES, AGES)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="tree", objective="total")
    sp = plan.strategy
    rng = SeededRandomSource(11)
    sq = []
    for _ in range(3000):
        noisy = [np.atleast_1d(m.noise.sample(size=len(m.cells), rng=rng)) for m in sp.measurements]
        sq.append(sp.reconstruct(noisy) ** 2)  # the truth is 0: the error itself
    sq = np.array(sq)
    se = sq.std(axis=0, ddof=1) / np.sqrt(len(sq))
    assert np.all(np.abs(sq.mean(axis=0) - sp.variances) <= 5 * se)
    totals = sq.sum(axis=1)
    se_total = totals.std(ddof=1) / np.sqrt(len(totals))
    assert abs(totals.mean() - sp.variances.sum()) <= 5 * se_total
    assert se_total < 0.05 * sp.variances.sum()  # the check can fail: it is not too loose
