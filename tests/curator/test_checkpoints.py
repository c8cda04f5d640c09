"""Checkpoints: a curator reopens a long ledger from its last checkpoint, with the same
filter as one rebuilt from every charge, and nothing before a checkpoint can be changed
unseen.

Real ledgers on both stores (``place``: an SQLite file and a PostgreSQL schema), real
curators over a real CSV file; tampering is done with SQL behind dpcurator's back. The
filter after a reopen is compared with one rebuilt from every charge, and per point
with brute force over the whole (small) domain.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import sqlite3
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator import Curator
from dpcurator.curator import checkpoint as cp
from dpcurator.curator.admission import query_of
from dpcurator.curator.ledger import Ledger, backup_ledger
from dpcurator.curator.overlap_filter import OverlapFilter
from dpcurator.curator.table_index import Charge
from dpcurator.errors import BudgetExceeded, LedgerError
from dpcurator.privacy import PureDP
from dpcurator.queries.overlap.dense import box_maximum

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 5},
        {"name": "b", "type": "categorical", "values": ["x", "y", "z"]},
    ]
}
POINTS = list(itertools.product(range(6), ["x", "y", "z"]))


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(3)
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": rng.integers(0, 6, 300), "b": rng.choice(list("xyz"), 300)}).to_csv(
        data, index=False
    )
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def requests(seed: int, n: int) -> list[str]:
    """Boxes, unions, several intervals, empty and whole-domain queries."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        a0 = r.randrange(6)
        a1 = r.randrange(a0, 6)
        kind = r.randrange(6)
        if kind == 0:
            out.append(f"a BETWEEN {a0} AND {a1}")
        elif kind == 1:
            out.append(f"a BETWEEN {a0} AND {a1} AND b = '{r.choice('xyz')}'")
        elif kind == 2:
            out.append(f"a = {a0} OR b = '{r.choice('xyz')}'")
        elif kind == 3:
            out.append(f"b IN ('x', 'z') AND a <= {a1}")
        elif kind == 4:
            out.append("a > 5")  # no point
        else:
            out.append("a >= 0")
    return out


def open_curator(table, place, budget=40, **kw):
    data, schema = table
    return Curator.open(data=data, schema=schema, budget=PureDP(budget), ledger=place.target, **kw)


def spend(c: Curator, seed: int, n: int) -> None:
    r = random.Random(seed)
    sessions = [c, c.analyst("ann", quota=25), c.analyst("bob")]
    for q in requests(seed, n):
        who = r.choice(sessions)
        with contextlib.suppress(BudgetExceeded):
            who.count(q, epsilon=r.choice([0.5, 0.25, 1 / 3, 1e-3]))


def rebuilt(c: Curator) -> OverlapFilter:
    """The filter rebuilt from every charge of the ledger (verified from the genesis)."""
    f = OverlapFilter(c.budget.amount, c.budget.currency)
    for row in c._ledger.charges_after(0):
        f.add(c._charge_of(row))
    return f


def loss_at(f: OverlapFilter, point: tuple, analyst: object = all) -> Fraction:
    """L(x) by brute force: the costs of the charges whose query holds the point."""
    x = dict(zip(("a", "b"), point, strict=True))
    return sum(
        (
            ch.cost
            for ch in f.charges("data")
            if (analyst is all or ch.analyst == analyst) and ch.query.covers(x)
        ),
        Fraction(0),
    )


def same_filters(got: OverlapFilter, want: OverlapFilter) -> None:
    assert got.last_id == want.last_id and got.version == want.version
    g, w = got._tables["data"], want._tables["data"]
    n = w.n
    assert g.n == n and g.charges.loaded > 0  # it started from a checkpoint
    for name in ("lo", "hi", "level", "shape"):
        assert np.array_equal(getattr(g, name)[:n], getattr(w, name)[:n]), name
    assert [g.costs[i] for i in g.cost[:n]] == [w.costs[i] for i in w.cost[:n]]
    assert [g.whos[i] for i in g.who[:n]] == [w.whos[i] for i in w.who[:n]]
    assert g.top == w.top and g.spent == w.spent
    for a, b in zip(g.all_charges(), w.all_charges(), strict=True):
        assert (a.id, a.table, a.analyst, a.cost, a.level) == (b.id, b.table, b.analyst, b.cost, b.level)
        assert all(a.query.covers(dict(zip("ab", p, strict=True))) == b.query.covers(dict(zip("ab", p, strict=True))) for p in POINTS)
    assert [c.id for c in got._log.range(0, got.version)] == list(range(1, n + 1))


