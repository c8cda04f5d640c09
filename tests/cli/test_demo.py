"""``dpcurator demo``: runs offline on the shipped sample with the OS CSPRNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dpcurator.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: The rows of the demo's headline, in order.
SPLITS = (
    "sequential (eps / t)",
    "uniform (eps / gamma, the paper)",
    "optimal for total",
    "optimal for per-table",
    "optimal for max",
    "marginals strategy, least squares",
)


def _number(text: str) -> float:
    return float(text.lstrip("±").replace(",", ""))


def test_demo_json(capsys) -> None:
    assert main(["demo", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gamma"] == 28 and d["queries"] == 4354
    # released by the marginals strategy: the showcase's answers are least-squares
    # estimates with their exact variance
    assert d["strategy"] == "marginals" and len(d["showcase"]) == 4
    for r in d["showcase"]:
        assert r["interval"] == "normal approximation, exact variance"
        half = (r["interval_high"] - r["interval_low"]) / 2
        assert half == pytest.approx(1.959964 * math.sqrt(r["variance"]), rel=1e-5)
    # released with the default objective: every table weighs the same (here: the equal
    # split, the uniform allocation)
    assert d["allocation"] == "optimal" and d["objective"] == "per-table"
    e = d["expected_abs_noise"]
    assert e["sequential"] >= 10 * e["uniform"]
    assert e["optimal"] == pytest.approx(e["uniform"], rel=1e-4)
    assert d["guarantee"]["epsilon"] <= 1.0
    # the headline's figures: sequential, uniform and the optimum of each objective
    a = d["allocations"]
    assert [(x["allocation"], x["objective"]) for x in a] == [
        ("sequential", None),
        ("uniform", None),
        ("optimal", "total"),
        ("optimal", "per-table"),
        ("optimal", "max"),
        ("marginals", "per-table"),
    ]
    assert [x["released"] for x in a] == [False, False, False, False, False, True]
    # the strategy has the least error for the objective it was chosen for
    assert all(a[-1]["per_table_squared_error"] < x["per_table_squared_error"] for x in a[:-1])
    assert {x["line"] for x in a} == {d["showcase"][0]["line"]} and d["showcase_table"]
    by = {x["objective"]: x for x in a[2:5]}
    measure = {
        "total": "total_squared_error",
        "per-table": "per_table_squared_error",
        "max": "worst_answer_squared_error",
    }
    for objective, key in measure.items():  # each objective is best on its own measure
        assert all(by[objective][key] <= x[key] * (1 + 1e-4) for x in a[:5]), objective
    # total buys its lower total error with the small tables: the showcase's cells
    assert by["total"]["total_squared_error"] < 0.5 * by["per-table"]["total_squared_error"]
    assert by["total"]["line_squared_error"] > 4 * by["per-table"]["line_squared_error"]
    assert by["max"]["optimality_gap"] == 0 and 0 <= by["per-table"]["optimality_gap"] <= 1e-4
    # the released variance is the strategy's: the showcase's interval is that wide
    sd = math.sqrt(a[-1]["line_squared_error"])
    r = d["showcase"][0]
    assert r["variance"] == pytest.approx(sd**2, rel=1e-9)


def test_demo_readable(capsys, tmp_path) -> None:
    out = tmp_path / "demo.parquet"
    png = tmp_path / "demo.png"
    assert main(["demo", "--out", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "derived by least squares" in text and "in memory" in text
    # no "x less noise" claims: every split's figures side by side, the released one marked
    assert "less noise" not in text and "utility gain" not in text
    rows = {}
    for ln in text.splitlines():
        for name in SPLITS:
            if ln[2:].startswith(name + " "):
                rows[name] = (ln[0], ln[2 + len(name) :].split())
    assert set(rows) == set(SPLITS)
    assert [rows[n][0] for n in SPLITS] == [" ", " ", " ", " ", " ", "*"]
    assert "Released (*): the marginals strategy" in text
    # one figure, one form: the guarantee is the worst point's exact total, rounded up
    # as the ledger's "spent" would be; each ± says what it is
    from fractions import Fraction

    from dpcurator.cli.output import amount

    d_plan_total = None
    for ln in text.splitlines():
        if ln.startswith("Guarantee: "):
            d_plan_total = ln.split()[1]
    assert "± is a standard deviation" in text
    # what the README says the demo releases
    readme = " ".join((ROOT / "README.md").read_text().split())
    import re

    tables, cells = re.search(
        r"a workload of (\d+) marginal tables \(([\d,]+) cells\)", readme
    ).groups()
    assert f"{tables} marginal tables, {cells} cells" in text
    assert re.search(r"^Released \(\*\): the \w+ strategy", text, re.M)
    assert "the strategy released" in readme
    assert re.search(
        r"^One released table, marginal\(sex, income\), .* with 95% intervals:$", text, re.M
    )
    # the figures are the planner's, each rounded up (never shown smaller than it is)
    from dpcurator.planner import compare_objectives, make_plan, strategy_errors
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_workload

    wl = parse_workload(
        ROOT / "examples" / "adult" / "marginals.txt",
        Schema.load(ROOT / "examples" / "adult" / "schema.json"),
    )
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0))
    assert (
        d_plan_total == f"{amount(Fraction(plan.guarantee.to_dict()['total_exact']), up=True)}-DP"
    )
    line = next(q.line for q in plan.queries if q.text.startswith("sex = 'Female' AND income"))
    for name, e in zip(SPLITS, compare_objectives(plan) + strategy_errors(plan), strict=True):
        shown = [_number(x) for x in rows[name][1]]
        truth = [e.total, *(math.sqrt(v) for v in (e.worst, e.per_table, e.line(line)))]
        for s, t in zip(shown, truth, strict=True):
            assert t <= s <= t * 1.01, (name, shown, truth)
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 4354
    assert png.stat().st_size > 50_000


def test_up_rounds_up() -> None:
    from dpcurator.cli.output import error_figure as up

    rng = np.random.default_rng(4)
    for x in np.exp(rng.uniform(-8, 28, 500)):
        s = up(float(x))
        assert float(x) <= _number(s) <= float(x) * 1.01, (x, s)
    assert up(39.0) == "39.0" and up(124.03) == "125" and up(6157.51) == "6,160"
    assert up(2.7e6) == "2,700,000" and up(1.6508e11) == "1.66e11" and up(0) == "0"


def test_demo_uses_the_csprng() -> None:
    src = (ROOT / "src" / "dpcurator" / "cli" / "demo.py").read_text()
    assert "Seeded" not in src and "allow_insecure" not in src and "rng=" not in src


def test_demo_bad_epsilon(capsys) -> None:
    assert main(["demo", "--epsilon", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
