"""Who may ask: bearer tokens, revocation from another process, administrators, quotas."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import httpx
import pytest

from dpcurator.client import Client
from dpcurator.errors import AuthenticationError, BudgetExceeded

from .conftest import Server, assert_error, running

ROUTES = [
    ("GET", "/v1/schema", None),
    ("GET", "/v1/budget", None),
    ("GET", "/v1/history", None),
    ("POST", "/v1/count", {"query": "age < 30", "epsilon": 0.01}),
    ("POST", "/v1/histogram", {"attribute": "sex", "epsilon": 0.01}),
    ("POST", "/v1/marginal", {"attributes": ["sex"], "epsilon": 0.01}),
    ("POST", "/v1/sum", {"attribute": "age", "lower": 0, "upper": 99, "epsilon": 0.01}),
    ("POST", "/v1/release", {"queries": ["age < 30"], "costs": [0.01]}),
    ("POST", "/v1/estimate", {"kind": "count", "epsilon": 0.01}),
    ("GET", "/v1/admin/analysts", None),
    ("POST", "/v1/admin/analysts", {"name": "mallory"}),
    ("DELETE", "/v1/admin/analysts/alice", None),
    ("GET", "/v1/admin/ledger", None),
]

BAD_HEADERS = {
    "unknown token": "Bearer dpc_0123456789abcdef_" + "A" * 43,
    "not a token": "Bearer hello",
    "another scheme": "Basic YWxpY2U6c2VjcmV0",
    "no scheme": None,  # the bare token: filled in below
    "empty bearer": "Bearer",
}


def raw_get(url: str, path: str, header: bytes | None) -> tuple[int, bytes, bytes]:
    """A GET with exactly the Authorization header bytes given (httpx refuses some)."""
    host, port = url.removeprefix("http://").split(":")
    lines = [f"GET {path} HTTP/1.1".encode(), f"Host: {host}".encode(), b"Connection: close"]
    if header is not None:
        lines.append(b"Authorization: " + header)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\r\n".join([*lines, b"", b""]))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_but_health_needs_a_token(server: Server, method, path, body) -> None:
    before = server.charges()
    with server.http() as h:
        r = h.request(method, path, json=body)
    e = assert_error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    assert "Authorization" in e["message"]
    assert server.charges() == before
    with server.http() as h:
        assert h.get("/v1/health").json() == {"status": "ok"}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_bad_credentials_are_401(server: Server, case: str) -> None:
    header = BAD_HEADERS[case] or server.tokens["alice"]
    before = server.charges()
    with server.http(headers={"Authorization": header}) as h:
        r = h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.01})
    assert_error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    assert server.charges() == before


@pytest.mark.parametrize(
    "header",
    [b"Bearer ", b"Bearer \x01\x02", b"Bearer \xff\xfe", b"Bearer " + b"a" * 8000, b"bearer"],
)
def test_malformed_authorization_headers_are_401(server: Server, header: bytes) -> None:
    status, head, body = raw_get(server.url, "/v1/budget", header)
    assert status == 401, (head, body)
    assert json.loads(body)["error"] == "unauthorized"
    assert b"www-authenticate: Bearer" in head.lower().replace(b"bearer", b"Bearer")


def test_scheme_is_case_insensitive_and_spaces_tolerated(server: Server) -> None:
    token = server.tokens["alice"]
    for header in (f"bearer {token}", f"BEARER {token}", f"Bearer   {token}  "):
        status, _, body = raw_get(server.url, "/v1/budget", header.encode())
        assert status == 200, body


def test_a_wrong_secret_with_a_known_key_is_401(server: Server) -> None:
    token = server.tokens["alice"]
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    with server.http(headers={"Authorization": f"Bearer {forged}"}) as h:
        assert_error(h.get("/v1/budget"), 401, "unauthorized")


def test_the_client_raises_authentication_error(server: Server) -> None:
    with (
        Client(server.url, "dpc_0123456789abcdef_" + "A" * 43) as c,
        pytest.raises(AuthenticationError),
    ):
        c.count("age < 30", epsilon=0.01)
    with server.client("alice") as c, pytest.raises(AuthenticationError):
        c._call("GET", "/v1/admin/analysts")


def test_revoke_in_another_process_applies_at_once(server: Server) -> None:
    """`dpcurator analysts revoke` in another process: the running server refuses the
    token at the very next request; her charges stay in the ledger."""
    token = server.add("dora")
    with server.client("dora") as c:
        charge = c.count("age < 30", epsilon=0.01).charge_id
        cmd = [sys.executable, "-m", "dpcurator.cli", "analysts", "revoke", "dora"]
        done = subprocess.run(
            [*cmd, "--ledger", str(server.ledger)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "revoked 'dora'" in done.stdout
        with pytest.raises(AuthenticationError):
            c.count("age < 30", epsilon=0.01)
    with server.http(headers={"Authorization": f"Bearer {token}"}) as h:
        assert_error(h.get("/v1/budget"), 401, "unauthorized")
    with server.http("root") as h:
        rows = h.get("/v1/admin/ledger").json()
        listed = {a["name"]: a for a in h.get("/v1/admin/analysts").json()}
    assert any(r["charge_id"] == charge and r["analyst"] == "dora" for r in rows)
    assert listed["dora"]["active"] is False


HOLD_THE_FILE = (
    "import sqlite3, sys, time\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "db.execute('BEGIN EXCLUSIVE')\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "db.execute('COMMIT')\n"
)


def test_tokens_are_judged_alike_while_a_commit_holds_the_ledger(server: Server) -> None:
    """While another process holds the ledger file's exclusive lock (as while a commit is
    written), a token cannot be looked up at once: the event loop leaves it to a worker
    thread, which waits for the lock. Unknown tokens are still 401 and known ones
    answered, through FastAPI and through the fast lane; nothing is charged for a 401."""
    before = server.charges()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_FILE, str(server.ledger), "0.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        stranger = {"Authorization": BAD_HEADERS["unknown token"]}
        with httpx.Client(base_url=server.url, headers=stranger, timeout=60) as h:
            assert_error(h.get("/v1/budget"), 401, "unauthorized")
            assert_error(h.post("/v1/count", json=ROUTES[3][2]), 401, "unauthorized")
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
    with server.http("alice") as h:
        assert h.get("/v1/budget").status_code == 200
    assert server.charges() == before


def test_admin_routes_are_403_for_analysts(server: Server) -> None:
    before = server.charges()
    with server.http("alice") as h:
        for method, path, body in ROUTES:
            if path.startswith("/v1/admin"):
                e = assert_error(h.request(method, path, json=body), 403, "forbidden")
                assert "administrator" in e["message"]
        assert "mallory" not in {
            a["name"] for a in server.client("root")._call("GET", "/v1/admin/analysts")
        }
    assert server.charges() == before


def test_admin_adds_lists_and_revokes_over_http(server: Server) -> None:
    with server.http("root") as h:
        r = h.post("/v1/admin/analysts", json={"name": "erin", "quota": 0.5})
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["name"] == "erin" and made["quota"] == 0.5 and made["active"] is True
        assert made["admin"] is False and made["token"].startswith("dpc_")
        listed = {a["name"]: a for a in h.get("/v1/admin/analysts").json()}
        assert listed["erin"] == {k: v for k, v in made.items() if k != "token"}
        assert listed["root"]["admin"] is True and "token" not in listed["root"]
        with Client(server.url, made["token"]) as c:
            assert c.remaining() == 0.5
            c.count("age < 30", epsilon=0.01)
            r = h.delete("/v1/admin/analysts/erin")
            assert r.status_code == 200, r.text
            assert r.json() == {"name": "erin", "quota": 0.5, "admin": False, "active": False}
            with pytest.raises(AuthenticationError):
                c.count("age < 30", epsilon=0.01)
        e = assert_error(h.delete("/v1/admin/analysts/nobody-here"), 404, "not_found")
        assert "nobody-here" in e["message"] and str(server.ledger) not in e["message"]
        # a new token for a known analyst replaces her old one
        again = h.post("/v1/admin/analysts", json={"name": "erin"}).json()
        assert again["quota"] == 0.5 and again["active"] is True
        with Client(server.url, again["token"]) as c:
            assert c.remaining() < 0.5
        assert_error(h.post("/v1/admin/analysts", json={"name": ""}), 400)
        assert_error(h.post("/v1/admin/analysts", json={"name": "x" * 300}), 400)
        assert_error(h.post("/v1/admin/analysts", json={"name": "z", "quota": -1}), 400)


def test_an_admin_made_over_http_can_administer(server: Server) -> None:
    with server.http("root") as h:
        made = h.post("/v1/admin/analysts", json={"name": "frank", "admin": True}).json()
    with Client(server.url, made["token"]) as c:
        names = {a["name"] for a in c._call("GET", "/v1/admin/analysts")}
    assert {"root", "frank", "alice"} <= names


def test_history_shows_only_her_own_charges(server: Server) -> None:
    with server.client("alice") as a, server.client("bob") as b:
        mine = a.count("age < 40", epsilon=0.01).charge_id
        theirs = b.count("age < 41", epsilon=0.01).charge_id
        ha, hb = a.history(), b.history()
    assert mine in {h.charge_id for h in ha} and theirs not in {h.charge_id for h in ha}
    assert theirs in {h.charge_id for h in hb} and mine not in {h.charge_id for h in hb}
    assert {h.analyst for h in ha} == {"alice"} and {h.analyst for h in hb} == {"bob"}
    with server.http("root") as h:
        everyone = {r["charge_id"] for r in h.get("/v1/admin/ledger").json()}
    assert {mine, theirs} <= everyone


def test_quota_set_by_the_cli_holds_over_http(server: Server) -> None:
    server.add("gina", "--quota", "0.1")
    before = server.charges()
    with server.client("gina") as c:
        d = c.remaining_detail()
        assert d.quota == 0.1 and d.value == 0.1 and d.budget > 0.1
        c.count("age < 30", epsilon=0.06)
        with pytest.raises(BudgetExceeded) as err:
            c.count("age < 30", epsilon=0.06)
        assert "'gina''s quota 0.1" in str(err.value)
    with server.http("gina") as h:
        e = assert_error(h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.06}), 409)
        assert e["error"] == "budget_exceeded" and "quota 0.1" in e["message"]
        b = h.get("/v1/budget").json()
        assert b["quota"] == 0.1 and b["quota_remaining"] == pytest.approx(0.04)
        # on other points her quota is whole again (overlap-aware quotas)
        ok = h.post("/v1/count", json={"query": "age >= 30", "epsilon": 0.06})
        assert ok.status_code == 200, ok.text
    assert server.charges() == before + 2


class _Untouchable:
    """A ledger and a rate limit that must not be asked anything."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"asked for {name}")


