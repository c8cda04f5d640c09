"""The filter's admission check decided against a threshold, against brute force.

``max_loss(..., at_most=T)`` may stop once "max <= T" is certain; ``decide`` uses it for
the budget and the quota. Whatever it does, ``Loss.value`` must never be below the true
maximum, a settled answer must be the brute-force answer, and every decision must be the
brute-force admission. The dense grid and the cheaper strategies are switched off so
that the 0/1 program (the one that times out on large grids) decides.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpcurator.curator.overlap_filter as of
import dpcurator.queries.overlap as overlap
from dpcurator.curator.overlap_filter import Charge, OverlapFilter, max_loss
from dpcurator.queries import Query, Schema
from dpcurator.queries.overlap import milp as milp_module
from dpcurator.queries.overlap.eliminate import reduce_to_core

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["x", "y", "z"]},
            {"name": "b", "type": "integer", "min": 0, "max": 3},
            {"name": "c", "type": "categorical", "values": ["p", "q"]},
            {"name": "d", "type": "integer", "min": 0, "max": 2},
        ]
    }
)
NAMES = ("a", "b", "c", "d")
POINTS = list(itertools.product(range(3), range(4), range(2), range(3)))
# the fixture only switches strategies off: the same for every example
MANY = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def covers(q: Query, point: tuple[int, ...]) -> bool:
    return all(
        any(s <= v < e for s, e in q.coverage(name)) for name, v in zip(NAMES, point, strict=True)
    )


def brute_max(charges: list[Charge], within: Query | None) -> Fraction:
    """max over the points of C_within of the covering charges' costs."""
    pts = [x for x in POINTS if within is None or covers(within, x)]
    return max(
        (sum((c.cost for c in charges if covers(c.query, x)), Fraction(0)) for x in pts),
        default=Fraction(0),
    )


@st.composite
def queries(draw: st.DrawFn) -> Query:
    covs = {}
    for name, size in zip(NAMES, (3, 4, 2, 3), strict=True):
        if draw(st.integers(0, 2)) == 0:
            continue
        members = draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=size))
        covs[name] = tuple((v, v + 1) for v in sorted(members))
    return Query.from_coverages(SCHEMA, covs)


costs = st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(3, 10), Fraction(1, 3)])
charge_lists = st.lists(st.tuples(queries(), costs, st.sampled_from(["ann", "bob"])), max_size=14)


def charges_of(drawn) -> list[Charge]:
    # levels far above any loss: the fast bounds never admit, the exact path decides
    return [Charge(i, "t", who, q, c, Fraction(100)) for i, (q, c, who) in enumerate(drawn, 1)]


@pytest.fixture
def solver_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No dense grid, and every component to the 0/1 program."""
    monkeypatch.setattr(of, "dense_max_overlap", lambda *a, **k: None)
    monkeypatch.setattr(overlap, "_DENSE", False)
    monkeypatch.setattr(overlap, "_decide", lambda comp, *_: reduce_to_core(comp, fold=False))


@MANY
@given(charge_lists, queries(), st.integers(-2, 30))
def test_threshold_loss_is_safe_and_settles_correctly(solver_only, drawn, within, t) -> None:
    charges = charges_of(drawn)
    threshold = Fraction(t, 10)
    true = brute_max(charges, within)
    loss = max_loss(charges, within, at_most=threshold)
    assert loss.value >= true  # never an under-estimate
    if loss.exact:
        assert loss.value == true
    if loss.reached is not None:  # a real point's loss
        assert loss.reached <= true
        if loss.witness is not None:
            assert covers(
                within, tuple(SCHEMA.attribute(n).position(loss.witness[n]) for n in NAMES)
            )
    # no time limit is reached on these: the answer is always settled, and right
    assert loss.settles(threshold)
    assert (loss.value <= threshold) == (true <= threshold)


@MANY
@given(
    charge_lists,
    queries(),
    costs,
    st.integers(0, 30),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_decide_is_the_brute_force_admission(solver_only, drawn, q, cost, b, quota) -> None:
    charges = charges_of(drawn)
    budget = Fraction(b, 10)
    quota_f = None if quota is None else Fraction(quota, 10)
    f = OverlapFilter(budget, "epsilon")
    for c in charges:
        f.add(c)
    d = f.decide("t", q, cost, analyst="ann", quota=quota_f)
    assert d is not None
    everyone = brute_max(charges, q)
    mine = brute_max([c for c in charges if c.analyst == "ann"], q)
    fits = everyone + cost <= budget and (quota_f is None or mine + cost <= quota_f)
    assert d.admitted == fits
    assert d.exact  # decided on the solver's answers, not on a bound
    if d.admitted:
        assert d.level >= everyone + cost  # a level is an upper bound
        assert d.spent >= everyone
    else:
        limit_mine = d.by == "quota"
        true = mine if limit_mine else everyone
        # the loss reported is a real point's, enough to refuse
        assert d.spent <= true
        assert d.spent + cost > d.limit


def _timed_out(comp, core, time_limit):
    """The 0/1 program as if its time limit stopped it after it found its best point but
    before it proved anything (its dual bound: everything)."""
    _, atoms, _ = real_milp_core(comp, core, None)
    everything = float(sum(u.max() for u in core.unary if len(u))) + float(comp.w.sum())
    return everything, atoms, False


real_milp_core = milp_module.milp_core


def test_decisions_stay_exact_where_the_exact_maximum_times_out(solver_only, monkeypatch):
    # three overlapping 2-way tables and a query over them: one component, whose exact
    # maximum the (simulated) time limit stops; the decision at the budget that just
    # fits is settled by the families' bound, the one just below by the point found
    cells = [
        Query.from_coverages(SCHEMA, {x: ((i, i + 1),), y: ((j, j + 1),)})
        for x, y in (("a", "b"), ("b", "d"), ("a", "d"))
        for i in range(3)
        for j in range(3)
    ]
    charges = [
        Charge(k, "t", None, q, Fraction(1, 10), Fraction(100)) for k, q in enumerate(cells, 1)
    ]
    charges.append(Charge(99, "t", None, cells[0], Fraction(1, 4), Fraction(100)))
    q = Query.from_coverages(SCHEMA, {"c": ((0, 1),)})
    true = brute_max(charges, q)
    monkeypatch.setattr(milp_module, "milp_core", _timed_out)
    f = OverlapFilter(true + Fraction(1, 10), "epsilon")
    for c in charges:
        f.add(c)
    assert not f.spent_on("t", q).exact  # the exact maximum: out of time
    fits = f.decide("t", q, Fraction(1, 10))
    assert fits is not None and fits.admitted and fits.exact
    f.budget = true + Fraction(1, 10) - Fraction(1, 100)
    fails = f.decide("t", q, Fraction(1, 10))
    assert fails is not None and not fails.admitted and fails.exact
    assert fails.spent == true  # the point found is a maximum here
