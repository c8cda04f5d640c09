"""max_overlap against brute force, and the structured cases of issue 3."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpcurator.queries.overlap as overlap_mod
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
    raise overlap_mod._Timeout


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_milp_fallback_matches_brute_force(
    case: tuple[Schema, list[Query], list[float] | None],
) -> None:
    # force every component with more than one attribute through the 0/1 program
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(overlap_mod._Component, "solve", _no_branch_and_bound)
        mp.setattr(overlap_mod._Component, "single", False)
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
