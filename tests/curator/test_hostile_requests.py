"""Hostile requests through the Python API: each one is refused before any charge, or
charged exactly what it covers. Every test here failed before the curator validated
and priced requests completely before charging them."""

import sqlite3
import threading
import time
from decimal import Decimal
from fractions import Fraction

import pytest

from dpcurator import Curator
from dpcurator.errors import (
    BudgetExceeded,
    DpCuratorError,
    InvalidParameter,
    QueryError,
    TooLarge,
)
from dpcurator.privacy import PureDP
from dpcurator.queries import Query, Schema
from dpcurator.queries.predicates import Predicate

ONE = PureDP(1.0)


def open_(people, budget=ONE, **kw):
    data, schema, _ = people
    return Curator.open(data=data, schema=schema, budget=budget, **kw)


def charges(ledger) -> int:
    with sqlite3.connect(ledger) as db:
        return db.execute("SELECT count(*) FROM charges").fetchone()[0]


# --- hand-built queries ---------------------------------------------------------------


def test_hand_built_query_with_unsorted_intervals_is_charged_on_what_it_covers(people):
    with open_(people) as c:
        age = c._schema("data").attribute("age")
        q = Query(c._schema("data"), (Predicate(age, ((50, 60), (0, 10))),))
        c.count(q, epsilon=1.0)
        # Both ranges were charged: any further query on them is refused.
        for text in ("age BETWEEN 55 AND 58", "age < 5"):
            with pytest.raises(BudgetExceeded):
                c.count(text, epsilon=1.0)
        assert c.remaining("age BETWEEN 20 AND 30") == 1.0
        assert c.remaining() == 0.0


@pytest.mark.parametrize(
    "build",
    [
        lambda s: Query(s, (Predicate(s.attribute("age"), ((60, 50),)),)),  # reversed
        lambda s: Query(s, (Predicate(s.attribute("age"), ((5, 5),)),)),  # empty
        lambda s: Query(s, (Predicate(s.attribute("age"), ((0, 1000),)),)),  # out of domain
        lambda s: Query(s, (Predicate(s.attribute("age"), ((-3, 4),)),)),
        lambda s: Query(s, (Predicate(s.attribute("age"), ((True, 4),)),)),
        lambda s: Query(s, (Predicate(s.attribute("age"), ((0.5, 4),)),)),
        lambda s: Query(s, (Predicate(s.attribute("age"), "0-4"),)),
        lambda s: Query(
            s,
            (Predicate(s.attribute("age"), ((0, 4),)), Predicate(s.attribute("age"), ((9, 12),))),
        ),
        lambda s: Query(s, ("age < 5",)),
        lambda s: Query(s, (Predicate("age", ((0, 4),)),)),
    ],
)
def test_malformed_hand_built_queries_are_refused_at_construction(people, build):
    with open_(people) as c, pytest.raises(QueryError):
        build(c._schema("data"))


