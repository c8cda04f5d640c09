"""The curator end to end on real DuckDB, real files and a real SQLite ledger."""

import math

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends.unit_rows import choose_rows
from dpcurator.curator.ledger import LedgerError
from dpcurator.errors import BudgetExceeded, DataError, InvalidParameter, QueryError, SchemaError
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.queries import parse_query

ONE = PureDP(1.0)


def open_(people, budget=ONE, **kw):
    data, schema, _ = people
    return Curator.open(data=data, schema=schema, budget=budget, **kw)


def test_seed_003_example_and_what_overlap_saves(tmp_path):
    # Seed 003: data 0..999, budget 1, three counts of 0.4.
    (tmp_path / "s.json").write_text(
        '{"attributes": [{"name": "v", "type": "integer", "min": 0, "max": 999}]}'
    )
    pd.DataFrame({"v": np.arange(1000)}).to_csv(tmp_path / "v.csv", index=False)
    with Curator.open(data=tmp_path / "v.csv", schema=tmp_path / "s.json", budget=PureDP(1.0)) as c:
        c.count("v < 500", epsilon=0.4)
        c.count("v < 100", epsilon=0.4)
        with pytest.raises(BudgetExceeded, match="left of the budget"):
            c.count("v > 50", epsilon=0.4)  # overlaps both: refused, as in the seed
        # The seed's third query, v > 900, shares no row with the first two: with
        # parallel composition it costs only the points it covers, so it is answered.
        a = c.count("v > 900", epsilon=0.4)
        assert a.remaining == pytest.approx(0.6)
        assert c.remaining() == pytest.approx(0.2)
        assert len(c.history()) == 3


def test_histogram_costs_once_second_attribute_again(people):
    with open_(people) as c:
        h = c.histogram("region", epsilon=0.5)
        assert len(h) == 4 and h.cost == 0.5
        assert c.remaining() == pytest.approx(0.5)
        c.histogram("sex", epsilon=0.5)
        assert c.remaining() == 0
        with pytest.raises(BudgetExceeded):
            c.count("age < 10", epsilon=0.01)
        assert len(c.history()) == 2


def test_answers_are_exact_counts_plus_noise(people):
    _, _, df = people
    rng = SeededRandomSource(1)
    with open_(people, budget=PureDP(1e6), rng=rng, allow_insecure=True) as c:
        a = c.count("age BETWEEN 30 AND 39 AND sex = 'F'", epsilon=1000)  # scale 0.001
        assert a.value == int(((df.age >= 30) & (df.age <= 39) & (df.sex == "F")).sum())
        assert a.noise == "discrete_laplace" and a.noise_parameter == pytest.approx(0.001)
        m = c.marginal(["sex", "region"], epsilon=1000)
        expected = df.groupby(["sex", "region"]).size()
        for cell in m.cells:
            # every label is query text that parses back to its cell
            q = parse_query(cell.query, c._schema("data"))
            sex, region = (q.coverage(n) for n in ("sex", "region"))
            key = (["F", "M"][sex[0][0]], ["north", "south", "east", "west"][region[0][0]])
            assert cell.value == expected.get(key, 0)
        h = c.histogram("age", bins=[0, 18, 65, 100], epsilon=1000)
        assert h.values() == [
            int(((df.age >= a) & (df.age < b)).sum()) for a, b in [(0, 18), (18, 65), (65, 100)]
        ]
        s = c.sum("age", 0, 50, where="region = 'north'", epsilon=1000)
        assert s.value == int(df.age[df.region == "north"].clip(0, 50).sum())
        assert s.noise_parameter == pytest.approx(50 / 1000)  # sensitivity max(|l|, |u|)


def test_answer_carries_interval_and_remaining(people):
    with open_(people) as c:
        a = c.count("sex = 'M'", epsilon=0.25)
        lo, hi = a.interval
        assert hi - lo == 2 * a.half_width and a.half_width > 0
        # 95% interval of the discrete Laplace with scale 4: P(|Y| > h) <= 0.05 < P(|Y| > h - 1).
        p = math.exp(-1 / 4)
        tail = lambda h: 2 * p ** (h + 1) / (1 + p)  # noqa: E731
        assert tail(a.half_width) <= 0.05 < tail(a.half_width - 1)
        assert a.remaining == pytest.approx(0.75) and a.cost == 0.25 and a.currency == "epsilon"


