"""How ``dpcurator serve`` holds its connections: uvicorn's h11 protocol, with a
deadline for each request to arrive and a cap on open connections.

Why. uvicorn closes a connection only when it has sat idle ``timeout_keep_alive``
seconds *between* requests, and one byte of a request cancels that timer: a
connection that sends part of a request line, or a head, or a declared body, and then
nothing (or a byte now and then), is held for ever. Each costs a file descriptor, and
a server has about a thousand (a common soft limit is 1024): measured, 1,500 such
connections from one client, opened in a second, left ``GET /v1/health`` unanswered.

What. A connection has :attr:`Limits.read_timeout` seconds to deliver each whole
request (line, headers and body), counted from its opening or from the end of its
previous answer; past it the connection is closed. A request that has arrived whole is
never timed out here (deciding it has ``request_time_limit``). And at most
:attr:`Limits.max_connections` connections are open at once: a new one past the cap
closes the connection that has waited longest for its request (an attacker's held
connections are old, a real client's request arrives within milliseconds), or, when
every connection holds a request being answered, is closed itself. Neither reads a
token or data, so neither reveals anything.

Why h11 and never httptools (which uvicorn picks when it is installed, as
``uvicorn[standard]`` and ``fastapi[standard]`` install it): uvicorn's httptools
protocol queues every pipelined request of a read (one connection grew a server by
800 MB), keeps a chunked body's trailers without bound and adds them to the headers (a
token sent as a trailer authenticated), drops the body of a request asking for an
upgrade, and answers a malformed request in place of the charged answer to the request
before it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from dpcurator.service.limits import Limits

log = logging.getLogger(__name__)

#: Connections the event loop accepts at once (the listening socket's backlog, and how
#: many asyncio accepts in one go before the protocol sees any: a burst of connections
#: holds this many descriptors beyond the cap until the oldest are closed).
BACKLOG = 128
#: File descriptors kept beside the connections: for the server's own use (the ledger,
#: DuckDB, the solver workers' pipes, logs) and a few bursts of accepted connections
#: not yet closed (:data:`BACKLOG`).
RESERVED_FDS = 512


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive whole and a cap
    on open connections (the module docstring says why). Made by :func:`protocol`."""

    read_timeout: float = Limits.read_timeout
    max_connections: int = Limits.max_connections
    #: The server's connections waiting for a request, longest-waiting first (a
    #: dictionary used as an ordered set; each server's class has its own).
    waiting: ClassVar[dict[GuardedH11Protocol, None]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: When this connection began waiting for its current request (None: a request
        #: has arrived whole and is being answered).
        self.waiting_since: float | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()
        if len(self.connections) > self.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and not self.cycle.more_body:
            self._arrived()  # the request is in whole (answered or not)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            self._await_request()  # the next request, or the rest of its body

    # --- the deadline -------------------------------------------------------------------

    def _await_request(self) -> None:
        self._stop_deadline()
        self.waiting_since = time.monotonic()
        self.waiting[self] = None  # the newest
        self._deadline = self.loop.call_later(self.read_timeout, self._timed_out)

    def _arrived(self) -> None:
        if self.waiting_since is not None and (
            self.cycle is not None and not self.cycle.response_complete
        ):
            self._stop_deadline()

    def _stop_deadline(self) -> None:
        self.waiting_since = None
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.waiting_since is not None and not self.transport.is_closing():
            _note(f"a connection did not send a whole request in {self.read_timeout:g} s")
            self._stop_deadline()
            self.transport.close()

    # --- the cap ------------------------------------------------------------------------

    def _make_room(self) -> None:
        """Close the connection that has waited longest for its request (this one, if
        every other holds a request being answered): the first of :attr:`waiting`."""
        oldest = next(iter(self.waiting), self)
        _note(f"more than max_connections = {self.max_connections} connections")
        oldest._stop_deadline()
        oldest.transport.close()


#: How often (seconds) :func:`_note` logs at most, per kind: connections closed by the
#: thousand a second would otherwise be log lines by the thousand.
NOTE_EVERY = 10.0
_noted: dict[str, tuple[float, int]] = {}


def _note(what: str) -> None:
    """Log that a connection was closed because of ``what``: the first at once, then
    one line per :data:`NOTE_EVERY` seconds with how many there were."""
    now = time.monotonic()
    last, skipped = _noted.get(what, (-NOTE_EVERY, 0))
    if now - last < NOTE_EVERY:
        _noted[what] = (last, skipped + 1)
        return
    more = f" (and {skipped} more since the last note)" if skipped else ""
    log.warning("closed a connection: %s%s", what, more)
    _noted[what] = (now, 0)


def protocol(limits: Limits) -> type[GuardedH11Protocol]:
    """:class:`GuardedH11Protocol` with ``limits``' read timeout and connection cap (a
    class, as uvicorn's ``http`` setting takes one)."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {
            "read_timeout": limits.read_timeout,
            "max_connections": limits.max_connections,
            "waiting": {},
        },
    )


def raise_fd_limit(max_connections: int) -> int:
    """Raise this process's soft limit on open files to hold ``max_connections``
    connections and :data:`RESERVED_FDS` more, as far as the hard limit allows; the
    connections that then fit (what the cap must not exceed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < want:
        top = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
            soft = top
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - RESERVED_FDS))
