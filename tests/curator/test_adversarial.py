"""Adversarial request sequences, audited point by point from the ledger file.

Random sequences of requests (text and hand-built queries, malformed objects, extreme
and ill-typed costs, histograms, marginals, sums, batches, two analysts with and without
quotas), from one process or several at once. After each sequence the ledger on disk is
read back independently and, at every point of the small domain, the losses of the
charges covering it are added up: no point may pass the budget, no analyst her quota.
A request either raises one of dpcurator's errors and charges nothing, or is charged
exactly once; a refusal by the budget is exact (some covered point would pass it).
"""

import itertools
import json
import multiprocessing as mp
import random
import sqlite3
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator import Curator
from dpcurator.curator.requests import canonical_query
from dpcurator.errors import BudgetExceeded, DpCuratorError
from dpcurator.privacy import PureDP
from dpcurator.queries import Query, Schema
from dpcurator.queries.predicates import Predicate

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "categorical", "values": ["x", "y", "z"]},
        {"name": "b", "type": "integer", "min": 0, "max": 3},
        {"name": "c", "type": "categorical", "values": ["lo", "mid", "hi"], "ordered": True},
    ]
}
NAMES = ("a", "b", "c")
SIZES = (3, 4, 3)
POINTS = list(itertools.product(*(range(n) for n in SIZES)))
BUDGET = Fraction(1)
QUOTA = {"alice": Fraction(1, 2)}  # bob has none
#: Requests must finish within the solver's limit plus counting and committing.
SLOWEST = 5.0 + 10.0


def write_table(folder: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    pd.DataFrame(
        {
            "a": rng.choice(["x", "y", "z"], 300),
            "b": rng.integers(0, 4, 300),
            "c": rng.choice(["lo", "mid", "hi"], 300),
        }
    ).to_csv(folder / "t.csv", index=False)
    (folder / "s.json").write_text(json.dumps(SCHEMA))
    return folder / "t.csv", folder / "s.json"


def open_curator(folder: Path) -> Curator:
    data, schema = folder / "t.csv", folder / "s.json"
    c = Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=folder / "l.db")
    for name, quota in QUOTA.items():
        c.analyst(name, quota=float(quota))
    c.analyst("bob")
    return c


# --- independent reading of the ledger -------------------------------------------------