def test_a_reopened_curator_starts_at_the_last_checkpoint_with_the_same_filter(table, place):
    c = open_curator(table, place)
    c._ledger.checkpoint_every = 7
    spend(c, 1, 60)
    n = c._ledger.head[0]
    c.close()
    led = Ledger(place.target, None, create=False, anchor=None)
    assert led.verify() == n and len(led._checkpoints) == n // 7  # every one checked
    led.close()
    c = open_curator(table, place)
    try:
        want = rebuilt(c)
        same_filters(c._filter, want)
        for point in POINTS:  # per point, brute force, the same
            assert loss_at(c._filter, point) == loss_at(want, point)
        worst = max(loss_at(want, p) for p in POINTS)
        assert c._filter.worst("data").value == worst and c._filter.worst("data").exact
        assert c.remaining() == pytest.approx(float(40 - worst), abs=0)  # exact, as a float
        spend(c, 2, 30)  # and it goes on charging, and checkpointing, from there
        assert c._ledger.checkpoint() is False  # not due: written after the commits
    finally:
        c.close()
    c = open_curator(table, place)
    try:
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


def test_decisions_after_a_reopen_are_those_of_a_curator_that_never_stopped(table, tmp_path):
    """The same requests, with the same seeds: one curator throughout, and one closed and
    reopened (at a checkpoint) every 9 requests, admit and refuse the same."""

    class Place:
        def __init__(self, name):
            self.target = str(tmp_path / name)

    qs = requests(5, 80)
    costs = [random.Random(i).choice([2.0, 1.0, 0.5]) for i in range(80)]

    def run(place, reopen):
        verdicts = []
        c = open_curator(table, place, budget=8)
        c._ledger.checkpoint_every = 4
        for i, (q, e) in enumerate(zip(qs, costs, strict=True)):
            if reopen and i % 9 == 8:
                c.close()
                c = open_curator(table, place, budget=8)
                c._ledger.checkpoint_every = 4
            try:
                c.count(q, epsilon=e)
                verdicts.append(True)
            except BudgetExceeded:
                verdicts.append(False)
        c.close()
        return verdicts

    once, again = run(Place("a.db"), False), run(Place("b.db"), True)
    assert once == again and True in once and False in once


def checkpointed(table, place, n: int = 30, every: int = 10) -> int:
    c = open_curator(table, place)
    c._ledger.checkpoint_every = every
    spend(c, 7, n)
    head = c._ledger.head[0]
    c.close()
    return head


def test_an_edited_segment_is_refused(table, place):
    checkpointed(table, place)
    if place.kind == "sqlite":
        place.tamper("UPDATE checkpoints SET segment = CAST(segment || x'00' AS BLOB) WHERE seq = 1")
    else:
        place.tamper("UPDATE checkpoints SET segment = segment || '\\x00'::bytea WHERE seq = 1")
    with pytest.raises(LedgerError, match="checkpoint 1: its segment was altered"):
        open_curator(table, place)


def test_an_edited_summary_is_refused(table, place):
    checkpointed(table, place)
    place.tamper("UPDATE checkpoints SET summary = replace(summary, '\"charges\"', '\"charges\" ') WHERE seq = 2")
    with pytest.raises(LedgerError, match="checkpoint 2 was altered"):
        open_curator(table, place)


def test_a_removed_middle_checkpoint_is_refused(table, place):
    checkpointed(table, place)
    place.tamper("DELETE FROM checkpoints WHERE seq = 1")
    with pytest.raises(LedgerError, match="checkpoint 2 was altered, removed or reordered"):
        open_curator(table, place)