def test_reopen_keeps_the_spend_and_refuses_another_budget(people, tmp_path):
    ledger = tmp_path / "ledger.db"
    with open_(people, ledger=ledger) as c:
        c.count("age < 50", epsilon=0.3)
        c.histogram("sex", epsilon=0.2)
    with open_(people, ledger=ledger) as c:
        assert c.remaining() == pytest.approx(0.5)
        assert c.remaining("age >= 50") == pytest.approx(0.8)
        assert [h.kind for h in c.history()] == ["count", "histogram"]
    with pytest.raises(LedgerError, match="another curator"):
        open_(people, budget=PureDP(2.0), ledger=ledger)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.count("salary > 3", epsilon=0.1),
        lambda c: c.count("age = 200", epsilon=0.1),
        lambda c: c.count("age > 3 OR sex = 'X'", epsilon=0.1),
        lambda c: c.count("age > 3", epsilon=float("nan")),
        lambda c: c.count("age > 3", epsilon=-0.1),
        lambda c: c.count("age > 3", epsilon=float("inf")),
        lambda c: c.count("age > 3", epsilon=0),
        lambda c: c.count("age > 3", rho=0.1),
        lambda c: c.count("age > 3", epsilon=0.1, rho=0.1),
        lambda c: c.count("age > 3"),
        lambda c: c.count("age > 3", epsilon=1.5),
        lambda c: c.histogram("salary", epsilon=0.1),
        lambda c: c.histogram("sex", bins=[0, 1], epsilon=0.1),
        lambda c: c.histogram("age", bins=[10, 5], epsilon=0.1),
        lambda c: c.histogram("age", bins=[10, 50], epsilon=0.1),
        lambda c: c.marginal([], epsilon=0.1),
        lambda c: c.marginal(["sex", "sex"], epsilon=0.1),
        lambda c: c.sum("sex", 0, 1, epsilon=0.1),
        lambda c: c.sum("age", 10, 0, epsilon=0.1),
        lambda c: c.sum("age", 0, float("nan"), epsilon=0.1),
        lambda c: c.sum("age", 0, 1 / 3, epsilon=0.1),
        lambda c: c.sum("age", 0, 0, epsilon=0.1),
        lambda c: c.count("age > 3", epsilon=0.1, table="other"),
    ],
)
def test_bad_input_is_a_clear_error_and_charges_nothing(people, call):
    with open_(people) as c:
        c.count("age < 10", epsilon=0.5)
        before, history = c.remaining(), len(c.history())
        with pytest.raises((InvalidParameter, QueryError, BudgetExceeded)) as err:
            call(c)
        assert "\n" not in str(err.value) and str(err.value)
        assert c.remaining() == before and len(c.history()) == history


def test_out_of_domain_data_is_refused_at_load(people, tmp_path):
    data, schema, df = people
    bad = df.copy()
    bad.loc[5, "age"] = 130
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(DataError, match="age"):
        Curator.open(data=path, schema=schema, budget=PureDP(1.0))
    with pytest.raises(SchemaError):
        (tmp_path / "broken.json").write_text("{not json")
        Curator.open(data=data, schema=tmp_path / "broken.json", budget=PureDP(1.0))


def test_insecure_randomness_is_refused_unless_asked_for(people):
    with pytest.raises(InvalidParameter, match="not a secure random source"):
        open_(people, rng=SeededRandomSource(3))


def test_several_tables_share_one_budget(people, tmp_path):
    data, schema, _ = people
    with Curator.open(tables={"h1": (data, schema), "h2": (data, schema)}, budget=PureDP(1.0)) as c:
        c.count("age < 50", epsilon=0.6, table="h1")
        # The same person may be in both hospitals: sequential across tables.
        with pytest.raises(BudgetExceeded):
            c.count("age >= 50", epsilon=0.6, table="h2")
        c.count("age >= 50", epsilon=0.4, table="h2")
        with pytest.raises(InvalidParameter, match="several tables"):
            c.count("age < 3", epsilon=0.1)


