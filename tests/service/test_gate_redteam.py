"""Red-team regressions for the gate (dpcurator.service.gate). Each test fails on the
gate as first written (branch red-gate, 3697e43) and states the behaviour it wants.

Real servers and raw sockets where the behaviour is the wire's; the gate's Connection
with a fake transport where the bug is a race that a real socket shows only now and then
(the same code path, driven step by step)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sqlite3
import threading
import time

import pytest

from dpcurator.service import gate as G

from .conftest import FAST, Server, add_analyst, running
from .test_gate import NOBODY, get, raw, stopped, undated

MISSING = b"GET /v1/budget HTTP/1.1\r\nHost: x\r\n\r\n"
UNKNOWN = get("/v1/budget", NOBODY)


def _all(server: Server, request: bytes, timeout: float = 2.0) -> bytes:
    """Everything the server sends on one connection until it closes or is quiet."""
    host, port = server.url.removeprefix("http://").split(":")
    out = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


# --- the gated server answers as the server without a gate -------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        get("/v1/budget", extra=b"Expect: 100-continue\r\n"),
        get("/v1/budget", NOBODY, extra=b"Expect: 100-continue\r\n"),
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n",
    ],
)
def test_expect_100_continue_is_answered_as_the_server_answers_it(pair, request_):
    """The server (its BodySizeLimit reads every body, uvicorn then writes 100 Continue)
    sends ``100 Continue`` before its 401; the gate sends the 401 alone."""
    gated, plain = pair
    raw(gated, UNKNOWN)  # (the gate's list is current)
    time.sleep(0.3)
    assert undated(_all(gated, request_)) == undated(_all(plain, request_))


def test_a_malformed_request_after_a_gate_answer_gets_the_servers_400(pair):
    """After a 401 the gate wrote, the server reads the rest on a fresh h11 connection
    that never saw the client's HTTP/1.1: its 400 is close-delimited where the server
    without a gate sends it chunked."""
    gated, plain = pair
    request_ = MISSING + b"GARBAGE\r\n\r\n"
    assert undated(_all(gated, request_)) == undated(_all(plain, request_))


# --- the gate's state machine: a request decided later ----------------------------------

_R = {"status": 401, "headers": [["content-type", "application/json"]], "body": "{}"}


class _Head:
    def head(self) -> object:
        return "h1"


class _Transport(asyncio.Transport):
    """A socket whose kernel buffer is ``full`` or not, as asyncio's transport behaves:
    pause_writing when output first stays behind, resume_writing once it is all sent."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.reading, self.full, self.buffered, self.closed = True, False, 0, False
        self.proto: G.Connection | None = None

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.out.append(bytes(data))
        if self.full:
            was, self.buffered = self.buffered, self.buffered + len(data)
            if was == 0:
                assert self.proto is not None
                self.proto.pause_writing()

    def drain(self) -> None:
        assert self.proto is not None
        self.full, self.buffered = False, 0
        self.proto.resume_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return default


def _connection(read_timeout: float = 5.0) -> tuple[G.Gate, G.Connection, _Transport]:
    """A gate whose token list is stale (the ledger's head moved): a well-formed token
    it does not list waits (LATER) until a list for the new head comes."""
    a, _b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.setblocking(False)
    gate = G.Gate(
        {
            "routes": [["GET", "/v1/budget"]],
            "missing": _R,
            "refused": _R,
            "default_headers": [],
            "read_timeout": read_timeout,
            "keep_alive": 5.0,
            "max_connections": 10,
            "ledger": None,
        },
        a,
    )
    gate._keep = _b  # type: ignore[attr-defined]
    gate.db = _Head()  # type: ignore[assignment]
    gate.tokens_head = "h0"
    t = _Transport()
    c = G.Connection(gate)
    t.proto = c
    c.connection_made(t)
    return gate, c, t


def _feed(c: G.Connection, data: bytes) -> None:
    buf = c.get_buffer(len(data))
    buf[: len(data)] = data
    c.buffer_updated(len(data))


def _answers(t: _Transport) -> int:
    return b"".join(t.out).count(b"HTTP/1.1 401")


def _new_list(gate: G.Gate) -> None:
    gate.take_tokens(json.dumps({"head": "h1", "tokens": {}}).encode())


