"""``dpcurator answer`` with statistic lines: rows per group, one ledger charge per line,
refusals (one line, exit 2) before anything is charged."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from dpcurator.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
SAMPLE = ROOT / "examples" / "data" / "adult-sample.csv"
WORKLOAD = """age < 30
mean(hours-per-week, 0, 100, where=age < 30)
median(age, by=sex) @ 2
quantiles(education, [0.25, 0.75])
histogram(sex)
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def charges(ledger: Path) -> list[tuple[str, str]]:
    if not ledger.exists():
        return []
    with sqlite3.connect(ledger) as con:
        return con.execute("select kind, request from charges order by id").fetchall()


@pytest.fixture
def workload(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text(WORKLOAD)
    return p


def base(workload, ledger):
    return [
        "answer",
        "--data",
        SAMPLE,
        "--schema",
        SCHEMA,
        "--workload",
        workload,
        "--ledger",
        ledger,
    ]


def test_rows_and_charges(tmp_path, capsys, workload):
    ledger, out = tmp_path / "l.db", tmp_path / "a.csv"
    code, stdout, _ = run(capsys, *base(workload, ledger), "--epsilon", 1, "--out", out)
    assert code == 0 and "statistic lines" in stdout
    rows = list(csv.DictReader(out.open()))
    assert [r["line"] for r in rows] == ["1", "2", "3", "3", "4", "4", "5", "5"]
    mean = rows[1]
    assert mean["query"] == "mean(hours-per-week, 0, 100, where=age < 30)"
    assert float(mean["interval_low"]) <= float(mean["answer"]) <= float(mean["interval_high"])
    assert 20 < float(mean["answer"]) < 60 and mean["noise"] == "discrete_laplace"
    med = rows[2:4]
    assert [r["group"] for r in med] == ["sex = 'Female'", "sex = 'Male'"]
    assert all(17 <= int(r["answer"]) <= 90 and int(r["rank_error"]) > 0 for r in med)
    assert [r["q"] for r in rows[4:6]] == ["0.25", "0.75"]
    assert rows[4]["answer"] in ("HS-grad", "Some-college", "11th", "Assoc-voc", "10th")
    assert [k for k, _ in charges(ledger)] == ["workload", "mean", "quantile", "quantile"] + [
        "workload"
    ] * 2
    # the median has weight 2: it got a larger part of the budget than the count
    assert float(med[0]["cost"]) > float(rows[0]["cost"])


def test_json_and_rho(tmp_path, capsys, workload):
    code, stdout, _ = run(capsys, *base(workload, ":memory:"), "--rho", 0.5, "--json")
    d = json.loads(stdout)
    assert code == 0 and len(d["answers"]) == 8
    assert {a["noise"] for a in d["answers"]} >= {"discrete_gaussian", "exponential_mechanism"}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--postprocess", "consistent"], "--postprocess consistent"),
        (["--strategy", "marginals"], "--strategy direct"),
        (["--plot", "x.png"], "--plot draws counts"),
        (["--out", "x.parquet"], "categorical"),
    ],
)
def test_refusals_charge_nothing(tmp_path, capsys, workload, extra, message):
    ledger = tmp_path / "l.db"
    extra = [str(tmp_path / e) if e.startswith("x.") else e for e in extra]
    code, _, err = run(capsys, *base(workload, ledger), "--epsilon", 1, *extra)
    assert code == 2 and message in err and err.count("\n") == 1
    assert charges(ledger) == []


def test_a_bad_statistic_line_names_its_line(tmp_path, capsys):
    w = tmp_path / "w.txt"
    w.write_text("age < 30\nmedian(age, by=nope)\n")
    ledger = tmp_path / "l.db"
    code, _, err = run(capsys, *base(w, ledger), "--epsilon", 1)
    assert code == 2 and f"{w}:2: unknown attribute 'nope'" in err
    assert charges(ledger) == []


def test_a_workload_over_the_whole_request_limit_is_one_line(tmp_path, capsys):
    """Five lines of a mean by 201,600 groups each (each within max_cells): 1,008,000
    cells in all, over the session's max_request_cells: one line, exit 2, at once,
    nothing charged."""
    import time

    by = "[native-country, occupation, education, race, sex, income]"
    w = tmp_path / "w.txt"
    w.write_text(f"mean(hours-per-week, 0, 99, by={by})\n" * 5)
    ledger = tmp_path / "l.db"
    t0 = time.monotonic()
    code, _, err = run(capsys, *base(w, ledger), "--epsilon", 1)
    assert time.monotonic() - t0 < 60  # refused from the schema, not worked through
    assert code == 2 and err.count("\n") == 1, err
    assert "this workload asks for 1008000 cells in all" in err
    assert "max_request_cells = 1000000; split it" in err
    assert charges(ledger) == []


def test_shares_and_histograms_with_where_in_a_workload(tmp_path, capsys):
    w = tmp_path / "shares.txt"
    w.write_text(
        "share(hours-per-week > 40, by=sex, where=age < 30)\n"
        "histogram(sex, where=age >= 30)\n"
        "marginal(sex, race, where=age < 30)\n"
    )
    ledger, out = tmp_path / "l.db", tmp_path / "a.csv"
    code, _, err = run(capsys, *base(w, ledger), "--epsilon", 1, "--out", out)
    assert code == 0, err
    rows = list(csv.DictReader(out.open()))
    share = rows[:2]
    assert [r["group"] for r in share] == ["sex = 'Female'", "sex = 'Male'"]
    for r in share:
        assert 0 <= float(r["interval_low"]) <= float(r["interval_high"]) <= 1
        assert r["small_group"] in ("True", "False")
    assert [r["query"] for r in rows[2:4]] == [
        "sex = 'Female' AND (age >= 30)",
        "sex = 'Male' AND (age >= 30)",
    ]
    assert all(r["line"] == "3" for r in rows[4:]) and len(rows) > 4
    kinds = [k for k, _ in charges(ledger)]
    assert kinds[0] == "share" and set(kinds[1:]) == {"workload"}