def test_analyst_quota_and_global_budget(people):
    with open_(people) as c:
        alice = c.analyst("alice", quota=0.3)
        bob = c.analyst("bob")
        alice.count("age < 50", epsilon=0.2)
        with pytest.raises(BudgetExceeded, match="alice"):
            alice.count("age < 40", epsilon=0.2)
        alice.count("age >= 50", epsilon=0.2)  # disjoint from her first: her quota holds
        bob.count("age < 50", epsilon=0.8)
        with pytest.raises(BudgetExceeded, match="budget"):
            bob.count("age < 30", epsilon=0.1)
        assert {h.analyst for h in c.history()} == {"alice", "bob"}
        assert len(alice.history()) == 2
        assert alice.remaining("age < 50") == pytest.approx(0.0)


def test_zcdp_gdp_and_approx_budgets(people):
    with open_(people, budget=ZCDP(0.5)) as c:
        a = c.count("sex = 'F'", rho=0.125)
        assert a.noise == "discrete_gaussian" and a.noise_parameter == pytest.approx(2.0)
        assert c.remaining() == pytest.approx(0.375)
    with open_(people, budget=GDP(1.0)) as c:
        c.count("sex = 'F'", mu=0.6)
        c.count("sex = 'F'", mu=0.8)  # sqrt(0.36 + 0.64) = 1
        assert c.remaining() == 0
        with pytest.raises(BudgetExceeded):
            c.count("sex = 'F'", mu=0.01)
    with open_(people, budget=ApproxDP(1.0, 1e-6)) as c:
        assert c.budget.currency == "rho"
        rho = c.remaining()
        assert ZCDP(rho).delta_at(1.0) <= 1e-6
        with pytest.raises(InvalidParameter, match="rho="):
            c.count("sex = 'F'", epsilon=0.1)


def test_privacy_unit_drops_extra_rows_and_scales_noise(tmp_path):
    (tmp_path / "s.json").write_text(
        '{"attributes": [{"name": "item", "type": "categorical", "values": ["a", "b"]}]}'
    )
    df = pd.DataFrame(
        {"user_id": [1, 1, 1, 1, 2, 3, 3], "item": ["a", "a", "b", "a", "b", "a", "b"]}
    )
    df.to_csv(tmp_path / "d.csv", index=False)
    with Curator.open(
        data=tmp_path / "d.csv",
        schema=tmp_path / "s.json",
        budget=PureDP(1e6),
        privacy_unit=("user_id", 2),
        rng=SeededRandomSource(0),
        allow_insecure=True,
    ) as c:
        a = c.count(None, epsilon=1000)
        assert a.value == 5  # user 1 keeps 2 rows of 4
        assert a.noise_parameter == pytest.approx(2 / 1000)  # sensitivity k = 2
    with pytest.raises(InvalidParameter):
        Curator.open(
            data=tmp_path / "d.csv",
            schema=tmp_path / "s.json",
            budget=PureDP(1),
            privacy_unit=("user_id", 0),
        )


def test_privacy_unit_rows_chosen_by_the_unit_key(tmp_path):
    (tmp_path / "s.json").write_text(
        '{"attributes": [{"name": "item", "type": "categorical", "values": ["a", "b"]}]}'
    )
    users = [1, 1, 1, 1, 1, 1, 2, 3, 3]
    items = ["a", "b", "a", "b", "b", "a", "b", "a", "b"]
    pd.DataFrame({"user_id": users, "item": items}).to_csv(tmp_path / "d.csv", index=False)
    rows = [(str(u), [0 if i == "a" else 1]) for u, i in zip(users, items, strict=True)]
    answers = {}
    for key in (bytes(range(32)), bytes(32), bytes(range(32))):
        want = choose_rows(rows, 2, key)
        with Curator.open(
            data=tmp_path / "d.csv",
            schema=tmp_path / "s.json",
            budget=PureDP(1e9),
            privacy_unit=("user_id", 2),
            unit_key=key,
            rng=SeededRandomSource(0),
            allow_insecure=True,
        ) as c:
            a = c.count("item = 'a'", epsilon=1e8)  # noise far below 1/2
            assert a.value == sum(1 for (code,) in want if code == 0)
            answers.setdefault(key, a.value)
            assert answers[key] == a.value  # the same key: the same rows
    with pytest.raises(InvalidParameter, match=r"^unit_key must be 32 random bytes"):
        Curator.open(
            data=tmp_path / "d.csv",
            schema=tmp_path / "s.json",
            budget=PureDP(1),
            privacy_unit=("user_id", 2),
            unit_key="not bytes",
        )


