"""The level-ordered scan (dpcurator.curator.level_order) gives exactly the largest level
among the charges whose hulls meet a query, as a vector pass over every charge does,
through adds, lowered levels, rollbacks and snapshots; with tiny chunks and tails so that
every rebuild and stop rule runs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.curator import level_order
from dpcurator.curator.overlap_filter import Charge
from dpcurator.curator.table_index import TableIndex
from dpcurator.queries import Query, Schema, parse_query

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 9},
            {"name": "b", "type": "integer", "min": 0, "max": 9},
            {"name": "c", "type": "categorical", "values": ["x", "y", "z"]},
        ]
    }
)


def _query(spec) -> Query:
    a0, a1, b0, b1, c = spec
    parts = []
    if a0 is not None:
        parts.append(f"a BETWEEN {min(a0, a1)} AND {max(a0, a1)}")
    if b0 is not None:
        parts.append(f"b BETWEEN {min(b0, b1)} AND {max(b0, b1)}")
    if c is not None:
        parts.append(f"c = '{c}'")
    return parse_query(" AND ".join(parts) if parts else "total", SCHEMA)


digit = st.integers(0, 9)
queries = st.tuples(
    st.none() | digit, digit, st.none() | digit, digit, st.none() | st.sampled_from("xyz")
).map(
    lambda t: (t[0], t[1] if t[0] is not None else 0, t[2], t[3] if t[2] is not None else 0, t[4])
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), queries, st.integers(0, 50)),
        st.tuples(st.just("lower"), st.integers(0, 10**6), st.integers(0, 50)),
        st.tuples(st.just("truncate"), st.integers(0, 10**6)),
        st.tuples(st.just("snapshot")),
        st.tuples(st.just("ask"), queries),
    ),
    max_size=60,
)


def _brute(index: TableIndex, q: Query) -> float:
    if q.is_empty or not index.n:
        return 0.0
    mask = index._hull_mask(q)
    return float(index.level[: index.n][mask].max()) if mask.any() else 0.0


@settings(max_examples=300)
@given(ops, st.sampled_from([(1, 1), (2, 3), (4, 2)]))
def test_the_scan_equals_a_pass_over_every_charge(steps, sizes):
    chunk, tail = sizes
    saved = level_order.CHUNK, level_order.TAIL
    level_order.CHUNK, level_order.TAIL = chunk, tail
    try:
        index = TableIndex(SCHEMA)
        next_id = 0
        for op in steps:
            if op[0] == "add":
                next_id += 1
                index.add(
                    Charge(next_id, "t", None, _query(op[1]), Fraction(1), Fraction(op[2], 7))
                )
            elif op[0] == "lower" and index.n:
                index.lower(op[1] % index.n, Fraction(op[2], 7))
            elif op[0] == "truncate" and index.n:
                if not index.owned:
                    index = index.snapshot()
                    index._own()
                index.truncate(op[1] % (index.n + 1))
            elif op[0] == "snapshot":
                index = index.snapshot()
            elif op[0] == "ask":
                q = _query(op[1])
                assert index.top_near(q) == _brute(index, q)
                assert index.bound(q) == Fraction(_brute(index, q))
        for spec in [(None, 0, None, 0, None), (0, 9, 0, 9, "x"), (3, 3, 5, 5, None)]:
            q = _query(spec)
            assert index.top_near(q) == _brute(index, q)
    finally:
        level_order.CHUNK, level_order.TAIL = saved


def test_a_query_meeting_a_high_charge_stops_after_one_chunk():
    """The point of the order: 20,000 charges, the query meets the highest one; the scan
    reads one chunk of the order (and the tail), not the history."""
    index = TableIndex(SCHEMA)
    rng = np.random.default_rng(0)
    for i in range(20_000):
        a = int(rng.integers(0, 10))
        index.add(
            Charge(i, "t", None, _query((a, a, None, 0, None)), Fraction(1), Fraction(i % 97))
        )
    q = _query((None, 0, None, 0, None))
    assert index.top_near(q) == 96.0
    order = index.order
    assert order is not None and order.count == 20_000
    calls = []
    real = level_order.meeting

    def counting(lo, hi, box):
        calls.append(len(lo))
        return real(lo, hi, box)

    level_order.meeting = counting
    try:
        assert order.top_meeting(index._box(q), index.level, -1.0) == 96.0
    finally:
        level_order.meeting = real
    assert calls == [level_order.CHUNK]


def test_a_forks_order_serves_the_filter_and_the_next_fork_but_not_its_own_rows():
    """An order built by a fork on the rows it shares with its filter is kept for the
    filter and every later fork (one build, not one per request); an order that holds a
    fork's own provisional rows never leaves that fork."""
    live = TableIndex(SCHEMA)
    for i in range(50):
        live.add(Charge(i, "t", None, _query((i % 10, 9, None, 0, None)), Fraction(1), Fraction(i)))
    q = _query((0, 9, None, 0, None))
    fork = live.snapshot()
    assert fork.top_near(q) == 49.0
    built = fork.order
    assert built is not None and built.count == 50
    later = live.snapshot()
    assert later.top_near(q) == 49.0 and later.order is built  # reused, not rebuilt
    own = live.snapshot()
    own._own()
    for i in range(50, 50 + 4 * level_order.TAIL):  # past the tail: it rebuilds
        own.add(Charge(i, "t", None, _query((0, 0, None, 0, None)), Fraction(1), Fraction(99)))
    assert own.top_near(q) == 99.0 and own.order.count > 50
    assert live._cell[0] is built  # its own rows stayed its own
    assert live.top_near(q) == 49.0


def test_a_level_lowered_while_the_order_is_built_leaves_it_sorted(monkeypatch):
    """Forks lower the shared levels without a lock: a level lowered between the sort
    and the recording of levels must not leave the recorded levels out of order (the
    scan would stop before a higher chunk and under-estimate the loss)."""
    live = TableIndex(SCHEMA)
    live.add(Charge(1, "t", None, _query((0, 0, None, 0, None)), Fraction(1), Fraction(10)))
    live.add(Charge(2, "t", None, _query((5, 5, None, 0, None)), Fraction(1), Fraction(9)))
    f1, f2 = live.snapshot(), live.snapshot()
    real = np.argsort

    def sort_then_another_fork_lowers(a, **kw):
        out = real(a, **kw)
        f2.lower(0, Fraction(1))  # the other fork's exact check, meanwhile
        return out

    monkeypatch.setattr(level_order.np, "argsort", sort_then_another_fork_lowers)
    q = _query((5, 5, None, 0, None))
    assert f1.top_near(q) == _brute(f1, q) == 9.0
    monkeypatch.setattr(level_order.np, "argsort", real)
    assert list(f1.order.levels) == sorted(f1.order.levels, reverse=True)
    live.add(Charge(3, "t", None, _query((5, 5, None, 0, None)), Fraction(1), Fraction(5)))
    assert live.top_near(q) >= _brute(live, q) == 9.0
    assert live.bound(q) >= Fraction(9)
