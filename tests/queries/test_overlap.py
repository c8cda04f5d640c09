"""max_overlap against brute force, and the structured cases of issue 3."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpcurator.queries.overlap as overlap_mod
import dpcurator.queries.overlap.boxes as boxes_mod
import dpcurator.queries.overlap.component as component_mod
import dpcurator.queries.overlap.eliminate as eliminate_mod
import dpcurator.queries.overlap.search as search_mod
from dpcurator.queries import (
    Attribute,
    Query,
    Schema,
    colouring_bound,
    common_point,
    disjoint,
    max_overlap,
    parse_query,
    parse_workload,
)
from dpcurator.queries.predicates import normalize


@pytest.fixture(autouse=True, scope="module")
def _general_solver():
    """These tests exercise the general solver's paths; the dense prefix-sum grid, which
    would answer most small cases first, has its own tests (test_dense.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(overlap_mod, "_DENSE", False)
        yield


def brute_force(schema: Schema, queries: list[Query], weights: list[float]) -> float:
    best = 0.0
    for pt in itertools.product(*(range(a.size) for a in schema.attributes)):
        x = {a.name: a.value(p) for a, p in zip(schema.attributes, pt, strict=True)}
        best = max(best, math.fsum(w for q, w in zip(queries, weights, strict=True) if q.covers(x)))
    return best


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Schema, list[Query], list[float] | None]:
    attrs = []
    for i in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            lo = draw(st.integers(-3, 3))
            attrs.append(Attribute(f"a{i}", "integer", min=lo, max=lo + draw(st.integers(0, 5))))
        else:
            n = draw(st.integers(1, 5))
            attrs.append(
                Attribute(
                    f"a{i}", "categorical", values=tuple("pqrst"[:n]), ordered=draw(st.booleans())
                )
            )
    schema = Schema(tuple(attrs))
    ranges_only = draw(st.booleans())
    queries = []
    for _ in range(draw(st.integers(0, 10))):
        cov = {}
        for a in attrs:
            if not draw(st.booleans()):
                continue
            if ranges_only:
                s = draw(st.integers(0, a.size - 1))
                cov[a.name] = ((s, draw(st.integers(s, a.size))),)
            else:
                members = draw(st.lists(st.booleans(), min_size=a.size, max_size=a.size))
                cov[a.name] = normalize((p, p + 1) for p, m in enumerate(members) if m)
        queries.append(Query.from_coverages(schema, cov))
    weights = draw(
        st.none()
        | st.lists(
            st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25]),
            min_size=len(queries),
            max_size=len(queries),
        )
    )
    return schema, queries, weights


def check(schema: Schema, queries: list[Query], weights: list[float] | None) -> None:
    res = max_overlap(queries, weights)
    w = weights if weights is not None else [1.0] * len(queries)
    assert res.exact
    assert res.value == pytest.approx(brute_force(schema, queries, w), abs=1e-9)
    assert res.upper_bound == res.value == res.lower_bound
    # the witness is a point of the domain covered by exactly the witness queries
    if not queries:
        assert res.witness == {} and res.witness_queries == ()
        return
    for a in schema.attributes:
        a.position(res.witness[a.name])
    covering = tuple(i for i, q in enumerate(queries) if q.covers(dict(res.witness)))
    assert covering == res.witness_queries
    assert math.fsum(w[i] for i in covering) == pytest.approx(res.value, abs=1e-9)
    if queries:
        assert colouring_bound(queries, weights).value >= res.value - 1e-9


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_matches_brute_force(case: tuple[Schema, list[Query], list[float] | None]) -> None:
    check(*case)


def _no_branch_and_bound(*args: object, **kwargs: object) -> None:
    raise search_mod.Timeout


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_milp_fallback_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None],
) -> None:
    # force every component with more than one attribute through the 0/1 program
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod.BranchAndBound, "solve", _no_branch_and_bound)
        mp.setattr(component_mod.Component, "single", False)
        check(*case)


ABC = Schema(
    (Attribute("c", "categorical", values=("a", "b", "c")), Attribute("n", "integer", min=0, max=9))
)


def test_categorical_triangle() -> None:
    qs = [parse_query(t, ABC) for t in ("c IN ('a','b')", "c IN ('b','c')", "c IN ('a','c')")]
    assert not any(disjoint(p, q) for p, q in itertools.combinations(qs, 2))
    assert common_point(qs) is None
    res = max_overlap(qs)
    assert (res.value, res.exact) == (2, True)
    assert colouring_bound(qs).value == 3