def test_a_request_waiting_for_the_list_is_answered_though_its_earlier_answers_drained():
    """A request waits for the list (reading paused) while the answers before it are not
    yet sent; they drain: resume_writing resumes reading, the next bytes make h11 give the
    waiting request's end to no one, and once refused it is never answered (nor anything
    after it); meanwhile the gate reads and keeps whatever the client sends."""

    async def run() -> None:
        gate, c, t = _connection()
        t.full = True
        _feed(c, MISSING + UNKNOWN)
        assert _answers(t) == 1 and not t.reading
        t.drain()
        assert not t.reading, "reading resumed while a request waits to be decided"
        _feed(c, MISSING)  # (what a real socket would deliver once reading resumed)
        _new_list(gate)
        await asyncio.sleep(0.1)
        assert _answers(t) == 3

    asyncio.run(run())


def test_reading_stays_paused_while_the_client_takes_no_answers():
    """A client that takes none of its answers: the gate answers nothing more (the next
    request waits, as in uvicorn), reads nothing more, and closes the connection after
    read_timeout. (As first written, a request decided later resumed reading, answered
    every next request into the gate's memory and re-armed the deadline each time.)"""

    async def run() -> None:
        gate, c, t = _connection(read_timeout=0.2)
        t.full = True
        _feed(c, MISSING + UNKNOWN)
        _new_list(gate)
        await asyncio.sleep(0.05)
        assert _answers(t) == 1
        assert not t.reading, "reading resumed while the client takes no answers"
        for _ in range(40):  # 0.8 s: four times read_timeout
            if t.reading and not t.closed:
                _feed(c, MISSING * 400)
            await asyncio.sleep(0.02)
        assert t.closed, f"still open, {t.buffered} bytes of answers held"

    asyncio.run(run())


# --- the gate asks again for a list it did not get ---------------------------------------


def _latency(server: Server, request_: bytes) -> float:
    t = time.monotonic()
    assert raw(server, request_).startswith(b"HTTP/1.1 401")
    return time.monotonic() - t


def test_a_request_for_a_list_lost_on_a_full_socket_pair_is_made_again(tmp_path):
    """The gate asks once (``asked``) and the ask is dropped when the socket pair is full
    of handovers (the server's loop busy a moment): it never asks again, refuses no
    unknown token any more, and every one waits 0.5 s, for the life of the server."""
    with running(tmp_path, config=FAST) as s:
        s.add("ann")
        raw(s, UNKNOWN)
        pad = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 15000 + b"\r\n\r\n"
        host, port = s.url.removeprefix("http://").split(":")
        socks = []
        add_analyst(s.ledger, "cy")
        with stopped(s):
            for _ in range(40):
                c = socket.create_connection((host, int(port)))
                c.sendall(pad)
                socks.append(c)
            time.sleep(0.3)
            c = socket.create_connection((host, int(port)))
            c.sendall(UNKNOWN)
            socks.append(c)
            time.sleep(0.2)
        time.sleep(1)
        for c in socks:
            c.close()
        _latency(s, UNKNOWN)  # (asks again, if it does)
        time.sleep(0.5)
        assert _latency(s, UNKNOWN) < 0.3


def test_a_list_the_server_could_not_read_is_asked_for_again(tmp_path):
    """The server could not read the tokens once (the file locked past 5 s): the gate,
    its ``asked`` never reset, never asks again (handoff.py says it does)."""
    with running(tmp_path, config=FAST) as s:
        s.add("ann")
        raw(s, UNKNOWN)
        add_analyst(s.ledger, "cy")
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            threading.Thread(target=lambda: _all(s, UNKNOWN, timeout=10), daemon=True).start()
            time.sleep(0.2)
            lock = sqlite3.connect(s.ledger, isolation_level=None, timeout=10)
            lock.execute("BEGIN EXCLUSIVE")
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        time.sleep(6)
        lock.execute("COMMIT")
        lock.close()
        time.sleep(0.5)
        _latency(s, UNKNOWN)
        time.sleep(0.5)
        assert _latency(s, UNKNOWN) < 0.3
        assert re.search("cannot read the tokens in force", s.log())
