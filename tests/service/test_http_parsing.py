"""How the server reads HTTP, on a real server with raw sockets: bounded heads, no
trailer taken for a header, no body lost to an upgrade, no charged answer lost to a
later bad request, pipelined requests answered in order.

httptools is installed with the test extras, so uvicorn's ``http="auto"`` would pick
it: the tests of an endless header, a trailer, an upgrade and a bad request after a
charged one fail unless ``serve`` keeps h11 (each failed on httptools, whose protocol
keeps, merges or drops what they send)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from .conftest import Server


def _address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:  # refused while we were still sending
        return b""


def _responses(sock: socket.socket) -> list[tuple[int, bytes]]:
    """Every response on ``sock`` until the server closes it: (status, body); a
    response without Content-Length (h11's refusals) is the last, its body the rest."""
    data = b""
    sock.settimeout(30)
    while chunk := _recv(sock):
        data += chunk
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        if "content-length" not in headers:
            out.append((int(lines[0].split()[1]), rest))
            break
        n = int(headers["content-length"])
        out.append((int(lines[0].split()[1]), rest[:n]))
        data = rest[n:]
    return out


def _exchange(server: Server, request: bytes) -> list[tuple[int, bytes]]:
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(request)
        return _responses(sock)


def _rss_mb(server: Server) -> float:
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def _health(server: Server) -> int:
    return _exchange(server, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0][
        0
    ]


def _count(token: str | None, body: bytes, *extra: bytes) -> bytes:
    auth = [f"Authorization: Bearer {token}".encode()] if token else []
    head = [
        b"POST /v1/count HTTP/1.1",
        b"Host: x",
        b"Content-Type: application/json",
        *auth,
        f"Content-Length: {len(body)}".encode(),
        *extra,
    ]
    return b"\r\n".join([*head, b"", b""]) + body


def test_an_endless_header_is_refused_and_costs_no_memory(server: Server) -> None:
    before = _rss_mb(server)
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        sent = 0
        try:
            while sent < 200 * 2**20:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        responses = _responses(sock)
    assert sent < 50 * 2**20  # the server stopped reading long before
    assert [status for status, _ in responses] in ([400], [])
    assert _rss_mb(server) < before + 20
    assert _health(server) == 200


def test_a_chunked_trailer_is_not_a_header(server: Server) -> None:
    """RFC 9110 §6.5.1: trailers are not merged into the headers. A token sent as a
    trailer authenticates nothing (uvicorn's httptools protocol answered 200 and
    charged)."""
    before = server.charges()
    body = b'{"query": "age < 30", "epsilon": 0.01}'
    request = (
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n"
        + f"Authorization: Bearer {server.tokens['alice']}\r\n\r\n".encode()
    )
    ((status, answer),) = _exchange(server, request)
    assert status == 401, answer
    assert json.loads(answer)["error"] == "unauthorized"
    assert server.charges() == before


def test_a_request_asking_for_an_upgrade_keeps_its_body(server: Server) -> None:
    """``curl --http2`` over plain HTTP asks to upgrade to h2c; the server answers in
    HTTP/1.1 with the body read (httptools' protocol skipped it: 422, empty body)."""
    body = b'{"query": "age < 30", "epsilon": 0.01}'
    request = _count(
        server.tokens["alice"],
        body,
        b"Connection: Upgrade, HTTP2-Settings, close",
        b"Upgrade: h2c",
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
    )
    ((status, answer),) = _exchange(server, request)
    assert status == 200, answer
    assert json.loads(answer)["query"] == "age < 30"


def test_a_bad_request_after_a_charged_one_leaves_its_answer(server: Server) -> None:
    """Two requests in one write, the second malformed: the first is charged, so its
    answer must reach the client before the refusal (httptools' protocol answered only
    the refusal, so the charged answer was lost)."""
    before = server.charges()
    good = _count(server.tokens["alice"], b'{"query": "age < 31", "epsilon": 0.01}')
    bad = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n"
    responses = _exchange(server, good + bad)
    assert [status for status, _ in responses] == [200, 400]
    assert json.loads(responses[0][1])["query"] == "age < 31"
    assert server.charges() == before + 1


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    """Requests back to back on one connection, each body large enough that the next
    head arrives in the same read as the previous body."""
    token = server.tokens["alice"]
    requests = [
        _count(
            token, f'{{"query": "age < {30 + i}", "epsilon": 0.01'.encode() + b" " * 40_000 + b"}"
        )
        for i in range(3)
    ]
    last = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    responses = _exchange(server, b"".join(requests) + last)
    assert [status for status, _ in responses] == [200, 200, 200, 200]
    assert [json.loads(b)["query"] for _, b in responses[:3]] == [
        "age < 30",
        "age < 31",
        "age < 32",
    ]


def test_a_large_body_sent_with_its_head_is_answered(server: Server) -> None:
    body = b'{"query": "age < 30", "epsilon": 0.01' + b" " * 900_000 + b"}"
    request = _count(server.tokens["alice"], body, b"Connection: close")
    ((status, answer),) = _exchange(server, request)
    assert status == 200, answer
    assert json.loads(answer)["query"] == "age < 30"