def test_triangle_across_attributes() -> None:
    schema = Schema(tuple(Attribute(x, "categorical", values=("a", "b", "c")) for x in "xyz"))
    qs = [
        parse_query(t, schema)
        for t in ("x IN ('a','b') AND y = 'a'", "x IN ('b','c') AND y = 'a'", "x IN ('a','c')")
    ]
    assert max_overlap(qs).value == 2
    assert colouring_bound(qs).value == 3


def test_ranges_helly() -> None:
    # intervals: pairwise overlap implies a common point
    qs = [parse_query(f"n BETWEEN {a} AND {b}", ABC) for a, b in [(0, 5), (3, 8), (4, 9), (5, 6)]]
    res = max_overlap(qs)
    assert res.value == 4 == colouring_bound(qs).value
    assert res.witness["n"] == 5
    assert common_point(qs) == {"c": "a", "n": 5}


def test_boxes_large_domain() -> None:
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=10**9) for i in range(3)))
    rng = np.random.default_rng(3)
    qs = []
    for _ in range(300):
        cov = {}
        for a in schema.attributes:
            lo, hi = sorted(int(v) for v in rng.integers(0, 10**9, 2))
            cov[a.name] = ((lo, hi + 1),)
        qs.append(Query.from_coverages(schema, cov))
    res = max_overlap(qs)
    assert res.exact
    # check against a brute force over the candidate corners (max is at lower corners)
    lo = np.array([[q.predicates[d].coverage[0][0] for d in range(3)] for q in qs])
    hi = np.array([[q.predicates[d].coverage[0][1] for d in range(3)] for q in qs])
    best = 0
    for p in lo:
        inside = np.all((lo <= p) & (p < hi), axis=1)
        best = max(best, int(inside.sum()))
    # a point with coordinates from different boxes may do better: brute force over them
    xs, ys, zs = (np.unique(lo[:, d]) for d in range(3))
    for x in xs:
        sx = (lo[:, 0] <= x) & (x < hi[:, 0])
        for y in ys:
            sxy = sx & (lo[:, 1] <= y) & (y < hi[:, 1])
            if sxy.sum() <= best:
                continue
            cnt = ((lo[sxy, 2][:, None] <= zs) & (zs < hi[sxy, 2][:, None])).sum(axis=0).max()
            best = max(best, int(cnt))
    assert res.value == best
    assert len(res.witness_queries) == best


ADULTISH = Schema(
    (
        Attribute("age", "integer", min=17, max=90),
        Attribute("sex", "categorical", values=("Female", "Male")),
        Attribute("race", "categorical", values=("A", "B", "C", "D", "E")),
        Attribute("edu", "categorical", values=("x", "y", "z"), ordered=True),
    )
)


def test_marginals_gamma_is_number_of_tables() -> None:
    text = (
        "marginal(sex, race)\nmarginal(race, edu)\nmarginal(sex, edu)\nmarginal(sex, race, edu)\n"
    )
    text += "histogram(age, bins=[17, 30, 50, 91])\nhistogram(age)\nhistogram(race)\n"
    wl = parse_workload(text, ADULTISH)
    res = max_overlap(wl)
    assert (res.value, res.exact) == (7, True)
    assert len(res.witness_queries) == 7


def test_weights_are_additive() -> None:
    wl = parse_workload(
        "sex = 'Female' @ 2\nsex = 'Male' @ 0.5\nage < 30 @ 1.5\nage >= 30 AND sex = 'Male' @ 4\ntotal @ 0.25",
        ADULTISH,
    )
    res = max_overlap(wl)
    assert res.value == pytest.approx(4.75)  # Male, age >= 30: 0.5 + 4 + 0.25
    assert res.witness["sex"] == "Male" and res.witness["age"] >= 30
    assert res.witness_queries == (1, 3, 4)
    assert max_overlap(wl, weights=[1] * 5).value == 3


def test_contradictions_cover_nothing() -> None:
    qs = [
        parse_query("age < 30 AND age > 40", ADULTISH),
        parse_query("sex IN ()", ADULTISH),
        parse_query("race = 'A'", ADULTISH),
    ]
    assert qs[0].is_empty and qs[1].is_empty
    res = max_overlap(qs)
    assert (res.value, res.witness_queries) == (1, (2,))
    assert disjoint(qs[0], qs[2]) and common_point(qs[:1]) is None
    assert max_overlap(qs[:2]).value == 0
    assert max_overlap([]).value == 0
    assert colouring_bound(qs).value == 1


def test_unconstrained_and_total() -> None:
    wl = parse_workload("total\ntotal @ 2\nage = 40", ADULTISH)
    res = max_overlap(wl)
    assert res.value == 4 and res.witness["age"] == 40