def test_query_from_another_schema_or_a_tampered_one_charges_nothing(people, tmp_path):
    ledger = tmp_path / "l.db"
    other = Schema.from_dict(
        {"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 120}]}
    )
    with open_(people, ledger=ledger) as c:
        foreign = Query(other, (Predicate(other.attribute("age"), ((0, 110),)),))
        with pytest.raises(QueryError, match="another schema"):
            c.count(foreign, epsilon=0.5)
        # A foreign attribute smuggled into a query of the right schema.
        q = Query(c._schema("data"), ())
        object.__setattr__(q, "predicates", (Predicate(other.attribute("age"), ((0, 110),)),))
        with pytest.raises(QueryError):
            c.count(q, epsilon=0.5)
        # A coverage changed after construction is validated again.
        ok = Query(c._schema("data"), (Predicate(c._schema("data").attribute("age"), ((0, 5),)),))
        object.__setattr__(ok.predicates[0], "coverage", ((7, 3),))
        with pytest.raises(QueryError):
            c.count(ok, epsilon=0.5)
        assert charges(ledger) == 0 and c.remaining() == 1.0


def test_a_query_label_always_describes_what_is_charged(people):
    with open_(people) as c:
        s = c._schema("data")
        lying = Query(s, (Predicate(s.attribute("age"), ((0, 100),)),), text="age < 5")
        a = c.count(lying, epsilon=0.25)
        assert a.query == "total"  # the whole domain, whatever the object's text said
        honest = Query(s, (Predicate(s.attribute("age"), ((0, 5),)),), text="age < 5")
        assert c.count(honest, epsilon=0.25).query == "age < 5"
        assert [h.request for h in c.history()] == ["total", "age < 5"]


# --- extreme costs and parameters -----------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"epsilon": 5e-324}, InvalidParameter),
        ({"epsilon": 1e-300}, InvalidParameter),
        ({"epsilon": 1e-24}, InvalidParameter),
        ({"epsilon": 10**400}, BudgetExceeded),
        ({"epsilon": 1e300}, BudgetExceeded),
        ({"epsilon": float("nan")}, InvalidParameter),
        ({"epsilon": float("inf")}, InvalidParameter),
        ({"epsilon": -0.1}, InvalidParameter),
        ({"epsilon": 0}, InvalidParameter),
        ({"epsilon": "0.1"}, InvalidParameter),
        ({"epsilon": True}, InvalidParameter),
        ({"epsilon": [0.1]}, InvalidParameter),
        ({"epsilon": Decimal("NaN")}, InvalidParameter),
        ({"rho": 0.1}, InvalidParameter),
        ({}, InvalidParameter),
    ],
)
def test_extreme_costs_are_refused_before_the_charge(people, tmp_path, kwargs, error):
    ledger = tmp_path / "l.db"
    with open_(people, ledger=ledger) as c:
        t = time.perf_counter()
        with pytest.raises(error):
            c.count("age < 30", **kwargs)
        assert time.perf_counter() - t < 5  # no hang in any interval computation
        assert charges(ledger) == 0
        assert c.remaining() == 1.0  # nothing poisoned
        c.count("age < 30", epsilon=0.5)


def test_exact_costs_given_as_fraction_or_decimal(people):
    with open_(people) as c:
        c.count("age < 30", epsilon=Fraction(1, 3))
        c.count("age < 30", epsilon=Decimal("0.25"))
        assert c.remaining("age < 30") == pytest.approx(1 - 1 / 3 - 0.25)
        with pytest.raises(BudgetExceeded):
            c.count("age < 30", epsilon=Fraction(5, 12) + Fraction(1, 10**30))
        c.count("age < 30", epsilon=Fraction(5, 12))
        assert c.remaining("age < 30") == 0


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.sum("age", -(2**62), 2**62, epsilon=1e-5), InvalidParameter),
        (lambda c: c.sum("age", 0, 10**400, epsilon=0.5), InvalidParameter),
        (lambda c: c.sum("age", 0, float("inf"), epsilon=0.5), InvalidParameter),
        (lambda c: c.sum("age", 0.5, "x", epsilon=0.5), InvalidParameter),
        (lambda c: c.sum("age", 0, 1e-13, epsilon=0.5), InvalidParameter),
        (lambda c: c.sum("age", 5, 3, epsilon=0.5), InvalidParameter),
        (lambda c: c.sum("age", b"0", 3, epsilon=0.5), InvalidParameter),
        (lambda c: c.histogram("age", bins=[0, float("inf")], epsilon=0.5), QueryError),
        (lambda c: c.histogram("age", bins=[10**400, 10**401], epsilon=0.5), QueryError),
        (lambda c: c.histogram("age", bins=[30, 10, 50], epsilon=0.5), QueryError),
        (lambda c: c.histogram("age", bins=[0, "x"], epsilon=0.5), QueryError),
        (lambda c: c.histogram("age", bins=5, epsilon=0.5), InvalidParameter),
        (lambda c: c.histogram(["age"], epsilon=0.5), QueryError),
        (lambda c: c.histogram("sex", bins=[0, 1], epsilon=0.5), QueryError),
        (lambda c: c.marginal([["age"]], epsilon=0.5), QueryError),
        (lambda c: c.marginal("age", epsilon=0.5), QueryError),
        (lambda c: c.marginal([], epsilon=0.5), QueryError),
        (lambda c: c.marginal(x for x in ["sex", "sex"]), QueryError),
        (lambda c: c.count("(" * 5000 + "age < 3" + ")" * 5000, epsilon=0.5), QueryError),
        (lambda c: c.count("age < 3 AND " * 10_000 + "age < 4", epsilon=0.5), TooLarge),
        (lambda c: c.count(42, epsilon=0.5), QueryError),
        (lambda c: c.count(b"age < 3", epsilon=0.5), QueryError),
        (lambda c: c.count("age < 3", epsilon=0.5, table=["data"]), InvalidParameter),
        (lambda c: c.release(["age < 3"], [0.1, 0.2]), InvalidParameter),
        (lambda c: c.release(["age < 3"], 0.1), InvalidParameter),
        (lambda c: c.release([], []), InvalidParameter),
        (lambda c: c.release(["age < 3", "age = 200"], [0.1, 0.1]), QueryError),
        (lambda c: c.release(["age < 3"], [1e-24]), InvalidParameter),
        (
            lambda c: c.release(["age < 3"], [0.1], kind="x'; DROP TABLE charges; --"),
            InvalidParameter,
        ),
        (lambda c: c.count("age < 3", epsilon=0.5, _analyst="nobody"), InvalidParameter),
    ],
)
def test_bad_arguments_are_clear_errors_and_charge_nothing(people, tmp_path, call, error):
    ledger = tmp_path / "l.db"
    with open_(people, ledger=ledger) as c:
        with pytest.raises(error) as info:
            call(c)
        assert "\n" not in str(info.value)
        assert charges(ledger) == 0


