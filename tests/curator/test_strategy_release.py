"""Releasing a workload by a strategy: the measured tables are charged in one
all-or-nothing transaction, the ledger records which asked answers were derived from
which charges, the answers are the least-squares estimates from the true counts plus the
recorded noise, and bad input charges nothing (Python API and CLI)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.cli import main
from dpcurator.curator import DerivedAnswer
from dpcurator.errors import BudgetExceeded, InvalidParameter, TooLarge
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Query, Schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "integer", "min": 0, "max": 19},
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "region", "type": "categorical", "values": ["n", "s", "e"]},
        ]
    }
)
MARGINALS = "marginal(sex, region)\nmarginal(age, sex)\nhistogram(region)\nhistogram(sex)"
RANGES = "\n".join(f"age BETWEEN {a} AND {b}" for a in range(20) for b in range(a, 20))


@pytest.fixture
def frame():
    rng = np.random.default_rng(5)
    n = 300
    return pd.DataFrame(
        {
            "age": rng.integers(0, 20, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(["n", "s", "e"], n),
        }
    )


@pytest.fixture
def curator(tmp_path, frame):
    cur = Curator.open(
        frame,
        SCHEMA,
        budget=PureDP(1.0),
        ledger=tmp_path / "ledger.db",
        rng=SeededRandomSource(11),
        allow_insecure=True,
    )
    yield cur
    cur.close()


@pytest.mark.parametrize(("workload", "strategy"), [(MARGINALS, "marginals"), (RANGES, "tree")])
def test_release_records_and_reconstructs(curator, frame, workload, strategy):
    plan, answers = curator.release_workload(workload, epsilon=0.5, strategy=strategy)
    assert plan.strategy_name == strategy
    assert all(isinstance(a, DerivedAnswer) for a in answers)
    hist = curator.history()
    ids = tuple(h.charge_id for h in hist)
    assert len(hist) == len(plan.strategy.measurements)
    assert all(a.charge_ids == ids for a in answers)
    assert all(h.kind == "strategy" for h in hist)
    # the ledger: every charge names its place in the release (consecutive ids); the
    # first holds the derived answers
    assert [h.answer["part"] for h in hist] == [[i, len(ids)] for i in range(len(ids))]
    assert ids == tuple(range(ids[0], ids[0] + len(ids)))
    derived = hist[0].answer["derived"]
    assert list(derived) == [a.query for a in answers]
    assert [derived[a.query] for a in answers] == pytest.approx([a.value for a in answers])
    # the answers are the strategy's reconstruction from the recorded noisy cells, and
    # each recorded cell is the true count plus integer noise
    noisy = [list(h.answer["cells"].values()) for h in hist]
    np.testing.assert_allclose(plan.strategy.reconstruct(noisy), [a.value for a in answers])
    be = load_table(frame, SCHEMA)
    for m, y in zip(plan.strategy.measurements, noisy, strict=True):
        truth = be.counts([Query.from_coverages(SCHEMA, c) for c in m.cells])
        assert all(isinstance(v, int) for v in y) and len(y) == len(truth)
    be.close()
    # the charges cover every point once each: the worst point spent their sum
    spent = sum(h.cost for h in hist)
    assert spent <= 0.5 and curator.remaining() == pytest.approx(1.0 - spent, abs=1e-6)
    assert all(a.remaining == pytest.approx(1.0 - spent, abs=1e-6) for a in answers)
    assert all(a.variance > 0 and a.half_width > 0 for a in answers)


def test_a_hierarchy_is_charged_on_each_nodes_points(tmp_path):
    """All ranges of 40 ages: the two-level hierarchy (blocks and their segments at costs
    of their own) is charged on each measurement's region only; the curator's exact
    remaining budget is what the worst point spent, never the sum of the charges."""
    schema = Schema.from_dict(
        {"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 39}]}
    )
    frame = pd.DataFrame({"age": np.random.default_rng(2).integers(0, 40, 500)})
    text = "\n".join(f"age BETWEEN {a} AND {b}" for a in range(40) for b in range(a, 40))
    with Curator.open(
        frame,
        schema,
        budget=PureDP(2.0),
        ledger=tmp_path / "l.db",
        rng=SeededRandomSource(4),
        allow_insecure=True,
    ) as cur:
        plan, answers = cur.release_workload(
            text, epsilon=1.0, objective="total", strategy="tree"
        )
        sp = plan.strategy
        assert plan.strategy_name == "tree" and any(m.region for m in sp.measurements)
        hist = cur.history()
        assert [h.request for h in hist] == [m.label for m in sp.measurements]
        regions = [Query.from_coverages(schema, dict(m.region)) for m in sp.measurements]
        spent = [
            sum(h.cost for h, r in zip(hist, regions, strict=True) if r.covers({"age": age}))
            for age in range(40)
        ]
        assert max(spent) <= 1.0 < sum(h.cost for h in hist)
        assert cur.remaining() == pytest.approx(2.0 - max(spent), abs=1e-6)
        for age in (0, 20):  # a point charged only by its segments; one inside a block
            left = cur.remaining(f"age = {age}")
            assert left == pytest.approx(2.0 - spent[age], abs=1e-6)
        noisy = [list(h.answer["cells"].values()) for h in hist]
        np.testing.assert_allclose(sp.reconstruct(noisy), [a.value for a in answers])


def test_marginals_answers_are_consistent(curator):
    _, answers = curator.release_workload(MARGINALS, epsilon=0.5, strategy="marginals")
    by = {a.query: a.value for a in answers}
    for sex in ("F", "M"):
        cells = sum(by[f"sex = '{sex}' AND region = '{r}'"] for r in "nse")
        assert cells == pytest.approx(by[f"sex = '{sex}'"], abs=1e-6)


def test_refusal_charges_nothing(curator):
    curator.count("total", epsilon=1.0)
    before = len(curator.history())
    with pytest.raises(BudgetExceeded):
        curator.release_workload(MARGINALS, epsilon=0.5, strategy="marginals")
    assert len(curator.history()) == before


def test_an_analysts_quota_is_planned_for(curator):
    plan, answers = curator.analyst("ann", quota=0.3).release_workload(RANGES, strategy="identity")
    assert plan.strategy_name == "identity" and len(answers) == 210
    assert sum(h.cost for h in curator.history()) <= 0.3


@pytest.mark.parametrize("bad", ["best", "", None, 7, "Marginals", "marginals\x00"])
def test_bad_strategy_charges_nothing(curator, bad):
    with pytest.raises(InvalidParameter, match="strategy"):
        curator.release_workload(MARGINALS, epsilon=0.5, strategy=bad)
    assert curator.history() == []


def test_forced_strategy_that_does_not_apply_charges_nothing(curator):
    with pytest.raises(InvalidParameter, match="does not apply"):
        curator.release_workload(MARGINALS, epsilon=0.5, strategy="tree")
    limit = curator.limits.max_queries
    with pytest.raises(TooLarge):
        curator.release_workload("total\n" * (limit + 1), epsilon=0.5, strategy="marginals")
    assert curator.history() == []


def _charges(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as con:
        return con.execute("select count(*) from charges").fetchone()[0]


def test_cli_answer_strategies(tmp_path, capsys):
    data = tmp_path / "d.csv"
    schema = tmp_path / "s.json"
    workload = tmp_path / "w.txt"
    rng = np.random.default_rng(1)
    pd.DataFrame(
        {
            "age": rng.integers(0, 20, 200),
            "sex": rng.choice(["F", "M"], 200),
            "region": rng.choice(["n", "s", "e"], 200),
        }
    ).to_csv(data, index=False)
    schema.write_text(json.dumps(SCHEMA.to_dict()))
    workload.write_text(RANGES)
    ledger = tmp_path / "l.db"
    base = ["answer", "--data", str(data), "--schema", str(schema), "--workload", str(workload)]
    base += ["--epsilon", "1", "--ledger", str(ledger)]
    for bad in ("best", "Tree", ""):
        assert main([*base, "--strategy", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--strategy" in err and "Traceback" not in err
    assert main([*base, "--strategy", "marginals", "--allocation", "uniform"]) == 2
    assert "--allocation uniform" in capsys.readouterr().err
    assert _charges(ledger) == 0
    assert main([*base, "--json", "--objective", "total"]) == 0
    d = json.loads(capsys.readouterr().out)
    names = [c["strategy"] for c in d["strategies"]]
    assert names == ["direct", "marginals", "identity", "tree", "p-identity"]
    best = min(
        (c for c in d["strategies"] if c["objective_value"] is not None),
        key=lambda c: c["objective_value"],
    )
    assert d["strategy"] == best["strategy"] != "direct"
    rows = d["answers"]
    assert len(rows) == 210 and all(r["strategy"] == d["strategy"] for r in rows)
    assert all(r["interval_low"] < r["answer"] < r["interval_high"] for r in rows)
    assert _charges(ledger) == len(rows[0]["charges"].split(","))
