"""Strategies: the residual-basis variances and reconstruction against a dense
least-squares solve on small domains, the b-ary tree against the same, per-point charges
against brute force over the domain, reported variances against simulation, the choice
never worse than direct, and hostile strategy names."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.planner import make_plan, objective_weights
from dpcurator.planner.allocation import groups_of
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import marginals as mg
from dpcurator.planner.strategies import ranges as rg
from dpcurator.planner.strategies import structured
from dpcurator.planner.strategies.domain import atom_domain
from dpcurator.privacy import GDP, ZCDP, PureDP
from dpcurator.privacy.filters import exact
from dpcurator.queries import Query, Schema, parse_workload_text

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 5},
            {"name": "b", "type": "categorical", "values": ["x", "y", "z"]},
            {"name": "c", "type": "integer", "min": 0, "max": 2},
        ]
    }
)

MIXED = """a BETWEEN 1 AND 3
a >= 2 AND b = 'x'
b IN ('x', 'y') OR c = 1
histogram(b)
marginal(a, c)
c = 2 AND a <= 1
total
a = 0 AND a = 1
"""


def _dense_queries(dom, n_queries):
    sizes = dom.sizes
    rows = []
    for q in range(n_queries):
        v = np.zeros(sizes)
        for b in dom.boxes[q]:
            t = np.ones(1)
            for i in range(dom.d):
                t = np.multiply.outer(t, dom.vector(i, b[i]))
            v += t.reshape(sizes)
        rows.append(v.ravel())
    return np.array(rows)


def _marginal_matrix(dom, mask):
    a = np.ones((1, 1))
    for i in range(dom.d):
        n = dom.sizes[i]
        a = np.kron(a, np.eye(n) if mask >> i & 1 else np.ones((1, n)))
    return a


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_marginals_match_dense_least_squares(seed):
    """Variances sum_T ||P_T q||^2 / lambda_T and the per-residual reconstruction equal
    the dense generalised least-squares solve (pseudo-inverse) on the atom domain."""
    wl = parse_workload_text(MIXED, SCHEMA)
    dom = atom_domain(wl.queries)
    model = mg.marginals_model(dom)
    rng = np.random.default_rng(seed)
    keep = rng.random(len(model.subsets)) < 0.5
    keep[-1] = True  # the full table: every query answerable
    sub = mg.restricted(model, tuple(s for s, k in zip(model.subsets, keep, strict=True) if k))
    w = rng.uniform(0.2, 3.0, len(sub.subsets))
    mats = [_marginal_matrix(dom, s) for s in sub.subsets]
    gram = sum(wi * m.T @ m for wi, m in zip(w, mats, strict=True))
    pinv = np.linalg.pinv(gram)
    dense_w = _dense_queries(dom, len(wl.queries))
    dense_var = np.einsum("ij,jk,ik->i", dense_w, pinv, dense_w)
    prof = sub.variances(w)
    mine = np.array([prof[k] if k >= 0 else 0.0 for k in sub.profile_of])
    np.testing.assert_allclose(mine, dense_var, rtol=1e-9, atol=1e-12)
    x = rng.integers(0, 30, int(np.prod(dom.sizes))).astype(float)
    ys = {
        s: (m @ x + rng.normal(0, 1 / np.sqrt(wi), m.shape[0])).reshape(mg.table_shape(dom, s))
        for s, m, wi in zip(sub.subsets, mats, w, strict=True)
    }
    a = np.vstack(mats)
    wt = np.concatenate([np.full(m.shape[0], wi) for m, wi in zip(mats, w, strict=True)])
    y = np.concatenate([ys[s].ravel() for s in sub.subsets])
    xhat = np.linalg.pinv(a.T @ (wt[:, None] * a)) @ (a.T @ (wt * y))
    got = mg.reconstruct(sub, ys, dict(zip(sub.subsets, w, strict=True)))
    np.testing.assert_allclose(got, dense_w @ xhat, rtol=1e-9, atol=1e-8)
    assert got[-1] == 0.0  # the empty query


@pytest.mark.parametrize("b", [2, 3, 5])
def test_tree_matches_dense_least_squares(b):
    text = "\n".join(f"a BETWEEN {i} AND {j}" for i in range(6) for j in range(i, 6))
    text += "\na = 0 OR a = 5"
    wl = parse_workload_text(text, SCHEMA)
    dom = atom_domain(wl.queries, merge=False)
    levels = rg.tree_levels(dom.sizes[0], b)
    for lv in levels:  # every level partitions the segments
        assert sorted(i for s, e in lv for i in range(s, e)) == list(range(dom.sizes[0]))
    model = rg.range_model(dom, levels)
    rng = np.random.default_rng(b)
    w = rng.uniform(0.2, 3.0, len(levels))
    mats = [rg._matrix(lv, dom.sizes[0]) for lv in levels]
    a = np.vstack(mats)
    wt = np.concatenate([np.full(m.shape[0], wi) for m, wi in zip(mats, w, strict=True)])
    x = rng.integers(0, 30, dom.sizes[0]).astype(float)
    ys = [m @ x + rng.normal(0, 1, m.shape[0]) for m in mats]
    xhat = np.linalg.lstsq(np.sqrt(wt)[:, None] * a, np.sqrt(wt) * np.concatenate(ys), rcond=None)[
        0
    ]
    dense_w = _dense_queries(dom, len(wl.queries))
    np.testing.assert_allclose(rg.reconstruct(model, ys, w), dense_w @ xhat, rtol=1e-9)
    cov = np.linalg.inv(a.T @ (wt[:, None] * a))
    want = np.einsum("ij,jk,ik->i", dense_w, cov, dense_w)
    got = model.variances(w)[model.profile_of]
    np.testing.assert_allclose(got, want, rtol=1e-9)


def _points(schema):
    return itertools.product(*(range(a.size) for a in schema.attributes))


@pytest.mark.parametrize(
    ("text", "strategy", "guarantee"),
    [
        (MIXED, "marginals", PureDP(1.0)),
        (MIXED, "marginals", ZCDP(0.3)),
        (MIXED, "marginals", GDP(0.7)),
        (
            "\n".join(f"a BETWEEN {i} AND {j}" for i in range(6) for j in range(i, 6)),
            "tree",
            PureDP(0.5),
        ),
        (
            "\n".join(f"a BETWEEN {i} AND {j}" for i in range(6) for j in range(i, 6)),
            "identity",
            ZCDP(0.5),
        ),
    ],
)
def test_per_point_charges_brute_force(text, strategy, guarantee):
    """Every measurement's cells partition its region (each point in at most one cell),
    and at every point the loss computed from the rows' weights and each row's noise
    (brute force over the domain, in exact fractions) equals what the release's charges
    put on that point, and is within the budget (see test_weighted_measurements for
    weighted rows; here counting tables and residual measurements)."""
    wl = parse_workload_text(text, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, guarantee, strategy=strategy, objective="total")
    sp = plan.strategy
    assert sp is not None and sp.name == strategy
    assert_charges_brute_force(sp, SCHEMA, PlanBudget.of(guarantee))
    assert plan.guarantee.within_budget


def assert_charges_brute_force(sp, schema, budget):
    """At every point of ``schema``'s domain: the loss from the measurements' rows (for
    each row covering the point with weight k: |k| / scale for the discrete Laplace,
    k^2 / (2 sigma^2) for the discrete Gaussian, k^2 mu_u^2 under GDP) is at most, and in
    the additive unit equal to, the sum of the charges covering the point; and that sum
    is at most the budget."""
    cells = [[Query.from_coverages(schema, c) for c in m.cells] for m in sp.measurements]
    dense = [
        np.eye(len(m.cells), dtype=np.int64) if m.weights is None else m.weights.dense()
        for m in sp.measurements
    ]
    pieces = sp.charges(schema, budget)
    order = 1 if budget.currency == "epsilon" else 2
    for pos in _points(schema):
        point = {a.name: a.value(p) for a, p in zip(schema.attributes, pos, strict=True)}
        charged = sum((p.additive for p in pieces if p.region.covers(point)), Fraction(0))
        loss = unit_loss = Fraction(0)
        for m, qs, a in zip(sp.measurements, cells, dense, strict=True):
            inside = [i for i, q in enumerate(qs) if q.covers(point)]
            assert len(inside) <= 1
            if not inside:
                continue
            col = [abs(int(k)) for k in a[:, inside[0]] if k]
            v = exact(m.value)
            unit = v * v if budget.currency == "mu" else v
            unit_loss += unit * sum(k**order for k in col)
            if budget.currency == "epsilon":
                loss += sum(Fraction(k) / m.noise.scale for k in col)
            elif budget.currency == "rho":
                loss += sum(Fraction(k * k) / (2 * m.noise.sigma**2) for k in col)
        assert charged == unit_loss
        if budget.currency != "mu":
            assert loss <= charged
        assert charged <= Fraction(budget.amount)


def test_reported_variances_match_simulation():
    """The exact variance of each derived answer against 3,000 simulated releases with
    the exact discrete noise (seeded): within 10% for every answer (the sampling error of
    a variance from 3,000 draws is about 2.6%)."""
    wl = parse_workload_text(MIXED, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="marginals")
    sp = plan.strategy
    rng = SeededRandomSource(7)
    draws = []
    for _ in range(3000):
        noisy = [m.noise.sample(size=len(m.cells), rng=rng) for m in sp.measurements]
        draws.append(sp.reconstruct([np.atleast_1d(n) for n in noisy]))
    emp = np.mean(np.array(draws) ** 2, axis=0)  # the truth is 0: the error itself
    live = sp.variances > 0
    np.testing.assert_allclose(emp[live], sp.variances[live], rtol=0.1)
    assert np.all(np.array(draws)[:, ~live] == 0)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.integers(0, 5),
            st.sampled_from(["", " AND b = 'x'", " AND c >= 1"]),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["total", "per-table", "max"]),
)
def test_auto_never_worse_than_direct(ranges, objective):
    text = "\n".join(f"a BETWEEN {min(i, j)} AND {max(i, j)}{extra}" for i, j, extra in ranges)
    wl = parse_workload_text(text, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), objective=objective)
    by = {c.name: c for c in plan.candidates}
    chosen = by[plan.strategy_name]
    assert by["direct"].objective is not None
    assert chosen.objective <= by["direct"].objective * (1 + 1e-12) or by["direct"].bound
    om = objective_weights(wl.queries, wl.weights, objective)
    var = plan.answer_variances()
    got = float(var.max()) if om is None else float(om @ var)
    assert got == pytest.approx(chosen.objective, rel=1e-9)


def test_marginals_target_shape_adult_like():
    """One 3-way table replaces three 2-way tables at the cost of one under pure DP: on
    three binary attributes, the marginals strategy beats direct for all 2-way tables."""
    schema = Schema.from_dict(
        {"attributes": [{"name": n, "type": "categorical", "values": ["0", "1"]} for n in "pqr"]}
    )
    wl = parse_workload_text("marginal(p, q)\nmarginal(p, r)\nmarginal(q, r)", schema)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="total")
    by = {c.name: c for c in plan.candidates}
    assert plan.strategy_name == "marginals"
    assert by["marginals"].objective < by["direct"].objective


@pytest.mark.parametrize("bad", ["Auto", "", "tree ", None, 3, "marginals;drop", "\udc80"])
def test_bad_strategy_names(bad):
    wl = parse_workload_text(MIXED, SCHEMA)
    with pytest.raises(InvalidParameter, match="strategy"):
        make_plan(wl.queries, wl.weights, PureDP(1.0), strategy=bad)


def test_forced_strategy_that_does_not_apply():
    wl = parse_workload_text(MIXED, SCHEMA)
    with pytest.raises(InvalidParameter, match="'tree' does not apply"):
        make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="tree")
    with pytest.raises(InvalidParameter, match="uniform allocation"):
        make_plan(wl.queries, wl.weights, PureDP(1.0), "uniform", strategy="marginals")


def test_too_many_attributes_falls_back_to_direct():
    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": f"x{i}", "type": "categorical", "values": ["0", "1"]} for i in range(12)
            ]
        }
    )
    wl = parse_workload_text(" AND ".join(f"x{i} = '0'" for i in range(12)), schema)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0))
    assert plan.strategy_name == "direct"
    assert "more than" in {c.name: c for c in plan.candidates}["marginals"].note


def test_structured_unknown_name():
    wl = parse_workload_text(MIXED, SCHEMA)
    om = objective_weights(wl.queries, wl.weights, "total")
    with pytest.raises(InvalidParameter, match="unknown strategy"):
        structured("direct", wl.queries, om, PlanBudget.of(PureDP(1.0)))
    assert len(groups_of(wl.queries)) == len(wl.queries)


def test_reconstruct_rejects_bad_measurements():
    wl = parse_workload_text(MIXED, SCHEMA)
    sp = make_plan(wl.queries, wl.weights, PureDP(1.0), strategy="marginals").strategy
    with pytest.raises(InvalidParameter):
        sp.reconstruct([])
    bad = [np.zeros(len(m.cells)) for m in sp.measurements]
    bad[0] = np.full(len(sp.measurements[0].cells), np.nan)
    with pytest.raises(InvalidParameter):
        sp.reconstruct(bad)