def test_huge_bin_edges_are_clamped_like_ranges(people):
    """Edges beyond the domain are clamped to it, as SQL ranges are (exact integers,
    whatever their size): one bin from -10^400 to 10^400 is the whole of age."""
    with open_(people) as c:
        h = c.histogram("age", bins=[-(10**400), 50, 10**400], epsilon=0.25)
        assert [a.query for a in h.cells] == ["age <= 49", "age >= 50"]
        assert h.request == "histogram(age, bins=[0, 50, 100])"


def test_generators_are_accepted_where_lists_are(people):
    with open_(people) as c:
        h = c.histogram("age", bins=(b for b in (0, 50, 100)), epsilon=0.25)
        assert len(h) == 2
        answers = c.release((q for q in ["age < 3", "age > 90"]), (x for x in [0.25, 0.25]))
        assert len(answers) == 2


def test_a_ledger_with_an_extreme_old_charge_still_works(people, tmp_path):
    """A charge of 5e-324 (written by an older version) must not break later checks."""
    ledger = tmp_path / "l.db"
    with open_(people, ledger=ledger) as c:
        q = c._schema("data")
        c._ledger.insert_charge(
            analyst=None,
            table="data",
            kind="count",
            request="age < 30",
            coverage={"age": [[0, 30]]},
            cost=Fraction("5e-324"),
            level=Fraction("5e-324"),
            noise="old",
        )
        assert q is not None
    with open_(people, ledger=ledger) as c:
        assert 0.999 < c.remaining() < 1.0
        for _ in range(3):
            c.count("age < 40", epsilon=0.3)
        with pytest.raises(BudgetExceeded):
            c.count("age < 10", epsilon=0.1)
        c.count("age > 50", epsilon=0.1)


# --- quotas -----------------------------------------------------------------------------


def test_a_quota_once_set_holds_on_every_path(people, tmp_path):
    ledger = tmp_path / "l.db"
    with open_(people, ledger=ledger) as c:
        c.analyst("alice", quota=0.3)
        alice = c.analyst("alice")  # no quota= : keeps hers
        alice.count("age < 30", epsilon=0.2)
        with pytest.raises(BudgetExceeded, match="quota"):
            alice.count("age < 30", epsilon=0.2)
        with pytest.raises(BudgetExceeded, match="quota"):
            alice.release(["age < 20"], [0.2])
        with pytest.raises(BudgetExceeded, match="quota"):
            # each alone fits her quota; together they do not (the first overlaps the second)
            c.release(["age < 10", "age < 25"], [0.05, 0.1], _analyst="alice")
        assert alice.remaining("age < 30") == pytest.approx(0.1)
        alice.release(["age < 20", "age > 60"], [0.1, 0.3])
    with open_(people, ledger=ledger) as c:  # the quota lives in the ledger
        with pytest.raises(BudgetExceeded, match="quota"):
            c.analyst("alice").count("age < 5", epsilon=0.01)
        c.set_quota("alice", None)  # only an explicit change lifts it
        c.analyst("alice").count("age < 5", epsilon=0.01)