def _request(ledger: object, rate: object) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(ledger=ledger, rate=rate)))


@pytest.mark.parametrize(
    "header",
    [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer dpc_nobody.x",
     f"Bearer dpc_{'0' * 16}_{'x' * 42}", f"Bearer dpc_{'G' * 16}_{'x' * 43}",
     f"Token dpc_{'0' * 16}_{'x' * 43}"],
)  # fmt: skip
def test_a_malformed_token_is_refused_in_the_event_loop(header: str | None) -> None:
    """No thread, no ledger, no rate: what the request sent is enough for its 401."""
    import asyncio

    from dpcurator.service.callers import ServiceError, caller

    with pytest.raises(ServiceError) as err:
        asyncio.run(caller(_request(_Untouchable(), _Untouchable()), header))  # type: ignore[arg-type]
    assert err.value.reason == "unauthorized"


def test_a_well_formed_token_is_looked_up_in_a_worker_thread_unless_refused_at_once() -> None:
    import asyncio
    import threading

    from dpcurator.service.callers import ServiceError, caller

    token = f"dpc_{'0' * 16}_{'x' * 43}"
    asked: list[tuple[str, bool]] = []
    for refused in (False, True):
        asked.clear()

        class Ledger:
            def refused_at_once(self, token: str, refused: bool = refused) -> bool:
                asked.append(("at once", threading.current_thread() is threading.main_thread()))
                return refused

            def authenticate(self, token: str) -> None:
                asked.append(("waiting", threading.current_thread() is threading.main_thread()))

        with pytest.raises(ServiceError) as err:
            asyncio.run(caller(_request(Ledger(), _Untouchable()), f"bearer   {token} "))  # type: ignore[arg-type]
        assert err.value.reason == "unauthorized"
        assert asked == [("at once", True)] + ([] if refused else [("waiting", False)])


