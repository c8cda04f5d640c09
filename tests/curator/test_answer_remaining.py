"""One notion of remaining: every answer reports what ``remaining`` (of the same
analyst, on the points the request covered) reports right after it when its
``remaining_exact`` says so, and never more than that otherwise."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded
from dpcurator.privacy import PureDP

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 9},
        {"name": "b", "type": "integer", "min": 0, "max": 4},
        {"name": "c", "type": "categorical", "values": ["x", "y", "z"]},
    ]
}
FRAME = pd.DataFrame(
    {
        "a": [i % 10 for i in range(120)],
        "b": [(i * 7) % 5 for i in range(120)],
        "c": [("x", "y", "z")[i % 3] for i in range(120)],
    }
)


def predicates() -> st.SearchStrategy[str]:
    a = st.tuples(st.integers(0, 9), st.integers(0, 9)).map(
        lambda t: f"a BETWEEN {min(t)} AND {max(t)}"
    )
    b = st.integers(0, 4).map(lambda v: f"b = {v}")
    c = st.sampled_from(["c = 'x'", "c IN ('y', 'z')", "NOT c = 'z'"])
    atom = st.one_of(a, b, c)
    return st.one_of(
        st.just("total"),
        atom,
        st.tuples(atom, atom).map(lambda t: f"{t[0]} AND {t[1]}"),
        st.tuples(atom, atom).map(lambda t: f"{t[0]} OR {t[1]}"),
    )


COSTS = st.sampled_from([0.05, 0.1, 0.2, 0.3])
STEP = st.one_of(
    st.tuples(st.just("count"), predicates(), COSTS),
    st.tuples(st.just("sum"), predicates(), COSTS),
    st.tuples(st.just("histogram"), predicates(), COSTS),
    st.tuples(st.just("batch"), st.lists(predicates(), min_size=1, max_size=4), COSTS),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(STEP, min_size=1, max_size=12),
    quota=st.sampled_from([None, 0.7]),
    grid=st.sampled_from([0, 2, 256]),
)
def test_every_answer_reports_what_remaining_reports_right_after(steps, quota, grid):
    """``grid``: how many charges near an answer the quick exact figure takes on (0: the
    levels' bound only; 256: the default, exact on these small domains)."""
    from dpcurator.curator import overlap_filter

    saved = overlap_filter.QUICK_CHARGES
    overlap_filter.QUICK_CHARGES = grid
    try:
        _replay(steps, quota, exact=grid == saved)
    finally:
        overlap_filter.QUICK_CHARGES = saved


def _replay(steps, quota, *, exact: bool):
    with Curator.open(data=FRAME, schema=SCHEMA, budget=PureDP(1.5), ledger=":memory:") as c:
        if quota is not None:
            c.add_analyst("ana", quota=quota)
        who = c.analyst("ana") if quota is not None else c
        for kind, arg, cost in steps:
            try:
                if kind == "count":
                    a = who.count(arg, epsilon=cost)
                    got = [(a.remaining, a.remaining_exact, arg)]
                elif kind == "sum":
                    a = who.sum("a", 0, 9, arg, epsilon=cost)
                    got = [(a.remaining, a.remaining_exact, arg)]
                elif kind == "histogram":
                    t = who.histogram("b", where=arg, epsilon=cost)
                    got = [(t.remaining, t.remaining_exact, arg)] + [
                        (cell.remaining, cell.remaining_exact, arg) for cell in t.cells
                    ]
                else:
                    answers = who.release(arg, [cost] * len(arg))
                    got = [
                        (a.remaining, a.remaining_exact, q)
                        for a, q in zip(answers, arg, strict=True)
                    ]
            except BudgetExceeded:
                continue
            for reported, flagged, query in got:
                detail = who.remaining_detail(query)
                assert detail.exact
                assert reported <= detail.value, (kind, query, reported, detail)
                if flagged:  # an answer that says its figure is exact is right
                    assert reported == detail.value, (kind, query, reported, detail)
                if exact:  # and on these small domains the quick figure always is
                    assert flagged
                if quota is not None:  # the smaller of her quota and the budget left
                    assert detail.value == min(detail.budget, detail.quota)


def test_an_analysts_answer_shows_her_quota_not_the_budget():
    with Curator.open(data=FRAME, schema=SCHEMA, budget=PureDP(3.0), ledger=":memory:") as c:
        c.add_analyst("ana", quota=1.0)
        ana = c.analyst("ana")
        a = ana.count("a < 5", epsilon=0.25)
        assert a.remaining == 0.75
        assert ana.remaining_detail("a < 5").budget == 2.75
        # Her quota is overlap-aware like the budget: disjoint points keep 0.75 of it,
        # points covered by both of her requests have 0.5 left.
        assert ana.count("a >= 5", epsilon=0.25).remaining == 0.75
        assert ana.count("a BETWEEN 3 AND 6", epsilon=0.25).remaining == 0.5
