"""Limits that keep one analyst from stalling the others: body size and request rate.

The work a single request may cause is bounded by the curator itself (cells, batch
size, query text, the maximum-overlap solver's time limit); what is bounded here is what
arrives before the curator sees anything: the bytes of a body, and how many requests one
token may send per second. Neither limit reads data, so their 413 and 429 answers reveal
nothing about it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpcurator.errors import InvalidParameter

#: Where an analyst's request-rate bucket lives: ``shared`` by every server on the
#: ledger (in a PostgreSQL ledger's database, or in a file beside a ledger file),
#: ``server`` (this server's own), or ``auto``: shared for a PostgreSQL ledger, else
#: the server's (``dpcurator serve --workers N`` makes its workers' ``auto`` shared).
RATE_SCOPES = ("auto", "shared", "server")


@dataclass(frozen=True)
class Limits:
    """Per-server limits (all public). ``rate_scope``: see :data:`RATE_SCOPES`."""

    max_body_bytes: int = 1_000_000
    requests_per_second: float = 20.0
    burst: int = 40
    rate_scope: str = "auto"
    #: Seconds a connection has to send a whole request (from its opening or its
    #: previous answer), and how many connections may be open at once
    #: (:mod:`dpcurator.service.http_protocol`).
    read_timeout: float = 30.0
    max_connections: int = 1000


class BodySizeLimit:
    """ASGI middleware: a body over ``limit`` bytes is answered 413 before it is read
    whole: by its Content-Length, or while it streams in (chunked). The body, at most
    ``limit`` bytes, is read before the application sees any of it, so no route ever
    parses a body that is too large, and a refusal is always a 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1
                if declared > self.limit:
                    await _too_large(send, self.limit)
                    return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away: there is no one to answer
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await _too_large(send, self.limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps(
        {"error": "too_large", "message": f"the request body exceeds {limit} bytes"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """A token bucket per analyst: ``rate`` requests a second on average, ``burst`` at
    once. Thread-safe; memory grows with the number of analysts, not of requests."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait(self, who: str) -> float:
        """0 if ``who`` may send a request now (and it is counted), else the seconds
        until they may."""
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(who, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens < 1.0:
                self._buckets[who] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self._buckets[who] = (tokens - 1.0, now)
            return 0.0

    def allow(self, who: str) -> bool:
        return self.wait(who) == 0.0


class SharedRateLimiter(RateLimiter):
    """The same buckets, shared by every server on the ledger: in its database
    (:mod:`dpcurator.curator.stores.postgres_rate`, refilled by the database's clock) or
    in a file beside a ledger file (:mod:`dpcurator.curator.stores.sqlite_rate`, by the
    host's clock); each request is one atomic statement. Thread-safe."""

    def __init__(self, buckets: Any, rate: float, burst: int) -> None:
        super().__init__(rate, burst)
        self._shared = buckets

    def wait(self, who: str) -> float:
        return float(self._shared.take(who, self.rate, self.burst))

    def close(self) -> None:
        self._shared.close()


def rate_limiter(limits: Limits, ledger: Any) -> RateLimiter:
    """The rate limiter ``limits`` ask for on ``ledger`` (see :data:`RATE_SCOPES`)."""
    if limits.rate_scope not in RATE_SCOPES:
        raise InvalidParameter(
            f"rate_scope must be one of {', '.join(RATE_SCOPES)}, got {limits.rate_scope!r}"
        )
    scope = limits.rate_scope
    if scope == "auto":
        scope = "shared" if ledger.kind == "postgresql" else "server"
    buckets = ledger.shared_buckets() if scope == "shared" else None
    if buckets is None:
        if scope == "shared":
            raise InvalidParameter(
                "a shared rate limit needs a ledger several servers share (a file or "
                f"postgresql://...); ledger {ledger.path} is in memory"
            )
        return RateLimiter(limits.requests_per_second, limits.burst)
    return SharedRateLimiter(buckets, limits.requests_per_second, limits.burst)