BODY_ROUTES = [(p, b) for m_, p, b in ROUTES if m_ == "POST" and "/admin/" not in p] + [
    ("/v1/sql", {"query": "SELECT WITH DIFFERENTIAL_PRIVACY COUNT(*) FROM people"}),
    ("/v1/mean", {"attribute": "age", "lower": 0, "upper": 99, "epsilon": 0.01}),
    ("/v1/units", {"query": "age < 30", "epsilon": 0.01}),
]


@pytest.mark.parametrize(("path", "body"), BODY_ROUTES)
def test_an_unknown_token_is_401_before_an_invalid_body(server: Server, path, body) -> None:
    """The route looks its caller up in its own thread, but a body that fails before it
    runs is answered as the caller would be first: 401 for a well-formed unknown token
    (not 422), 422 for a known one."""
    stranger = {"Authorization": BAD_HEADERS["unknown token"]}
    for bad in ({**body, "epsilon": "plenty"}, {"nonsense": [1, 2]}):
        with httpx.Client(base_url=server.url, headers=stranger) as h:
            r = h.post(path, json=bad)
            assert_error(r, 401, "unauthorized")
            assert r.headers["WWW-Authenticate"] == "Bearer"
        with server.http("alice") as h:
            assert h.post(path, json=bad).status_code == 422


