"""SQL over HTTP against a real ``dpcurator serve``: ``POST /v1/sql`` answers the table,
``Client.sql`` mirrors ``AnalystSession.sql`` (columns, rows' shape, costs, errors), and
an EXPLAIN charges nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded, DpCuratorError, QueryError
from dpcurator.privacy import PureDP

from .conftest import assert_error, running, write_people

DP = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5)"
QUERIES = [
    f"{DP} sex, COUNT(*) AS n, AVG(age, contribution_bounds_per_group => (0, 99)) AS a FROM people GROUP BY sex",
    f"{DP} region, COUNT(*) AS n FROM people WHERE score > 3 GROUP BY region HAVING n >= 0 ORDER BY region DESC LIMIT 2",
    f"{DP} PERCENTILE_CONT(age, 0.5) AS m, AVG(CASE WHEN score > 5 THEN 1 ELSE 0 END) AS s FROM people",
    f"EXPLAIN {DP} COUNT(*) FROM people",
]
MISTAKES = [
    "SELECT COUNT(*) FROM people",
    f"{DP} sex, COUNT(*) FROM people",
    f"{DP} AVG(age) FROM people",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=11) COUNT(*) FROM people",
]


def script(s):
    got = [s.sql(q) for q in QUERIES]
    raised = []
    for q in MISTAKES:
        with pytest.raises(DpCuratorError) as err:
            s.sql(q)
        raised.append((type(err.value), str(err.value)))
    return got, raised


def shape(r):
    return (
        r.columns,
        len(r.rows),
        [type(v) for v in r.rows[0]],
        r.cost,
        r.currency,
        r.explain,
        r.admitted,
    )


def test_the_client_mirrors_the_in_process_session(tmp_path: Path) -> None:
    data = write_people(tmp_path / "data")
    with Curator.open(
        data=data[0], schema=data[1], budget=PureDP(10.0), ledger=tmp_path / "local.db"
    ) as curator:
        local, local_errors = script(curator.analyst("x"))
        local_history = [(h.kind, h.cost) for h in curator.history()]
    with running(tmp_path / "served", data=data, budget=("--epsilon", "10")) as s:
        s.add("x")
        with s.client("x") as c:
            remote, remote_errors = script(c)
            remote_history = [(h.kind, h.cost) for h in c.history()]
        with s.http("x") as h:
            r = h.post("/v1/sql", json={"query": QUERIES[0]})
            assert r.status_code == 200
            body = r.json()
            assert set(body) >= {"columns", "rows", "cost", "remaining"}
            assert body["columns"][:4] == ["sex", "n", "n_low", "n_high"]
            assert_error(h.post("/v1/sql", json={"query": MISTAKES[1]}), 400, "invalid_query")
            # a position that is not a whole number: a 400, not a 500 with a traceback
            r = h.post("/v1/sql", json={"query": f"{DP} sex, COUNT(*) FROM people GROUP BY 1.5"})
            body = assert_error(r, 400, "invalid_query")
            assert "GROUP BY 1.5: a position is a whole number" in body["message"]
            assert_error(h.post("/v1/sql", json={"query": 3}), 422, "invalid_query")
            assert_error(
                h.post("/v1/sql", json={"query": QUERIES[0], "x": 1}), 422, "invalid_request"
            )
    assert remote_errors == local_errors
    assert [t for t, _ in local_errors] == [QueryError, QueryError, QueryError, BudgetExceeded]
    assert [shape(a) for a in local] == [shape(b) for b in remote]
    assert local_history == remote_history == [("sql", 0.5)] * 3  # EXPLAIN charged nothing
    assert local[3].explain and local[3].admitted and local[3].charge_id is None
    assert [row[0] for row in remote[1].rows] == sorted(
        (row[0] for row in remote[1].rows), reverse=True
    )
    assert remote[0].to_pandas().shape == (2, 7)
