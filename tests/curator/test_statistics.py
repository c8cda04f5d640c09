"""Means, variances, standard deviations and quantiles through the curator, end to end on
real DuckDB, real files and a real SQLite ledger: exact values under negligible noise,
one charge on the covered points per grouped statistic, refusals, quotas, the privacy
unit, estimates, and hostile arguments that charge nothing."""

from __future__ import annotations

import json
import math
import sqlite3
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded, DpCuratorError, InvalidParameter, QueryError, TooLarge
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import GDP, ZCDP, PureDP

EDU = [f"e{i}" for i in range(16)]


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(2)
    n = 3000
    df = pd.DataFrame(
        {
            "age": rng.integers(17, 91, n),
            "sex": rng.choice(["F", "M"], n),
            "edu": rng.choice(EDU, n),
            "hours": rng.integers(0, 100, n),  # 0 means "missing"
        }
    )
    data = tmp_path / "t.csv"
    df.to_csv(data, index=False)
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "age", "type": "integer", "min": 17, "max": 90},
                    {"name": "sex", "type": "categorical", "values": ["F", "M"]},
                    {"name": "edu", "type": "categorical", "values": EDU, "ordered": True},
                    {"name": "hours", "type": "integer", "min": 0, "max": 99, "missing": 0},
                ]
            }
        )
    )
    return data, schema, df


ONE = PureDP(1.0)


def open_(table, budget=ONE, **kw):
    data, schema, _ = table
    return Curator.open(data=data, schema=schema, budget=budget, **kw)


def exact(table):
    return open_(table, PureDP(1e7), rng=SeededRandomSource(3), allow_insecure=True)


def charges(ledger) -> int:
    with sqlite3.connect(ledger) as db:
        return db.execute("SELECT count(*) FROM charges").fetchone()[0]


def test_values_under_negligible_noise(table):
    _, _, df = table
    young = df[df.age < 40]
    with exact(table) as c:
        m = c.mean("age", 20, 60, "age < 40", by="sex", epsilon=1e6)
        for r, (_, g) in zip(m.results, young.groupby("sex"), strict=True):
            assert r.value == pytest.approx(g.age.clip(20, 60).mean(), abs=1e-6)
            assert r.interval[0] <= r.value <= r.interval[1]
            assert r.count == len(g)
        assert m.results[0].group == "sex = 'F'" and m.request == (
            "mean(age, 20, 60, by=sex, where=age < 40)"
        )
        v = c.variance("age", 17, 90, epsilon=1e6)
        assert v.value == pytest.approx(df.age.var(ddof=0), rel=1e-6)
        s = c.stdev("age", 17, 90, by=["sex", "edu"], epsilon=1e6)
        assert len(s) == 32
        want = df.groupby(["sex", "edu"]).age.std(ddof=0)
        for r in s.results:
            sex, edu = r.group.replace("'", "").replace("sex = ", "").split(" AND edu = ")
            assert r.value == pytest.approx(want[(sex, edu)], rel=1e-6)
        q = c.quantiles("age", [0.25, 0.5, 0.75], by="sex", epsilon=1e6)
        for r in q.results:
            g = df[df.sex == r.group[-2]].age.sort_values().to_numpy()
            below, upto = (g < r.value).sum(), (g <= r.value).sum()
            assert below <= r.q * len(g) <= upto  # an exact q-quantile (ties included)
            assert r.rank_error == 1  # the bound: M e^{-eta t} <= 0.05 needs t >= 1
        med = c.median("edu", epsilon=1e6)  # an ordered categorical
        pos = df.edu.map({e: i for i, e in enumerate(EDU)})
        p = EDU.index(med.value)
        assert (pos < p).sum() <= len(df) / 2 <= (pos <= p).sum()


def test_missing_values_are_left_out_and_not_charged(table):
    _, _, df = table
    present = df.hours[df.hours != 0].sort_values().to_numpy()
    with exact(table) as c:
        m = c.mean("hours", 0, 99, epsilon=1e6)
        assert m.results[0].count == len(present)
        assert m.value == pytest.approx(present.mean(), abs=1e-6)
        assert c.remaining("hours IS NULL") == 1e7  # rows with hours missing were not read
        assert c.remaining("hours > 0") == 1e7 - 1e6
        med = c.median("hours", epsilon=1e6)
        assert (present < med.value).sum() <= len(present) / 2 <= (present <= med.value).sum()