def test_a_forged_checkpoint_with_a_valid_hash_is_refused_by_the_anchor_and_verify(table, place):
    """Whoever can write the store can rehash a checkpoint that says less was spent: the
    chain alone cannot tell, but the anchor (which records each checkpoint's hash, as it
    does the charges') can, and verifying the ledger rebuilds every checkpoint from its
    charges."""
    checkpointed(table, place)
    led = Ledger(place.target, None, create=False, anchor=None)
    last = led._checkpoints[-1] if led.verify() else None
    led.close()
    assert last is not None
    summary = cp.Summary.parse(last.summary)
    n, top, spent = summary.tables["data"]
    forged = cp.Summary({"data": (n, top, {k: v / 2 for k, v in spent.items()})}).text()
    con = place.connect()
    try:
        rows = con.execute("SELECT seq, upto, created, charge_hash, summary, segment_hash, hash FROM checkpoints ORDER BY seq").fetchall()
    finally:
        con.close()
    prev = cp.checkpoints_genesis(bytes.fromhex(json_genesis(place)))
    for r in rows[:-1]:
        prev = bytes.fromhex(r[6])
    r = rows[-1]
    fields = (r[0], r[1], r[2], r[3], forged, r[5])
    h = cp.checkpoint_hash(prev, fields).hex()
    place.tamper(
        f"UPDATE checkpoints SET summary = '{forged}', hash = '{h}' WHERE seq = {r[0]}"
    )
    if place.kind == "sqlite":  # the anchor beside the file recorded the true checkpoint
        with pytest.raises(LedgerError, match=f"its checkpoint {r[0]} is not the one its anchor"):
            open_curator(table, place)
    c = open_curator(table, place, anchor=None)  # without one, the forged chain is consistent
    c.close()
    led = Ledger(place.target, None, create=False, anchor=None)
    try:
        with pytest.raises(LedgerError, match=f"checkpoint {r[0]} does not hold what the charges"):
            led.verify()
    finally:
        led.close()


def json_genesis(place) -> str:
    con = place.connect()
    try:
        return con.execute("SELECT value FROM meta WHERE key = 'genesis'").fetchone()[0]
    finally:
        con.close()


def test_a_charge_edited_before_a_checkpoint_is_found_by_verify_and_unused_by_open(table, place):
    checkpointed(table, place)
    place.tamper("UPDATE charges SET cost = '1/1000000' WHERE id = 3")
    c = open_curator(table, place)  # the sealed state, not the edited row
    try:
        assert c._filter._tables["data"].charges[2].cost != Fraction(1, 10**6)
    finally:
        c.close()
    with pytest.raises(LedgerError, match="charge 3 was altered"):
        Ledger(place.target, None, create=False, anchor=None)  # opened to verify: all of it


def test_the_last_checkpoint_must_end_at_its_charge(table, place):
    checkpointed(table, place, n=25)
    con = place.connect()
    seq, upto = con.execute("SELECT seq, upto FROM checkpoints ORDER BY seq DESC").fetchone()
    con.close()
    place.tamper(f"UPDATE charges SET hash = '{'f' * 64}' WHERE id = {upto}")
    with pytest.raises(LedgerError, match=f"checkpoint {seq} does not end at the hash of charge {upto}"):
        open_curator(table, place)


def test_a_ledger_from_before_checkpoints_opens_and_gains_them(table, tmp_path):
    class Place:
        kind = "sqlite"
        target = str(tmp_path / "old.db")

    checkpointed(table, Place, n=12, every=10**6)  # no checkpoint yet
    db = sqlite3.connect(Place.target)
    db.execute("DROP TABLE checkpoints")  # as an older dpcurator made it
    db.commit()
    db.close()
    led = Ledger(Place.target, None, create=False, anchor=None)  # read-only tools: as is
    assert led.verify() > 0 and not led._has_checkpoints
    led.close()
    c = open_curator(table, Place)  # a curator adds the table
    c._ledger.checkpoint_every = 3
    spend(c, 8, 6)
    c.close()
    c = open_curator(table, Place)
    try:
        assert c._filter._tables["data"].charges.loaded > 0
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


