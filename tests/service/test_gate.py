"""The gate (dpcurator.service.gate): a process of its own answers the 401s that need
no curator, exactly as the server would, and hands every other connection over.

Real servers and raw sockets. That a 401 came from the gate is shown by stopping the
server's process (SIGSTOP): the gate still answers, and the server answers nothing."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcurator.curator import Curator
from dpcurator.curator.credentials import MISSING_TOKEN, REFUSED_TOKEN
from dpcurator.privacy import PureDP
from dpcurator.service import create_app
from dpcurator.service.handoff import gate_plan

from .conftest import FAST, Server, add_analyst, cli, running, write_people

NOBODY = "dpc_" + "0" * 16 + "_" + "B" * 43


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def gate_pid(server: Server) -> int:
    for pid in _children(server.proc.pid):
        with contextlib.suppress(OSError):
            if b"dpcurator.service.gate" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError("no gate process")


def raw(server: Server, request: bytes, *, timeout: float = 10.0, responses: int = 1) -> bytes:
    """What the server sends back to ``request`` on a new connection, until it has sent
    ``responses`` whole answers (each with a Content-Length) or closes."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while _whole(data) < responses:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def _whole(data: bytes) -> int:
    n, rest = 0, data
    while (m := re.search(rb"\r\n\r\n", rest)) is not None:
        length = re.search(rb"(?i)content-length: (\d+)", rest[: m.end()])
        end = m.end() + (int(length.group(1)) if length else 0)
        if len(rest) < end:
            break
        n, rest = n + 1, rest[end:]
    return n


def undated(response: bytes) -> bytes:
    return re.sub(rb"(?im)^date: [^\r]*\r\n", b"", response)


def get(path: str, token: str | None = None, *, extra: bytes = b"") -> bytes:
    auth = b"" if token is None else f"Authorization: Bearer {token}\r\n".encode()
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + auth + extra + b"\r\n"