def test_time_limit_gives_safe_upper_bound() -> None:
    rng = np.random.default_rng(0)
    schema = Schema(
        tuple(
            Attribute(f"c{i}", "categorical", values=tuple(map(str, range(12)))) for i in range(8)
        )
    )
    qs = []
    for _ in range(150):
        cov = {}
        for j in rng.choice(8, size=int(rng.integers(1, 4)), replace=False):
            vals = np.flatnonzero(rng.random(12) < 0.5)
            cov[f"c{j}"] = tuple((int(v), int(v) + 1) for v in vals)
        qs.append(Query.from_coverages(schema, cov))
    exact = max_overlap(qs)
    quick = max_overlap(qs, time_limit=0.05)
    colour = colouring_bound(qs).value
    assert exact.exact
    assert quick.upper_bound >= exact.value
    assert quick.value >= exact.value
    assert quick.value <= colour
    assert quick.lower_bound <= exact.value
    if not quick.exact:
        assert quick.value == quick.upper_bound


def test_weights_validation() -> None:
    qs = [parse_query("age = 20", ADULTISH)]
    with pytest.raises(ValueError, match="weights"):
        max_overlap(qs, weights=[1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        max_overlap(qs, weights=[-1])


# ----------------------------------------------------------- fast paths (issue 3 perf)


@st.composite
def tree_workloads(draw: st.DrawFn) -> tuple[Schema, list[Query], list[float] | None]:
    """Queries on one attribute or on the two ends of an edge of a random tree of
    attributes, plus (sometimes) one query closing a cycle: elimination folds the tree
    and leaves a small core."""
    n = draw(st.integers(2, 6))
    attrs = [
        Attribute(f"a{i}", "categorical", values=tuple("pqrs"[: draw(st.integers(2, 4))]))
        for i in range(n)
    ]
    schema = Schema(tuple(attrs))
    edges = [(draw(st.integers(0, i - 1)), i) for i in range(1, n)]
    if n >= 3 and draw(st.booleans()):
        edges.append((0, n - 1))  # a cycle (or a repeated edge)
    queries = []
    for _ in range(draw(st.integers(1, 12))):
        scope = draw(st.sampled_from([(i,) for i in range(n)] + edges))
        cov = {}
        for i in scope:
            a = attrs[i]
            members = draw(st.lists(st.booleans(), min_size=a.size, max_size=a.size))
            cov[a.name] = normalize((p, p + 1) for p, m in enumerate(members) if m)
        queries.append(Query.from_coverages(schema, cov))
    weights = draw(
        st.none()
        | st.lists(
            st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25]),
            min_size=len(queries),
            max_size=len(queries),
        )
    )
    return schema, queries, weights


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_workloads())
def test_elimination_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None],
) -> None:
    # no branch and bound: forests are solved by elimination, cores by enumeration
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod.BranchAndBound, "solve", _no_branch_and_bound)
        check(*case)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(tree_workloads(), workloads()))
def test_core_milp_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None],
) -> None:
    # every core (what elimination leaves) goes to the 0/1 program
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod.BranchAndBound, "solve", _no_branch_and_bound)
        mp.setattr(eliminate_mod, "_BRUTE_WORK", -1)
        mp.setattr(overlap_mod, "_BOX_MIN", 10**9)
        check(*case)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_milp_without_elimination_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None],
) -> None:
    # the whole component in the 0/1 program (unary folding, family aggregation)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod.BranchAndBound, "solve", _no_branch_and_bound)
        mp.setattr(overlap_mod, "_ELIMINATE", False)
        mp.setattr(eliminate_mod, "_BRUTE_WORK", -1)
        mp.setattr(overlap_mod, "_BOX_MIN", 10**9)
        check(*case)


def test_milp_family_aggregation_on_marginals() -> None:
    text = (
        "marginal(sex, race)\nmarginal(race, edu)\nmarginal(sex, edu)\nmarginal(sex, race, edu)\n"
    )
    text += "histogram(race)\nrace IN ('A', 'B') AND edu = 'x'\n"
    wl = parse_workload(text, ADULTISH)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_mod.BranchAndBound, "solve", _no_branch_and_bound)
        mp.setattr(overlap_mod, "_ELIMINATE", False)
        mp.setattr(eliminate_mod, "_BRUTE_WORK", -1)
        mp.setattr(overlap_mod, "_BOX_MIN", 10**9)
        res = max_overlap(wl)
    assert (res.value, res.exact) == (6, True)
    assert res.method == "milp"
    assert max_overlap(wl).value == 6