def test_batch_release_is_all_or_nothing(people):
    _, _, _ = people
    with open_(people, budget=PureDP(1.0)) as c:
        qs = ["age < 30", "age >= 30 AND age < 60", "age >= 60", "sex = 'F'"]
        answers = c.release(qs, [0.5, 0.5, 0.5, 0.5])
        assert len(answers) == 4 and len(c.history()) == 4
        assert c.remaining() == pytest.approx(0.0)  # every point: one age band + sex = F
        assert all(0 <= a.remaining <= 0.5 for a in answers)
        before = len(c.history())
        with pytest.raises(BudgetExceeded, match="query 2 of the batch"):
            c.release(["region = 'north' AND sex = 'M' AND age < 30", "age < 10"], [0.5, 0.1])
        assert len(c.history()) == before  # nothing in the batch was charged
        # The refused batch left no phantom charge in the filter either.
        assert c.remaining() == pytest.approx(0.0) and len(c._filter.charges("data")) == before
        with pytest.raises(InvalidParameter):
            c.release(["age < 3"], [0.1, 0.2])


def test_batch_release_counts_are_exact(people):
    _, _, df = people
    with open_(people, budget=PureDP(1e6), rng=SeededRandomSource(5), allow_insecure=True) as c:
        qs = [f"age BETWEEN {a} AND {a + 9}" for a in range(0, 100, 10)]
        answers = c.release(qs, [1000.0] * len(qs))
        assert [a.value for a in answers] == [
            int(((df.age >= a) & (df.age <= a + 9)).sum()) for a in range(0, 100, 10)
        ]


@pytest.mark.parametrize("eps", [0.1, 0.3, 0.7, 0.25, 1 / 3])
def test_noise_never_spends_more_than_the_ledger_charges(people, eps):
    from fractions import Fraction

    with open_(people, budget=PureDP(10.0)) as c:
        a = c.count("sex = 'F'", epsilon=eps)
        charged = Fraction(repr(eps))  # the ledger charges the decimal the float prints as
        scale = Fraction(a.noise_parameter)  # the float of an exact rational scale
        assert Fraction(1) / scale <= charged * (1 + Fraction(1, 10**15))
        assert Fraction(c.history()[-1].cost).limit_denominator(10**9) == charged.limit_denominator(
            10**9
        )
    with open_(people, budget=ZCDP(10.0)) as c:
        a = c.count("sex = 'F'", rho=eps)
        assert Fraction(1, 2) / Fraction(a.noise_parameter) ** 2 <= Fraction(repr(eps)) * (
            1 + Fraction(1, 10**15)
        )


def test_a_schema_may_be_a_dictionary_and_anything_else_is_one_clear_error():
    frame = pd.DataFrame({"a": [1, 2, 3]})
    schema = {"attributes": [{"name": "a", "type": "integer", "min": 0, "max": 9}]}
    with Curator.open(data=frame, schema=schema, budget=PureDP(1.0), ledger=":memory:") as c:
        assert c.count("a < 3", epsilon=0.5).cost == 0.5
    for bad in (42, ["a"], None.__class__):
        with pytest.raises(SchemaError, match="schema must be a Schema, a path"):
            Curator.open(data=frame, schema=bad, budget=PureDP(1.0), ledger=":memory:")
