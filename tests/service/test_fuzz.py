"""Property-based fuzz of every route of the OpenAPI document (plain hypothesis).

For each operation of ``/openapi.json``, hypothesis draws request bodies from the
operation's own schema (valid-looking values, edge numbers, hostile text) and garbage
(wrong types, extra fields, deep nesting, ``1e400``, undecodable bytes, empty bodies),
and query strings and path parameters the same way; every request carries a valid
administrator's token. Whatever is sent: no 5xx, every 4xx is JSON exactly
``{"error", "message"}``, and a refused request charges nothing (the ledger's rows are
counted before and after each request).
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import FAST, Server, running, write_people

CORE = {
    ("GET", "/v1/health"),
    ("GET", "/v1/schema"),
    ("POST", "/v1/count"),
    ("POST", "/v1/histogram"),
    ("POST", "/v1/marginal"),
    ("POST", "/v1/sum"),
    ("POST", "/v1/release"),
    ("POST", "/v1/estimate"),
    ("GET", "/v1/budget"),
    ("GET", "/v1/history"),
    ("GET", "/v1/admin/analysts"),
    ("POST", "/v1/admin/analysts"),
    ("DELETE", "/v1/admin/analysts/{name}"),
    ("GET", "/v1/admin/ledger"),
}


def _document() -> dict[str, Any]:
    """The service's OpenAPI document, from an app made in process (at collection, so
    that every route it lists, now or later, is fuzzed)."""
    from dpcurator import Curator
    from dpcurator.privacy import PureDP
    from dpcurator.service import create_app

    with tempfile.TemporaryDirectory() as d:
        data, schema = write_people(Path(d), rows=5)
        with Curator.open(data=data, schema=schema, budget=PureDP(1.0)) as curator:
            return create_app(curator).openapi()


def _operations(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)


OPERATIONS = _operations(_document())
CHARGING = {"/v1/count", "/v1/histogram", "/v1/marginal", "/v1/sum", "/v1/release"} | {
    f"/v1/{s}" for s in ("mean", "variance", "stdev", "quantile", "quantiles", "median")
}
EXAMPLES = max(3, 100 // len(OPERATIONS))  # per operation: about 100 in all

WORDS = [
    "", " ", "age", "sex", "region", "score", "nope", "data", "north", "F",
    "age < 30", "age = 300", "age >= 18 AND sex = 'F'", "region IN ('north', 'east')",
    "age < 30 OR region = 'west'", "NOT sex = 'M'", "score BETWEEN 2 AND 5",
    "(((age < 3)))", "age <", "score BETWEEN", "age NOT BETWEEN 2 AND", "sex = 'X'", "age < 1e400", "age < 99999999999999999999999",
    "histogram(sex)", "histogram(age, bins=[0, 50, 100])", "marginal(sex, region)",
    "age < 30\nsex = 'F'", "age < 30\n\n\nhistogram(", "☃", "年齢 < 30", "\x00", "\ud7ff",
    "'; DROP TABLE charges; --", "%s%n", "a" * 300, "(" * 150 + "age < 3" + ")" * 150,
]  # fmt: skip
NUMBERS = [
    0, -1, 1, 2, 0.5, 1e-300, 5e-324, 1e308, 1.7976931348623157e308, -0.0, 10**30,
    -(10**30), 2**63, 2**64 + 1, 99, 100, 0.001,
]  # fmt: skip
RAW = [
    b"",
    b"null",
    b"[]",
    b"{",
    b"\xff\xfe\x00",
    b'{"epsilon": 1e400}',
    b'{"epsilon": NaN, "query": "age < 3"}',
    b'{"epsilon": -Infinity}',
    b'{"epsilon": ' + b"9" * 5000 + b"}",
    b"[" * 50_000 + b"]" * 50_000,
    b'{"query": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}",
    b'{"query": "age < 3", "query": 7}',
    b'"\\ud800"',
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(NUMBERS),
    st.text(max_size=20),
    st.sampled_from(WORDS),
)
json_any = st.recursive(
    json_leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
text = st.one_of(st.sampled_from(WORDS), st.text(max_size=40))


def from_schema(schema: dict[str, Any], doc: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Valid-looking values of a JSON schema of the OpenAPI document."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return from_schema(doc["components"]["schemas"][name], doc)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, doc) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        return text
    if kind == "integer":
        return st.one_of(st.integers(-5, 105), st.integers(), st.sampled_from([2**63, -(2**70)]))
    if kind == "number":
        return st.one_of(st.sampled_from(NUMBERS), st.floats(allow_nan=False, allow_infinity=False))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*(from_schema(s, doc) for s in schema["prefixItems"])).map(list)
        return st.lists(from_schema(schema.get("items", {}), doc), max_size=2)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: from_schema(v, doc) for k, v in props.items() if k in required},
            optional={k: from_schema(v, doc) for k, v in props.items() if k not in required},
        )
    return json_any


ATTRIBUTES = ["age", "sex", "region", "score"]
GOOD_QUERIES = ["age < 30", "sex = 'F'", "region IN ('north', 'east') AND score >= 3", None]
#: Values that make a valid request likely, by field name (the costs in epsilon).
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "epsilon": st.sampled_from([0.01, 0.1, 0.5]),
    "query": st.sampled_from(GOOD_QUERIES),
    "where": st.sampled_from(GOOD_QUERIES),
    "attribute": st.sampled_from(ATTRIBUTES),
    "attributes": st.lists(st.sampled_from(ATTRIBUTES), min_size=1, max_size=2, unique=True),
    "bins": st.lists(st.integers(0, 100), min_size=2, max_size=4, unique=True).map(sorted),
    "lower": st.just(0),
    "upper": st.sampled_from([1, 99]),
    "workload": st.sampled_from(["age < 30\nsex = 'F'", "histogram(region)", "score < 5"]),
    "queries": st.just(["age < 30", "score < 5"]),
    "costs": st.just([0.01, 0.02]),
    "allocation": st.sampled_from(["optimal", "uniform", "sequential"]),
    "name": st.text(string.ascii_lowercase, min_size=1, max_size=12),
    "quota": st.sampled_from([None, 0.5, 3]),
}


def plausible(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A body of the schema with its fields' values made likely to be valid: the cost
    given in epsilon only, known attributes, good queries."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        body = draw(valid)
        if not isinstance(body, dict):
            return body
        out = {k: v for k, v in body.items() if k not in ("rho", "mu", "table")}
        for k in out:
            if k in PLAUSIBLE:
                out[k] = draw(PLAUSIBLE[k])
        if "kind" in out:
            out["epsilon"] = draw(PLAUSIBLE["epsilon"])
        if "attribute" in out or "attributes" in out or "lower" in out or "query" in out:
            out["epsilon"] = draw(PLAUSIBLE["epsilon"])
        if "queries" in out or "costs" in out:
            out.pop("workload", None)
            out.pop("epsilon", None)
            out["queries"], out["costs"] = draw(PLAUSIBLE["queries"]), draw(PLAUSIBLE["costs"])
        return {k: v for k, v in out.items() if v is not None}

    return build()


def garbled(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid-looking body with one field of the wrong type, an extra field, or a
    field dropped."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        body = draw(valid)
        if not isinstance(body, dict):
            return draw(json_any)
        body = dict(body)
        how = draw(st.sampled_from(["wrong type", "extra", "drop", "nest"]))
        if how == "extra" or not body:
            body[draw(st.text(string.ascii_letters, min_size=1, max_size=8))] = draw(json_any)
        else:
            key = draw(st.sampled_from(sorted(body)))
            if how == "drop":
                del body[key]
            elif how == "nest":
                body[key] = [[[{"x": [body[key]]}]]]
            else:
                body[key] = draw(json_any)
        return body

    return build()


@st.composite
def requests(draw: st.DrawFn, method: str, path: str, doc: dict[str, Any]) -> dict[str, Any]:
    """One request for an operation: path, query string, and a JSON or raw body."""
    op = doc["paths"][path][method.lower()]
    url = path
    params: dict[str, str] = {}
    for p in op.get("parameters", []):
        if p["in"] == "path":
            name = draw(st.one_of(text, st.sampled_from(["alice", "bob"])).filter(bool))
            if name == "root":
                name = "root too"  # keep the administrator's own token working
            url = url.replace("{" + p["name"] + "}", quote(name, safe=""))
        elif p["in"] == "query" and draw(st.booleans()):
            params[p["name"]] = draw(text)
    if draw(st.integers(0, 5)) == 0:
        params[draw(st.text(string.ascii_letters, min_size=1, max_size=6))] = draw(text)
    produces = {kind for res in op.get("responses", {}).values() for kind in res.get("content", {})}
    out: dict[str, Any] = {"method": method, "url": url, "params": params, "produces": produces}
    body = op.get("requestBody")
    if body is None:
        if draw(st.integers(0, 4)) == 0:
            out["content"] = draw(st.sampled_from(RAW))
        return out
    valid = from_schema(body["content"]["application/json"]["schema"], doc)
    kind = draw(st.sampled_from(["plausible", "plausible", "valid", "garbled", "any", "raw"]))
    if kind == "plausible":
        out["json"] = draw(plausible(valid))
    elif kind == "valid":
        out["json"] = draw(valid)
    elif kind == "garbled":
        out["json"] = draw(garbled(valid))
    elif kind == "any":
        out["json"] = draw(json_any)
    else:
        out["content"] = draw(st.one_of(st.sampled_from(RAW), st.binary(max_size=40)))
    if isinstance(out.get("json"), dict) and out["json"].get("name") == "root":
        out["json"]["name"] = "root too"  # keep the administrator's own token working
    return out


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory):
    with running(tmp_path_factory.mktemp("fuzz"), config=FAST) as s:
        s.add("root", "--admin")
        s.add("alice", "--quota", "50")
        with httpx.Client(base_url=s.url, timeout=60) as h:
            doc = h.get("/openapi.json").json()
        yield s, doc


def test_the_document_lists_every_operation(fuzzed) -> None:
    _, doc = fuzzed
    assert _operations(doc) == OPERATIONS
    assert set(OPERATIONS) >= CORE


def check(s: Server, h: httpx.Client, req: dict[str, Any]) -> None:
    before = s.charges()
    content = req.get("content")
    if content is not None:
        r = h.request(
            req["method"], req["url"], params=req["params"], content=content,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
    elif "json" in req:
        body = json.dumps(req["json"]).encode()
        r = h.request(
            req["method"], req["url"], params=req["params"], content=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
    else:
        r = h.request(req["method"], req["url"], params=req["params"])
    after = s.charges()
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code < 400 and "application/json" not in req["produces"]:
        assert after == before
        return
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    if r.status_code >= 400:
        assert isinstance(body, dict) and set(body) == {"error", "message"}, body
        assert isinstance(body["error"], str) and isinstance(body["message"], str), body
        assert body["error"] and body["message"], body
        assert after == before, (r.status_code, body)
    elif req["url"] in CHARGING:
        assert after > before
    else:
        assert after == before


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[" ".join(o) for o in OPERATIONS])
def test_fuzz_every_route(fuzzed, method: str, path: str) -> None:
    s, doc = fuzzed

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(req=requests(method, path, doc))
    def run(req: dict[str, Any]) -> None:
        with s.http("root") as h:
            check(s, h, req)

    run()
    with s.client("root") as c:  # the administrator's token still works
        c.remaining()


def test_the_document_describes_every_error_status(fuzzed) -> None:
    """Every status the service answers with is in the document, as {"error", "message"}."""
    _, doc = fuzzed
    for method, path in CORE - {("GET", "/v1/health")}:
        responses = doc["paths"][path][method.lower()]["responses"]
        for status in ("400", "401", "403", "404", "409", "413", "415", "422", "429", "503"):
            ref = responses[status]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorOut"), (method, path, status)
    assert set(doc["components"]["schemas"]["ErrorOut"]["properties"]) == {"error", "message"}