def test_backups_and_copies_carry_the_checkpoints(table, place, tmp_path):
    head = checkpointed(table, place)
    backup_ledger(place.target, tmp_path / "copy.db", anchor=None)

    class Copy:
        target = str(tmp_path / "copy.db")

    c = open_curator(table, Copy)
    try:
        assert c._ledger.head[0] == head and c._filter._tables["data"].charges.loaded == 30
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


# --- the pure parts ------------------------------------------------------------------------


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6), st.integers(0, 6), st.integers(0, 3), st.integers(0, 3),
            st.sampled_from(["1/3", "1152921504606847/1152921504606846976", "5", "2/7"]),
            st.sampled_from([None, "ann", "bob"]), st.booleans(),
        ),
        min_size=1, max_size=30,
    )
)  # fmt: skip
def test_a_segment_round_trips_and_loads_as_the_charges_add(specs):
    schema_dict = {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 5},
            {"name": "c", "type": "integer", "min": 0, "max": 2},
        ]
    }
    from dpcurator.queries import Schema

    schema = Schema.of(schema_dict)
    rows, charges = [], []
    level = Fraction(0)
    for i, (a0, a1, c0, c1, cost, who, union) in enumerate(specs, start=1):
        lo, hi = min(a0, a1, 4), min(max(a0, a1), 4) + 1
        if union:  # two disjoint boxes
            coverage = {"|": [{"a": [[lo, hi]]}, {"a": [[hi, 6]], "c": [[min(c0, 2), 3]]}]}
        else:
            coverage = {"a": [[min(a0, a1), max(a0, a1)]], "c": [[c0, max(c0, c1)]]}
        q = query_of(schema, coverage, "")
        if q.is_empty:
            coverage = {"a": []}
            q = query_of(schema, coverage, "")
        from dpcurator.curator.admission import coverage_json

        text = json.dumps(coverage_json(q))
        level += Fraction(cost)
        rows.append((i, who, "t", text, cost, str(level)))
        charges.append(Charge(i, "t", who, q, Fraction(cost), level))
    seg = cp.build_segment(rows)
    data = cp.encode_segment(seg)
    back = cp.decode_segment(data)
    assert cp.encode_segment(back) == data
    summary = cp.Summary({}).plus(back)
    assert cp.Summary.parse(summary.text()) == summary
    loaded = OverlapFilter(Fraction(10**6), "epsilon")
    loaded.load(back, summary, len(rows), lambda t: schema, lambda s, cov: query_of(s, cov, ""))
    added = OverlapFilter(Fraction(10**6), "epsilon")
    for ch in charges:
        added.add(ch)
    g, w = loaded._tables["t"], added._tables["t"]
    for name in ("lo", "hi", "level", "shape"):
        assert np.array_equal(getattr(g, name)[: w.n], getattr(w, name)[: w.n]), name
    assert g.top == w.top and g.spent == w.spent
    assert loaded.worst("t").value == added.worst("t").value
    for who in (None, "ann", "bob"):
        assert loaded.worst("t", who).value == added.worst("t", who).value


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"dpcurator segment 1\n",
        b"nonsense",
        b"dpcurator segment 1\n" + (5).to_bytes(8, "little") + b"[{}]",
        b"dpcurator segment 1\n" + (2).to_bytes(8, "little") + b"{}",
        b"dpcurator segment 1\n" + (99).to_bytes(8, "little") + b"[]",
    ],
)
def test_a_malformed_segment_is_a_value_error(bad):
    with pytest.raises(ValueError):
        cp.decode_segment(bad)


def test_every_truncation_of_a_real_segment_is_a_value_error():
    rows = [(1, "ann", "t", '{"a": [[0, 3]]}', "1/3", "1/3"), (2, None, "t", '{"a": []}', "1", "4/3")]
    data = cp.encode_segment(cp.build_segment(rows))
    for cut in range(len(data)):
        with pytest.raises(ValueError):
            cp.decode_segment(data[:cut])


