"""The Lagrangian branch and bound (queries/overlap/lagrangian.py) against brute force.

Exact answers must equal the maximum over every combination of atoms; every bound, at
the root, after a stop at the deadline or from a threshold run, must not be below it;
every point must carry exactly the weight reported. Then through ``max_overlap``: random
subsets over many attributes are decided by it, a grid core still goes to the 0/1
program, and a time limit gives a safe bound.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.queries import Attribute, Query, Schema, max_overlap, parse_workload
from dpcurator.queries.overlap.eliminate import reduce_to_core
from dpcurator.queries.overlap.lagrangian import LagrangianSearch, solve_lagrangian
from dpcurator.queries.overlap.split import prepare, split_components
from dpcurator.queries.predicates import normalize

SLOW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Problem = tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, bool]


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    """Unary potentials over a few attributes of a few atoms, and queries on 1-4 of them
    (the search's own input), with integral or fractional weights."""
    na = draw(st.integers(1, 5))
    sizes = [draw(st.integers(1, 4)) for _ in range(na)]
    integral = draw(st.booleans())
    weight = st.integers(0, 3).map(float) if integral else st.floats(0, 3, allow_nan=False)
    unary = [np.array([draw(weight) for _ in range(s)]) for s in sizes]
    pq: list[int] = []
    pa: list[int] = []
    cover: list[np.ndarray] = []
    w: list[float] = []
    for q in range(draw(st.integers(1, 14))):
        attrs = draw(st.lists(st.integers(0, na - 1), min_size=1, max_size=4, unique=True))
        for a in sorted(attrs):
            pq.append(q)
            pa.append(a)
            cover.append(np.array([draw(st.booleans()) for _ in range(sizes[a])]))
        w.append(draw(weight))
    if draw(st.booleans()):  # a duplicate query (merged by the search)
        q = draw(st.integers(0, len(w) - 1))
        for p in [p for p in range(len(pq)) if pq[p] == q]:
            pq.append(len(w))
            pa.append(pa[p])
            cover.append(cover[p])
        w.append(w[q])
    return unary, np.array(pq), np.array(pa), cover, np.array(w), integral


def brute(problem: Problem) -> float:
    unary, pq, pa, cover, w, _ = problem
    best = -math.inf
    for x in itertools.product(*[range(len(u)) for u in unary]):
        total = math.fsum(float(u[a]) for u, a in zip(unary, x, strict=True))
        for q in range(len(w)):
            if all(cover[p][x[pa[p]]] for p in np.flatnonzero(pq == q)):
                total += float(w[q])
        best = max(best, total)
    return best


def search_of(problem: Problem) -> LagrangianSearch:
    unary, pq, pa, cover, w, integral = problem
    eps = 0.0 if integral else 1e-9 * max(1.0, float(w.sum()))
    return LagrangianSearch(unary, pq, pa, cover, w, integral, eps)


def start(search: LagrangianSearch) -> tuple[float, np.ndarray]:
    x = search.coordinate_ascent(np.argmax(search.u, axis=1))
    return search.restarts(search.value(x), x, math.inf)


@SLOW
@given(problems())
def test_search_is_exact(problem: Problem) -> None:
    truth = brute(problem)
    search = search_of(problem)
    best, x = start(search)
    assert best <= truth + 1e-9
    lam, root = search.root(best, math.inf, math.inf)
    upper, value, point, exact = search.run(lam, root, best, x, math.inf)
    assert exact
    assert value == pytest.approx(truth, abs=1e-9)
    assert search.value(point) == pytest.approx(value, abs=1e-12)
    assert upper >= truth - 1e-9


@SLOW
@given(problems(), st.floats(-0.5, 1.5), st.sampled_from(["done", "stopped"]))
def test_a_run_at_a_target_settles_it_truthfully(problem: Problem, frac: float, how: str) -> None:
    """With a target T the run may stop at "at most T" (its upper bound <= T) or at a
    point beyond T; either is the brute-force truth, and bounds stay safe."""
    truth = brute(problem)
    search = search_of(problem)
    best, x = start(search)
    lam, root = search.root(best, math.inf, math.inf)
    target = frac * truth
    deadline = math.inf if how == "done" else time.monotonic() - 1
    upper, value, point, exact = search.run(lam, root, best, x, deadline, target)
    assert upper >= truth - 1e-9
    assert value <= truth + 1e-9
    assert search.value(point) == pytest.approx(value, abs=1e-12)
    if exact:
        assert value == pytest.approx(truth, abs=1e-9)
    if how == "done":  # a finished run settles the question one way or the other
        assert upper <= search.certified(target) + 1e-9 or value > target
    if upper <= target:
        assert truth <= target + 1e-9


@SLOW
@given(problems(), st.sampled_from(["stopped", "soon", "threshold"]), st.floats(0, 1))
def test_bounds_are_never_below_the_maximum(problem: Problem, how: str, frac: float) -> None:
    truth = brute(problem)
    search = search_of(problem)
    best, x = start(search)
    lam, root = search.root(best, math.inf, math.inf)
    assert root + search.pad >= truth - 1e-9  # any multipliers give a bound
    if how == "threshold":  # a completed run at T proves max <= max(T, best)
        target = frac * truth
        value, point, done, _ = search.search(lam, target, -1.0, x, math.inf)
        assert done
        assert max(search.certified(target), value) >= truth - 1e-9
        if value > -1.0:  # a point above the threshold was found: it weighs what it says
            assert search.value(point) == pytest.approx(value, abs=1e-12)
        return
    deadline = time.monotonic() - 1 if how == "stopped" else time.monotonic() + 1e-3
    upper, value, point, exact = search.run(lam, root, best, x, deadline)
    assert upper >= truth - 1e-9
    assert value <= truth + 1e-9
    assert search.value(point) == pytest.approx(value, abs=1e-12)
    if exact:
        assert value == pytest.approx(truth, abs=1e-9)


def _subsets(rng: np.random.Generator, schema: Schema, n: int) -> list[Query]:
    """Queries constraining 2-3 attributes to random subsets of their values."""
    out = []
    for _ in range(n):
        cov = {}
        for j in rng.choice(len(schema), size=int(rng.integers(2, 4)), replace=False):
            a = schema.attributes[int(j)]
            vals = np.flatnonzero(rng.random(a.size) < 0.5)
            vals = vals if len(vals) else np.array([int(rng.integers(a.size))])
            cov[a.name] = normalize((int(v), int(v) + 1) for v in vals)
        out.append(Query.from_coverages(schema, cov))
    return out


def _brute_queries(schema: Schema, queries: list[Query], w: np.ndarray) -> float:
    sizes = [a.size for a in schema.attributes]
    total = np.zeros(sizes)
    for q, wq in zip(queries, w, strict=True):
        term = np.ones(sizes, bool)
        for p in q.predicates:
            j = schema.index(p.attribute.name)
            mask = np.zeros(sizes[j], bool)
            for s, e in p.coverage:
                mask[s:e] = True
            shape = [1] * len(sizes)
            shape[j] = sizes[j]
            term &= mask.reshape(shape)
        total += wq * term
    return float(total.max())


@pytest.mark.parametrize("seed", range(4))
def test_random_subsets_are_decided_by_the_lagrangian_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=4) for i in range(8)))
    queries = _subsets(rng, schema, 60)
    # fractional weights (integral ones on a domain this small go to the dense grid)
    w = rng.integers(1, 4, len(queries)) / (2.0 if seed % 2 else 3.0)
    res = max_overlap(queries, w)
    assert res.exact and res.method == "lagrangian"
    assert res.value == pytest.approx(_brute_queries(schema, queries, w), abs=1e-9)
    assert res.lower_bound == pytest.approx(math.fsum(w[i] for i in res.witness_queries), abs=1e-9)
    assert all(queries[i].covers(res.witness) for i in res.witness_queries)


