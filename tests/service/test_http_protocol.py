"""The server's HTTP protocol (dpcurator.service.http_protocol) on a real server: a
request's head is bounded whatever arrives, refusals are the API's JSON, and what is
within the bounds (large bodies, pipelined requests, slow senders) is answered."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from dpcurator.curator.requests import MAX_QUERY_TEXT
from dpcurator.service.http_protocol import MAX_HEAD_BYTES

from .conftest import Server


def _address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _responses(sock: socket.socket) -> list[tuple[int, dict, bytes]]:
    """Every response on ``sock`` until the server closes it: (status, headers, body)."""
    data = b""
    sock.settimeout(30)
    while chunk := _recv(sock):
        data += chunk
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        n = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:  # refused while we were still sending
        return b""


def _send_until_refused(sock: socket.socket, first: bytes, more: bytes, limit: int) -> int:
    """Send ``first``, then ``more`` again and again (up to ``limit`` bytes) until the
    server stops reading; the bytes sent."""
    sock.sendall(first)
    sent = len(first)
    try:
        while sent < limit:
            sock.sendall(more)
            sent += len(more)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _rss_mb(server: Server) -> float:
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def _health(server: Server) -> int:
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return _responses(sock)[0][0]


def _assert_too_large(response: tuple[int, dict, bytes]) -> None:
    status, headers, body = response
    assert status == 431
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "error": "too_large",
        "message": f"the request's line and headers exceed {MAX_HEAD_BYTES} bytes",
    }


@pytest.mark.parametrize(
    ("first", "more"),
    [
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Endless: ", b"a" * 65536),  # one header
        (b"GET /v1/health?", b"a" * 65536),  # the request line
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n", b"X-Many: 1\r\n" * 3000),  # many headers
    ],
    ids=["header", "url", "many-headers"],
)
def test_an_endless_head_is_431_and_costs_no_memory(server: Server, first, more) -> None:
    """Without the bound, uvicorn's httptools protocol kept every byte of an unfinished
    head: one connection grew the server by 120 MB in 20 s."""
    before = _rss_mb(server)
    with socket.create_connection(_address(server), timeout=30) as sock:
        sent = _send_until_refused(sock, first, more, 200 * 2**20)
        assert sent < 100 * 2**20  # it stopped reading long before
        responses = _responses(sock)
    assert len(responses) == 1
    _assert_too_large(responses[0])
    assert _rss_mb(server) < before + 20
    assert _health(server) == 200


def test_a_head_within_the_bound_is_answered_even_sent_byte_by_byte(server: Server) -> None:
    filler = b"X-Filler: " + b"a" * (MAX_HEAD_BYTES - 200) + b"\r\n"
    request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + filler + b"Connection: close\r\n\r\n"
    assert len(request) < MAX_HEAD_BYTES
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(request[:-300])
        for i in range(len(request) - 300, len(request)):
            sock.sendall(request[i : i + 1])
        ((status, _, body),) = _responses(sock)
    assert status == 200 and json.loads(body) == {"status": "ok"}


def test_a_head_just_past_the_bound_is_431(server: Server) -> None:
    filler = b"X-Filler: " + b"a" * MAX_HEAD_BYTES + b"\r\n"
    request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n"
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(request[: MAX_HEAD_BYTES - 10])
        time.sleep(0.2)  # the server reads what it has, within the bound
        sock.sendall(request[MAX_HEAD_BYTES - 10 :])
        (response,) = _responses(sock)
    _assert_too_large(response)


def test_the_longest_query_text_fits_in_a_url(server: Server) -> None:
    """``GET /v1/budget?query=`` takes the longest query text the curator takes, every
    character percent-encoded."""
    clause = "age = 1 OR "
    text = clause * ((MAX_QUERY_TEXT - 7) // len(clause)) + "age = 1"
    text += " " * (MAX_QUERY_TEXT - len(text))
    assert len(text) == MAX_QUERY_TEXT
    target = "/v1/budget?query=" + "".join(f"%{b:02X}" for b in text.encode())
    token = server.tokens["alice"]
    head = f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    head += "User-Agent: " + "u" * 4000 + "\r\nConnection: close\r\n\r\n"
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(head.encode())
        ((status, _, body),) = _responses(sock)
    assert status == 200, body
    assert json.loads(body)["query"] == text


def test_a_large_body_sent_with_its_head_is_not_counted_as_head(server: Server) -> None:
    """A body of 900 kB arrives in the same reads as its head: it is the body limit's
    (1 MB), not the head's; the count is answered."""
    token = server.tokens["alice"]
    body = b'{"query": "age < 30", "epsilon": 0.01' + b" " * 900_000 + b"}"
    request = (
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
        + body
    )
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(request)
        ((status, _, answer),) = _responses(sock)
    assert status == 200, answer
    assert json.loads(answer)["query"] == "age < 30"


def test_pipelined_requests_with_bodies_are_each_answered(server: Server) -> None:
    """Requests sent back to back on one connection, each body large enough that the
    next head arrives in the same read as the previous body."""
    token = server.tokens["alice"]
    one = []
    for i in range(3):
        body = f'{{"query": "age < {30 + i}", "epsilon": 0.01'.encode() + b" " * 40_000 + b"}"
        one.append(
            b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    last = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(b"".join(one) + last)
        responses = _responses(sock)
    assert [s for s, _, _ in responses] == [200, 200, 200, 200]
    assert [json.loads(b)["query"] for _, _, b in responses[:3]] == [
        "age < 30",
        "age < 31",
        "age < 32",
    ]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x7fb\r\n\r\n",
        b"GET /v1/he alth HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),  # TLS to a plain server
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: "
        b"chunked\r\n\r\n0\r\n\r\n",
        b"POST /v1/count HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    ],
    ids=["nul", "del", "space-in-target", "tls", "smuggling", "negative-length"],
)
def test_a_malformed_request_is_400_in_json(server: Server, request_bytes: bytes) -> None:
    before = server.charges()
    with socket.create_connection(_address(server), timeout=30) as sock:
        sock.sendall(request_bytes)
        ((status, headers, body),) = _responses(sock)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": "invalid_request", "message": "malformed HTTP request"}
    assert server.charges() == before
    assert _health(server) == 200
