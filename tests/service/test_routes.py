"""Each route over HTTP: answers, estimates, budgets, releases, and the error shapes."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from dpcurator import Curator
from dpcurator.curator import Answer, DerivedAnswer, TableAnswer
from dpcurator.curator.answers import HistoryEntry
from dpcurator.curator.curator import Estimate, Remaining
from dpcurator.errors import (
    BudgetExceeded,
    DpCuratorError,
    InvalidParameter,
    QueryError,
    ServiceUnavailable,
    TooLarge,
    WorkloadError,
)
from dpcurator.privacy import PureDP

from .conftest import Server, assert_error, running, write_people

# --- one script, two sessions --------------------------------------------------------------


def script(s) -> tuple[dict[str, object], dict[str, type]]:
    """An analyst's script: what it gets, and the exception class of each mistake."""
    got: dict[str, object] = {
        "count": s.count("age < 30", epsilon=0.5),
        "total": s.count(epsilon=0.5),
        "histogram": s.histogram("age", [0, 30, 60, 100], epsilon=0.5),
        "numpy bins": s.histogram("age", np.arange(0, 101, 50), epsilon=np.float64(0.5)),
        "tuple": s.marginal(("sex", "score"), epsilon=0.5),
        "categories": s.histogram("region", epsilon=0.5),
        "marginal": s.marginal(["sex", "region"], where="age >= 18", epsilon=0.5),
        "sum": s.sum("age", 0, 99, "sex = 'F'", epsilon=0.5),
        "release": s.release(["score < 5", "score >= 5"], [0.25, 0.5]),
        "workload": s.release_workload("age < 50\nhistogram(sex)", epsilon=0.5)[1],
        "workload, total": s.release_workload(
            "age < 50\nhistogram(score)", epsilon=0.5, objective="total"
        )[1],
        "estimate": s.estimate("marginal", attributes=["sex", "score"], epsilon=0.5),
        "remaining": s.remaining("age < 30"),
        "remaining_detail": s.remaining_detail(),
        "history": s.history(),
    }
    mistakes = {
        "over the budget": lambda: s.count("age < 30", epsilon=11),
        "over what is left": lambda: s.count("age < 30", epsilon=9.5),
        "outside a domain": lambda: s.count("age = 300", epsilon=0.5),
        "unknown column": lambda: s.histogram("agee", epsilon=0.5),
        "syntax": lambda: s.count("age <", epsilon=0.5),
        "negative cost": lambda: s.count("age < 30", epsilon=-1),
        "two costs": lambda: s.count("age < 30", epsilon=0.5, rho=0.5),
        "no cost": lambda: s.count("age < 30"),
        "sum of a category": lambda: s.sum("sex", 0, 1, epsilon=0.5),
        "clip bounds": lambda: s.sum("age", 9, 1, epsilon=0.5),
        "bins": lambda: s.histogram("age", [50, 10], epsilon=0.5),
        "costs for queries": lambda: s.release(["age < 30"], [0.5, 0.5]),
        "workload syntax": lambda: s.release_workload("histogram(", epsilon=0.5),
        "long text": lambda: s.count("age < 30 AND " * 2000 + "age < 31", epsilon=0.5),
        "unknown table": lambda: s.count("age < 30", epsilon=0.5, table="nope"),
        "estimate kind": lambda: s.estimate("mode", attribute="age", epsilon=0.5),
        "query not text": lambda: s.count(5, epsilon=0.5),
        "attribute not text": lambda: s.histogram(5, epsilon=0.5),
        "attributes one text": lambda: s.marginal("sex", epsilon=0.5),
        "attribute in a list not text": lambda: s.marginal([5], epsilon=0.5),
        "bins not a list": lambda: s.histogram("age", 5, epsilon=0.5),
        "queries one text": lambda: s.release("age < 3", [0.5]),
        "bound not a number": lambda: s.sum("age", "0", 5, epsilon=0.5),
        "table not text": lambda: s.count(epsilon=0.5, table=5),
        "cost NaN": lambda: s.count(epsilon=float("nan")),
        "cost infinite": lambda: s.count(epsilon=float("inf")),
        "remaining of a long text": lambda: s.remaining("age < 30 AND " * 2000 + "age < 31"),
        "remaining of bad text": lambda: s.remaining("age <"),
    }
    raised: dict[str, type] = {}
    for name, call in mistakes.items():
        with pytest.raises(DpCuratorError) as err:
            call()
        raised[name] = type(err.value)
    return got, raised