def test_bad_analyst_names_and_quotas(people):
    with open_(people) as c:
        for name in ("", "  ", 3, None, "a\nb", "x" * 1000):
            with pytest.raises(InvalidParameter):
                c.analyst(name)
        for quota in (0, -1, float("nan"), "0.5", True, 10**400 * 1.0 if False else float("inf")):
            with pytest.raises(InvalidParameter):
                c.analyst("bob", quota=quota)


# --- concurrency ------------------------------------------------------------------------


def test_threads_leave_the_filter_equal_to_the_ledger(people, tmp_path):
    """Each charge is added to the in-memory filter exactly once, whichever thread
    committed it and whichever thread read it back."""
    ledger = tmp_path / "l.db"
    with open_(people, budget=PureDP(10_000.0), ledger=ledger) as c:
        errors = []

        def work(i):
            try:
                for j in range(40):
                    if j % 3 == 0:
                        c.remaining("age < 50")
                    c.count(f"age < {1 + (i * 40 + j) % 99}", epsilon=0.5)
            except Exception as err:  # pragma: no cover - reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        with c._ledger.lock:
            c._sync()
            held = sorted(ch.id for ch in c._filter.charges("data"))
        assert held == sorted(h.charge_id for h in c.history())
        assert len(held) == 240


def test_every_error_is_one_of_ours(people):
    """No request, however wrong, escapes as a TypeError, OverflowError or the like."""
    weird = [None, 0, -1, 1e400, float("nan"), "", "x", b"x", [], {}, object(), 10**400, True]
    with open_(people) as c:
        for v in weird:
            for call in (
                lambda v=v: c.count(v, epsilon=0.1),
                lambda v=v: c.count("age < 3", epsilon=v),
                lambda v=v: c.histogram(v, epsilon=0.1),
                lambda v=v: c.histogram("age", bins=v, epsilon=0.1),
                lambda v=v: c.marginal(v, epsilon=0.1),
                lambda v=v: c.sum("age", v, 10, epsilon=0.1),
                lambda v=v: c.sum(v, 0, 10, epsilon=0.1),
                lambda v=v: c.release(v, [0.1]),
                lambda v=v: c.release(["age < 3"], v),
                lambda v=v: c.remaining(v),
                lambda v=v: c.count("age < 3", epsilon=0.1, table=v),
            ):
                try:
                    call()
                except DpCuratorError as err:
                    assert "\n" not in str(err)


# --- estimates ---------------------------------------------------------------------------


def test_an_estimate_charges_nothing_and_agrees_with_the_answer(people, tmp_path):
    ledger = tmp_path / "l.db"
    with open_(people, ledger=ledger) as c:
        e = c.estimate("histogram", attribute="region", epsilon=0.5)
        assert e.admitted and e.cells == 4 and e.cost == 0.5 and e.noise == "discrete_laplace"
        assert charges(ledger) == 0
        h = c.histogram("region", epsilon=0.5)
        assert h.cells[0].half_width == e.half_width
        assert c.estimate("count", query="region = 'east'", epsilon=0.5).admitted
        assert not c.estimate("count", query="region = 'east'", epsilon=0.6).admitted
        assert (
            c.estimate("sum", attribute="age", lower=0, upper=100, epsilon=0.2).noise_parameter
            == 500
        )
        alice = c.analyst("alice", quota=0.1)
        assert not alice.estimate("count", query="age > 3", epsilon=0.2).admitted
        for kind, args in [
            ("count", {"query": "age < 300"}),
            ("nope", {"epsilon": 0.1}),
            ("count", {"epsilon": 0.1, "bogus": 1}),
            ("sum", {"attribute": "age", "epsilon": 0.1}),
        ]:
            with pytest.raises(DpCuratorError):
                c.estimate(kind, **args)
        assert charges(ledger) == 1


