"""What a user of the command line sees: a durable ledger by default, amounts rounded for
people, outputs by extension, intervals of post-processed answers at a chosen level,
pictures, messages in CLI terms, --version; bad input one line, exit 2, no traceback."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dpcurator.cli import cli_terms, main
from dpcurator.cli.output import amount

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
SAMPLE = ROOT / "examples" / "data" / "adult-sample.csv"
BASE = ["answer", "--data", SAMPLE, "--schema", SCHEMA, "--separator", ",", "--header"]
DIRECT = ["--strategy", "direct"]  # these tests study the measurement of the asked queries


def run(capsys, *argv) -> tuple[int, str, str]:
    if argv and argv[0] == "answer" and "--strategy" not in argv:
        argv = (*argv, *DIRECT)
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.fixture
def workload(tmp_path) -> Path:
    w = tmp_path / "w.txt"
    w.write_text("total\nhistogram(sex)\nmarginal(sex, income)\n")
    return w


# --- 1. the ledger is durable by default ------------------------------------------------


def test_answer_without_ledger_refuses(tmp_path, capsys, workload) -> None:
    code, out, err = run(capsys, *BASE, "--workload", workload, "--epsilon", 1)
    assert code == 2 and out == ""
    one_line(err, "--ledger FILE", "--ledger :memory:")


def test_memory_ledger_is_flagged(tmp_path, capsys, workload) -> None:
    out_file = tmp_path / "a.csv"
    code, out, err = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--out",
        out_file,
    )
    assert code == 0, err
    assert "NOT durable" in out
    code, out, err = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--json",
        "--out",
        out_file,
    )
    d = json.loads(out)
    assert d["ledger"]["durable"] is False and d["ledger"]["path"] == ":memory:"


def test_file_ledger_remaining_matches_ledger_show(tmp_path, capsys, workload) -> None:
    led = tmp_path / "l.db"
    code, out, err = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        0.5,
        "--ledger",
        led,
        "--json",
        "--out",
        tmp_path / "a.json",
    )
    assert code == 0, err
    d = json.loads(out)["ledger"]
    assert d["durable"] and Fraction(d["remaining_exact"]) + Fraction(d["spent_exact"]) == Fraction(
        1, 2
    )
    code, out, _ = run(capsys, "ledger", "show", led, "--json")
    assert json.loads(out)["remaining_exact"] == d["remaining_exact"]


# --- 3. amounts for people ----------------------------------------------------------------


@pytest.mark.parametrize(
    "x, cur, up, text",
    [
        (Fraction(1, 2), "epsilon", False, "0.5"),
        (Fraction(0.49999999999999994), "epsilon", False, "0.499999"),
        (Fraction(1, 3), "epsilon", False, "0.333333"),
        (Fraction(1, 3), "epsilon", True, "0.333334"),
        (Fraction(7, 10), "rho", False, "0.7"),
        (Fraction(2), "mu", False, "1.41421"),
        (Fraction(2), "mu", True, "1.41422"),
        (Fraction(16, 25), "mu", False, "0.8"),
        (Fraction(123456789), "epsilon", False, "123456000"),
        (Fraction(3, 2000000), "epsilon", False, "0.0000015"),
        (Fraction(0), "epsilon", False, "0"),
    ],
)
def test_amounts_are_rounded_never_past_the_truth(x, cur, up, text) -> None:
    assert amount(x, cur, up=up) == text
    shown = Fraction(text)
    truth = x if cur != "mu" else None
    if truth is not None:
        assert (shown >= truth) if up else (shown <= truth)
    else:
        assert (shown * shown >= x) if up else (shown * shown <= x)


# --- 4. messages, outputs, account, version -------------------------------------------------


def test_load_errors_speak_cli(tmp_path, capsys, workload) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(SAMPLE.read_text().replace("Male", "Mael", 3))
    args = [
        "answer",
        "--data",
        bad,
        "--schema",
        SCHEMA,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        tmp_path / "l.db",
    ]
    code, _, err = run(capsys, *args)
    assert code == 2
    one_line(err, "--on-invalid drop", "--replace ATTRIBUTE=VALUE")
    assert "replace={" not in err and "on_invalid=" not in err
    code, out, err = run(capsys, *args, "--on-invalid", "drop", "--out", tmp_path / "a.csv")
    assert code == 0, err
    assert "3,257 rows read, 3,254 used; 3 dropped (values outside the schema)" in out
    code, out, err = run(
        capsys, *args, "--replace", "sex=Male", "--out", tmp_path / "b.csv", "--ledger", ":memory:"
    )
    assert code == 0, err
    assert "3 with sex replaced" in out


def test_cli_terms() -> None:
    assert cli_terms("pass columns=[...] naming every column") == (
        "pass --columns a,b,c (or a file of names) naming every column"
    )
    assert "--replace: unknown" in cli_terms("replace: unknown attribute 'x'")


def test_columns_message(tmp_path, capsys, workload) -> None:
    code, _, err = run(
        capsys,
        *BASE[:5],
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--no-header",
        "--columns",
        "a,b",
    )
    assert code == 2
    one_line(err, "--columns names 2")


def test_out_by_extension(tmp_path, capsys, workload) -> None:
    common = [*BASE, "--workload", workload, "--rho", 0.5, "--ledger", ":memory:"]
    for ext in ("csv", "json", "parquet"):
        f = tmp_path / f"a.{ext}"
        code, _, err = run(capsys, *common, "--out", f)
        assert code == 0, err
        if ext == "csv":
            rows = list(csv.DictReader(f.open()))
        elif ext == "json":
            rows = json.loads(f.read_text())
        else:
            rows = pq.read_table(f).to_pylist()
        assert len(rows) == 7 and rows[0]["query"] == "total"
    code, out, err = run(capsys, *common, "--out", tmp_path / "a.xlsx")
    assert code == 2 and out == ""
    one_line(err, ".xlsx", ".csv, .json or .parquet")


@pytest.mark.parametrize("flag", ["--out", "--plot"])
def test_unwritable_outputs_fail_before_charging(tmp_path, capsys, workload, flag) -> None:
    led = tmp_path / "l.db"
    target = tmp_path / "missing" / ("a.png" if flag == "--plot" else "a.csv")
    code, _, err = run(
        capsys, *BASE, "--workload", workload, "--epsilon", 1, "--ledger", led, flag, target
    )
    assert code == 2
    one_line(err, flag, "does not exist")
    assert not led.exists()  # nothing was charged: the ledger was never created


def test_account_plot_into_missing_folder(tmp_path, capsys) -> None:
    code, _, err = run(capsys, "account", "--plot", tmp_path / "no" / "x.png", "pure:1x3")
    assert code == 2
    one_line(err, "does not exist")
    assert "Errno" not in err


def test_account_delta_zero_is_pure_composition(capsys) -> None:
    code, out, _ = run(capsys, "account", "--delta", "0", "--json", "pure:0.1x3", "dlaplace:10x2")
    assert code == 0
    d = json.loads(out)
    assert d["best"] == {"method": "basic", "epsilon": 0.5}
    assert d["methods"]["basic"]["epsilon_exact"] == "1/2"
    code, out, _ = run(capsys, "account", "--delta", "0", "gaussian:20x10")
    assert code == 0 and "no finite epsilon at delta = 0" in out and "gaussian:20" in out


def test_account_says_why_nothing_certifies(capsys) -> None:
    code, out, _ = run(capsys, "account", "--delta", "1e-6", "approx:1,1e-5x10")
    assert code == 0
    assert "add up to 10 x 1e-05 (approx:1,1e-5) = 0.0001" in out
    code, out, _ = run(capsys, "account", "--delta", "1e-6", "--json", "approx:1,1e-5x10")
    assert "0.0001" in json.loads(out)["why_none"]


def test_version() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "dpcurator.cli", "--version"], capture_output=True, text=True
    )
    assert p.returncode == 0 and p.stdout.startswith("dpcurator ") and p.stdout.strip()[10:]


# --- intervals: the answer as released, at the chosen level -------------------------------


def _rows(tmp_path, capsys, workload, *extra) -> list[dict]:
    out = tmp_path / "a.json"
    code, _, err = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--out",
        out,
        *extra,
    )
    assert code == 0, err
    return json.loads(out.read_text())


def test_confidence_gives_the_exact_interval(tmp_path, capsys, workload) -> None:
    from dpcurator.cli.release import noise_of

    for c in (0.5, 0.99):
        rows = _rows(tmp_path, capsys, workload, "--confidence", c)
        for r in rows:
            n = noise_of(r["noise"], r["noise_parameter"])
            h = n.interval(1 - c)
            assert r["confidence"] == c and r["interval"] == "exact"
            assert r["interval_low"] == r["answer"] - h and r["interval_high"] == r["answer"] + h
            assert n.tail(h) <= 1 - c < n.tail(h - 1) if h > 0 else True
    code, _, err = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--confidence",
        "1.5",
    )
    assert code == 2
    one_line(err, "--confidence")


def test_postprocessed_intervals_describe_the_answer(tmp_path, capsys, workload) -> None:
    rows = _rows(tmp_path, capsys, workload, "--postprocess", "consistent,clamp,round")
    for r in rows:
        assert r["interval"] == "normal approximation, exact variance, clamped, rounded"
        assert r["interval_low"] <= r["answer"] <= r["interval_high"]
        assert r["interval_low"] >= 0 and float(r["answer"]).is_integer()
        # a consistent answer is never noisier than the raw one
        assert r["interval_high"] - r["interval_low"] <= 2 * r["noisy_half_width"] + 2
    total, female, male = rows[0], rows[1], rows[2]
    assert abs(total["answer"] - female["answer"] - male["answer"]) <= 2


def test_consistent_variances_match_a_simulation() -> None:
    """Var of the consistent answers: the exact formula against the empirical variance."""
    import numpy as np

    from dpcurator.planner import consistent, make_plan
    from dpcurator.planner.consistency import consistency_system, consistent_variances
    from dpcurator.privacy import ZCDP
    from dpcurator.queries import Schema, parse_workload_text

    schema = Schema.load(SCHEMA)
    wl = parse_workload_text("total\nhistogram(sex)\nmarginal(sex, income)\n", schema)
    plan = make_plan(wl.queries, wl.weights, ZCDP(0.5), "uniform", compare=False)
    var = np.array([n.variance() for n in plan.noises])
    system = consistency_system(plan.queries)
    exact = consistent_variances(plan.queries, var, list(range(len(var))), system)
    rng = np.random.default_rng(0)
    sims = np.array(
        [
            consistent(plan.queries, rng.normal(size=len(var)) * np.sqrt(var), var, system)
            for _ in range(4000)
        ]
    )
    assert np.all(exact <= var + 1e-9)
    assert np.allclose(sims.var(axis=0), exact, rtol=0.1)
    # the per-row solve gives the same as the dense formula
    one = consistent_variances(plan.queries, var, [3], system)
    assert one[0] == pytest.approx(exact[3], rel=1e-4)


# --- 6. pictures and progress -----------------------------------------------------------------


def test_answer_plot_and_progress(tmp_path, capsys, workload) -> None:
    png = tmp_path / "release.png"
    code, out, _ = run(
        capsys,
        *BASE,
        "--workload",
        workload,
        "--epsilon",
        1,
        "--ledger",
        ":memory:",
        "--out",
        tmp_path / "a.csv",
        "--plot",
        png,
        "--progress",
    )
    assert code == 0
    assert png.stat().st_size > 20_000 and f"plot:         {png}" in out


def test_plot_panels_use_released_answers_only(tmp_path) -> None:
    """The released-table panel draws the rows it is given (released answers and their
    intervals), never a count from the data: the plot function has no data to read."""
    import inspect

    from dpcurator.cli import plots

    src = inspect.getsource(plots.plot_release)
    assert "counts(" not in src and "Curator" not in src and "backend" not in src
    from dpcurator.planner import make_plan
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_workload_text

    wl = parse_workload_text("histogram(sex)\n", Schema.load(SCHEMA))
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), "optimal")
    errs = plots.per_answer_errors(plan)
    assert set(errs) == {"sequential", "uniform", "optimal"}
    assert errs["optimal"][0] <= errs["uniform"][0] * 1.0001 <= errs["sequential"][0] * 1.0001