def test_the_client_mirrors_the_in_process_session(tmp_path: Path) -> None:
    """One script against ``curator.analyst("x")`` and against ``Client(url, token)``:
    same types, same public fields, same budget left, same exception classes."""
    data = write_people(tmp_path / "data")
    with Curator.open(
        data=data[0], schema=data[1], budget=PureDP(10.0), ledger=tmp_path / "local.db"
    ) as curator:
        local, local_errors = script(curator.analyst("x"))
    with running(tmp_path / "served", data=data, budget=("--epsilon", "10")) as s:
        s.add("x")
        with s.client("x") as c:
            remote, remote_errors = script(c)
    assert remote_errors == local_errors
    assert local_errors["over the budget"] is BudgetExceeded
    assert local_errors["over what is left"] is BudgetExceeded
    assert local_errors["outside a domain"] is QueryError
    assert local_errors["negative cost"] is InvalidParameter
    assert local_errors["long text"] is TooLarge
    assert local_errors["workload syntax"] is WorkloadError
    assert local_errors["query not text"] is QueryError
    assert local_errors["attributes one text"] is QueryError
    assert local_errors["remaining of a long text"] is TooLarge
    for key in local:
        a, b = local[key], remote[key]
        assert type(a) is type(b), key
        if isinstance(a, list):
            assert [type(x) for x in a] == [type(x) for x in b], key
            a, b = (a[0], b[0]) if a else (a, b)
        assert public(a) == public(b), key
    assert isinstance(local["count"], Answer) and isinstance(local["histogram"], TableAnswer)
    assert isinstance(local["estimate"], Estimate)
    assert isinstance(local["remaining_detail"], Remaining)
    assert isinstance(local["history"][0], HistoryEntry)
    assert len(local["history"]) == len(remote["history"])
    assert [h.request for h in local["history"]] == [h.request for h in remote["history"]]
    assert [h.cost for h in local["history"]] == [h.cost for h in remote["history"]]
    assert local["count"].interval == (
        local["count"].value - local["count"].half_width,
        local["count"].value + local["count"].half_width,
    )


def public(x: object) -> object:
    """What does not depend on the noise or on the time."""
    if isinstance(x, Answer):
        return (x.query, x.noise, x.noise_parameter, x.cost, x.currency, x.half_width, x.remaining)
    if isinstance(x, DerivedAnswer):
        return (
            x.query,
            x.variance,
            x.half_width,
            x.strategy,
            x.currency,
            x.remaining,
            x.charge_ids,
        )
    if isinstance(x, TableAnswer):
        return (x.request, x.cost, x.currency, x.remaining, [public(c) for c in x.cells])
    if isinstance(x, HistoryEntry):
        return (x.analyst, x.table, x.kind, x.request, x.cost, x.currency, x.noise)
    return x


# --- estimates, budgets, releases -----------------------------------------------------------


def test_estimate_charges_nothing(server: Server) -> None:
    with server.client("alice") as c:
        c.count("age < 30", epsilon=0.01)  # so that the whole budget is not left there
    before = server.charges()
    with server.client("alice") as c:
        left = c.remaining()
        e = c.estimate("histogram", attribute="age", bins=[0, 50, 100], epsilon=0.1)
        assert e.kind == "histogram" and e.cells == 2 and e.admitted and e.exact
        assert e.cost == 0.1 and e.currency == "epsilon" and e.noise == "discrete_laplace"
        assert e.noise_parameter == 10.0 and e.half_width > 0 and e.expected_abs_error > 0
        too_much = c.estimate("count", query="age < 30", epsilon=min(left + 1, 100))
        assert too_much.kind == "count" and too_much.admitted is False
        c.estimate("sum", attribute="age", lower=0, upper=99, where="sex = 'M'", epsilon=0.1)
        assert c.remaining() == left
    with server.http("alice") as h:
        r = h.post("/v1/estimate", json={"kind": "count", "attribute": "age", "epsilon": 0.1})
        assert "attribute" in assert_error(r, 400, "invalid_parameter")["message"]
        r = h.post("/v1/estimate", json={"kind": "sum", "attribute": "age", "epsilon": 0.1})
        assert "lower" in assert_error(r, 400)["message"]
    assert server.charges() == before


