"""The overlap-aware filter against brute force over every point of a small domain."""

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.curator.overlap_filter import Charge, OverlapFilter, max_loss
from dpcurator.queries import Query, Schema

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["x", "y", "z"]},
            {"name": "b", "type": "integer", "min": 0, "max": 3},
            {"name": "c", "type": "categorical", "values": ["p", "q"]},
        ]
    }
)
POINTS = list(itertools.product(range(3), range(4), range(2)))


def covers(q: Query, point) -> bool:
    return all(
        any(s <= v < e for s, e in q.coverage(name))
        for name, v in zip(("a", "b", "c"), point, strict=True)
    )


subsets = {
    "a": st.sets(st.integers(0, 2), max_size=3),
    "b": st.tuples(st.integers(0, 3), st.integers(0, 3)).map(lambda t: (min(t), max(t) + 1)),
    "c": st.sets(st.integers(0, 1), max_size=2),
}


@st.composite
def queries(draw):
    covs = {}
    if draw(st.booleans()):
        covs["a"] = tuple((v, v + 1) for v in sorted(draw(subsets["a"])))
    if draw(st.booleans()):
        covs["b"] = (draw(subsets["b"]),)
    if draw(st.booleans()):
        covs["c"] = tuple((v, v + 1) for v in sorted(draw(subsets["c"])))
    return Query.from_coverages(SCHEMA, covs)


costs = st.sampled_from(
    [Fraction(1, 10), Fraction(1, 4), Fraction(3, 10), Fraction(2, 5), Fraction(1, 2)]
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(queries(), costs), min_size=1, max_size=25),
    st.sampled_from([Fraction(1), Fraction(3, 2), Fraction(5, 2)]),
)
def test_adaptive_adversary_never_pushes_a_point_past_the_budget(requests, budget):
    f = OverlapFilter(budget, "epsilon")
    loss = dict.fromkeys(POINTS, Fraction(0))  # brute force: L(x) at every point
    for i, (q, c) in enumerate(requests):
        covered = [x for x in POINTS if covers(q, x)]
        brute_ok = max((loss[x] for x in covered), default=Fraction(0)) + c <= budget
        d = f.decide("t", q, c)
        # Refused exactly when some covered point would pass the budget.
        assert d.admitted == brute_ok
        # The fast bound never understates: exact <= bound.
        assert (
            f.spent_on("t", q).value <= f.quick_local("t", q, refine=True) <= f.quick_local("t", q)
        )
        if d.admitted:
            f.add(Charge(i, "t", None, q, c, d.level))
            for x in covered:
                loss[x] += c
        assert max(loss.values()) <= budget
        assert f.spent_anywhere().value == max(loss.values())


def test_histogram_costs_once_and_second_attribute_costs_again():
    f = OverlapFilter(Fraction(1), "epsilon")
    everything = Query.from_coverages(SCHEMA, {})
    f.add(Charge(1, "t", None, everything, Fraction(1, 2), Fraction(1, 2)))  # histogram over a
    assert f.spent_anywhere().value == Fraction(1, 2)
    f.add(Charge(2, "t", None, everything, Fraction(1, 2), Fraction(1)))  # histogram over b
    assert f.spent_anywhere().value == 1


def test_other_tables_count_at_their_worst_point():
    f = OverlapFilter(Fraction(1), "epsilon")
    q1 = Query.from_coverages(SCHEMA, {"a": ((0, 1),)})
    q2 = Query.from_coverages(SCHEMA, {"a": ((1, 2),)})
    f.add(Charge(1, "hospital1", None, q1, Fraction(3, 10), Fraction(3, 10)))
    # A person may be in both tables: on hospital2, even a disjoint query sees 0.3.
    assert f.spent_on("hospital2", q2).value == Fraction(3, 10)
    assert f.spent_on("hospital1", q2).value == 0


def test_max_loss_merges_identical_coverages_and_is_exact():
    q = Query.from_coverages(SCHEMA, {"b": ((0, 2),)})
    charges = [Charge(i, "t", None, q, Fraction(1, 10), Fraction(i + 1, 10)) for i in range(10)]
    res = max_loss(charges)
    assert res.value == 1 and res.exact


#: Costs whose common denominator passes 2^53 after two or three of them (thirds and
#: sevenths of shortest decimals, 12-place decimals, large primes, zCDP-like squares).
wide_costs = st.one_of(
    st.sampled_from([Fraction(1, 3), Fraction(1, 7), Fraction(2, 11), Fraction(1, 13)]),
    st.integers(1, 10**12 - 1).map(lambda k: Fraction(k, 10**12)),
    st.sampled_from([999_983, 1_000_003, 2**61 - 1]).flatmap(
        lambda p: st.integers(1, p - 1).map(lambda k: Fraction(k, p))
    ),
    st.integers(1, 10**6).map(lambda k: Fraction(k, 10**6) ** 2),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(queries(), wide_costs), min_size=2, max_size=18),
    st.sampled_from(["grid", "search", "boxes"]),
)
def test_wide_denominators_give_exact_figures(requests, path):
    """Costs of large denominators (the common one far past 2^53): the worst point, the
    worst point of every query's coverage, the answers' quick figure and every decision
    are the exact maxima, and say so, on every path (the segment grid; the search in
    exact integers, alone or down to grids of one cell)."""
    from dpcurator.curator import overlap_filter
    from dpcurator.queries.overlap import wide

    with pytest.MonkeyPatch.context() as mp:
        if path != "grid":
            mp.setattr(overlap_filter, "DENSE_LIMIT", 0)
        if path == "boxes":
            mp.setattr(wide, "GRID_CELLS", 1)
        budget = Fraction(3, 2)
        f = OverlapFilter(budget, "epsilon")
        loss = dict.fromkeys(POINTS, Fraction(0))
        for i, (q, c) in enumerate(requests):
            covered = [x for x in POINTS if covers(q, x)]
            before = max((loss[x] for x in covered), default=Fraction(0))
            here = f.spent_on("t", q)
            assert here.exact and here.value == before
            d = f.decide("t", q, c)
            assert d.exact and d.admitted == (before + c <= budget)
            if d.admitted:
                f.add(Charge(i + 1, "t", None, q, c, d.level))
                for x in covered:
                    loss[x] += c
            worst = f.fork().spent_anywhere()
            assert worst.exact and worst.value == max(loss.values())
        for q, _ in requests:
            quick = f.quick_spent_on("t", q)
            truth = max((loss[x] for x in POINTS if covers(q, x)), default=Fraction(0))
            assert quick.value >= truth
            if path == "grid":  # a small grid near the query: exact
                assert quick.exact and quick.value == truth
