"""The fast lane answers exactly as FastAPI does (dpcurator.service.fast_lane).

Two curators opened alike (same data, budget, analysts, a seeded noise source) are
served side by side and sent the same requests in the same order: one copy with
``Content-Type: application/json``, which the lane takes, the other with
``application/json; charset=utf-8``, which FastAPI takes and reads the same way (the lane
takes only the plain form). Every response must be the same, byte for byte: status,
headers, body, noise included; and a spy on the lane shows which path answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator import Curator
from dpcurator.errors import LedgerError, TooLarge
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema
from dpcurator.service import Limits, create_app
from dpcurator.service import models as m
from dpcurator.service.callers import Caller, ServiceError, one_hop, unverified_caller
from dpcurator.service.fast_lane import MAX_BODY, FastLane, lanes

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "score", "type": "integer", "min": 0, "max": 9},
    ]
}
LANE = {"Content-Type": "application/json"}
#: FastAPI reads this the same way; the lane leaves it to FastAPI.
FASTAPI = {"Content-Type": "application/json; charset=utf-8"}


class Served:
    """One curator behind its app, with tokens by analyst name."""

    def __init__(self, directory: Path, frame: pd.DataFrame) -> None:
        directory.mkdir()
        self.curator = Curator.open(
            frame,
            Schema.from_dict(SCHEMA),
            budget=PureDP(2.0),
            ledger=directory / "ledger.db",
            rng=SeededRandomSource(11),
            allow_insecure=True,
        )
        self.tokens = {
            "root": self.curator.add_analyst("root", admin=True),
            "alice": self.curator.add_analyst("alice", quota=0.5),
            "bob": self.curator.add_analyst("bob"),
        }
        self.app = create_app(self.curator, Limits(requests_per_second=10_000, burst=10_000))
        _add_raising_routes(self.app)
        self.client = TestClient(self.app, raise_server_exceptions=False)


def _add_raising_routes(app: Any) -> None:
    """One-hop routes whose code raises: each error's handler, through both paths."""
    hop = one_hop(app.state)
    failures = {
        "too-large": TooLarge("too many cells"),
        "ledger": LedgerError("the store is gone"),
        "internal": RuntimeError("a bug"),
    }
    for name, err in failures.items():
        app.post(f"/v1/test-{name}", response_model=m.AnswerOut)(hop(_raising(err)))


def _raising(err: Exception) -> Any:
    def fail(body: m.CountRequest, who: Caller) -> m.AnswerOut:
        raise err

    return fail


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Served, Served, list]]:
    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame(
        {
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "score": rng.integers(0, 10, n),
        }
    )
    a = Served(tmp_path / "a", frame)
    b = Served(tmp_path / "b", frame)
    taken: list[str] = []
    take = FastLane._take

    def spy(self: FastLane, scope: Any, message: Any) -> Any:
        got = take(self, scope, message)
        if got is not None:
            taken.append(scope["path"])
        return got

    monkeypatch.setattr(FastLane, "_take", spy)
    with a.client, b.client:
        yield a, b, taken
    a.curator.close()
    b.curator.close()