def test_elimination_on_a_long_path() -> None:
    # a path of 300 attributes, each edge a 2-way marginal with a twist: exact by
    # elimination alone (branch and bound would recurse 300 levels deep)
    m = 300
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=3) for i in range(m)))
    qs = []
    for i in range(m - 1):
        for a in range(4):
            qs.append(
                Query.from_coverages(schema, {f"x{i}": ((a, a + 1),), f"x{i + 1}": ((a, 4),)})
            )
        qs.append(Query.from_coverages(schema, {f"x{i}": ((0, 2),)}))
    res = max_overlap(qs)
    assert res.exact and res.method == "eliminate"
    covering = [i for i, q in enumerate(qs) if q.covers(dict(res.witness))]
    assert tuple(covering) == res.witness_queries and len(covering) == res.value
    # each edge gives at most 2 (the cell and the range); all 2 is possible iff
    # x_i in {0, 1} and x_{i+1} >= x_i: x = 0 everywhere does it, except the last one free
    assert res.value == 2 * (m - 1)


@st.composite
def box_workloads(draw: st.DrawFn) -> tuple[Schema, list[Query], list[float] | None]:
    k = draw(st.integers(1, 3))
    schema = Schema(
        tuple(Attribute(f"x{i}", "integer", min=0, max=draw(st.integers(0, 11))) for i in range(k))
    )
    queries = []
    for _ in range(draw(st.integers(1, 25))):
        cov = {}
        for a in schema.attributes:
            if draw(st.integers(0, 4)) == 0:
                continue
            s = draw(st.integers(0, a.size - 1))
            cov[a.name] = ((s, draw(st.integers(s + 1, a.size))),)
        queries.append(Query.from_coverages(schema, cov))
    weights = draw(
        st.none()
        | st.lists(
            st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=len(queries), max_size=len(queries)
        )
    )
    return schema, queries, weights


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(box_workloads(), st.sampled_from([1, 2, 3, 16]), st.booleans())
def test_box_slab_sweep_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None], coarse: int, fallback: bool
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(overlap_mod, "_BOX_MIN", 0)  # every box component to the box solver
        mp.setattr(boxes_mod, "_COARSE", coarse)
        mp.setattr(overlap_mod, "_ELIMINATE", False)
        if fallback:  # the block branch and bound when the 2-D grid is too large
            mp.setattr(boxes_mod, "_SLAB_CELLS", 0)
        check(*case)


def test_box_slab_sweep_time_limit_is_safe() -> None:
    rng = np.random.default_rng(5)
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=299) for i in range(3)))
    qs = []
    for _ in range(2000):
        cov = {}
        for a in schema.attributes:
            lo, hi = sorted(int(v) for v in rng.integers(0, 300, 2))
            cov[a.name] = ((lo, hi + 1),)
        qs.append(Query.from_coverages(schema, cov))
    exact = max_overlap(qs)
    assert exact.exact and exact.method == "boxes"
    quick = max_overlap(qs, time_limit=0.0)
    assert quick.upper_bound >= exact.value >= quick.lower_bound
    covering = tuple(i for i, q in enumerate(qs) if q.covers(dict(quick.witness)))
    assert covering == quick.witness_queries and len(covering) == quick.lower_bound


def test_shared_value_attributes_are_fixed() -> None:
    # every constraint on 'race' contains 'C'; on 'edu' they share nothing
    qs = [
        parse_query(t, ADULTISH)
        for t in (
            "race IN ('A', 'C') AND edu = 'x'",
            "race IN ('B', 'C', 'E') AND edu = 'y'",
            "race != 'D' AND sex = 'Male'",
            "race = 'C'",
        )
    ]
    res = max_overlap(qs)
    assert res.exact and res.value == 3 and res.witness["race"] == "C"
    assert res.witness["sex"] == "Male"


def test_macro_cells_equal_parsed_queries() -> None:
    wl = parse_workload("marginal(race, sex)\nhistogram(edu)\nmarginal(edu, age)", ADULTISH)
    assert len(wl) == 10 + 3 + 3 * 74
    assert [q.text for q in wl.queries[:3]] == [
        "sex = 'Female' AND race = 'A'",
        "sex = 'Male' AND race = 'A'",
        "sex = 'Female' AND race = 'B'",
    ]
    for q in wl.queries:
        assert parse_query(q.text, ADULTISH) == q
        assert (
            Query.from_coverages(ADULTISH, {p.attribute.name: p.coverage for p in q.predicates})
            == q
        )
    assert {q.line for q in wl.queries} == {1, 2, 3}
