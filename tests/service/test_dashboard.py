"""The dashboard's page and JSON routes, in process: who sees what, the heat map against
``/v1/budget`` cell by cell, caching per ledger version, refusals, bad input."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from urllib.parse import quote

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from dpcurator import Curator
from dpcurator.curator import landscape
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema
from dpcurator.service import create_app
from dpcurator.service.dashboard import MAX_REFUSALS, half_width
from dpcurator.service.limits import Limits

from .conftest import SCHEMA, assert_error

WIDE = {
    "attributes": [
        *SCHEMA["attributes"],
        {"name": "income", "type": "integer", "min": 0, "max": 149},
    ]
}


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[TestClient, Curator, dict[str, str]]]:
    rng = np.random.default_rng(5)
    n = 300
    frame = pd.DataFrame(
        {
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
            "region": rng.choice(["north", "south", "east", "west"], n),
            "score": rng.integers(0, 10, n),
            "income": rng.integers(0, 150, n),
        }
    )
    cur = Curator.open(
        frame,
        Schema.from_dict(WIDE),
        budget=PureDP(1.0),
        ledger=tmp_path / "ledger.db",
        rng=SeededRandomSource(1),
        allow_insecure=True,
    )
    tokens = {
        "root": cur.add_analyst("root", admin=True),
        "alice": cur.add_analyst("alice", quota=0.5),
        "bob": cur.add_analyst("bob"),
    }
    app = create_app(cur, Limits(requests_per_second=10_000, burst=10_000))
    with TestClient(app) as client:
        yield client, cur, tokens
    cur.close()


def auth(tokens: dict[str, str], who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens[who]}"}


def ask(client: TestClient, tokens, who: str, route: str, body: dict) -> object:
    r = client.post(f"/v1/{route}", json=body, headers=auth(tokens, who))
    assert r.status_code in (200, 409), r.text
    return r.json()


# --- the page -----------------------------------------------------------------------------


def test_the_page_and_its_assets_load_nothing_from_elsewhere(served) -> None:
    client, _, _ = served
    page = client.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    for name, kind in (("dashboard.js", "javascript"), ("dashboard.css", "css")):
        r = client.get(f"/dashboard/{name}")
        assert r.status_code == 200 and kind in r.headers["content-type"]
    assert_error(client.get("/dashboard/secret.txt"), 404, "not_found")
    assert_error(client.get("/dashboard/..%2Fapp.py"), 404)
    static = resources.files("dpcurator.service") / "static"
    for f in static.iterdir():
        text = f.read_text()
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text), f.name
    assert "localStorage" not in (static / "dashboard.js").read_text()


def test_the_sign_in_names_where_a_token_comes_from(served) -> None:
    """Under ``serve --demo`` the token is printed at start; otherwise ``analysts add``
    gives one: the sign-in names both, so neither user is sent the wrong way."""
    client, _, _ = served
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", client.get("/dashboard").text))
    assert "dpcurator serve --demo printed" in text
    assert "dpcurator analysts add NAME --ledger FILE" in text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/dashboard/overview",
        "/v1/dashboard/answers",
        "/v1/dashboard/refusals",
        "/v1/dashboard/heatmap?rows=age&cols=sex",
    ],
)
def test_every_route_needs_a_valid_token(served, path: str) -> None:
    client, _, _ = served
    assert_error(client.get(path), 401, "unauthorized")
    bad = {"Authorization": "Bearer dpc_0123456789abcdef_" + "A" * 43}
    assert_error(client.get(path, headers=bad), 401, "unauthorized")


# --- who sees what -----------------------------------------------------------------------


def test_without_a_unit_every_cost_is_per_row(served) -> None:
    """The overview says whom the budget protects; /v1/schema has no unit (null)."""
    client, _, tokens = served
    overview = client.get("/v1/dashboard/overview", headers=auth(tokens, "bob")).json()
    assert overview["privacy_unit"] is None and overview["unit_text"] == "per row"
    schema = client.get("/v1/schema", headers=auth(tokens, "bob")).json()
    assert "privacy_unit" in schema and schema["privacy_unit"] is None


def test_an_analyst_sees_only_her_own_records(served) -> None:
    client, _, tokens = served
    ask(client, tokens, "alice", "count", {"query": "age < 30", "epsilon": 0.1})
    ask(client, tokens, "bob", "histogram", {"attribute": "region", "epsilon": 0.2})
    refused = ask(client, tokens, "bob", "count", {"query": "region = 'east'", "epsilon": 0.9})
    assert refused["error"] == "budget_exceeded"
    ask(client, tokens, "alice", "count", {"query": "age < 20", "epsilon": 0.45})  # quota

    mine = client.get("/v1/dashboard/overview", headers=auth(tokens, "alice")).json()
    assert mine["you"] == {"name": "alice", "admin": False}
    assert [a["name"] for a in mine["analysts"]] == ["alice"]
    assert [s["analyst"] for s in mine["spend"]["series"]] == ["alice"]
    assert "bob" not in mine["spend"]["svg"] and "root" not in mine["spend"]["svg"]
    assert mine["charges"] == 1
    assert mine["remaining"]["quota"] == 0.5
    budget = client.get("/v1/budget", headers=auth(tokens, "alice")).json()
    for k in ("remaining", "remaining_budget", "quota_remaining"):
        assert mine["remaining"][k] == budget[k]

    answers = client.get("/v1/dashboard/answers", headers=auth(tokens, "alice")).json()
    assert {a["analyst"] for a in answers["answers"]} == {"alice"}
    history = client.get("/v1/history", headers=auth(tokens, "alice")).json()
    assert [a["charge_id"] for a in answers["answers"]] == [h["charge_id"] for h in history][::-1]
    for a in answers["answers"]:
        assert "region" not in a["request"]
    refusals = client.get("/v1/dashboard/refusals", headers=auth(tokens, "alice")).json()
    assert [r["analyst"] for r in refusals["refusals"]] == ["alice"]
    assert refusals["refusals"][0]["request"] == "'age < 20'"
    assert "quota" in refusals["refusals"][0]["of"]
    for path in ("answers", "refusals"):
        r = client.get(f"/v1/dashboard/{path}?analyst=bob", headers=auth(tokens, "alice"))
        assert_error(r, 403, "forbidden")

    everyone = client.get("/v1/dashboard/overview", headers=auth(tokens, "root")).json()
    assert {a["name"] for a in everyone["analysts"]} == {"alice", "bob", "root"}
    assert everyone["charges"] == 2
    bob = next(a for a in everyone["analysts"] if a["name"] == "bob")
    assert bob["charged"] == 0.2 and bob["spent"] == 0.2 and bob["exact"]
    seen = client.get("/v1/dashboard/refusals", headers=auth(tokens, "root")).json()["refusals"]
    assert [r["analyst"] for r in seen] == ["alice", "bob"]  # newest first
    assert seen[1]["cost"] == 0.9 and seen[1]["left"] == 0.7 and seen[1]["route"] == "count"
    only = client.get("/v1/dashboard/answers?analyst=bob", headers=auth(tokens, "root")).json()
    assert {a["analyst"] for a in only["answers"]} == {"bob"}


def test_answers_carry_the_same_interval_as_when_they_were_released(served) -> None:
    client, _, tokens = served
    answer = ask(client, tokens, "bob", "count", {"query": "score < 5", "epsilon": 0.3})
    wrong = {"attribute": "age", "lower": 0, "upper": 99, "rho": 1}  # another currency
    assert_error(client.post("/v1/sum", json=wrong, headers=auth(tokens, "bob")), 400)
    got = client.get("/v1/dashboard/answers", headers=auth(tokens, "bob")).json()["answers"]
    (entry,) = got
    assert entry["half_width"] == answer["half_width"]
    (cell,) = entry["cells"]
    assert (cell["low"], cell["high"]) == tuple(answer["interval"])
    assert half_width("DiscreteLaplace(scale=10)") == 30
    assert half_width("DiscreteGaussian(sigma=7/2)") is not None
    assert half_width("nonsense") is None


# --- the heat map ------------------------------------------------------------------------


def test_the_heat_map_is_what_v1_budget_says_of_each_cell(served) -> None:
    client, cur, tokens = served
    ask(client, tokens, "alice", "count", {"query": "age < 30 AND sex = 'F'", "epsilon": 0.2})
    ask(client, tokens, "bob", "marginal", {"attributes": ["region", "score"], "epsilon": 0.1})
    ask(client, tokens, "bob", "count", {"query": "score >= 7 OR region = 'west'", "epsilon": 0.3})
    ask(
        client,
        tokens,
        "alice",
        "histogram",
        {"attribute": "age", "bins": [0, 50, 100], "epsilon": 0.25},
    )
    schema = cur.schema()
    for who in ("alice", "bob"):
        r = client.get(
            "/v1/dashboard/heatmap?rows=age&cols=region&row_bins=0,10,30,60,100",
            headers=auth(tokens, who),
        )
        assert r.status_code == 200, r.text
        grid = r.json()
        assert grid["rows"]["labels"] == ["0–9", "10–29", "30–59", "60–99"]
        assert grid["cols"]["labels"] == ["north", "south", "east", "west"]
        assert grid["exact"] and grid["method"] == "grid"
        rows = landscape.grid_axis(schema, "age", [0, 10, 30, 60, 100])
        cols = landscape.grid_axis(schema, "region")
        for i in range(4):
            for j in range(4):
                text = landscape.cell_text(schema, rows, i, cols, j)
                b = client.get(f"/v1/budget?query={quote(text)}", headers=auth(tokens, who)).json()
                assert b["exact"]
                assert grid["remaining"][i][j] == b["remaining"], (who, text)
                assert grid["remaining_budget"][i][j] == b["remaining_budget"]
                if who == "alice":
                    assert grid["quota_remaining"][i][j] == b["quota_remaining"]
        if who == "bob":
            assert grid["quota_remaining"] is None
        assert "<svg" in grid["svg"] and "age" in grid["svg"]


def test_the_heat_map_is_cached_per_ledger_version_and_follows_new_charges(served) -> None:
    client, _, tokens = served
    url = "/v1/dashboard/heatmap?rows=sex&cols=region"
    first = client.get(url, headers=auth(tokens, "root")).json()
    assert not first["cached"]
    again = client.get(url, headers=auth(tokens, "root")).json()
    assert again["cached"] and again["remaining"] == first["remaining"]
    assert first["remaining"] == [[1.0] * 4] * 2
    ask(client, tokens, "bob", "count", {"query": "sex = 'M' AND region = 'east'", "epsilon": 0.4})
    after = client.get(url, headers=auth(tokens, "root")).json()
    assert not after["cached"] and after["version"] == first["version"] + 1
    assert after["remaining"] == [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.6, 1.0]]


def test_large_attributes_are_binned_and_bins_are_bounded(served) -> None:
    client, _, tokens = served
    grid = client.get(
        "/v1/dashboard/heatmap?rows=income&cols=sex", headers=auth(tokens, "root")
    ).json()
    assert len(grid["rows"]["labels"]) == 75 and grid["rows"]["labels"][0] == "0–1"
    edges = ",".join(str(i) for i in range(102))
    r = client.get(
        f"/v1/dashboard/heatmap?rows=income&cols=sex&row_bins={edges}", headers=auth(tokens, "root")
    )
    assert_error(r, 413, "too_large")


@pytest.mark.parametrize(
    ("query", "status", "reason"),
    [
        ("rows=agee&cols=sex", 400, "invalid_query"),
        ("rows=age&cols=age", 400, "invalid_query"),
        ("rows=sex&cols=age&row_bins=0,1", 400, "invalid_query"),
        ("rows=age&cols=sex&row_bins=0,x", 400, "invalid_parameter"),
        ("rows=age&cols=sex&row_bins=10,5", 400, "invalid_query"),
        ("rows=age&cols=sex&row_bins=30,60", 400, "invalid_query"),
        ("rows=age&cols=sex&row_bins=5", 400, "invalid_query"),
        ("rows=age&cols=sex&table=other", 400, "invalid_parameter"),
        ("rows=" + "a" * 300, 422, "invalid_request"),
    ],
)
def test_bad_heat_map_requests_are_4xx(served, query: str, status: int, reason: str) -> None:
    client, _, tokens = served
    r = client.get(f"/v1/dashboard/heatmap?{query}", headers=auth(tokens, "alice"))
    assert_error(r, status, reason)


def test_no_input_makes_a_500(served) -> None:
    client, _, tokens = served
    rng = np.random.default_rng(3)
    junk = [
        "",
        " ",
        "0",
        "-1",
        "1e9",
        "age",
        "sex",
        "x,y",
        ",",
        "0,,5",
        "999999999999999999999",
        "\u00e9",
        "%00",
        "[1]",
        "null",
        "1.5",
        "0,50,100",
        "age OR 1",
    ]
    paths = ["/v1/dashboard/heatmap", "/v1/dashboard/answers", "/v1/dashboard/refusals"]
    names = ["rows", "cols", "row_bins", "col_bins", "table", "limit", "analyst"]
    for _ in range(150):
        path = paths[rng.integers(len(paths))]
        params = {names[k]: junk[rng.integers(len(junk))] for k in rng.choice(len(names), 3)}
        r = client.get(path, params=params, headers=auth(tokens, "root"))
        assert r.status_code < 500, (path, params, r.text)
        if r.status_code >= 400:
            assert_error(r, r.status_code)


def test_cell_by_cell_and_bounds_when_the_grid_is_too_large(served, monkeypatch) -> None:
    client, cur, tokens = served
    ask(client, tokens, "bob", "count", {"query": "age < 40 AND score > 3", "epsilon": 0.2})
    ask(client, tokens, "bob", "count", {"query": "age > 20 OR sex = 'F'", "epsilon": 0.3})
    schema = cur.schema()
    rows, cols = (
        landscape.grid_axis(schema, "age", [0, 20, 40, 100]),
        landscape.grid_axis(schema, "score"),
    )
    one_pass = landscape.remaining_grid(cur, "data", rows, cols)
    monkeypatch.setattr(landscape, "grid_max_loss", lambda *a, **k: None)
    by_cell = landscape.remaining_grid(cur, "data", rows, cols)
    assert by_cell.method == "cells" and all(all(r) for r in by_cell.exact)
    assert by_cell.remaining == one_pass.remaining
    bounded = landscape.remaining_grid(cur, "data", rows, cols, time_limit=0.0)
    assert not any(any(r) for r in bounded.exact)
    for got, exact in zip(bounded.remaining, one_pass.remaining, strict=True):
        assert all(g <= e for g, e in zip(got, exact, strict=True))  # never more than is left


def test_refusals_are_bounded() -> None:
    from dpcurator.service.dashboard import Refusals

    kept = Refusals(size=3)
    for i in range(5):
        kept.record(
            "a" if i % 2 else "b",
            "count",
            f"refused: 'q{i}' costs 1 epsilon, but "
            "the points it covers have 0.5 left of the budget PureDP(epsilon=1.0)",
        )
    assert [r["request"] for r in kept.latest(None, 10)] == ["'q4'", "'q3'", "'q2'"]
    assert [r["request"] for r in kept.latest("a", 10)] == ["'q3'"]
    assert MAX_REFUSALS >= 100