@contextlib.contextmanager
def stopped(server: Server) -> Iterator[None]:
    """The server's own process stopped (its gate and solver workers run on)."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def test_the_plan_is_the_applications_own(tmp_path):
    data = write_people(tmp_path)
    with Curator.open(data[0], data[1], budget=PureDP(1.0), ledger=tmp_path / "l.db") as c:
        plan = gate_plan(create_app(c))
    routes = {tuple(r) for r in plan["routes"]}
    assert ("GET", "/v1/budget") in routes and ("POST", "/v1/count") in routes
    # no token needed there, or a path parameter: never the gate's
    assert not {r for r in routes if r[1] in ("/", "/v1/health", "/docs", "/openapi.json")}
    assert all("{" not in path for _, path in routes)
    assert plan["missing"]["status"] == plan["refused"]["status"] == 401
    assert MISSING_TOKEN in plan["missing"]["body"] and REFUSED_TOKEN in plan["refused"]["body"]
    assert ("www-authenticate", "Bearer") in [tuple(h) for h in plan["refused"]["headers"]]


@pytest.mark.parametrize(
    "request_",
    [
        get("/v1/budget"),
        get("/v1/budget", "dpc_nobody.x"),
        get("/v1/budget?table=people", "not a token"),
        get("/v1/budget", extra=b"Authorization: Basic YTpi\r\n"),
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        get("/v1/budget", extra=b"Connection: close\r\n"),
        b"GET /v1/budget HTTP/1.0\r\n\r\n",
    ],
)
def test_the_gates_401_is_the_servers_and_needs_no_server(pair, request_):
    gated, plain = pair
    with stopped(gated):
        mine = raw(gated, request_)
    theirs = raw(plain, request_)
    assert mine.startswith(b"HTTP/1.1 401 Unauthorized\r\n"), mine[:200]
    assert undated(mine) == undated(theirs)


def test_a_token_not_in_force_is_refused_at_the_gate_once_it_knows_the_tokens(pair):
    gated, plain = pair
    request_ = get("/v1/budget", NOBODY)
    assert raw(gated, request_).startswith(b"HTTP/1.1 401")  # (the gate has its list)
    deadline = time.monotonic() + 20
    while True:
        with stopped(gated):
            try:
                mine = raw(gated, request_, timeout=0.5)
                break
            except TimeoutError:  # the list had not come yet
                assert time.monotonic() < deadline
        time.sleep(0.2)
    assert undated(mine) == undated(raw(plain, request_))
    # a token whose key is known but whose secret is wrong: the same
    key = gated.tokens["ann"].split("_")[1]
    with stopped(gated):
        wrong = raw(gated, get("/v1/budget", f"dpc_{key}_{'C' * 43}"))
    assert undated(wrong) == undated(mine)


def test_a_valid_token_goes_to_the_server_and_a_new_one_is_never_refused(pair, tmp_path):
    gated, _ = pair
    ann = get("/v1/budget", gated.tokens["ann"])
    assert raw(gated, ann).startswith(b"HTTP/1.1 200")
    with stopped(gated), pytest.raises(TimeoutError):
        raw(gated, ann, timeout=0.5)  # the server's to answer, and it is stopped
    # an analyst added by another process while the gate holds an older list: the
    # gate sees the ledger's head moved, and hands her over rather than refuse her
    raw(gated, get("/v1/budget", NOBODY))  # (the gate's list is the current one)
    time.sleep(0.5)
    new = add_analyst(gated.ledger, f"new{time.monotonic_ns()}")
    with stopped(gated), pytest.raises(TimeoutError):
        raw(gated, get("/v1/budget", new), timeout=0.5)
    assert raw(gated, get("/v1/budget", new)).startswith(b"HTTP/1.1 200")


def test_a_revoked_token_is_refused_at_the_gate(tmp_path):
    with running(tmp_path, config=FAST) as s:
        s.add("ann")
        token = s.add("cy")
        assert raw(s, get("/v1/budget", token)).startswith(b"HTTP/1.1 200")
        code, _, err = cli("analysts", "revoke", "cy", "--ledger", s.ledger)
        assert code == 0, err
        assert raw(s, get("/v1/budget", token)).startswith(b"HTTP/1.1 401")  # the server's
        deadline = time.monotonic() + 20
        while True:
            with stopped(s):
                try:
                    got = raw(s, get("/v1/budget", token), timeout=0.5)
                    break
                except TimeoutError:
                    assert time.monotonic() < deadline
            time.sleep(0.2)
        assert got.startswith(b"HTTP/1.1 401 Unauthorized")


def test_one_connection_refused_then_handed_over_keeps_its_order(pair):
    gated, _ = pair
    ann = gated.tokens["ann"]
    pipelined = get("/v1/budget") + get("/v1/budget", ann) + get("/v1/budget", "bad")
    got = raw(gated, pipelined, responses=3)
    statuses = re.findall(rb"HTTP/1.1 (\d{3})", got)
    assert statuses == [b"401", b"200", b"401"], got
    # and one at a time on a kept-alive connection
    host, port = gated.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for request_, want in [
            (get("/v1/budget", "bad"), b"401"),
            (get("/v1/budget", ann), b"200"),
        ]:
            sock.sendall(request_)
            data = b""
            while _whole(data) < 1:
                data += sock.recv(65536)
            assert data.startswith(b"HTTP/1.1 " + want), data[:100]


def test_a_request_with_a_body_is_the_servers(pair):
    gated, plain = pair
    body = b'{"query": "age < 30", "epsilon": 0.1}'
    request_ = (
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with stopped(gated), pytest.raises(TimeoutError):
        raw(gated, request_, timeout=0.5)
    assert undated(raw(gated, request_)) == undated(raw(plain, request_))


def test_the_server_sees_the_clients_own_connection(pair):
    """A handed-over connection is the client's socket: its peer is the client."""
    gated, _ = pair
    with gated.http("ann") as c:
        for _ in range(3):
            assert c.get("/v1/budget").status_code == 200
    assert gate_pid(gated) != gated.proc.pid


def test_the_gate_ends_with_the_server_and_the_server_with_the_gate(tmp_path):
    with running(tmp_path / "a", config=FAST) as s:
        gate = gate_pid(s)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{gate}").exists() and b"gate" in Path(f"/proc/{gate}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the gate outlived its server"
        time.sleep(0.1)
    s = running(tmp_path / "b", config=FAST)
    with s as server:
        os.kill(gate_pid(server), signal.SIGKILL)
        assert server.proc.wait(timeout=30) != 0
    assert "the gate" in server.log()


def test_gate_true_with_tls_is_refused(tmp_path):
    data = write_people(tmp_path)
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    code, _, err = cli(
        "serve", "--data", data[0], "--schema", data[1], "--ledger", tmp_path / "l.db",
        "--epsilon", "1", "--ssl-certfile", cert, "--ssl-keyfile", cert,
        "--config", _config(tmp_path, "[server]\ngate = true\n"),
    )  # fmt: skip
    assert code != 0
    assert "gate" in err and "Traceback" not in err


