"""``dpcurator ledger show|history|analysts``: read a ledger alone (never the data), amounts
rounded for people and exact in JSON, the spend-over-time picture, one-line errors."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.curator.ledger import Ledger
from dpcurator.curator.standing import remaining_from_ledger
from dpcurator.privacy import GDP, PureDP

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
SAMPLE = ROOT / "examples" / "data" / "adult-sample.csv"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["ledger", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Path:
    """A ledger with charges by the curator and two analysts, on a copy of the data that
    is deleted afterwards: reading the ledger must not need it."""
    d = tmp_path_factory.mktemp("ledger")
    data = d / "adult.csv"
    shutil.copy(SAMPLE, data)
    path = d / "l.db"
    with Curator.open(
        data=data, schema=SCHEMA, budget=PureDP(1.0), ledger=path, separator=",", header=True
    ) as cur:
        cur.count("age < 30", epsilon=0.3)
        cur.count("age >= 30", epsilon=0.2)  # disjoint: the worst point has 0.3
        alice = cur.analyst("alice", quota=0.5)
        first = alice.count("age < 30", epsilon=0.1)
        alice.histogram("sex", epsilon=0.1)
        cur.add_analyst("bob", quota=0.25)
        bob = cur.analyst("bob")
        bob.count("sex = 'Male'", epsilon=0.05)
        cur.remaining()
        expected = cur.remaining_detail("age >= 30")
    data.unlink()
    assert expected.value == 0.65
    (d / "alice_first.json").write_text(json.dumps(first.value))
    return path


def test_show_reads_only_the_ledger(ledger, capsys) -> None:
    code, out, err = run(capsys, "show", ledger)
    assert code == 0 and err == ""
    assert "5 charges, 2 analysts" in out
    # worst point: age < 30 AND sex = 'Male' has 0.3 + 0.1 + 0.1 + 0.05
    assert "spent:      0.55 at the worst point" in out
    assert "remaining:  0.45 everywhere" in out
    assert "alice" in out and "bob" in out and "(no analyst)" in out


def test_show_json_has_exact_amounts(ledger, capsys) -> None:
    code, out, _ = run(capsys, "show", ledger, "--json", "--query", "age >= 30")
    assert code == 0
    d = json.loads(out)
    assert d["remaining_exact"] == "9/20" and d["remaining"] == 0.45
    assert d["spent_exact"] == "11/20"
    q = d["query"]
    assert q["query"] == "age >= 30" and q["remaining_exact"] == "13/20" and q["remaining"] == 0.65
    a = d["analysts"]["alice"]
    assert a["quota_exact"] == "1/2" and a["spent_exact"] == "1/5" and a["remaining"] == 0.3
    assert d["analysts"]["bob"]["remaining_exact"] == "1/5"
    assert d["tables"]["data"]["charges"] == 5 and d["charges_without_analyst"] == 2


def test_show_agrees_with_the_curator(ledger) -> None:
    """One notion of remaining: the ledger alone gives what the curator gives."""
    led = Ledger(ledger, create=False)
    try:
        st = remaining_from_ledger(led, "age >= 30")
        assert st.remaining == Fraction(13, 20)
        mine = remaining_from_ledger(led, analyst="alice")
        assert mine.quota_remaining == Fraction(3, 10) and mine.value == Fraction(3, 10)
    finally:
        led.close()


def test_show_is_exact_when_the_costs_denominators_grow(tmp_path, capsys) -> None:
    """Costs of 1/3 and 1/7 (their shortest decimals, 16 places each) and a ZCDP-like 12-place
    cost on overlapping ranges: the costs times their common denominator pass float64's
    2^53, and the worst point is still exact (it used to be an upper bound ~5e-10 too high,
    flagged ``exact: false``)."""
    path = tmp_path / "wide.db"
    costs = [Fraction(repr(1 / 3)), Fraction(repr(1 / 7)), Fraction("0.000123456789")]
    queries = ["age < 40", "age >= 30", "age >= 35 AND age < 60"]
    with Curator.open(
        data=SAMPLE, schema=SCHEMA, budget=PureDP(10), ledger=path, separator=",", header=True
    ) as cur:
        answers = [cur.count(q, epsilon=c) for q, c in zip(queries, costs, strict=True)]
        detail = cur.remaining_detail()
        local = cur.remaining_detail("age >= 50")
    worst = max(
        sum((c for q, c in zip(queries, costs, strict=True) if _age_covers(q, age)), Fraction(0))
        for age in range(17, 91)
    )
    assert worst == sum(costs)  # ages 35 to 39 have all three
    code, out, _ = run(capsys, "show", path, "--json", "--query", "age >= 50")
    d = json.loads(out)
    assert code == 0 and d["exact"] is True
    assert Fraction(d["spent_exact"]) == worst
    assert Fraction(d["remaining_exact"]) == 10 - worst
    assert Fraction(d["query"]["remaining_exact"]) == 10 - costs[1] - costs[2]
    for got, truth in ((detail, 10 - worst), (local, 10 - costs[1] - costs[2])):
        # exact, rounded down to a float
        assert got.exact and Fraction(got.value) <= truth < Fraction(got.value) + 2**-48
    assert all(a.remaining_exact for a in answers)


def _age_covers(query: str, age: int) -> bool:
    """Whether ``age`` satisfies a conjunction of ``age < n`` / ``age >= n``."""
    ok = True
    for part in query.split(" AND "):
        _, op, n = part.split()
        ok &= age < int(n) if op == "<" else age >= int(n)
    return ok


def test_history_lists_every_charge(ledger, capsys) -> None:
    code, out, _ = run(capsys, "history", ledger)
    assert code == 0
    lines = out.splitlines()
    assert "age < 30" in lines[1] and "0.3" in lines[1]
    assert "histogram(sex)" in out and "5 charges" in lines[-1]
    code, out, _ = run(capsys, "history", ledger, "--analyst", "alice", "--json")
    rows = json.loads(out)
    assert [r["query"] for r in rows] == ["age < 30", "histogram(sex)"]
    assert rows[0]["cost_exact"] == "1/10" and rows[0]["analyst"] == "alice"
    assert rows[0]["time"].endswith("Z") and rows[0]["answered"]
    # the answer as released, recoverable from the ledger (a lost stdout loses nothing)
    assert rows[0]["answer"] == {
        "age < 30": json.loads((ledger.parent / "alice_first.json").read_text())
    }
    assert set(rows[1]["answer"]) == {"sex = 'Female'", "sex = 'Male'"}


def test_analysts_lists_quotas_roles_tokens(ledger, capsys) -> None:
    code, out, _ = run(capsys, "analysts", ledger, "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["alice"]["quota_exact"] == "1/2" and not rows["alice"]["active"]
    assert rows["bob"]["quota"] == 0.25 and rows["bob"]["active"] and not rows["bob"]["admin"]
    code, out, _ = run(capsys, "analysts", ledger)
    assert "bob" in out and "active" in out


def test_spend_plot(ledger, tmp_path, capsys) -> None:
    png = tmp_path / "spend.png"
    code, out, _ = run(capsys, "show", ledger, "--plot", png)
    assert code == 0 and png.stat().st_size > 10_000 and str(png) in out


def test_mu_amounts_are_square_roots(tmp_path, capsys) -> None:
    path = tmp_path / "mu.db"
    with Curator.open(
        data=SAMPLE, schema=SCHEMA, budget=GDP(1.0), ledger=path, separator=",", header=True
    ) as cur:
        cur.count("age < 30", mu=0.6)
    _, out, _ = run(capsys, "show", path, "--json")
    d = json.loads(out)
    assert d["exact_unit"] == "mu^2" and d["remaining_exact"] == "16/25"
    assert d["remaining"] == 0.8 and d["spent"] == 0.6


@pytest.mark.parametrize(
    "argv, words",
    [
        (["show", "MISSING"], ["no such file"]),
        (["show", "LEDGER", "--query", "age <"], ["--query 'age <'"]),
        (["show", "LEDGER", "--table", "data"], ["--table goes with --query"]),
        (["show", "LEDGER", "--query", "age < 30", "--table", "nope"], ["nope"]),
        (["show", "LEDGER", "--plot", "/no/such/folder/x.png"], ["does not exist"]),
        (["history", "LEDGER", "--analyst", "carol"], ["carol"]),
        (["analysts", "NOTALEDGER"], ["ledger"]),
    ],
)
def test_bad_input_is_one_line(ledger, tmp_path, capsys, argv, words) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a ledger")
    subs = {"LEDGER": ledger, "MISSING": tmp_path / "missing.db", "NOTALEDGER": junk}
    code, out, err = run(capsys, *[subs.get(a, a) for a in argv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_two_tables_compose_sequentially(tmp_path, capsys) -> None:
    """A person may be in both tables: each table counts at its worst point."""
    path = tmp_path / "two.db"
    tables = {"a": (SAMPLE, SCHEMA), "b": (SAMPLE, SCHEMA)}
    with Curator.open(
        tables=tables, budget=PureDP(1.0), ledger=path, separator=",", header=True
    ) as cur:
        cur.count("age < 30", epsilon=0.25, table="a")
        cur.count("age >= 30", epsilon=0.125, table="b")
    code, out, _ = run(capsys, "show", path, "--json", "--query", "age < 30", "--table", "a")
    assert code == 0
    d = json.loads(out)
    assert d["spent_exact"] == "3/8" and d["tables"]["a"]["spent_exact"] == "1/4"
    assert d["query"]["spent_exact"] == "3/8"  # 1/4 here, and b's worst point 1/8
    code, _, err = run(capsys, "show", path, "--query", "age < 30")
    assert code == 2
    assert err.count("\n") == 1 and "--table" in err and "table=" not in err, err


def test_show_reads_a_ledger_with_a_charge_on_a_join(tmp_path, capsys) -> None:
    """A SELECT on ``a JOIN b`` (the privacy unit's join) is charged on the joined
    domain: the ledger's readers rebuild that schema from the two tables' (a KeyError
    and a traceback before), list the join as a table of its own, and the worst point
    has the charge."""
    (tmp_path / "a.csv").write_text("uid,x\n1,0\n1,1\n2,1\n")
    (tmp_path / "b.csv").write_text("uid,y\n1,5\n2,6\n")
    for name, col, top in (("a", "x", 1), ("b", "y", 9)):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"attributes": [{"name": col, "type": "integer", "min": 0, "max": top}]})
        )
    path = tmp_path / "j.db"
    with Curator.open(
        tables={n: (tmp_path / f"{n}.csv", tmp_path / f"{n}.json") for n in "ab"},
        budget=PureDP(10), ledger=path, privacy_unit=("uid", 2),
    ) as cur:  # fmt: skip
        cur.sql(
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=3) COUNT(*) AS n FROM a JOIN b USING (uid) WHERE y > 5"
        )
    code, out, err = run(capsys, "show", path, "--json")
    assert code == 0 and err == ""
    shown = json.loads(out)
    assert shown["tables"]["a JOIN b"] == {
        "charges": 1, "spent": 3.0, "spent_exact": "3", "exact": True
    }  # fmt: skip
    assert shown["tables"]["a"]["charges"] == 0 and shown["spent_exact"] == "3"
    code, out, _ = run(capsys, "show", path)
    assert code == 0 and "a JOIN b" in out
