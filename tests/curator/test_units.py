"""``units(condition)``: distinct privacy units, sensitivity 1, charged k times its cost.

The brute-force test checks the privacy claim itself: after a long adaptive mix of
counts, means and ``units()``, every unit's loss, for every choice of k of its rows
(which rows are kept must not matter), is within the budget.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
from fractions import Fraction

import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends.unit_rows import kept_by_unit
from dpcurator.errors import BudgetExceeded, DpCuratorError, InvalidParameter, QueryError
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import GDP, ZCDP, PureDP

B_VALUES = ["p", "q", "r"]
SCHEMA = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 3},
        {"name": "b", "type": "categorical", "values": B_VALUES},
    ]
}
KEY = bytes(range(32))


def small_table(seed: int = 5, units: int = 12) -> pd.DataFrame:
    """Units u0, u1, ... with 1 to 8 rows each over the 12 points of (a, b)."""
    rng = random.Random(seed)
    rows = []
    for u in range(units):
        n = 1 + (u % 8) if u < 8 else rng.randint(1, 8)
        for _ in range(n):
            rows.append((f"u{u}", rng.randint(0, 3), rng.choice(B_VALUES)))
    return pd.DataFrame(rows, columns=["uid", "a", "b"])


def open_units(df, tmp_path, budget, k=3, **kw) -> Curator:
    return Curator.open(
        df,
        SCHEMA,
        budget=budget,
        ledger=tmp_path / "ledger.db",
        privacy_unit=("uid", k),
        unit_key=KEY,
        rng=SeededRandomSource(11),
        allow_insecure=True,
        **kw,
    )


def condition(lo: int, hi: int, bs: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{b}'" for b in bs)
    return f"a >= {lo} AND a <= {hi} AND b IN ({listed})"


def covers(cond: tuple[int, int, tuple[str, ...]], row: tuple[int, str]) -> bool:
    lo, hi, bs = cond
    return lo <= row[0] <= hi and row[1] in bs


def test_every_unit_and_every_choice_of_its_rows_stays_within_the_budget(tmp_path):
    df = small_table()
    k, budget = 3, Fraction(1)
    rng = random.Random(2024)
    costs = [Fraction(1, 40), Fraction(1, 20), Fraction(1, 10), Fraction(1, 5)]
    asked: dict[int, tuple[str, tuple[int, int, tuple[str, ...]], Fraction]] = {}
    refused = 0
    last = 0
    with open_units(df, tmp_path, PureDP(1.0), k=k) as cur:
        for step in range(150):
            # adaptive: the next request depends on the answers released so far
            r = random.Random(rng.random() + last)
            lo = r.randint(0, 3)
            hi = r.randint(lo, min(3, lo + r.choice((0, 0, 1, 3))))
            bs = tuple(sorted(r.sample(B_VALUES, r.choice((1, 1, 2, 3)))))
            cond = (lo, hi, bs)
            c = r.choice(costs)
            kind = r.choice(("count", "mean", "units", "units"))
            try:
                if kind == "count":
                    ans = cur.count(condition(*cond), epsilon=float(c))
                    last = ans.value
                elif kind == "mean":
                    ans = cur.mean("a", 0, 3, condition(*cond), epsilon=float(c))
                    last = step
                else:
                    ans = cur.units(condition(*cond), epsilon=float(c))
                    last = ans.value
            except BudgetExceeded:
                refused += 1
                continue
            asked[ans.charge_id] = (kind, cond, c)
        ledger = {row.id: row for row in cur.ledger.charges_after(0)}
    answered = len(asked)
    assert answered + refused == 150
    assert answered >= 40, f"only {answered} of 150 requests answered"
    assert refused >= 10  # the budget was really reached somewhere
    assert set(ledger) == set(asked)
    for cid, (kind, _, c) in asked.items():
        assert ledger[cid].kind == kind
        assert ledger[cid].cost == (k * c if kind == "units" else c)  # k c on each point

    rows_of = {
        uid: list(zip(g["a"].astype(int), g["b"], strict=True)) for uid, g in df.groupby("uid")
    }
    worst = Fraction(0)
    for rows in rows_of.values():
        for chosen in itertools.combinations(rows, min(k, len(rows))):
            loss = Fraction(0)
            for kind, cond, c in asked.values():
                m = sum(covers(cond, row) for row in chosen)
                # a count or a mean at cost c, noise of sensitivity k: c m / k (the
                # mean's two halves likewise); units(): sensitivity 1 at cost c
                loss += c * (m >= 1) if kind == "units" else c * m / k
            assert loss <= budget, (rows, chosen, loss)
            worst = max(worst, loss)
    assert worst > budget / 2  # the bound is approached, not vacuous


def kept_units(df: pd.DataFrame, k: int, cond) -> int:
    """Reference: the units with a kept row (each unit's k rows of smallest keyed hash)
    in ``cond``."""
    rows = [
        (str(u), (int(a), B_VALUES.index(b)))
        for u, a, b in zip(df["uid"], df["a"], df["b"], strict=True)
    ]
    kept = kept_by_unit(rows, k, KEY)
    return sum(any(covers(cond, (a, B_VALUES[b])) for a, b in mine) for mine in kept.values())


@pytest.mark.parametrize("k", [3, 8])
def test_exact_at_a_huge_epsilon(tmp_path, k):
    df = small_table(seed=9, units=40)
    with open_units(df, tmp_path, PureDP(1e9), k=k) as cur:
        for cond in [(0, 3, tuple(B_VALUES)), (1, 2, ("p", "q")), (3, 3, ("r",)), (0, 0, ("q",))]:
            got = cur.units(condition(*cond), epsilon=1e6)
            assert got.value == kept_units(df, k, cond)
            assert got.query == f"units({condition(*cond)})"
            assert got.cost == k * 1e6 and got.half_width == 0
        everyone = cur.units(epsilon=1e6)
        assert everyone.value == df.uid.nunique() and everyone.query == "units()"
        if k == 8:  # every row kept: pandas' distinct count
            mask = (df.a >= 1) & (df.a <= 2) & df.b.isin(["p", "q"])
            assert cur.units("a IN (1, 2) AND b != 'r'", epsilon=1e6).value == (
                df[mask].uid.nunique()
            )
        hist = cur.history()[-1]
        assert hist.kind == "units" and hist.answer == {hist.request: hist.answer[hist.request]}


@pytest.mark.parametrize(
    ("budget", "kw", "noise"),
    [
        (ZCDP(1.0), {"rho": 0.05}, "discrete_gaussian"),
        (GDP(1.0), {"mu": 0.2}, "discrete_gaussian"),
        (PureDP(1.0), {"epsilon": 0.1}, "discrete_laplace"),
    ],
)
def test_every_currency_charges_k_times_the_additive_cost(tmp_path, budget, kw, noise):
    df = small_table()
    with open_units(df, tmp_path, budget) as cur:
        est = cur.estimate("units", condition="b = 'p'", **kw)
        ans = cur.units("b = 'p'", **kw)
        assert ans.noise == est.noise == noise
        assert ans.noise_parameter == est.noise_parameter
        assert ans.cost == est.cost and est.admitted
        (row,) = cur.ledger.charges_after(0)
        amount = Fraction(str(kw[cur.budget.currency]))
        amount = amount**2 if "mu" in kw else amount
        assert row.cost == 3 * amount and row.kind == "units"
        # the noise is a per-row count's at the given cost (sensitivity 1)
        count = cur.estimate("count", query="b = 'p'", **kw)
        assert est.noise_parameter < count.noise_parameter  # that one has sensitivity k


def charges(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM charges").fetchone()[0]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.units("colour = 'p'", epsilon=0.1), QueryError, "unknown attribute"),
        (lambda c: c.units("a <", epsilon=0.1), QueryError, None),
        (lambda c: c.units(42, epsilon=0.1), QueryError, "a query must be text"),
        (lambda c: c.units("a = 1", rho=0.1), InvalidParameter, "give the cost as epsilon="),
        (lambda c: c.units("a = 1", epsilon=-1), InvalidParameter, None),
        (lambda c: c.units("a = 1", epsilon=1e-300), DpCuratorError, None),
        (lambda c: c.units("a = 1", epsilon=0.5), BudgetExceeded, "k = 3 times"),
        (lambda c: c.units("a = 1", epsilon=0.1, table="other"), InvalidParameter, "unknown"),
        (
            lambda c: c.estimate("units", condition="a = 1", epsilon=0.1, bins=3),
            InvalidParameter,
            "units:",
        ),
        (lambda c: c.analyst("nobody-yet").units("a = 1", epsilon=2.0), BudgetExceeded, None),
    ],
)
def test_bad_requests_are_one_line_errors_and_charge_nothing(tmp_path, call, error, match):
    with open_units(small_table(), tmp_path, PureDP(1.0)) as cur:
        with pytest.raises(error, match=match) as info:
            call(cur)
        assert "\n" not in str(info.value)
        assert cur.history() == []
    assert charges(tmp_path / "ledger.db") == 0


def test_over_the_budget_on_its_points_is_refused_and_charges_nothing(tmp_path):
    with open_units(small_table(), tmp_path, PureDP(1.0)) as cur:
        cur.units("a = 1", epsilon=0.3)  # charges 0.9 on a = 1
        with pytest.raises(BudgetExceeded, match=r"refused: 'units\(a <= 1\)' costs 0.3 epsilon"):
            cur.units("a <= 1", epsilon=0.1)
        cur.units("a = 2", epsilon=0.3)  # elsewhere: admitted
        bob = cur.analyst("bob", quota=0.25)
        with pytest.raises(BudgetExceeded, match="quota"):
            bob.units("a = 3", epsilon=0.1)  # 0.3 over her 0.25
        assert [h.kind for h in cur.history()] == ["units", "units"]


def test_without_a_privacy_unit_units_is_refused(tmp_path):
    df = small_table()
    with Curator.open(df, SCHEMA, budget=PureDP(1.0), ledger=tmp_path / "l.db") as cur:
        for call in (
            lambda: cur.units("a = 1", epsilon=0.1),
            lambda: cur.estimate("units", condition="a = 1", epsilon=0.1),
        ):
            with pytest.raises(InvalidParameter, match=r"no privacy unit.*count"):
                call()
        assert cur.history() == []


@pytest.mark.parametrize(("budget", "cur"), [(PureDP(1.0), "epsilon"), (GDP(1.0), "mu")])
def test_a_workload_units_line_is_charged_its_planned_cost(tmp_path, budget, cur):
    df = small_table()
    with open_units(df, tmp_path, budget) as cur_:
        plan, answers = cur_.release_workload("a = 1\nunits(a = 1)\nmean(a, 0, 3, where=b = 'p')")
        count, units, _ = answers
        assert units.query == "units(a = 1)"
        rows = cur_.ledger.charges_after(0)
        assert [r.kind for r in rows] == ["workload", "units", "mean"]
        assert rows[1].cost == cur_.budget.additive(Fraction(str(plan.values[1])))
        # its noise: sensitivity 1 at a k-th of the planned cost. For epsilon that is a
        # count's noise at that cost; for mu (additive in mu^2) a sqrt(k)-th of its sigma
        ratio = plan.values[0] / plan.values[1]
        if cur == "epsilon":
            assert units.noise_parameter == pytest.approx(count.noise_parameter * ratio)
        else:  # rounded down to a float mu whose square is below the k-th: a hair more
            want = count.noise_parameter * ratio / 3**0.5
            assert want * (1 - 1e-6) <= units.noise_parameter <= want * (1 + 1e-2)


def test_a_workload_units_line_without_a_unit_or_with_a_bad_condition(tmp_path):
    df = small_table()
    with Curator.open(df, SCHEMA, budget=PureDP(1.0), ledger=tmp_path / "l.db") as cur:
        with pytest.raises(InvalidParameter, match="no privacy unit"):
            cur.release_workload("a = 1\nunits(a = 2)")
        assert cur.history() == []
    with open_units(df, tmp_path, PureDP(1.0)) as cur:
        with pytest.raises(DpCuratorError, match=r"<workload>:2: .*unknown attribute"):
            cur.release_workload("a = 1\nunits(colour = 2)")
        assert cur.history() == []
