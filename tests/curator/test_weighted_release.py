"""Releasing weighted measurements through the curator (real DuckDB, a real ledger file):
HDMM's p-Identity rows and ResidualPlanner's residual measurements are charged per
point exactly as brute force says, the ledger records each measurement's weights and
noisy rows (enough to re-derive the answers), the rows are the weighted true counts plus
integer noise, and after a reopen the filter still holds every charge."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.planner import make_plan
from dpcurator.planner.strategies import Measurement, StrategyPlan
from dpcurator.planner.strategies.weights import KroneckerWeights
from dpcurator.privacy import ZCDP, PureDP
from dpcurator.queries import Query, Schema

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "integer", "min": 0, "max": 11},
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "region", "type": "categorical", "values": ["n", "s", "e"]},
        ]
    }
)
RANGES = "\n".join(f"age BETWEEN {a} AND {b}" for a in range(12) for b in range(a, 12))
MARGINALS = "marginal(sex, region)\nmarginal(age, sex)\nhistogram(region)\nhistogram(age)"


@pytest.fixture
def frame():
    rng = np.random.default_rng(8)
    n = 400
    return pd.DataFrame(
        {
            "age": rng.integers(0, 12, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(["n", "s", "e"], n),
        }
    )


def _open(tmp_path, frame, budget):
    return Curator.open(
        frame,
        SCHEMA,
        budget=budget,
        ledger=tmp_path / "ledger.db",
        rng=SeededRandomSource(3),
        allow_insecure=True,
    )


def _points():
    for age in range(12):
        for sex in "FM":
            for region in "nse":
                yield {"age": age, "sex": sex, "region": region}


@pytest.mark.parametrize(
    ("workload", "strategy", "budget", "cost"),
    [
        (RANGES, "p-identity", PureDP(2.0), {"epsilon": 1.0}),
        (MARGINALS, "marginals", ZCDP(1.0), {"rho": 0.5}),
    ],
)
def test_weighted_release_charges_records_and_reopens(
    tmp_path, frame, workload, strategy, budget, cost
):
    with _open(tmp_path, frame, budget) as cur:
        plan, answers = cur.release_workload(workload, strategy=strategy, **cost)
        sp = plan.strategy
        assert plan.strategy_name == strategy
        assert any(m.weights is not None for m in sp.measurements)
        hist = cur.history()
        pieces = sp.charges(SCHEMA, plan.budget)
        assert len(hist) == len(pieces)
        assert [h.request for h in hist] == [p.label for p in pieces]
        # the rows recorded are the weighted true counts plus integer noise; the weights
        # recorded re-derive every answer
        be = load_table(frame, SCHEMA)
        noisy = []
        for m, h in zip(sp.measurements, hist, strict=True):  # one piece per measurement
            rows = list(h.answer["cells"].values())
            assert len(rows) == m.rows and all(isinstance(v, int) for v in rows)
            truth = m.measure(be.counts([Query.from_coverages(SCHEMA, c) for c in m.cells]))
            assert np.abs(np.array(rows) - truth).max() < 60 * m.noise.std()
            if m.weights is not None:
                rec = h.answer["weights"]
                back = KroneckerWeights.from_json(rec)
                assert back == m.weights and len(rec["cells"]) == len(m.cells)
            noisy.append(rows)
        be.close()
        np.testing.assert_allclose(sp.reconstruct(noisy), [a.value for a in answers])
        # every point spent exactly the sum of the charges covering it, which brute force
        # over the rows' weights gives (every column of these strategies alike)
        amount = Fraction(str(next(iter(cost.values()))))
        whole = Fraction(budget.epsilon if isinstance(budget, PureDP) else budget.rho)
        for h, p in zip(hist, pieces, strict=True):
            assert h.cost == float(p.additive)  # the cost charged is the piece's
        for point in list(_points())[::7]:
            spent = sum((p.additive for p in pieces if p.region.covers(point)), Fraction(0))
            assert spent <= amount
            text = (
                f"age = {point['age']} AND sex = '{point['sex']}' AND region = '{point['region']}'"
            )
            assert cur.remaining(text) == pytest.approx(float(whole - spent), rel=1e-9)
        left = cur.remaining()
    with _open(tmp_path, frame, budget) as again:  # the filter rebuilt from the ledger
        assert again.remaining() == left
        assert left == pytest.approx(float(whole - amount), rel=1e-6)


def test_uneven_weights_are_charged_per_level_in_the_ledger(tmp_path, frame):
    """A measurement whose columns differ in norm is charged once per distinct norm, on
    the union of its cells: the remaining budget at each age is what brute force says."""
    weights = np.array(
        [[1, 2, 0, 0, 3, 1, 0, 0, 0, 0, 0, 1], [1] * 12, [0, 1, 1, 0, 0, 2] + [0] * 6]
    )
    cells = tuple({"age": ((i, i + 1),)} for i in range(12))
    budget = PureDP(4.0)
    with _open(tmp_path, frame, budget) as cur:
        plan = make_plan([Query.from_coverages(SCHEMA, {"age": ((0, 3),)})], None, budget)
        unit = 0.25
        m = Measurement(
            "uneven", cells, unit, plan.budget.noise(unit), {}, KroneckerWeights((weights,))
        )
        sp = StrategyPlan("test", "", (m,), np.zeros(1), lambda ys: np.zeros(1))
        from dataclasses import replace

        cur._release_strategy(replace(plan, strategy=sp), "data", None)
        column = np.abs(weights).sum(axis=0)
        hist = cur.history()
        assert sorted(int(Fraction(h.cost) / Fraction(unit)) for h in hist) == sorted(
            set(column.tolist())
        )
        for age in range(12):
            left = cur.remaining(f"age = {age}")
            assert left == pytest.approx(4.0 - unit * column[age], abs=1e-9)
        assert cur.remaining() == pytest.approx(4.0 - unit * column.max(), abs=1e-9)


@pytest.mark.parametrize("strategy", ["p-identity", "marginals"])
@pytest.mark.parametrize(
    "cost", [5e-324, 1e-300, 1e400, float("nan"), -1.0, "0.5", True, [0.5], 2.0]
)
def test_weighted_strategies_refuse_extreme_costs_and_charge_nothing(
    tmp_path, frame, strategy, cost
):
    """Costs at the edges of floats, of the wrong type or above the budget: one error of
    the project's hierarchy, one line, nothing charged (zCDP: residual measurements)."""
    from dpcurator.errors import DpCuratorError

    workload = RANGES if strategy == "p-identity" else MARGINALS
    with _open(tmp_path, frame, ZCDP(1.0)) as cur:
        with pytest.raises(DpCuratorError) as e:
            cur.release_workload(workload, rho=cost, strategy=strategy)
        assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
        assert cur.history() == []