def test_a_grouped_statistic_costs_one_groups_budget_at_every_point(table, tmp_path):
    ledger = tmp_path / "l.db"
    with open_(table, ledger=ledger) as c:
        a = c.mean("age", 17, 90, by="edu", epsilon=1.0)  # 16 groups, one charge of 1
        assert len(a) == 16 and a.cost == 1.0 and a.remaining == 0.0
        assert charges(ledger) == 1
        (h,) = c.history()
        assert (h.kind, h.cost, len(h.answer["results"])) == ("mean", 1.0, 16)
        with pytest.raises(BudgetExceeded):
            c.count("edu = 'e3'", epsilon=0.01)


def test_charged_only_where_it_looks(table):
    with open_(table) as c:
        c.median("age", "age < 30", by="sex", epsilon=0.6)
        assert c.remaining("age < 30") == pytest.approx(0.4)
        assert c.remaining("age >= 30") == 1.0
        c.mean("age", 30, 90, "age >= 30", epsilon=1.0)  # disjoint: the whole budget left
        with pytest.raises(BudgetExceeded, match="refused"):
            c.variance("age", 17, 90, "age < 35", epsilon=0.5)
        assert len(c.history()) == 2
        q = c.quantiles("age", [0.1, 0.9], "age < 30", epsilon=0.4)
        assert q.remaining == 0.0


@pytest.mark.parametrize("budget, kw", [(ZCDP(1.0), "rho"), (GDP(1.0), "mu")])
def test_every_currency(table, budget, kw):
    with open_(table, budget) as c:
        m = c.mean("age", 17, 90, by="sex", **{kw: 0.5})
        assert m.mechanism == "discrete_gaussian" and m.currency == kw
        q = c.quantiles("age", [0.25, 0.75], **{kw: 0.5})
        assert q.mechanism == ("exponential_mechanism" if kw == "rho" else "permute_and_flip")
        assert c.remaining() == pytest.approx(0.0 if kw == "rho" else math.sqrt(0.5), abs=1e-9)