@settings(max_examples=160)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)),
        min_size=1, max_size=25,
    ),
    st.one_of(
        st.lists(st.integers(1, 2**200), min_size=3, max_size=3),  # the float prefilter
        st.lists(st.integers(0, 2**57), min_size=3, max_size=3),  # loads that fit int64
    ),
    st.sampled_from([3, 10**6]),
)  # fmt: skip
def test_box_maximum_is_the_brute_force_maximum_in_exact_integers(boxes, weights, size):
    """Exact for weights of any size (summed in int64 when the loads fit, else through
    the float prefilter), on a second attribute of 3 or of a million positions (its
    cuts sorted, not marked)."""
    lo = np.array([[min(a, b), min(c, d)] for a, b, c, d, _ in boxes], np.int64)
    hi = np.array([[max(a, b), max(c, d)] for a, b, c, d, _ in boxes], np.int64)
    codes = np.array([w for *_, w in boxes], np.int64)
    got = box_maximum([4, size], lo, hi, codes, weights)
    assert got is not None
    value, point = got

    def load(x, y):
        return sum(
            weights[w] for (l0, l1), (h0, h1), w in zip(lo.tolist(), hi.tolist(), codes.tolist(), strict=True)
            if l0 <= x < h0 and l1 <= y < h1
        )

    ys = range(min(size, 5))  # beyond 3 no box reaches: 4 stands for them all
    best = max(load(x, y) for x in range(4) for y in ys)
    assert value == best and load(*point) == best and 0 <= point[1] < size


# --- the command line and the anchor -------------------------------------------------------


def cli(capsys, *argv: object) -> tuple[int, str, str]:
    from dpcurator.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ledger_verify_rebuilds_every_checkpoint_and_says_so(table, place, capsys, tmp_path):
    head = checkpointed(table, place)
    code, out, err = cli(capsys, "ledger", "verify", place.target)
    assert code == 0 and err == ""
    assert f"verified: {head} charges" in out and "3 checkpoints (each rebuilt from its charges)" in out
    code, out, _ = cli(capsys, "ledger", "verify", place.target, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verified"] is True and doc["charges"] == head
    assert doc["checkpoints"] == 3 and len(doc["checkpoints_hash"]) == 64
    code, out, _ = cli(capsys, "ledger", "head", place.target, "--json")
    assert code == 0 and json.loads(out)["checkpoints"] == 3
    # a checkpoint that lies about its charges, rehashed: one line, exit status 2
    con = place.connect()
    r = con.execute(
        "SELECT seq, upto, created, charge_hash, summary, segment_hash FROM checkpoints "
        "ORDER BY seq DESC"
    ).fetchone()
    prev = con.execute(f"SELECT hash FROM checkpoints WHERE seq = {r[0] - 1}").fetchone()[0]
    con.close()
    forged = r[4].replace('"charges":', '"charges":', 1)
    summary = cp.Summary.parse(forged)
    n, top, spent = summary.tables["data"]
    forged = cp.Summary({"data": (n, top / 2, spent)}).text()
    h = cp.checkpoint_hash(bytes.fromhex(prev), (*r[:4], forged, r[5])).hex()
    place.tamper(f"UPDATE checkpoints SET summary = '{forged}', hash = '{h}' WHERE seq = {r[0]}")
    # (with an anchor of its own: the one beside an SQLite file refuses the forgery first)
    fresh = tmp_path / "fresh.anchor"
    code, out, err = cli(capsys, "ledger", "verify", place.target, "--anchor", fresh)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"checkpoint {r[0]} does not hold what the charges" in err


def test_an_anchor_line_with_or_without_a_checkpoint_reads():
    from dpcurator.curator.anchor import Heads, parse

    h = Heads(5, "a" * 64, 2, "b" * 64, "c" * 64, 3, "d" * 64)
    assert parse(h.line().rstrip(b"\n")) == h
    old = Heads(5, "a" * 64, 2, "b" * 64, "c" * 64)  # as written before checkpoints
    assert old.line().count(b" ") == 4 and parse(old.line().rstrip(b"\n")) == old
    assert old.within(h) and not h.within(old)


def test_a_removed_last_checkpoint_is_a_rollback_the_anchor_refuses(table, tmp_path):
    class Place:
        kind = "sqlite"
        target = str(tmp_path / "l.db")

    checkpointed(table, Place)
    db = sqlite3.connect(Place.target)
    db.execute("DELETE FROM checkpoints WHERE seq = 3")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="rolled back: it holds 2 checkpoints, but its anchor"):
        open_curator(table, Place)
    c = open_curator(table, Place, anchor=None)  # without the anchor: from checkpoint 2
    try:
        assert c._filter._tables["data"].charges.loaded == 20
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