def test_budget_with_and_without_a_query(tmp_path: Path) -> None:
    with running(tmp_path, budget=("--epsilon", "1")) as s:
        s.add("ann")
        with s.http("ann") as h:
            whole = h.get("/v1/budget").json()
            assert whole == {
                "budget": "PureDP(epsilon=1.0)",
                "currency": "epsilon",
                "remaining": 1.0,
                "remaining_budget": 1.0,
                "quota": None,
                "quota_remaining": None,
                "query": None,
                "exact": True,
            }
            assert h.post("/v1/count", json={"query": "sex = 'F'", "epsilon": 0.25}).is_success
            assert h.get("/v1/budget").json()["remaining"] == 0.75
            f = h.get("/v1/budget", params={"query": "sex = 'F' AND age < 30"}).json()
            m = h.get("/v1/budget", params={"query": "sex = 'M'"}).json()
            assert f["remaining"] == 0.75 and f["query"] == "sex = 'F' AND age < 30"
            assert m["remaining"] == 1.0 and m["exact"] is True
            r = h.get("/v1/budget", params={"query": "sex = 'X'"})
            assert "sex" in assert_error(r, 400, "invalid_query")["message"]
            r = h.get("/v1/budget", params={"query": "age < 1", "table": "nope"})
            assert_error(r, 400, "invalid_parameter")
            r = h.get("/v1/budget", params={"query": "age < 1 OR " * 3000 + "age < 2"})
            assert r.status_code in (413, 422) and set(r.json()) == {"error", "message"}


def test_release_a_workload_and_a_batch(tmp_path: Path) -> None:
    with running(tmp_path, budget=("--epsilon", "1")) as s:
        s.add("ann")
        with s.http("ann") as h:
            r = h.post(
                "/v1/release",
                json={
                    "workload": "age < 30\nage >= 30\nhistogram(sex)",
                    "epsilon": 0.5,
                    "strategy": "direct",
                },
            )
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["strategy"] == "direct" and out["derived"] == []
            assert [a["query"] for a in out["answers"]] == [
                "age < 30",
                "age >= 30",
                "sex = 'F'",
                "sex = 'M'",
            ]
            assert out["allocation"] == "optimal" and isinstance(out["notes"], list)
            # every point is in one of the two age queries and one sex cell
            c = [a["cost"]["amount"] for a in out["answers"]]
            assert max(c[:2]) + max(c[2:]) <= 0.5
            assert s.charges() == 4
            r = h.post(
                "/v1/release", json={"queries": ["score < 3", "score >= 3"], "costs": [0.1, 0.2]}
            )
            assert r.status_code == 200, r.text
            assert [a["cost"]["amount"] for a in r.json()["answers"]] == [0.1, 0.2]
            assert s.charges() == 6
            # all or nothing: the last query does not fit, nothing is charged
            left = h.get("/v1/budget", params={"query": "score >= 3"}).json()["remaining"]
            r = h.post(
                "/v1/release",
                json={"queries": ["age < 10", "score >= 3"], "costs": [0.01, left + 0.01]},
            )
            e = assert_error(r, 409, "budget_exceeded")
            assert "query 2 of the batch" in e["message"] and "nothing" in e["message"]
            assert s.charges() == 6
            assert h.get("/v1/budget", params={"query": "age < 10"}).json()["remaining"] == left
            for bad in (
                {"workload": "age < 30", "queries": ["age < 30"], "costs": [0.1]},
                {"queries": ["age < 30"]},
                {"queries": ["age < 30"], "costs": [0.1], "epsilon": 0.1},
                {"queries": [], "costs": []},
                {"workload": ""},
                {"workload": "age < 30", "rho": 0.1},
            ):
                assert_error(h.post("/v1/release", json=bad), 400)
            assert s.charges() == 6
            for bad_name in ("Auto", "best", "", 3, None, "tree\u0000"):
                r = h.post("/v1/release", json={"workload": "histogram(sex)", "strategy": bad_name})
                assert r.status_code == 422, r.text
            assert s.charges() == 6
            # a strategy: its tables are charged (one charge each), every asked answer is
            # their least-squares estimate, with its variance and the charges it comes from
            r = h.post(
                "/v1/release",
                json={
                    "workload": "marginal(sex, region)\nhistogram(sex)\nhistogram(region)",
                    "epsilon": 0.2,
                    "strategy": "marginals",
                    "objective": "total",
                },
            )
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["strategy"] == "marginals" and out["answers"] == []
            names = [c["strategy"] for c in out["strategies"]]
            assert names == ["marginals"]
            derived = out["derived"]
            assert len(derived) == 8 + 2 + 4
            ids = derived[0]["charge_ids"]
            assert s.charges() == 6 + len(ids)
            assert all(d["variance"] > 0 and d["charge_ids"] == ids for d in derived)
            cells = sum(d["value"] for d in derived[:8])
            assert abs(cells - derived[8]["value"] - derived[9]["value"]) < 1e-6
            # weighted rows (HDMM's p-Identity): one measurement, one charge on every point
            before = s.charges()
            ranges = "\n".join(
                f"age BETWEEN {a} AND {b}" for a in range(20, 30) for b in range(a, 30)
            )
            r = h.post(
                "/v1/release",
                json={"workload": ranges, "epsilon": 0.2, "strategy": "p-identity"},
            )
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["strategy"] == "p-identity" and len(out["derived"]) == 55
            assert len(out["derived"][0]["charge_ids"]) == 1 and s.charges() == before + 1
            assert all(d["variance"] > 0 for d in out["derived"])