def _config(tmp: Path, text: str) -> Path:
    p = tmp / "gate.toml"
    p.write_text(text)
    return p


def test_the_head_is_read_while_a_commit_holds_the_file_only_if_no_commit_landed(tmp_path):
    """HeadReader: locked out by a writer, it gives the head it read last only while the
    file's change counter is the one read with it."""
    import sqlite3

    from dpcurator.service.gate import HeadReader

    path = tmp_path / "l.db"
    data = write_people(tmp_path)
    with Curator.open(data[0], data[1], budget=PureDP(1.0), ledger=path) as c:
        c.add_analyst("ann")
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    head = writer.execute("SELECT value FROM meta WHERE key = 'analysts_head'").fetchone()[0]
    fresh, seen = HeadReader(str(path)), HeadReader(str(path))
    assert seen.head() == head
    writer.execute("BEGIN EXCLUSIVE")  # readers locked out, nothing written yet
    assert fresh.head() is None  # never read: cannot tell
    assert seen.head() == head  # no commit since its read: the same head
    writer.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")
    writer.execute("COMMIT")
    writer.execute("BEGIN EXCLUSIVE")
    assert seen.head() is None  # a commit landed since: cannot tell
    writer.execute("COMMIT")
    assert seen.head() == head  # read again
    replaced = tmp_path / "other.db"
    replaced.write_bytes(path.read_bytes())
    os.replace(replaced, path)
    assert seen.head() is None  # another file under the name: never read
    writer.close()


def test_a_large_body_handed_over_arrives_whole(pair):
    """The gate hands a connection over at its request's head: the rest of a body far
    larger than what the gate reads at a time is read by the server."""
    gated, _ = pair
    body = b'{"query": "age < 30", "epsilon": 0.001' + b" " * 300_000 + b"}"
    request_ = (
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {gated.tokens['bo']}\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    got = raw(gated, request_)
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    assert b'"query":"age < 30"' in got


def test_on_postgresql_the_gate_refuses_malformed_tokens_and_hands_over_the_rest(
    tmp_path, postgres_stores
):
    ledger = postgres_stores.new().target
    with running(tmp_path, ledger=ledger, config=FAST) as s:
        s.add("ann")
        with stopped(s):
            assert raw(s, get("/v1/budget", "bad")).startswith(b"HTTP/1.1 401 Unauthorized")
            with pytest.raises(TimeoutError):  # no head to read: the server's to tell
                raw(s, get("/v1/budget", NOBODY), timeout=0.5)
        assert raw(s, get("/v1/budget", NOBODY)).startswith(b"HTTP/1.1 401")
        assert raw(s, get("/v1/budget", s.tokens["ann"])).startswith(b"HTTP/1.1 200")


def test_an_idle_connection_after_a_401_is_closed_as_the_server_closes_it(pair):
    """uvicorn closes a kept-alive connection idle for 5 s; the gate, after its own 401,
    does the same (not read_timeout's 30 s)."""
    import concurrent.futures

    def idle_for(server: Server) -> float:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(get("/v1/budget"))
            data = b""
            while _whole(data) < 1:
                data += sock.recv(65536)
            start = time.monotonic()
            assert sock.recv(65536) == b""  # closed by the other end
            return time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mine, theirs = pool.map(idle_for, pair)
    assert 4 < mine < 7 and 4 < theirs < 7, (mine, theirs)


def test_in_wal_mode_the_head_is_never_taken_from_the_counter(tmp_path):
    """In WAL mode a commit reaches the main file only at a checkpoint, so its change
    counter says nothing: a locked-out read then cannot tell (someone may switch a
    ledger to WAL while the server runs)."""
    import sqlite3

    from dpcurator.service.gate import HeadReader

    path = tmp_path / "l.db"
    data = write_people(tmp_path)
    with Curator.open(data[0], data[1], budget=PureDP(1.0), ledger=path) as c:
        c.add_analyst("ann")
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    writer.execute("PRAGMA journal_mode=WAL")
    reader = HeadReader(str(path))
    head = reader.head()
    assert head is not None
    writer.execute("UPDATE meta SET value = 'moved' WHERE key = 'analysts_head'")
    assert reader.head() == "moved"  # (a reader in WAL is not locked out)
    writer.execute("UPDATE meta SET value = 'again' WHERE key = 'analysts_head'")
    assert reader._unchanged() is None  # were it locked out: cannot tell
    writer.close()