def test_quota_and_privacy_unit(table, tmp_path):
    _, schema, df = table
    df2 = df.assign(pid=np.arange(len(df)) // 2)
    df2.to_csv(tmp_path / "u.csv", index=False)
    with Curator.open(
        data=tmp_path / "u.csv", schema=schema, budget=PureDP(1.0), privacy_unit=("pid", 3)
    ) as c:
        e = c.estimate("mean", attribute="age", lower=20, upper=60, epsilon=0.5)
        assert e.noise_parameter == pytest.approx(3 * 2 * 40 / 0.5 * 1)  # k (2 R) / (eps / 2)
        e = c.estimate("median", attribute="age", epsilon=0.5)
        assert e.noise == "permute_and_flip" and e.half_width > 0
        bob = c.analyst("bob", quota=0.3)
        bob.median("age", epsilon=0.3)
        with pytest.raises(BudgetExceeded, match="quota"):
            bob.mean("age", 17, 90, "age > 80", epsilon=0.3)
        assert [h.kind for h in bob.history()] == ["quantile"]
        assert "sensitivity=3" in bob.history()[0].noise


def test_estimate_agrees_with_the_answer_and_charges_nothing(table, tmp_path):
    ledger = tmp_path / "l.db"
    with open_(table, ledger=ledger) as c:
        e = c.estimate("stdev", attribute="age", lower=17, upper=90, by="sex", epsilon=0.5)
        assert (e.kind, e.cells, e.cost, e.admitted) == ("stdev", 2, 0.5, True)
        assert e.error_scale > 0 and "variance" in e.error
        e = c.estimate("quantiles", attribute="age", qs=[0.1, 0.5], by="sex", epsilon=0.5)
        assert (e.kind, e.cells, e.noise) == ("quantile", 4, "permute_and_flip")
        assert charges(ledger) == 0
        a = c.quantiles("age", [0.1, 0.5], by="sex", epsilon=0.5)
        assert max(r.rank_error for r in a.results) == e.half_width  # the largest bound
        assert not c.estimate("median", attribute="age", epsilon=0.6).admitted
        with pytest.raises(InvalidParameter, match="unexpected keyword"):
            c.estimate("median", attribute="age", q=0.5, epsilon=0.1)
        with pytest.raises(InvalidParameter, match="unknown argument"):
            c.estimate("median", attribute="age", _table="x", epsilon=0.1)


BAD = [
    (lambda c: c.mean("age", 0, float("nan"), epsilon=0.1), InvalidParameter),
    (lambda c: c.mean("age", 0, 1e400, epsilon=0.1), InvalidParameter),
    (lambda c: c.mean("age", 5, 5, epsilon=0.1), InvalidParameter),
    (lambda c: c.mean("age", 9, 5, epsilon=0.1), InvalidParameter),
    (lambda c: c.mean("sex", 0, 5, epsilon=0.1), QueryError),
    (lambda c: c.mean("a\udc80", 0, 5, epsilon=0.1), QueryError),
    (lambda c: c.mean("age", 0, 5, epsilon=5e-324), InvalidParameter),
    (lambda c: c.mean("age", 0, 5, epsilon=2.0), BudgetExceeded),
    (lambda c: c.mean("age", 0, 5, rho=0.1), InvalidParameter),
    (lambda c: c.mean("age", 0, 5, by="age", epsilon=0.1), QueryError),
    (lambda c: c.mean("age", 0, 5, by=["sex", "sex"], epsilon=0.1), QueryError),
    (lambda c: c.mean("age", 0, 5, by=[["sex"]], epsilon=0.1), QueryError),
    (lambda c: c.mean("age", 0, 5, by=7, epsilon=0.1), QueryError),
    (lambda c: c.mean("age", 0, 5, by=["sex"] * 9, epsilon=0.1), TooLarge),
    (lambda c: c.mean("age", 0, 5, "age <", epsilon=0.1), QueryError),
    (lambda c: c.variance("age", 0, 2**40, epsilon=0.1), InvalidParameter),
    (lambda c: c.mean("age", 0, 10**30, epsilon=1e-9), InvalidParameter),  # pure noise
    (lambda c: c.quantile("age", 1.5, epsilon=0.1), InvalidParameter),
    (lambda c: c.quantile("age", float("nan"), epsilon=0.1), InvalidParameter),
    (lambda c: c.quantile("age", 0.1234567, epsilon=0.1), InvalidParameter),
    (lambda c: c.quantile("sex", 0.5, epsilon=0.1), QueryError),
    (lambda c: c.quantiles("age", [], epsilon=0.1), InvalidParameter),
    (lambda c: c.quantiles("age", 0.5, epsilon=0.1), InvalidParameter),
    (lambda c: c.quantiles("age", iter([0.5] * 2000), epsilon=0.1), TooLarge),
    (lambda c: c.median("age", candidates=[17, 200], epsilon=0.1), QueryError),
    (lambda c: c.median("age", candidates=["x"], epsilon=0.1), InvalidParameter),
    (lambda c: c.median("edu", candidates=["nope"], epsilon=0.1), QueryError),
    (lambda c: c.median("hours", candidates=[0, 5], epsilon=0.1), QueryError),
    (lambda c: c.median("age", candidates=[], epsilon=0.1), QueryError),
    (lambda c: c.median("age", table="other", epsilon=0.1), InvalidParameter),
]


@pytest.mark.parametrize("call, error", BAD)
def test_bad_arguments_are_clear_errors_and_charge_nothing(table, tmp_path, call, error):
    ledger = tmp_path / "l.db"
    with open_(table, ledger=ledger) as c:
        with pytest.raises(error) as info:
            call(c)
        assert "\n" not in str(info.value)
        assert isinstance(info.value, DpCuratorError)
    assert charges(ledger) == 0


def test_limits_are_checked_before_anything(table):
    from dpcurator.curator.requests import RequestLimits

    with open_(table, limits=RequestLimits(max_cells=100)) as c:
        with pytest.raises(TooLarge, match="max_cells"):
            c.median("age", by=["sex"], epsilon=0.1)  # 2 groups x 74 values
        with pytest.raises(TooLarge, match="max_cells"):
            c.mean("age", 17, 90, by=["sex", "edu", "hours"], epsilon=0.1)
        c.median("age", candidates=range(20, 90, 10), by="sex", epsilon=0.1)
        assert len(c.history()) == 1


def test_empty_groups_answer_too(table):
    with exact(table) as c:
        m = c.mean("age", 17, 90, "age > 95 OR FALSE", by="sex", epsilon=1e6)
        assert [r.count for r in m.results] == [0, 0]
        # small groups say so: no value (never a clip bound), the whole range as interval
        assert all(r.small_group and r.value is None for r in m.results)
        assert all(r.interval == (17.0, 90.0) and r.std_error is None for r in m.results)
        v = c.variance("age", 17, 90, "FALSE", by="sex", epsilon=1e6)
        assert all(r.small_group and r.interval == (0.0, 73**2 / 4) for r in v.results)
        sd = c.stdev("age", 17, 90, "FALSE", epsilon=1e6)
        assert sd.results[0].small_group and sd.results[0].interval == (0.0, 36.5)
        full = c.mean("age", 17, 90, by="sex", epsilon=1e6)
        assert not any(r.small_group or r.value is None for r in full.results)
        recorded = c.history()[0].answer["results"]  # the ledger says so too
        assert [(r["value"], r["small_group"]) for r in recorded] == [(None, True)] * 2
        q = c.median("age", "FALSE", epsilon=1e6)
        assert 17 <= q.value <= 90


def test_statistic_answers_are_exact_fractions_of_the_budget(table):
    with open_(table, PureDP(1.0)) as c:
        for _ in range(10):
            c.median("age", epsilon=0.1)
        assert c.remaining() == 0.0
        with pytest.raises(BudgetExceeded):
            c.median("age", epsilon=Fraction(1, 10**9))


def test_a_workload_with_statistics_is_one_all_or_nothing_release(table, tmp_path):
    ledger = tmp_path / "l.db"
    with open_(table, ledger=ledger) as c:
        plan, answers = c.release_workload(
            "age < 30\nmean(age, 17, 90, where=age < 30, by=sex)\nmedian(edu, by=sex)\nhistogram(sex)"
        )
        assert plan.strategy is None and len(answers) == 5
        assert answers[1].statistic == "mean" and len(answers[1]) == 2
        assert answers[2].statistic == "quantile" and answers[2].results[0].value in EDU
        assert [a.charge_id for a in answers] == [1, 2, 3, 4, 5]
        assert charges(ledger) == 5
        assert c.remaining() < 1e-5  # planned over the maximum overlap: all spent
        with pytest.raises(InvalidParameter, match="strategy='direct'"):
            c.release_workload("median(age)", strategy="tree")
        assert charges(ledger) == 5


def test_share_is_the_fraction_where_the_condition_holds(table, tmp_path):
    _, _, df = table
    with exact(table) as c:
        # the indicator is what a count counts: rows where hours is missing (its marker
        # 0 is a declared value, so a range covers it unless IS NOT NULL says otherwise)
        # stay in the denominator, and count as "no" here
        a = c.share("hours < 40 AND hours IS NOT NULL", "age >= 30", by="sex", epsilon=1e6)
        assert a.statistic == "share" and len(a) == 2
        assert a.request.startswith("share(") and a.request.endswith(", by=sex, where=age >= 30)")
        read = df[df.age >= 30]
        want = (read.hours.between(1, 39)).groupby(read.sex).mean()
        for r, sex in zip(a.results, ["F", "M"], strict=True):
            assert r.value == pytest.approx(want[sex], abs=1e-4)
            assert r.count == (read.sex == sex).sum() and not r.small_group
            assert 0 <= r.interval[0] <= want[sex] <= r.interval[1] <= 1
        whole = c.share("sex = 'F'", epsilon=1e6).results[0]
        assert whole.value == pytest.approx((df.sex == "F").mean(), abs=1e-4)
        # an empty group says so
        e = c.share("age > 30", "sex = 'F'", by="sex", epsilon=1e6)
        assert not e.results[0].small_group and e.results[1].small_group
        assert e.results[1].value is None and e.results[1].interval == (0.0, 1.0)
    ledger = tmp_path / "share.db"
    with open_(table, ledger=ledger) as c:
        s = c.share("age > 60", "sex = 'F'", by="edu", epsilon=0.5)
        assert charges(ledger) == 1 and s.cost == 0.5
        assert c.remaining("sex = 'F'") == pytest.approx(0.5)  # charged on the rows read
        assert c.remaining("sex = 'M'") == 1.0
        assert all(r.value is None or 0 <= r.value <= 1 for r in s.results)
        (h,) = c.history()
        assert h.kind == "share" and len(h.answer["results"]) == 16
        for bad, err in [(None, QueryError), ("age >", QueryError), (3, QueryError)]:
            with pytest.raises(err):
                c.share(bad, epsilon=0.1)
        with pytest.raises(QueryError):
            c.share("age > 3", by="nope", epsilon=0.1)
        assert charges(ledger) == 1
