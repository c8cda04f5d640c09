"""How ``dpcurator serve`` holds its connections: uvicorn's h11 protocol, with
deadlines for each request to arrive and each answer to be taken, and a cap on open
connections.

Why. uvicorn closes a connection only when it has sat idle ``timeout_keep_alive``
seconds *between* requests, and one byte of a request cancels that timer: a
connection that sends part of a request line, or a head, or a declared body, and then
nothing (or a byte now and then), is held for ever. Each costs a file descriptor, and
a server has about a thousand (a common soft limit is 1024): measured, 1,500 such
connections from one client, opened in a second, left ``GET /v1/health`` unanswered.

What. A connection has :attr:`Limits.read_timeout` seconds to deliver each whole
request (line, headers and body), counted from its opening or from the end of its
previous answer, and as long again for its client to take any answer it has stopped
taking (asyncio keeps even a *closed* connection open until its output is sent: a
client that never reads would hold it for ever); past either, the connection is closed
at once, its output dropped. A request that has arrived whole is never timed out while
it is being decided (that has ``request_time_limit``). And at most
:attr:`Limits.max_connections` connections are open at once: a new one past the cap
closes a connection whose client is not taking its output, else the one that has
waited longest for its request (an attacker's held connections are old, a real client's
request arrives within milliseconds), else, when every connection holds a request being
answered, itself. None of this reads a token or data, so it reveals nothing.

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
import sys
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from dpcurator.errors import InvalidParameter
from dpcurator.service.connection_notes import note as _note
from dpcurator.service.limits import Limits

#: Connections the event loop accepts at once (the listening socket's backlog, and how
#: many asyncio accepts in one go before the protocol sees any: a burst of connections
#: holds this many descriptors beyond the cap until the oldest are closed).
BACKLOG = 128
#: File descriptors kept beside the connections: for the server's own use (the ledger,
#: DuckDB, the solver workers' pipes, logs) and a few bursts of accepted connections
#: not yet closed (:data:`BACKLOG`).
RESERVED_FDS = 512
#: The fewest connections a server must be able to hold to start.
MIN_CONNECTIONS = 32
#: What :attr:`Limits.read_timeout` (seconds; a deadline of microseconds would close
#: every connection at once) and :attr:`Limits.max_connections` may be.
READ_TIMEOUT_RANGE = (0.01, 86_400)
MAX_CONNECTIONS_RANGE = (1, 1_000_000)


class _Transport:
    """A connection's transport as uvicorn holds it: the same, except that a close
    tells the protocol (:meth:`GuardedH11Protocol._closed`), since asyncio keeps a
    closed connection open until the client has taken all of its output."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        if self._transport.is_closing():  # uvicorn closes again when the connection
            return  # is lost; a closed TLS transport has no buffer left to ask about
        self._transport.close()
        self._protocol._closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines for a request to arrive and for an answer
    to be taken, and a cap on open connections (the module docstring says why). Made
    by :func:`protocol`."""

    read_timeout: float = Limits.read_timeout
    max_connections: int = Limits.max_connections
    #: The server's connections waiting for a request, and those whose client is not
    #: taking their output (writing paused, or closed with output unsent), each
    #: longest first (dictionaries used as ordered sets; each server's class has its
    #: own): the ones a new connection past the cap closes, stuck ones first.
    waiting: ClassVar[dict[GuardedH11Protocol, None]] = {}
    stuck: ClassVar[dict[GuardedH11Protocol, None]] = {}
    #: What the gate read of a connection it handed over (:mod:`.handoff`): read first.
    handoff: bytes = b""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._raw: asyncio.Transport | None = None
        self._read_deadline: asyncio.TimerHandle | None = None
        self._write_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_Transport(transport, self))  # type: ignore[arg-type]
        self._await_request()
        if len(self.connections) > self.max_connections:
            self._make_room()
        if self.handoff and not transport.is_closing():
            prefix, self.handoff = self.handoff, b""
            self.data_received(prefix)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_reading_deadline()
        self._unstuck()
        self._raw = None
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.more_body and not cycle.response_complete:
            self._stop_reading_deadline()  # the request is in whole: it is answered

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            self._await_request()  # the next request, or the rest of its body

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stuck()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._raw is not None and not self._raw.is_closing():
            self._unstuck()  # the client takes its output

    # --- a request must arrive ----------------------------------------------------------

    def _await_request(self) -> None:
        self._stop_reading_deadline()
        self.waiting[self] = None  # the newest
        self._read_deadline = self.loop.call_later(
            self.read_timeout, self._read_timed_out, self._unsent()
        )

    def _read_timed_out(self, unsent: int) -> None:
        """No whole request came in time: abort, unless the client is still taking the
        previous answer (what is unsent shrank) or took the last of it meanwhile, which
        restarts the deadline."""
        self._read_deadline = None
        now = self._unsent()
        if (0 < now < unsent) or (now == 0 < unsent):
            self._read_deadline = self.loop.call_later(self.read_timeout, self._read_timed_out, now)
            return
        self._abort(
            f"closed a connection that did not send a whole request in {self.read_timeout:g} s"
        )

    def _stop_reading_deadline(self) -> None:
        self.waiting.pop(self, None)
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    # --- an answer must be taken --------------------------------------------------------

    def _closed(self) -> None:
        """The connection was closed (by uvicorn or here): it asks nothing more, and any
        output left must be taken within the deadline."""
        self._stop_reading_deadline()
        if self._unsent() > 0:
            self._stuck()

    def _stuck(self) -> None:
        if self._write_deadline is None:
            self.stuck[self] = None
            self._write_deadline = self.loop.call_later(
                self.read_timeout, self._write_timed_out, self._unsent()
            )

    def _write_timed_out(self, unsent: int) -> None:
        """The client took none of its output in time: abort; if it took some, it has
        as long again for the rest."""
        self._write_deadline = None
        now = self._unsent()
        if 0 < now < unsent:
            self._write_deadline = self.loop.call_later(
                self.read_timeout, self._write_timed_out, now
            )
        elif now == 0:
            self._unstuck()  # all taken
        else:
            self._abort(
                f"closed a connection whose client did not take its answer in "
                f"{self.read_timeout:g} s"
            )

    def _unsent(self) -> int:
        """Bytes of output the client has not taken yet: in the transport's buffer and
        in the kernel's send queue (Linux's SIOCOUTQ; elsewhere the buffer alone),
        which holds megabytes of an answer once it has been handed over."""
        raw = self._raw
        if raw is None:
            return 0
        try:
            buffered = raw.get_write_buffer_size()
        except AttributeError:  # a TLS transport closed twice keeps no buffer
            return 0
        return buffered + _kernel_unsent(raw.get_extra_info("socket"))

    def _unstuck(self) -> None:
        self.stuck.pop(self, None)
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    # --- closing at once ----------------------------------------------------------------

    def _abort(self, why: str) -> None:
        """Close the connection at once, its unsent output dropped: a client that does
        not take it would otherwise hold the connection for ever."""
        _note(why)
        self._stop_reading_deadline()
        self._unstuck()
        if self._raw is not None:
            self._raw.abort()

    def _make_room(self) -> None:
        """Close the connection whose client is not taking its output, longest first;
        else the one that has waited longest for its request; else (every other is being
        answered) this one."""
        oldest = next(iter(self.stuck), None) or next(iter(self.waiting), self)
        oldest._abort(
            f"closed a connection: more than max_connections = {self.max_connections} open"
        )


def _kernel_unsent(sock: Any) -> int:
    """Bytes in ``sock``'s kernel send queue not yet acknowledged by the client (0 where
    that cannot be asked)."""
    try:
        import fcntl  # not on Windows
        import termios

        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (ImportError, AttributeError, OSError, ValueError):
        return 0
    return int.from_bytes(out, sys.byteorder, signed=True)


def protocol(limits: Limits) -> type[GuardedH11Protocol]:
    """:class:`GuardedH11Protocol` with ``limits``' read timeout and connection cap (a
    class, as uvicorn's ``http`` setting takes one). Limits out of range (a hand-built
    :class:`Limits`) are an :class:`InvalidParameter`."""
    (t0, t1), (n0, n1) = READ_TIMEOUT_RANGE, MAX_CONNECTIONS_RANGE
    t, n = limits.read_timeout, limits.max_connections
    if isinstance(t, bool) or not isinstance(t, int | float) or not t0 <= t <= t1:
        raise InvalidParameter(f"read_timeout must be {t0} to {t1} seconds, got {t!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not n0 <= n <= n1:
        raise InvalidParameter(f"max_connections must be an integer {n0} to {n1}, got {n!r}")
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {
            "read_timeout": limits.read_timeout,
            "max_connections": limits.max_connections,
            "waiting": {},
            "stuck": {},
        },
    )


def raise_fd_limit(max_connections: int) -> int:
    """Raise this process's soft limit on open files to hold ``max_connections``
    connections and :data:`RESERVED_FDS` more, as far as the hard limit allows; the
    connections that then fit (what the cap must not exceed)."""
    try:
        import resource  # not on Windows
    except ImportError:
        return max_connections
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
    return max(0, min(max_connections, soft - RESERVED_FDS))
