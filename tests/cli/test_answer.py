"""``dpcurator answer`` end to end on real files (DuckDB, the shipped Adult sample and the
full Adult file), the noise of released answers against the exact pmf, and bad input
(one line, exit 2, nothing charged)."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.cli import main
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.planner import make_plan
from dpcurator.privacy import ZCDP, PureDP
from dpcurator.queries import Schema, parse_workload

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
SAMPLE = ROOT / "examples" / "data" / "adult-sample.csv"
MARGINALS = ROOT / "examples" / "adult" / "marginals.txt"
MIXTURE = ROOT / "examples" / "adult" / "mixture.txt"
COLUMNS = ROOT / "examples" / "adult" / "columns.txt"
ADULT = Path("/work/shared/data/adult/adult.data")
BASE = ["answer", "--data", SAMPLE, "--schema", SCHEMA, "--separator", ",", "--header"]
DIRECT = ["--strategy", "direct"]  # these tests study the measurement of the asked queries


def run(capsys, *argv) -> tuple[int, str, str]:
    if argv and argv[0] == "answer" and "--strategy" not in argv:
        argv = (*argv, *DIRECT)
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def charges(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as con:
        return con.execute("select count(*) from charges").fetchone()[0]


def test_json_summary_and_csv(tmp_path, capsys) -> None:
    out = tmp_path / "answers.csv"
    code, so, err = run(
        capsys,
        *BASE,
        "--workload",
        MIXTURE,
        "--epsilon",
        1,
        "--json",
        "--out",
        out,
        "--ledger",
        tmp_path / "l.db",
    )
    assert code == 0, err
    d = json.loads(so)
    assert {
        "queries",
        "gamma",
        "allocation",
        "guarantee",
        "utility_gain",
        "expected_abs_noise",
        "out",
    } <= set(d)
    assert d["allocation"] == "optimal" and d["out"] == str(out)
    # the default objective, per-table: every line of the mixture covers each point once,
    # so each line weighing the same makes the equal split (uniform) optimal
    assert d["objective"] == "per-table" and 0 <= d["optimality_gap"] <= 1e-4
    e = d["expected_abs_noise"]
    assert e["optimal"] == pytest.approx(e["uniform"], rel=1e-4)
    assert e["uniform"] < e["sequential"] / 10
    assert d["utility_gain"] == pytest.approx(1 - e["optimal"] / e["sequential"])
    assert d["guarantee"]["epsilon"] <= 1.0 and d["guarantee"]["kind"] == "pure"
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == d["queries"] == len(parse_workload(MIXTURE, Schema.load(SCHEMA)))
    r = rows[0]
    assert r["query"] == "total" and r["noise"] == "discrete_laplace"
    assert int(r["interval_low"]) <= int(r["noisy_answer"]) <= int(r["interval_high"])


def test_full_adult_file_readable_summary(tmp_path, capsys) -> None:
    if not ADULT.exists():
        pytest.skip("shared Adult data not available")
    out = tmp_path / "a.json"
    code, so, err = run(
        capsys,
        "answer",
        "--data",
        ADULT,
        "--schema",
        SCHEMA,
        "--workload",
        MARGINALS,
        "--rho",
        0.5,
        "--separator",
        ", ",
        "--no-header",
        "--columns",
        COLUMNS,
        "--out",
        out,
        "--postprocess",
        "clamp",
        "--ledger",
        tmp_path / "l.db",
    )
    assert code == 0, err
    assert "gamma:        28 (exact)" in so and "utility gain" in so and "theorem:" in so
    rows = json.loads(out.read_text())
    assert len(rows) == 4354 and all(r["answer"] >= 0 for r in rows)
    total = sum(r["noisy_answer"] for r in rows if r["line"] == 4)  # age histogram
    assert abs(total - 32561) < 2000


def test_postprocess_consistent_round(tmp_path, capsys) -> None:
    w = tmp_path / "w.txt"
    w.write_text("total\nhistogram(sex)\nmarginal(sex, income)\n")
    out = tmp_path / "a.csv"
    code, _, err = run(
        capsys,
        *BASE,
        "--workload",
        w,
        "--rho",
        0.1,
        "--out",
        out,
        "--postprocess",
        "consistent",
        "--ledger",
        ":memory:",
    )
    assert code == 0, err
    v = [float(r["answer"]) for r in csv.DictReader(out.open())]
    # total; sex (2 values); sex x income (4 cells)
    assert v[0] == pytest.approx(sum(v[1:3]), abs=1e-6) == pytest.approx(sum(v[3:7]), abs=1e-6)


def test_approx_target_and_ledger(tmp_path, capsys) -> None:
    ledger = tmp_path / "l.db"
    code, so, err = run(
        capsys,
        *BASE,
        "--workload",
        MIXTURE,
        "--epsilon",
        1,
        "--delta",
        1e-6,
        "--ledger",
        ledger,
        "--json",
        "--allocation",
        "uniform",
    )
    assert code == 0, err
    d = json.loads(so)
    g = d["guarantee"]
    assert g["kind"] == "approx" and g["epsilon"] <= 1.0 and g["delta"] == 1e-6
    assert "laplace_alternative" in d
    n = charges(ledger)
    assert n == d["queries"]
    # the budget is spent: a second release is refused, one line, nothing charged
    code, so, err = run(
        capsys, *BASE, "--workload", MIXTURE, "--epsilon", 1, "--delta", 1e-6, "--ledger", ledger
    )
    assert code == 2 and err.count("\n") == 1 and "refused" in err
    assert charges(ledger) == n


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--epsilon", "-1"], "epsilon"),
        (["--epsilon", "1", "--rho", "1"], "exactly one budget"),
        (["--rho", "1", "--delta", "1e-6"], "--delta"),
        (["--epsilon", "1", "--delta", "2"], "delta"),
        (["--epsilon", "nan"], "finite"),
        (["--epsilon", "1", "--postprocess", "smooth"], "postprocess"),
        (["--epsilon", "1", "--workload", "BADWORKLOAD"], "age"),
        (["--epsilon", "1", "--out", "/nonexistent-dir/x.csv"], "nonexistent"),
        (["--epsilon", "1", "--workload", "BIGCONSISTENT", "--postprocess", "consistent"], "cells"),
        (["--epsilon", "1", "--separator", ";"], ""),
    ],
)
def test_bad_input_one_line_nothing_charged(tmp_path, capsys, extra, match) -> None:
    ledger = tmp_path / "l.db"
    bad = tmp_path / "bad.txt"
    bad.write_text("total\nage = 200\n")
    big = tmp_path / "big.txt"
    big.write_text("marginal(age, hours-per-week, native-country, occupation, education)\n")
    args = [*BASE, "--ledger", ledger]
    extra = [
        str(bad) if e == "BADWORKLOAD" else str(big) if e == "BIGCONSISTENT" else e for e in extra
    ]
    if "--workload" not in extra:
        args += ["--workload", MIXTURE]
    code, _so, err = run(capsys, *args, *extra)
    assert code == 2
    assert err.count("\n") == 1 and match in err
    assert charges(ledger) == 0


def _chi_square_pvalue(errors: np.ndarray, noise) -> float:
    """Chi-square goodness of fit of integer errors against the noise's exact pmf,
    pooling the tails so that every bin expects at least 5."""
    n = len(errors)
    h = 0
    while noise.tail(h) * n >= 5 * 2:
        h += 1
    ks = np.arange(-h, h + 1)
    expected = np.array([noise.pmf(int(k)) for k in ks]) * n
    observed = np.array([(errors == k).sum() for k in ks], float)
    tail_e = n - expected.sum()
    tail_o = n - observed.sum()
    if tail_e >= 5:
        expected = np.append(expected, tail_e)
        observed = np.append(observed, tail_o)
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


@pytest.mark.parametrize("guarantee", [PureDP(2.0), ZCDP(2.0)])
def test_released_errors_follow_the_claimed_pmf(guarantee) -> None:
    """answer - truth over 3 x 4,354 released marginal cells, against the exact pmf of
    the claimed noise (uniform allocation: one distribution). Significance 1e-4 per test:
    the false-alarm rate of this test is 1e-4 per run (seeded: deterministic in CI)."""
    schema = Schema.load(SCHEMA)
    wl = parse_workload(MARGINALS, schema)
    plan = make_plan(wl.queries, wl.weights, guarantee, "uniform", compare=False)
    assert len({str(n) for n in plan.noises}) == 1
    truth_backend = load_table(SAMPLE, schema, separator=",", header=True)
    truth = truth_backend.counts(list(wl.queries))
    truth_backend.close()
    errors = []
    for seed in range(3):
        with Curator.open(
            data=SAMPLE,
            schema=schema,
            budget=guarantee,
            separator=",",
            header=True,
            rng=SeededRandomSource(seed),
            allow_insecure=True,
        ) as cur:
            ans = cur.release(list(plan.queries), list(plan.values))
        assert [a.noise_parameter for a in ans[:1]] == [
            float(getattr(plan.noises[0], "scale", None) or plan.noises[0].sigma)
        ]
        errors.append(np.array([a.value for a in ans]) - truth)
    err = np.concatenate(errors)
    assert _chi_square_pvalue(err, plan.noises[0]) > 1e-4
    # and the 95% intervals cover about 95% (binomial, 4 sigma)
    cover = np.mean(np.abs(err) <= plan.noises[0].interval(0.05))
    assert abs(cover - (1 - plan.noises[0].tail(plan.noises[0].interval(0.05)))) < 4 * np.sqrt(
        0.05 * 0.95 / len(err)
    )


def test_objective_per_table_feeds_a_small_table(tmp_path, capsys) -> None:
    w = tmp_path / "w.txt"
    w.write_text("marginal(sex, income)\nmarginal(education, occupation)\n")
    costs, summaries = {}, {}
    for objective in ("total", "per-table", None):
        name = objective or "default"
        out = tmp_path / f"{name}.csv"
        code, so, err = run(
            capsys,
            *BASE,
            "--workload",
            w,
            "--epsilon",
            1,
            "--out",
            out,
            "--ledger",
            tmp_path / f"{name}.db",
            *(("--objective", objective) if objective else ()),
        )
        assert code == 0, err
        rows = list(csv.DictReader(out.open()))
        costs[name] = [float(r["cost"]) for r in rows]
        summaries[name] = so
    assert costs["per-table"][0] > costs["total"][0]  # a cell of the small table
    # without --objective: per-table, said in the summary
    assert costs["default"] == costs["per-table"]
    assert "allocation:   optimal (objective: per-table)" in summaries["default"]
    assert "allocation:   optimal (objective: total)" in summaries["total"]
    wl = parse_workload(w, Schema.load(SCHEMA))
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="per-table")
    assert costs["default"] == list(plan.values)
    with pytest.raises(SystemExit) as exit_:
        run(capsys, *BASE, "--workload", w, "--epsilon", 1, "--objective", "fair")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--objective" in err and "Traceback" not in err


def test_objective_help_says_per_table_is_the_default(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["answer", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "per-table the sum over workload lines" in text
    assert "starved next to a large one (default)" in text
    assert "(total: a table with many cells weighs more)" in text


@pytest.mark.parametrize(
    "data,schema,workload,extra",
    [
        (
            ROOT / "examples" / "marketing" / "conversions.csv",
            ROOT / "examples" / "marketing" / "schema.json",
            ROOT / "examples" / "marketing" / "workload.txt",
            [],
        ),
        (SAMPLE, SCHEMA, ROOT / "examples" / "adult" / "workload.txt", ["--allocation", "uniform"]),
    ],
)
def test_the_guarantee_and_the_spent_budget_are_one_figure(
    tmp_path, capsys, data, schema, workload, extra
) -> None:
    # exactly 199999/200000 and 999999/1000000 at the worst point: printed 0.999996 and
    # 1 beside "spent 0.999995" and "spent 0.999999" when the guarantee was a float
    ledger = tmp_path / "l.db"
    argv = [
        "answer",
        "--data",
        data,
        "--schema",
        schema,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ledger,
        "--out",
        tmp_path / "a.csv",
        *extra,
    ]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    guarantee = next(ln for ln in out.splitlines() if ln.startswith("guarantee:"))
    spent = next(ln for ln in out.splitlines() if ln.startswith("remaining:"))
    shown = guarantee.split()[1].removesuffix("-DP")
    assert f"(spent {shown})" in spent, (guarantee, spent)
    code, out, err = run(capsys, *argv[: -2 - len(extra)], "--json", "--ledger", ":memory:", *extra)
    d = json.loads(out)
    assert d["guarantee"]["total_exact"] == d["ledger"]["spent_exact"]


def test_the_summary_judges_each_allocation_on_the_objective(tmp_path, capsys) -> None:
    """The optimal allocation (per-table) has more total |noise| than the uniform one
    here: the summary shows the measure it minimised beside it, and says so."""
    w = tmp_path / "w.txt"
    w.write_text("age < 30\nage >= 35\nmarginal(sex, race)\n")
    argv = [*BASE, "--workload", w, "--epsilon", 1, "--ledger", ":memory:"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    d = json.loads(out)
    e, by = d["expected_abs_noise"], d["objective_error"]
    assert e["optimal"] > e["uniform"]  # worse on total |noise| ...
    assert by["optimal"] < by["uniform"] < by["sequential"]  # ... best on its objective
    code, out, err = run(capsys, *argv, "--out", tmp_path / "a.csv")
    assert code == 0, err
    from dpcurator.cli.output import up

    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("expected error of the noisy"))
    assert "total |noise|" in lines[head + 1] and "objective (per-table)" in lines[head + 1]
    rows = {ln.replace("*", " ").split()[0]: ln for ln in lines[head + 2 : head + 5]}
    for name in ("sequential", "uniform", "optimal"):
        assert rows[name].split()[-1] == up(by[name]), rows[name]
    assert "optimal minimises the per-table objective" in lines[head + 5]
    assert "total |noise| is another measure" in lines[head + 5]
    # the same figure as the strategies' lines: the direct strategy is the optimal split
    direct = next((ln for ln in lines if ln.strip().startswith(("direct ", "* direct "))), None)
    if direct is not None and "does not apply" not in direct:
        assert f" {up(by['optimal'])} expected error (per-table)" in direct