def test_a_workload_is_text_never_a_file_name(people, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("age < 3\n")
    with open_(people) as c:
        with pytest.raises(DpCuratorError):
            c.release_workload(str(secret), epsilon=0.5)
        plan, answers = c.release_workload(
            "histogram(region)\nmarginal(sex, region)\nage < 30 @ 2", epsilon=0.5
        )
        assert len(answers) == len(plan.queries) == 4 + 8 + 1
        assert c.remaining() == pytest.approx(0.5, abs=1e-5)
        plan, _ = c.release_workload("total", epsilon=0.6)  # only 0.5 is left: planned with it
        assert plan.notes and c.remaining() < 1e-5
        with pytest.raises(BudgetExceeded):
            c.release_workload("total")


def test_a_slow_exact_check_does_not_hold_the_ledger_lock(tmp_path):
    """A request that needs a long maximum-overlap computation runs it without holding
    the ledger's write lock (SQLite's, shared by every process): another writer gets the
    lock while the slow request is still computing."""
    import contextlib
    import json
    import random

    import numpy as np
    import pandas as pd

    attrs = [f"c{i}" for i in range(12)]
    values = [f"v{j}" for j in range(20)]
    g = np.random.default_rng(0)
    pd.DataFrame({a: g.choice(values, 200) for a in attrs}).to_csv(tmp_path / "h.csv", index=False)
    (tmp_path / "h.json").write_text(
        json.dumps(
            {"attributes": [{"name": a, "type": "categorical", "values": values} for a in attrs]}
        )
    )
    rnd = random.Random(2)

    def hard() -> str:
        parts = []
        for a in rnd.sample(attrs, rnd.randint(1, 3)):
            vals = [v for v in values if rnd.random() < 0.5] or [values[0]]
            parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
        return " AND ".join(parts)

    with Curator.open(
        data=tmp_path / "h.csv",
        schema=tmp_path / "h.json",
        budget=PureDP(100.0),
        ledger=tmp_path / "l.db",
    ) as c:
        # levels past the budget: every new request needs the exact computation
        c.release([hard() for _ in range(100)], [1.0] * 100)
        inside = threading.Event()
        real = c._filter.solve  # the search, in a worker process (forks use the same)

        def slow_solve(*args, **kw):  # the exact computation, made to take a second
            inside.set()
            time.sleep(1.0)
            return real(*args, **kw)

        done = threading.Event()

        def slow() -> None:
            with contextlib.suppress(BudgetExceeded):
                c.count(hard(), epsilon=1.0)
            done.set()

        c._filter.solve = slow_solve
        try:
            t = threading.Thread(target=slow)
            t.start()
            assert inside.wait(10)  # the slow request is inside its exact computation
            other = sqlite3.connect(tmp_path / "l.db", timeout=10)
            other.execute("BEGIN IMMEDIATE")  # the write lock every curator process takes
            got_lock_while_solving = not done.is_set()
            other.execute("ROLLBACK")
            other.close()
            t.join()
        finally:
            c._filter.solve = real
        assert got_lock_while_solving


def test_request_limits_are_per_curator_and_checked_before_building(people):
    from dpcurator.curator.requests import RequestLimits

    data, schema, _ = people
    with Curator.open(
        data=data, schema=schema, budget=ONE, limits=RequestLimits(max_cells=50, max_queries=120)
    ) as c:
        with pytest.raises(TooLarge, match="100 cells exceeds the limit max_cells = 50"):
            c.histogram("age", epsilon=0.1)
        with pytest.raises(TooLarge, match="exceeds the limit max_cells = 50"):
            c.marginal(["age", "sex"], epsilon=0.1)
        with pytest.raises(TooLarge, match="max_queries"):
            c.release(["age < 3"] * 121, [0.001] * 121)
        with pytest.raises(TooLarge, match="may hold 120 more"):
            c.release_workload("marginal(age, sex, region)", epsilon=0.1)  # 800 cells
        with pytest.raises(TooLarge, match="may hold 20 more"):
            c.release_workload("histogram(age)\nmarginal(sex, region, age)", epsilon=0.1)
        assert c.remaining() == 1.0
        c.histogram("region", epsilon=0.1)
    with Curator.open(
        data=data, schema=schema, budget=ONE, limits=RequestLimits(max_charges=10)
    ) as c:
        with pytest.raises(
            TooLarge,
            match="11 queries would write as many ledger rows, over the limit max_charges = 10",
        ):
            c.release(["age < 3"] * 11, [0.001] * 11)
        assert c.history() == []
        c.release(["age < 3"] * 10, [0.001] * 10)
    with pytest.raises(InvalidParameter):
        RequestLimits(max_cells=0)