def test_two_curators_on_one_ledger_checkpoint_what_both_charged(table, place):
    """Charges of two processes interleave: a checkpoint then reads back the other's
    charges (its hashes checked) instead of sealing only its own."""
    one, two = open_curator(table, place), open_curator(table, place)
    for c in (one, two):
        c._ledger.checkpoint_every = 3
    try:
        for i, q in enumerate(requests(11, 24)):
            with contextlib.suppress(BudgetExceeded):
                (one if i % 3 else two).count(q, epsilon=0.25)
    finally:
        one.close()
        two.close()
    c = open_curator(table, place)
    try:
        assert len(c._ledger._checkpoints) >= 4
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


@settings(max_examples=80)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5), st.integers(0, 5), st.integers(0, 2), st.integers(0, 2),
            st.sampled_from(["1/3", "1152921504606847/1152921504606846976", "2/7"]),
            st.sampled_from([None, "ann"]),
        ),
        min_size=1, max_size=20,
    ),
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 2), st.integers(0, 2)),
    st.sampled_from([all, None, "ann"]),
)  # fmt: skip
def test_box_within_is_the_brute_force_maximum_over_the_query(specs, box, who):
    """The answer's quick figure from the arrays: the exact maximum over the query's
    points of the summed costs of the (analyst's) charges covering them."""
    from dpcurator.queries import Schema

    schema = Schema.of(
        {
            "attributes": [
                {"name": "a", "type": "integer", "min": 0, "max": 5},
                {"name": "c", "type": "integer", "min": 0, "max": 2},
            ]
        }
    )
    f = OverlapFilter(Fraction(10**6), "epsilon")
    for i, (a0, a1, c0, c1, cost, analyst) in enumerate(specs, start=1):
        cov = {"a": [[min(a0, a1), max(a0, a1) + 1]], "c": [[min(c0, c1), max(c0, c1) + 1]]}
        f.add(Charge(i, "t", analyst, query_of(schema, cov, ""), Fraction(cost), Fraction(10)))
    a0, a1, c0, c1 = box
    q = query_of(schema, {"a": [[min(a0, a1), max(a0, a1) + 1]], "c": [[min(c0, c1), 3]]}, "")
    ix = f._tables["t"]
    got = ix.box_within(np.arange(ix.n), q, who)
    assert got is not None
    points = [
        {"a": a, "c": c} for a in range(6) for c in range(3) if q.covers({"a": a, "c": c})
    ]
    want = max(
        sum(
            (ch.cost for ch in f.charges("t")
             if (who is all or ch.analyst == who) and ch.query.covers(x)),
            Fraction(0),
        )
        for x in points
    )  # fmt: skip
    assert got == want