# --- error shapes -------------------------------------------------------------------------


def test_a_bad_request_names_the_column(server: Server) -> None:
    before = server.charges()
    with server.http("alice") as h:
        e = assert_error(h.post("/v1/count", json={"query": "age = 300", "epsilon": 0.1}), 400)
        assert e["error"] == "invalid_query"
        assert "value 300 is outside the domain of 'age'" in e["message"]
        e = assert_error(h.post("/v1/histogram", json={"attribute": "agee", "epsilon": 0.1}), 400)
        assert "'agee'" in e["message"]
        e = assert_error(h.post("/v1/count", json={"query": 5, "epsilon": 0.1}), 422)
        assert e["error"] == "invalid_query" and e["message"].startswith("query: ")
        e = assert_error(h.post("/v1/count", json={"query": "age < 3", "epsilon": "0.1"}), 422)
        assert e["error"] == "invalid_request" and e["message"].startswith("epsilon")
        e = assert_error(h.post("/v1/count", json={"query": "age < 3", "eps": 0.1}), 422)
        assert e["message"].startswith("eps")
        e = assert_error(h.post("/v1/marginal", json={"attributes": "sex", "epsilon": 0.1}), 422)
        assert e["message"].startswith("attributes")
        e = assert_error(h.post("/v1/sum", json={"attribute": "age", "epsilon": 0.1}), 422)
        assert "lower" in e["message"]
    assert server.charges() == before


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"null",
        b"[]",
        b"{",
        b"\xff\xfe{}",
        b'{"query": "age < 3", "epsilon": 1e400}',
        b'{"query": "age < 3", "epsilon": NaN}',
        b'{"query": "age < 3", "epsilon": -Infinity}',
        b'{"query": "age < 3", "epsilon": ' + b"9" * 5000 + b"}",
        b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b', "epsilon": 0.1}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"query": "age < 3", "query": 4, "epsilon": 0.1}',
    ],
    ids=lambda b: repr(b[:24]),
)
def test_unparseable_or_odd_json_is_a_4xx_that_charges_nothing(server: Server, body) -> None:
    before = server.charges()
    with server.http("alice", headers={"Content-Type": "application/json"}) as h:
        r = h.post("/v1/count", content=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    e = assert_error(r, r.status_code)
    assert e["error"] in ("invalid_request", "invalid_parameter", "invalid_query"), e
    assert server.charges() == before


def test_the_client_maps_unparseable_bodies_to_invalid_parameter(server: Server) -> None:
    with server.client("alice") as c, pytest.raises(InvalidParameter):
        c._call("POST", "/v1/count", content=b"{", headers={"Content-Type": "application/json"})


def test_a_body_that_is_not_declared_json_is_415(server: Server) -> None:
    """``curl -d '{...}'`` without ``-H 'Content-Type: application/json'`` sends a form:
    the answer says what to send instead of a puzzling validation error."""
    before = server.charges()
    body = b'{"query": "age < 30", "epsilon": 0.01}'
    for kind in ("application/x-www-form-urlencoded", "text/plain", None):
        with server.http("alice", headers={"Content-Type": kind} if kind else {}) as h:
            e = assert_error(h.post("/v1/count", content=body), 415, "unsupported_media_type")
        assert "application/json" in e["message"]
    for kind in ("application/json", "application/json; charset=utf-8", "application/x+json"):
        with server.http("alice", headers={"Content-Type": kind}) as h:
            assert h.post("/v1/count", content=body).status_code == 200
    assert server.charges() == before + 3


def test_a_body_over_the_limit_is_413(server: Server) -> None:
    before = server.charges()
    big = b'{"query": "' + b" " * 1_100_000 + b'age < 3", "epsilon": 0.1}'
    with server.http("alice", headers={"Content-Type": "application/json"}) as h:
        e = assert_error(h.post("/v1/count", content=big), 413, "too_large")
        assert "1000000 bytes" in e["message"]

        def chunks():
            for i in range(0, len(big), 65536):
                yield big[i : i + 65536]

        # streamed without a Content-Length (chunked): refused as it arrives
        e = assert_error(h.post("/v1/count", content=chunks()), 413, "too_large")
        # a small chunked body is fine
        r = h.post("/v1/count", content=iter([b'{"query": "age < 3", ', b'"epsilon": 0.01}']))
        assert r.status_code == 200, r.text
    assert server.charges() == before + 1
    with server.client("alice") as c, pytest.raises(TooLarge):
        c.count("age < 3 " + " " * 1_100_000, epsilon=0.1)


def test_unknown_routes_and_methods(server: Server) -> None:
    with server.http("alice") as h:
        assert_error(h.get("/v1/nope"), 404, "not_found")
        assert_error(h.put("/v1/count", json={}), 405, "method_not_allowed")
        assert_error(h.get("/v1/count"), 405, "method_not_allowed")


def test_a_tampered_ledger_is_503_without_details(tmp_path: Path) -> None:
    """The ledger is edited behind the server's back: the next charge is refused with
    503 ``ledger_unavailable`` (the details go to the server's log, not to the analyst),
    and nothing more is charged."""
    import sqlite3

    with running(tmp_path) as s:
        s.add("ann")
        with s.client("ann") as c:
            c.count("age < 30", epsilon=0.5)
            db = sqlite3.connect(s.ledger, timeout=60)
            db.execute("UPDATE charges SET cost = '1/100' WHERE id = 1")
            db.commit()
            db.close()
            with s.http("ann") as h:
                r = h.post("/v1/count", json={"query": "age < 40", "epsilon": 0.5})
            e = assert_error(r, 503, "ledger_unavailable")
            assert "server log" in e["message"] and str(s.ledger) not in e["message"]
            with pytest.raises(ServiceUnavailable):
                c.count("age < 40", epsilon=0.5)
        assert s.charges() == 1
    assert "altered" in s.log()


def test_a_4xx_says_what_to_change(server: Server) -> None:
    """A body the service cannot read is refused with the field (or the line and column
    of the broken JSON), what it must be and what was sent; nothing is charged."""
    before = server.charges()
    cases = [
        (
            "/v1/histogram",
            b'{"attribute": "age",\n "bins": [1, 2,]}',
            "invalid_request",
            ["not valid JSON at line 2, column 16", "expecting value", "one JSON object"],
        ),
        (
            "/v1/count",
            b"",
            "invalid_request",
            ["the body is empty", "query", "epsilon", "rho", "mu", "table"],
        ),
        (
            "/v1/histogram",
            b"",
            "invalid_request",
            ["the body is empty", "attribute (required)", "bins", "where"],
        ),
        (
            "/v1/histogram",
            b"[1, 2]",
            "invalid_request",
            ["must be a JSON object", "attribute (required)", "got a list"],
        ),
        (
            "/v1/histogram",
            b'{"epsilon": 0.1}',
            "invalid_query",
            ["attribute: a required field is missing", "attribute (required), bins"],
        ),
        (
            "/v1/count",
            b'{"query": "age < 3", "epsilon": 0.1, "epsilo": 1}',
            "invalid_request",
            ["epsilo: unknown field", "query, epsilon, rho, mu, table"],
        ),
        (
            "/v1/histogram",
            b'{"attribute": "age", "bins": [1, true]}',
            "invalid_request",
            ["bins[1]: must be"],
        ),
        (
            "/v1/count",
            b'{"query": 3, "epsilon": 0.1}',
            "invalid_query",
            ["query: must be text, got the number 3"],
        ),
        (
            "/v1/count",
            b'{"query": "age < 3", "epsilon": "0.1"}',
            "invalid_request",
            ["epsilon: must be a number, got the text '0.1'"],
        ),
        (
            "/v1/release",
            b'{"workload": "total", "epsilon": 1, "allocation": "best"}',
            "invalid_request",
            ["allocation: must be 'sequential', 'uniform' or 'optimal'"],
        ),
    ]
    with server.http("alice", headers={"Content-Type": "application/json"}) as h:
        for path, body, reason, parts in cases:
            e = assert_error(h.post(path, content=body), 422, reason)
            for part in parts:
                assert part in e["message"], (body, e["message"])
            assert "Field required" not in e["message"] and "decode error" not in e["message"]
    assert server.charges() == before


def test_the_root_points_to_the_api_and_the_dashboard(server: Server) -> None:
    with httpx.Client(base_url=server.url) as h:  # no token needed
        r = h.get("/")
        assert r.status_code == 200
        d = r.json()
        assert d["api"] == "/docs" and d["dashboard"] == "/dashboard"
        for route in (d["api"], d["openapi"], d["dashboard"], d["health"]):
            assert h.get(route).status_code == 200, route
        e = assert_error(h.get("/v2/count"), 404, "not_found")
        assert "'/v2/count'" in e["message"] and "/docs" in e["message"]
        assert "/dashboard" in e["message"]
