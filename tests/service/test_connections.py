"""Held connections cannot hang the server (dpcurator.service.http_protocol), on real
servers with raw sockets: each request must arrive whole within ``read_timeout``, at
most ``max_connections`` are open, and what arrives in time is answered."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from pathlib import Path

import pytest

from dpcurator.service.http_protocol import RESERVED_FDS

from .conftest import Server, running

#: One second to send a request; the rate limit lifted.
QUICK = "[server]\nread_timeout = 1\nrequests_per_second = 10000\nburst = 10000\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory):
    with running(tmp_path_factory.mktemp("quick"), config=QUICK) as s:
        s.add("ann")
        yield s


def _connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_after(sock: socket.socket, limit: float, drip: bytes = b"") -> float:
    """Seconds until the server closes ``sock`` (reading and discarding), sending
    ``drip`` every 0.2 s meanwhile; fails past ``limit``."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
        if drip:
            try:
                sock.sendall(drip)
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
    pytest.fail(f"the connection was still open after {limit} s")


def _health(server: Server) -> float:
    """Seconds GET /v1/health took on a new connection (fails if not 200)."""
    start = time.monotonic()
    with _connect(server) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
    return time.monotonic() - start


@pytest.mark.parametrize(
    ("sent", "drip"),
    [
        (b"", b""),  # connected, nothing sent
        (b"GET /v1/health HTTP/1.1\r\n", b""),  # part of a head
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n", b"X-A: b\r\n"),  # a head, a line at a time
        (  # a body, two bytes at a time
            b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer TOKEN\r\nContent-Length: 100000\r\n\r\n",
            b"  ",
        ),
    ],
    ids=["silent", "part-of-a-head", "dripping-head", "dripping-body"],
)
def test_a_request_not_sent_whole_in_time_is_closed(quick: Server, sent, drip) -> None:
    before = quick.charges()
    with _connect(quick) as sock:
        sock.sendall(sent.replace(b"TOKEN", quick.tokens["ann"].encode()))
        took = _closed_after(sock, 10, drip)
    assert 0.9 <= took < 4
    assert quick.charges() == before
    assert _health(quick) < 2


def test_the_deadline_starts_again_after_each_answer(quick: Server) -> None:
    """Requests on one connection, 0.4 s apart, for longer than the deadline: each is
    in time, so all are answered on the same connection."""
    token = quick.tokens["ann"]
    body = b'{"query": "age < 30", "epsilon": 0.001}'
    request = (
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with _connect(quick) as sock:
        for _ in range(6):
            time.sleep(0.4)
            sock.sendall(request)
            data = b""
            while b"}" not in data:
                chunk = sock.recv(65536)
                assert chunk, "the server closed a connection whose requests came in time"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_a_request_being_answered_is_not_timed_out(tmp_path: Path) -> None:
    """The deadline is for a request to arrive, not to be answered: a batch that takes
    longer than ``read_timeout`` to answer is answered."""
    config = "[server]\nread_timeout = 0.05\nrequests_per_second = 10000\nburst = 10000\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        queries = [f"age < {i % 100} AND score < {i % 10}" for i in range(2000)]
        with s.http("ann") as h:
            start = time.monotonic()
            r = h.post("/v1/release", json={"workload": "\n".join(queries), "epsilon": 0.5})
            took = time.monotonic() - start
        assert r.status_code == 200, r.text
        assert took > 0.05  # it did take longer than the deadline


def test_past_max_connections_the_longest_waiting_is_closed(tmp_path: Path) -> None:
    with running(tmp_path, config="[server]\nmax_connections = 20\n") as s:
        held = []
        for _ in range(50):
            sock = _connect(s)
            sock.sendall(b"GET /v1/health HTTP/1.1\r\n")  # and nothing more
            held.append(sock)
            time.sleep(0.01)  # in order
        time.sleep(0.5)
        closed = []
        for sock in held:
            sock.settimeout(0.05)
            try:
                closed.append(sock.recv(10) == b"")
            except TimeoutError:
                closed.append(False)
            except ConnectionResetError:
                closed.append(True)
        try:
            assert closed[:20] == [True] * 20  # the oldest were closed first
            assert closed[-15:] == [False] * 15  # the newest are still open
            assert sum(not c for c in closed) <= 20
            assert _health(s) < 2  # a new connection made room for itself
        finally:
            for sock in held:
                sock.close()


def _not_reading(server: Server, request: bytes) -> socket.socket:
    """A connection that sends ``request`` and never reads: a small receive buffer and
    segments, so that the server's output stays unsent (about 27 kB is taken)."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect((host, int(port)))
    sock.sendall(request)
    return sock


def _sockets(server: Server) -> int:
    """How many sockets the server process holds open."""
    fds = Path(f"/proc/{server.proc.pid}/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd).startswith("socket:")
    return count


#: A large answer (the API's description, about 78 kB) that needs no token.
LARGE = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [LARGE + b"Connection: close\r\n\r\n", (LARGE + b"\r\n") * 3],
    ids=["closed-with-output-unsent", "pipelined-answers-untaken"],
)
def test_a_client_that_does_not_take_its_answer_is_cut_off(quick: Server, request_bytes) -> None:
    """asyncio keeps a closed connection open until its output is sent, and an answer
    waits for the client to read: a client that never reads held its connection for
    ever (with max_connections of them, the server answered nothing)."""
    base = _sockets(quick)
    held = [_not_reading(quick, request_bytes) for _ in range(10)]
    try:
        time.sleep(0.5)
        assert _sockets(quick) >= base + 10  # held while the deadline runs
        end = time.monotonic() + 5
        while _sockets(quick) > base and time.monotonic() < end:
            time.sleep(0.1)
        assert _sockets(quick) <= base  # all cut off after read_timeout (1 s)
    finally:
        for sock in held:
            sock.close()
    assert _health(quick) < 2


def test_at_the_cap_a_connection_not_taking_its_answer_makes_room(tmp_path: Path) -> None:
    """max_connections clients that never read (the read deadline long): a new
    connection closes one of them rather than be refused."""
    with running(tmp_path, config="[server]\nmax_connections = 10\n") as s:
        held = [_not_reading(s, LARGE + b"Connection: close\r\n\r\n") for _ in range(10)]
        try:
            time.sleep(0.5)
            assert _health(s) < 2
            assert _health(s) < 2
        finally:
            for sock in held:
                sock.close()


def test_the_open_files_limit_holds_the_connections(server: Server) -> None:
    limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
    soft, hard = re.search(r"Max open files\s+(\S+)\s+(\S+)", limits).groups()
    if hard != "unlimited":
        assert soft == "unlimited" or int(soft) >= min(int(hard), 1000 + RESERVED_FDS)


@pytest.mark.parametrize(
    "fields",
    [
        {"read_timeout": 5e-324},
        {"read_timeout": 1e400},
        {"read_timeout": float("nan")},
        {"read_timeout": -1.0},
        {"read_timeout": True},
        {"read_timeout": "30"},
        {"max_connections": 0},
        {"max_connections": 10**9},
        {"max_connections": 2.5},
        {"max_connections": True},
        {"max_connections": None},
    ],
)
def test_a_hand_built_limit_out_of_range_is_refused(fields: dict) -> None:
    import dataclasses

    from dpcurator.errors import InvalidParameter
    from dpcurator.service.http_protocol import protocol
    from dpcurator.service.limits import Limits

    with pytest.raises(InvalidParameter, match=r"read_timeout|max_connections"):
        protocol(dataclasses.replace(Limits(), **fields))
