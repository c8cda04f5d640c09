"""per-table is the default objective everywhere a workload is planned: the curator's
``release_workload`` (and an analyst's session) and the HTTP service's ``/v1/release``
(and its client). The CLI's default is tested with the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from dpcurator import Curator
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.planner import make_plan
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_workload
from dpcurator.service import create_app
from dpcurator.service.limits import Limits

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "integer", "min": 0, "max": 99},
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "region", "type": "categorical", "values": ["north", "south", "east", "west"]},
            {"name": "score", "type": "integer", "min": 0, "max": 9},
        ]
    }
)

#: Tables of 8 and 10 cells and one query: the points age < 30 are in one answer of each
#: line. per-table gives every line a third; total gives the tables more.
WORKLOAD = "marginal(sex, region)\nhistogram(score)\nage < 30"


def costs(objective: str, epsilon: float) -> list[float]:
    wl = parse_workload(WORKLOAD, SCHEMA)
    return list(make_plan(wl.queries, wl.weights, PureDP(epsilon), objective=objective).values)


@pytest.fixture
def curator(tmp_path):
    rng = np.random.default_rng(2)
    n = 200
    frame = pd.DataFrame(
        {
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(["north", "south", "east", "west"], n),
            "score": rng.integers(0, 10, n),
        }
    )
    cur = Curator.open(
        frame,
        SCHEMA,
        budget=PureDP(1.0),
        ledger=tmp_path / "ledger.db",
        rng=SeededRandomSource(3),
        allow_insecure=True,
    )
    yield cur
    cur.close()


def test_the_objectives_differ_here() -> None:
    per, total = costs("per-table", 0.5), costs("total", 0.5)
    assert per == pytest.approx([0.5 / 3] * 19, rel=1e-5)
    assert total[0] > 1.5 * total[-1]


def test_curator_default_is_per_table(curator) -> None:
    plan, answers = curator.release_workload(WORKLOAD, strategy="direct", epsilon=0.5)
    assert plan.objective == "per-table"
    assert list(plan.values) == costs("per-table", 0.5)
    assert [a.cost for a in answers] == pytest.approx(costs("per-table", 0.5))
    plan, _ = curator.analyst("ann").release_workload(WORKLOAD, strategy="direct", epsilon=0.25)
    assert plan.objective == "per-table" and list(plan.values) == costs("per-table", 0.25)
    plan, _ = curator.release_workload(WORKLOAD, strategy="direct", epsilon=0.25, objective="total")
    assert plan.objective == "total" and list(plan.values) == costs("total", 0.25)


def test_service_release_default_is_per_table(curator) -> None:
    token = curator.add_analyst("ann")
    app = create_app(curator, Limits(requests_per_second=1000, burst=1000))
    with TestClient(app) as client:
        r = client.post(
            "/v1/release",
            json={"workload": WORKLOAD, "strategy": "direct", "epsilon": 0.5},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["allocation"] == "optimal" and out["objective"] == "per-table"
        got = [a["cost"]["amount"] for a in out["answers"]]
        assert got == pytest.approx(costs("per-table", 0.5), rel=1e-9)
        assert got != pytest.approx(costs("total", 0.5), rel=1e-2)
        # Asked for: another objective, and one that does not exist (nothing charged).
        r = client.post(
            "/v1/release",
            json={
                "workload": WORKLOAD,
                "strategy": "direct",
                "epsilon": 0.25,
                "objective": "total",
            },
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["objective"] == "total"
        got = [a["cost"]["amount"] for a in r.json()["answers"]]
        assert got == pytest.approx(costs("total", 0.25), rel=1e-9)
        charges = len(curator.history())
        r = client.post(
            "/v1/release",
            json={
                "workload": WORKLOAD,
                "strategy": "direct",
                "epsilon": 0.1,
                "objective": "fairest",
            },
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 422 and "objective" in r.text
        assert len(curator.history()) == charges


@pytest.mark.parametrize("bad", [None, 5, "Total", ["total"], "per-table\n", 1e400])
def test_a_bad_objective_is_one_clear_error_and_charges_nothing(curator, bad) -> None:
    from dpcurator.errors import InvalidParameter

    with pytest.raises(InvalidParameter, match="unknown objective"):
        curator.release_workload(WORKLOAD, strategy="direct", epsilon=0.5, objective=bad)
    assert curator.history() == []