def ledger_rows(path: Path) -> list[tuple[str | None, dict, Fraction]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT analyst, coverage, cost FROM charges ORDER BY id").fetchall()
    return [(a, json.loads(cov), Fraction(cost)) for a, cov, cost in rows]


def covers(coverage: dict, point: tuple[int, ...]) -> bool:
    if set(coverage) == {"|"}:  # a boolean query: a union of disjoint boxes
        return any(covers(box, point) for box in coverage["|"])
    return all(any(s <= point[NAMES.index(n)] < e for s, e in ivs) for n, ivs in coverage.items())


def losses(rows, analyst: str | None = None) -> dict[tuple[int, ...], Fraction]:
    out = dict.fromkeys(POINTS, Fraction(0))
    for who, cov, cost in rows:
        if analyst is not None and who != analyst:
            continue
        for x in POINTS:
            if covers(cov, x):
                out[x] += cost
    return out


def audit(path: Path) -> None:
    rows = ledger_rows(path)
    assert max(losses(rows).values()) <= BUDGET
    for name, quota in QUOTA.items():
        assert max(losses(rows, name).values()) <= quota


# --- requests ----------------------------------------------------------------------------

COSTS = [
    0.05,
    0.1,
    0.25,
    0.3,
    0.5,
    1.0,
    Fraction(1, 3),
    5e-324,
    1e-24,
    1e300,
    10**400,
    -1.0,
    float("nan"),
    "0.1",
    None,
    True,
]


@st.composite
def coverage(draw):
    covs = {}
    for name, size in zip(NAMES, SIZES, strict=True):
        if draw(st.booleans()):
            if name == "a":
                vals = sorted(draw(st.sets(st.integers(0, size - 1), max_size=size)))
                covs[name] = tuple((v, v + 1) for v in vals)
            else:
                lo = draw(st.integers(0, size - 1))
                covs[name] = ((lo, draw(st.integers(lo + 1, size))),)
    return covs


@st.composite
def query(draw):
    """Text, a hand-built Query, or something malformed."""
    covs = draw(coverage())
    how = draw(st.sampled_from(["text", "object", "lying", "garbage", "none", "or", "not"]))
    other = draw(coverage())
    garbage = draw(st.sampled_from(["a = 'w'", "b < ", "((b < 2)", "z = 1", 42]))
    return (how, covs, (garbage, other))


def build(schema: Schema, spec):
    how, covs, (garbage, other) = spec
    if how == "none":
        return None
    q = Query.from_coverages(schema, covs)
    if how == "or":  # a union across attributes: several disjoint boxes, one charge
        return f"({q.to_text()}) OR ({Query.from_coverages(schema, other).to_text()})"
    if how == "not":
        return f"NOT ({q.to_text()}) AND NOT ({Query.from_coverages(schema, other).to_text()})"
    if how == "text":
        return q.to_text()
    if how == "object":
        return Query(schema, q.predicates)
    if how == "lying":  # a text that does not describe the coverage
        return Query(schema, q.predicates, text="b = 0")
    return garbage


request = st.one_of(
    st.tuples(st.just("count"), query(), st.sampled_from(COSTS)),
    st.tuples(
        st.just("histogram"), st.sampled_from(["a", "b", "c", "d"]), query(), st.sampled_from(COSTS)
    ),
    st.tuples(
        st.just("marginal"),
        st.sampled_from([["a", "b"], ["c"], ["a", "a"], []]),
        st.sampled_from(COSTS),
    ),
    st.tuples(
        st.just("sum"),
        st.sampled_from([(0, 3), (-2, 5), (0, 2**70), (3, 1)]),
        query(),
        st.sampled_from(COSTS),
    ),
    st.tuples(
        st.just("release"),
        st.lists(st.tuples(query(), st.sampled_from(COSTS)), min_size=1, max_size=4),
    ),
)
who = st.sampled_from([None, "alice", "bob", "mallory"])


def perform(c: Curator, schema: Schema, req, analyst) -> int:
    """Send one request; return how many charges it should have made."""
    s = c if analyst is None else c.analyst(analyst) if analyst != "mallory" else None
    kind = req[0]
    if s is None:  # an analyst the ledger does not know
        c.count("total", epsilon=0.1, _analyst=analyst)
        return 1
    if kind == "count":
        s.count(build(schema, req[1]), epsilon=req[2])
    elif kind == "histogram":
        s.histogram(req[1], where=build(schema, req[2]), epsilon=req[3])
    elif kind == "marginal":
        s.marginal(req[1], epsilon=req[2])
    elif kind == "sum":
        lo, hi = req[1]
        s.sum("b", lo, hi, build(schema, req[2]), epsilon=req[3])
    else:
        pairs = req[1]
        s.release([build(schema, q) for q, _ in pairs], [cost for _, cost in pairs])
        return len(pairs)
    return 1


def count_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM charges").fetchone()[0]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(request, who), min_size=1, max_size=14))
def test_no_sequence_overspends_and_every_refusal_charges_nothing(sequence):
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        write_table(folder)
        with open_curator(folder) as c:
            schema = c._schema("data")
            for req, analyst in sequence:
                before = count_rows(folder / "l.db")
                loss_before = losses(ledger_rows(folder / "l.db"))
                start = time.perf_counter()
                try:
                    made = perform(c, schema, req, analyst)
                except BudgetExceeded as err:
                    assert count_rows(folder / "l.db") == before, err
                    if req[0] == "count" and analyst is None and "budget" in str(err):
                        # exact refusal: some covered point really would pass the budget
                        q = canonical_query(build(schema, req[1]), schema)
                        cost = req[2]
                        cost = Fraction(repr(cost)) if isinstance(cost, float) else Fraction(cost)
                        covered = [x for x in POINTS if q.covers(point(schema, x))]
                        worst = max((loss_before[x] for x in covered), default=Fraction(0))
                        assert worst + cost > BUDGET
                except DpCuratorError as err:
                    assert count_rows(folder / "l.db") == before, err
                    assert "\n" not in str(err)
                else:
                    assert count_rows(folder / "l.db") == before + made
                assert time.perf_counter() - start < SLOWEST
            audit(folder / "l.db")
            # the filter in memory agrees with the ledger on disk
            assert len(c._filter.charges("data")) == count_rows(folder / "l.db")


def point(schema: Schema, x: tuple[int, ...]) -> dict[str, int | str]:
    return {n: schema.attribute(n).value(p) for n, p in zip(NAMES, x, strict=True)}


# --- several processes at once ------------------------------------------------------------


def worker(folder: str, seed: int, out: mp.Queue) -> None:
    rnd = random.Random(seed)
    answered = 0
    with open_curator(Path(folder)) as c:
        schema = c._schema("data")
        for _ in range(25):
            covs = {}
            for name, size in zip(NAMES, SIZES, strict=True):
                if rnd.random() < 0.5:
                    lo = rnd.randrange(size)
                    covs[name] = ((lo, rnd.randrange(lo, size) + 1),)
            q = Query.from_coverages(schema, covs)
            analyst = rnd.choice([None, "alice", "bob"])
            s = c if analyst is None else c.analyst(analyst)
            if rnd.random() < 0.2:
                q = Query(schema, tuple(Predicate(p.attribute, p.coverage) for p in q.predicates))
            try:
                if rnd.random() < 0.2:
                    s.release([q, q.to_text()], [0.05, 0.1])
                    answered += 2
                else:
                    s.count(q, epsilon=rnd.choice([0.05, 0.1, 0.2]))
                    answered += 1
            except BudgetExceeded:
                pass
    out.put(answered)


def test_processes_and_quotas_never_overspend_a_point():
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        write_table(folder)
        open_curator(folder).close()  # create the ledger and the analysts once
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(d, seed, out)) for seed in range(3)]
        for p in procs:
            p.start()
        answered = sum(out.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert count_rows(folder / "l.db") == answered
        audit(folder / "l.db")
        rows = ledger_rows(folder / "l.db")
        # the budget was really contended: some point is close to full
        assert max(losses(rows).values()) > BUDGET / 2