def test_an_invalid_body_takes_one_token_of_the_rate_and_429_comes_first(tmp_path) -> None:
    """Burst 2, a refill of one request in 1,000 s: an invalid body is 422 and takes one
    token, a valid request the other; then an invalid body is 429, not 422."""
    config = "[server]\nrequests_per_second = 0.001\nburst = 2\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        with s.http("ann") as h:
            bad = {"query": "age < 30", "epsilon": "plenty"}
            assert h.post("/v1/count", json=bad).status_code == 422
            assert (
                h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1}).status_code == 200
            )
            r = h.post("/v1/count", json=bad)
            assert_error(r, 429, "rate_limited")
            assert int(r.headers["Retry-After"]) >= 1


def test_a_route_runs_in_the_thread_that_looked_its_caller_up(tmp_path) -> None:
    """One worker thread per request: the token's lookup, the rate and the count all in
    it, and not in the event loop's."""
    import threading

    import numpy as np
    import pandas as pd
    from fastapi.testclient import TestClient

    from dpcurator import Curator
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema
    from dpcurator.service import Limits, create_app

    from .conftest import SCHEMA

    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "age": rng.integers(0, 100, 200),
            "sex": rng.choice(["F", "M"], 200),
            "region": rng.choice(["north", "south", "east", "west"], 200),
            "score": rng.integers(0, 10, 200),
        }
    )
    cur = Curator.open(
        frame, Schema.from_dict(SCHEMA), budget=PureDP(10.0), ledger=tmp_path / "l.db"
    )
    try:
        token = cur.add_analyst("ann")
        seen: list[tuple[str, int]] = []
        ledger, count = cur.ledger, cur.count
        authenticate = ledger.authenticate

        def looked_up(t: object):  # the real lookup, its thread noted
            seen.append(("lookup", threading.get_ident()))
            return authenticate(t)

        def counted(*a: object, **kw: object):  # the real count, its thread noted
            seen.append(("count", threading.get_ident()))
            return count(*a, **kw)

        ledger.authenticate = looked_up  # type: ignore[method-assign]
        cur.count = counted  # type: ignore[method-assign]
        app = create_app(cur, Limits(requests_per_second=1000, burst=1000))
        with TestClient(app) as client:
            headers = {"Authorization": f"Bearer {token}"}
            for _ in range(3):
                seen.clear()
                r = client.post(
                    "/v1/count", json={"query": "age < 30", "epsilon": 0.1}, headers=headers
                )
                assert r.status_code == 200, r.text
                assert [k for k, _ in seen] == ["lookup", "count"]
                assert seen[0][1] == seen[1][1] != threading.get_ident()
    finally:
        cur.close()