def same(a: Served, b: Served, who: str | None, path: str, body: bytes | dict) -> Any:
    """POST ``body`` to both: through the lane on ``a``, through FastAPI on ``b``; the
    two responses must be identical. Returns ``a``'s response."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    got = []
    for served, headers in ((a, LANE), (b, FASTAPI)):
        h = dict(headers)
        if who is not None:
            h["Authorization"] = f"Bearer {served.tokens[who]}"
        got.append(served.client.post(path, content=content, headers=h))
    lane, fastapi = got
    assert (lane.status_code, lane.content) == (fastapi.status_code, fastapi.content)
    assert sorted(lane.headers.items()) == sorted(fastapi.headers.items())
    return lane


def test_the_lane_takes_the_post_query_routes_and_nothing_else(pair) -> None:
    a, _, _ = pair
    assert set(lanes(a.app, unverified_caller)) == {
        *(f"/v1/{r}" for r in ("count", "units", "sql", "histogram", "marginal", "sum")),
        *(f"/v1/{r}" for r in ("mean", "variance", "stdev", "share", "quantile")),
        *(f"/v1/{r}" for r in ("quantiles", "median", "release", "estimate")),
        "/v1/test-too-large",
        "/v1/test-ledger",
        "/v1/test-internal",
    }


def test_answers_and_refusals_are_the_same_through_both_paths(pair) -> None:
    a, b, taken = pair
    script: list[tuple[str | None, str, dict]] = [
        ("alice", "/v1/count", {"query": "age < 30", "epsilon": 0.1}),
        ("bob", "/v1/count", {"query": "age >= 30 AND sex = 'F'", "epsilon": 0.25}),
        ("bob", "/v1/histogram", {"attribute": "score", "epsilon": 0.2}),
        ("bob", "/v1/marginal", {"attributes": ["sex", "score"], "epsilon": 0.1}),
        ("bob", "/v1/sum", {"attribute": "age", "lower": 0, "upper": 99, "epsilon": 0.1}),
        ("bob", "/v1/mean", {"attribute": "age", "lower": 0, "upper": 99, "epsilon": 0.2}),
        ("bob", "/v1/median", {"attribute": "age", "epsilon": 0.1}),
        ("bob", "/v1/estimate", {"kind": "count", "query": "age < 5", "epsilon": 0.1}),
        ("bob", "/v1/release", {"queries": ["age < 10", "age >= 90"], "costs": [0.1, 0.1]}),
        (
            "bob",
            "/v1/sql",
            {
                "query": "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.1) sex, COUNT(*) "
                "FROM data GROUP BY sex"
            },
        ),
        # the curator's refusals: each its handler's status, message and headers
        ("alice", "/v1/count", {"query": "age < 30", "epsilon": 0.45}),  # over her quota
        ("bob", "/v1/count", {"query": "age < 30", "epsilon": 5}),  # over the budget
        ("bob", "/v1/count", {"query": "age <", "epsilon": 0.1}),  # syntax
        ("bob", "/v1/count", {"query": "agee < 3", "epsilon": 0.1}),  # unknown column
        ("bob", "/v1/count", {"query": "age < 3", "epsilon": 0.1, "table": "nope"}),
        ("bob", "/v1/count", {"query": "age < 3", "epsilon": -1}),
        ("bob", "/v1/count", {"query": "age < 3", "epsilon": 0.1, "rho": 0.1}),
        ("bob", "/v1/histogram", {"attribute": "age", "bins": [5, 1], "epsilon": 0.1}),
        # the route's own code raising: the application's handlers, then the 500
        ("bob", "/v1/test-too-large", {"query": "age < 3", "epsilon": 0.1}),
        ("bob", "/v1/test-ledger", {"query": "age < 3", "epsilon": 0.1}),
        ("bob", "/v1/test-internal", {"query": "age < 3", "epsilon": 0.1}),
    ]
    statuses = []
    for who, path, body in script:
        statuses.append(same(a, b, who, path, body).status_code)
    assert statuses[:10] == [200] * 10
    assert statuses[10:] == [409, 409, 400, 400, 400, 400, 400, 400, 413, 503, 500]
    assert taken == [path for _, path, _ in script]  # every one through the lane

    # the same charges, in the same order, with the same noise
    def charges(s: Served) -> list[dict]:
        return [dict(vars(h), created=None) for h in s.curator.history()]

    assert charges(a) == charges(b) and len(charges(a)) == 10

    # the dashboard recorded both refusals (409) through the lane as through FastAPI
    def refusals(s: Served) -> list[tuple]:
        got = s.client.get(
            "/v1/dashboard/refusals", headers={"Authorization": f"Bearer {s.tokens['root']}"}
        ).json()["refusals"]
        return sorted((r["analyst"], r["route"], r["request"]) for r in got)

    assert refusals(a) == refusals(b)
    assert [r[:2] for r in refusals(a)] == [("alice", "count"), ("bob", "count")]


def test_an_unknown_revoked_or_limited_caller_is_refused_the_same(tmp_path: Path) -> None:
    frame = pd.DataFrame({"age": [1, 2, 3], "sex": ["F", "M", "F"], "score": [1, 2, 3]})
    a, b = Served(tmp_path / "a", frame), Served(tmp_path / "b", frame)
    for s in (a, b):
        s.curator.ledger.revoke("bob")
        s.app.state.rate = type(s.app.state.rate)(1.0, 1)  # one request, then 429
    with a.client, b.client:
        body = {"query": "age < 3", "epsilon": 0.1}
        assert same(a, b, "bob", "/v1/count", body).status_code == 401
        for s in (a, b):
            s.tokens["nobody"] = "dpc_" + "a" * 16 + "_" + "b" * 43
        assert same(a, b, "nobody", "/v1/count", body).status_code == 401
        assert same(a, b, "alice", "/v1/count", body).status_code == 200
        r = same(a, b, "alice", "/v1/count", body)
        assert r.status_code == 429 and r.headers["retry-after"]
    a.curator.close()
    b.curator.close()


ODD_BODIES = [
    b"",
    b"null",
    b"[]",
    b'"age < 3"',
    b"{",
    b'{"query": "age < 3"}',  # no cost
    b'{"query": 3, "epsilon": 0.1}',
    b'{"query": "age < 3", "epsilon": "x"}',
    b'{"query": "age < 3", "epsilon": 0.1, "extra": 1}',
    b'{"query": "age < 3", "epsilon": NaN}',
    b'{"query": "age < 3", "epsilon": 5e-324}',
    b'{"query": "age < 3", "epsilon": 1e400}',
    b'{"query": "age < 3", "epsilon": 1' + b"0" * 5000 + b"}",
    b'{"query": "age BETWEEN -1e400 AND 1e400", "epsilon": 0.1}',
    b'{"query": "' + b"(" * 5000 + b'age < 3", "epsilon": 0.1}',
    b'{"query": {"query": "age < 3"}, "epsilon": 0.1}',
    b"[" * 100_000,
    '{"query": "age < 3", "epsilon": 0.1}'.encode("utf-16"),
    b'\xff{"query": "age < 3", "epsilon": 0.1}',
]


@pytest.mark.parametrize("body", ODD_BODIES, ids=range(len(ODD_BODIES)))
def test_what_the_lane_leaves_to_fastapi_is_answered_as_before(pair, body: bytes) -> None:
    a, b, taken = pair
    before = len(a.curator.history())
    r = same(a, b, "bob", "/v1/count", body)
    assert r.status_code in (200, 400, 415, 422), r.text
    if r.status_code in (415, 422):  # not JSON, not an object, or not the body model
        assert taken == []
    if r.status_code != 200:  # a one-line error, and nothing charged
        assert set(r.json()) == {"error", "message"} and "\n" not in r.json()["message"]
        assert len(a.curator.history()) == before


def test_unusual_headers_go_to_fastapi(pair) -> None:
    a, b, taken = pair
    body = json.dumps({"query": "age < 3", "epsilon": 0.1}).encode()
    cases = [
        [("content-type", "application/json")],  # no token
        [("content-type", "application/json"), ("authorization", "Basic abc")],
        [("content-type", "text/plain"), ("authorization", "Bearer {t}")],
        [("authorization", "Bearer {t}")],  # no content type
        [("content-type", "application/json"), ("authorization", "Bearer {t}")] * 2,
    ]
    for headers in cases:
        got = []
        for s in (a, b):
            raw = [(k, v.format(t=s.tokens["bob"])) for k, v in headers]
            got.append(s.client.post("/v1/count", content=body, headers=raw))
        assert (got[0].status_code, got[0].content) == (got[1].status_code, got[1].content)
        assert got[0].status_code != 200 or headers == cases[-1]
    assert taken == []  # not one through the lane


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fields=st.dictionaries(
        st.sampled_from(["query", "epsilon", "rho", "table", "where", "extra"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-3, 3),
            st.floats(allow_nan=False),
            st.sampled_from(["age < 30", "sex = 'F'", "age <", "", "data", "0.1", "1e400"]),
            st.lists(st.integers(0, 3), max_size=2),
        ),
        max_size=5,
    )
)
def test_any_count_body_is_answered_the_same_way(pair, fields: dict) -> None:
    a, b, _ = pair
    same(a, b, "bob", "/v1/count", fields)


def test_a_route_an_earlier_one_shadows_is_left_to_fastapi() -> None:
    """The lane takes a path only where Starlette's router would pick that route."""
    api = FastAPI()
    hop = one_hop(api.state)

    @api.post("/v1/{anything}")
    def catch_all(anything: str) -> dict:
        return {}

    def deny() -> None:
        raise RuntimeError("a guard the lane would skip")

    for path in ("/v1/count", "/v2/count"):
        api.post(path, response_model=m.AnswerOut)(hop(_raising(RuntimeError())))
    # another dependency than the caller's, or FastAPI's own body limit: FastAPI's
    api.post("/v3/count", response_model=m.AnswerOut, dependencies=[Depends(deny)])(
        hop(_raising(RuntimeError()))
    )
    api.post("/v4/count", response_model=m.AnswerOut, max_body_size=10)(
        hop(_raising(RuntimeError()))
    )
    assert set(lanes(api, unverified_caller)) == {"/v2/count"}


def test_overridden_dependencies_and_long_bodies_go_to_fastapi(pair) -> None:
    a, b, taken = pair
    padded = b'{"query": "age < 3", "epsilon": 0.1}' + b" " * MAX_BODY
    assert same(a, b, "bob", "/v1/count", padded).status_code == 200
    assert taken == []  # read once, by FastAPI
    for s in (a, b):
        s.app.dependency_overrides[unverified_caller] = _no_one
    r = same(a, b, "bob", "/v1/count", {"query": "age < 3", "epsilon": 0.1})
    assert r.status_code == 401 and taken == []


async def _no_one() -> None:
    raise ServiceError("unauthorized", "no one, in this test")