def test_box_maximum_at_the_edge_of_int64_is_exact():
    """Loads just below and just above 2^62: both exact (int64, then the float
    prefilter with exact candidates)."""
    for w in (2**62 // 3 - 1, 2**62 // 3 + 1, 2**63 - 1):
        lo, hi = np.zeros((3, 1), np.int64), np.full((3, 1), 2, np.int64)
        got = box_maximum([2], lo, hi, np.zeros(3, np.int64), [w])
        assert got == (3 * w, (0,))


def test_box_maximum_narrows_to_the_attributes_the_boxes_constrain():
    """16 attributes of 2 values, boxes on c0 alone: the grid is c0's (2^16 corner
    passes were half a minute), and the maximum is exact."""
    lo = np.zeros((3, 16), np.int64)
    hi = np.full((3, 16), 2, np.int64)
    hi[0, 0], lo[1, 0] = 1, 1  # c0 < 1, c0 >= 1, and the whole domain
    got = box_maximum([2] * 16, lo, hi, np.array([0, 1, 0]), [5, 7])
    assert got is not None and got[0] == 12 and got[1][0] == 1


def test_box_maximum_refuses_rather_than_trust_overflowed_floats():
    big = 2**1024 - 2**970 - 1  # beyond the float range once summed
    lo, hi = np.array([[0], [0]], np.int64), np.array([[2], [1]], np.int64)
    assert box_maximum([2], lo, hi, np.array([0, 1]), [big, 2**1023]) is None


@pytest.mark.parametrize(
    "header",
    [
        {"table": ["data"]},
        {"analysts": [{}]},
        {"costs": [[1]]},
        {"costs": ["0"]},
        {"costs": ["-1/3"]},
    ],
)
def test_a_segment_header_of_the_wrong_types_is_a_value_error(header):
    rows = [(1, "ann", "data", '{"a": [[0, 3]]}', "1/3", "1/3")]
    data = cp.encode_segment(cp.build_segment(rows))
    magic = b"dpcurator segment 1\n"
    size = int.from_bytes(data[len(magic) : len(magic) + 8], "little")
    head = json.loads(data[len(magic) + 8 : len(magic) + 8 + size])
    head[0].update(header)
    new = json.dumps(head, separators=(",", ":"), sort_keys=True).encode()
    forged = magic + len(new).to_bytes(8, "little") + new + data[len(magic) + 8 + size :]
    with pytest.raises(ValueError):
        cp.decode_segment(forged)


def test_an_empty_interval_is_an_empty_charge_in_a_checkpoint_too(table, tmp_path):
    """A coverage with an empty interval ([[2, 2]]) is an empty query: the checkpoint
    says so, and the ledger reopens with the filter a rebuild gives."""

    class Place:
        target = str(tmp_path / "e.db")

    c = open_curator(table, Place)
    c._ledger.checkpoint_every = 2
    for cov in ({"a": [[2, 2]]}, {"a": [[0, 2], [3, 3]]}, {"a": [[1, 4]]}):
        with c._ledger.transaction():
            c._ledger.insert_charge(
                analyst=None, table="data", kind="count", request="x", coverage=cov,
                cost=Fraction(1, 10), level=Fraction(1, 10), noise="n",
            )  # fmt: skip
    c.close()
    led = Ledger(Place.target, None, create=False, anchor=None)
    assert led.verify() == 3 and led._checkpoints
    led.close()
    c = open_curator(table, Place)
    try:
        same_filters(c._filter, rebuilt(c))
    finally:
        c.close()


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "a < 3",
        [["a", [0, 1]]],
        {"a": [[3, 1]]},
        {"a": [[-1, 2]]},
        {"a": [[0, 1e400]]},
        {"a": [[0, 5e-324]]},
        {"a": [[0, 2**70]], "b": "x"},
        {"|": [{"a": [[0, 1]]}, 7]},
        {"a": [[0, 1, 2]]},
        {"a": [[True, 2]]},
        {"|": [{"|": [{"|": [{"a": [[0, 1]]}]}]}]},  # nested unions: not a coverage
    ],
)
def test_ledger_coverage_refuses_garbage_in_one_line_and_writes_nothing(bad, tmp_path):
    led = Ledger(tmp_path / "l.db", {"budget": "b", "tables": {"t": {}}})
    try:
        with pytest.raises(LedgerError, match="refusing to record malformed coverage"):
            led.coverage(bad)
        with pytest.raises(LedgerError, match="malformed coverage"):
            led.insert_charge(
                analyst=None, table="t", kind="count", request="x", coverage=bad,
                cost=Fraction(1), level=Fraction(1), noise="n",
            )  # fmt: skip
        assert led.head[0] == 0
    finally:
        led.close()


@pytest.mark.parametrize("what", ["missing", "empty", "text", "dir"])
def test_ledger_verify_refuses_what_is_not_a_ledger_in_one_line(what, tmp_path, capsys):
    target = tmp_path / "x.db"
    if what == "empty":
        target.write_bytes(b"")
    elif what == "text":
        target.write_text("not a ledger\n" * 50)
    elif what == "dir":
        target.mkdir()
    code, out, err = cli(capsys, "ledger", "verify", target)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.db.anchor").exists()