@pytest.mark.parametrize("marginals", [False, True])
def test_families_leave_the_core_to_the_other_strategies(marginals: bool) -> None:
    # random subsets: the Lagrangian search decides, exactly; with two marginal tables
    # (a quarter of the weight in families of disjoint cells) it declines
    rng = np.random.default_rng(3)
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=4) for i in range(8)))
    queries = _subsets(rng, schema, 60)
    w = rng.integers(1, 4, 60) / 2.0
    if marginals:
        queries += parse_workload("marginal(x0, x1)\nmarginal(x2, x3)", schema).queries
        w = np.r_[w, np.full(50, 0.5)]
    qs, ws, integral = prepare(queries, w)
    parts = split_components(qs, ws, 0.0 if integral else 1e-9 * max(1.0, float(ws.sum())))
    comp = max(parts.components, key=lambda c: len(c.w))
    sol = solve_lagrangian(comp, reduce_to_core(comp), math.inf)
    if marginals:
        assert sol is None
        return
    assert sol is not None and sol.exact
    members = [int(i) for i in comp.local]
    best = _brute_queries(schema, [queries[i] for i in members], w[members])
    assert sol.value == pytest.approx(best, abs=1e-9)


def test_a_time_limit_gives_a_safe_bound() -> None:
    rng = np.random.default_rng(5)
    schema = Schema(tuple(Attribute(f"c{i}", "integer", min=0, max=9) for i in range(10)))
    queries = _subsets(rng, schema, 200)
    exact = max_overlap(queries)
    assert exact.exact and exact.method == "lagrangian"
    for limit in (0.0, 0.05, 0.3):
        res = max_overlap(queries, time_limit=limit)
        assert res.value >= exact.value
        assert res.lower_bound <= exact.value
        if res.exact:
            assert res.value == exact.value
        else:
            assert res.method == "bound"


def test_a_grid_core_still_goes_to_the_01_program() -> None:
    # 3-way marginals: the families bound the number of tables, far below the Lagrangian
    # bound; a pendant attribute folds away, so branch and bound is not tried either
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=5) for i in range(6)))
    text = "\n".join(
        f"marginal({', '.join(c)}) @ 0.5"
        for c in itertools.combinations([f"x{i}" for i in range(5)], 3)
    )
    text += "\nx4 <= 2 AND x5 >= 3 @ 0.5\nx4 >= 3 AND x5 <= 2 @ 0.5"
    res = max_overlap(parse_workload(text, schema))
    assert (res.method, res.value, res.exact) == ("milp", 5.5, True)
