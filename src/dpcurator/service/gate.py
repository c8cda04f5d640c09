"""The gate: a process of its own that accepts ``dpcurator serve``'s connections,
answers the 401s that need no curator, and hands every other connection, as it is, to
the server.

Why. A 401 needs no data and no budget, but in the server it waits for the event
loop, and the event loop for the interpreter lock. Under a flood of exact checks and
2,000-query batches (benchmarks/stall.py, 2 cores at 0% idle) the thread holding that
lock is often off the CPU, and a 401 answered in under a millisecond of work took up
to 35-150 ms. A process that is idle between requests is woken at once by the kernel
and holds no lock anyone else needs: in the same runs, a trivial server of its own
answered within 5-20 ms.

What it answers. Only a request that the server would answer with one of two 401s
whatever else it holds, and that has no body: its method and exact path are one of
the routes the server found to refuse such requests before anything else (the server
asks its own application at start: :func:`dpcurator.service.handoff.gate_plan`), and
its one ``Authorization`` header is missing, is not a well-formed bearer token, or
names a token not in force. The 401 is the server's own, byte for byte (its headers
and body, taken from the application at start; the ``date`` is now's). A token is
judged not in force on the server's list of tokens (key and secret hash, compared in
constant time as the ledger does, :func:`dpcurator.curator.credentials.matches`) only
while the ledger file's analysts' head is still the one that list was read at (a read
that never waits, :class:`HeadReader`); when it is not, the gate asks for a new list and
waits for it (a request handed over takes its connection to the server for good). On
PostgreSQL there is no such head, and every well-formed token goes to the server.
Anything else, a malformed request included, goes to the server, which answers it as
it always has.

How it hands a connection over. The socket itself, passed over a Unix socket pair
(``SCM_RIGHTS``) with the bytes the gate has read of it since its last answer; the
server reads on from there as if it had accepted the connection (the client's address
is the socket's own), and from then on the connection is the server's alone, with all
of its limits. The gate reads at most :data:`READ_SIZE` bytes at a time, so that what
it hands over stays small. A token the gate passes is authenticated again by the
server: the gate only ever refuses.

Its own limits are the server's: a connection has ``read_timeout`` seconds to send
each request and as long to take each answer, and past ``max_connections`` a new one
closes the one that has waited longest. Started by the server
(:class:`dpcurator.service.handoff.GateLink`) as ``python -m dpcurator.service.gate``,
its settings one JSON line on standard input; it ends when the server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sqlite3
import struct
import sys
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

import h11

from dpcurator.curator.credentials import bearer_token, matches, split_token
from dpcurator.service.connection_notes import note as _note
from dpcurator.service.connection_notes import noting_accept_errors

log = logging.getLogger("dpcurator.gate")

#: Bytes read from a connection at a time (what a handover carries stays near this).
READ_SIZE = 16 * 1024
#: Message kinds on the socket pair: a connection handed over (its socket attached),
#: a request for the list of tokens in force, and the gate's word that it listens.
HANDOFF, REFRESH, READY = b"H", b"R", b"S"
#: A secret hash no secret has, compared for an unknown key (so that the time taken
#: does not say whether the key exists).
_NO_HASH = "0" * 64
#: Seconds before the gate's second try to decide a request while the ledger file is
#: being written or a new list of tokens is on its way (each next wait twice the last,
#: at most :data:`RETRY_MAX`), and how long it tries before handing the request over.
#: A commit takes milliseconds, a list about as long; the waits grow so that many
#: requests waiting on a server that does not answer cost the gate little.
HEAD_RETRY, RETRY_MAX, HEAD_WAIT = 0.002, 0.064, 0.5
#: Seconds after which a list asked for and not received is asked for again.
ASK_AGAIN = 1.0


class _Later:
    """The gate cannot tell yet (the ledger file is being written): ask again soon."""


LATER = _Later()


@dataclass(frozen=True)
class Refusal:
    """A 401 as the server writes it: its status, the application's headers, body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @property
    def reason(self) -> bytes:
        return HTTPStatus(self.status).phrase.encode()

    @staticmethod
    def of(d: dict[str, Any]) -> Refusal:
        headers = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in d["headers"])
        return Refusal(int(d["status"]), headers, d["body"].encode("latin-1"))


class Gate:
    """The gate's state: what it refuses, the tokens in force, its connections."""

    def __init__(self, settings: dict[str, Any], ctrl: socket.socket) -> None:
        self.routes = {(m.encode(), p.encode()) for m, p in settings["routes"]}
        self.missing = Refusal.of(settings["missing"])
        self.refused = Refusal.of(settings["refused"])
        self.defaults = tuple(
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in settings["default_headers"]
        )
        self.read_timeout = float(settings["read_timeout"])
        self.keep_alive = float(settings["keep_alive"])
        self.max_connections = int(settings["max_connections"])
        self.ctrl = ctrl
        self.loop = asyncio.get_running_loop()
        self.db = None if settings["ledger"] is None else HeadReader(settings["ledger"])
        self.tokens: dict[str, str] = {}
        self.tokens_head: str | None = None
        self.asked_at: float | None = None  # when the list was last asked for
        self.connections: dict[Connection, None] = {}  # longest open first
        self.handing: dict[Connection, bytes] = {}  # handed over, not yet sent
        self.retrying = False

    # --- what is refused here -----------------------------------------------------------

    def refusal(self, request: h11.Request) -> Refusal | _Later | None:
        """The 401 for ``request``, or None (the server's to answer), or :data:`LATER`."""
        if (request.method, request.target.partition(b"?")[0]) not in self.routes:
            return None
        authorization: list[bytes] = []
        for name, value in request.headers:
            if name in (b"content-length", b"transfer-encoding") and not (
                name == b"content-length" and value == b"0"
            ):
                return None  # a body: the server's (it may read it first)
            if name == b"expect":
                return None  # the server writes 100 Continue first (it reads every body)
            if name == b"authorization":
                authorization.append(value)
        if not authorization:
            return self.missing
        if len(authorization) > 1:
            return None
        token = bearer_token(authorization[0].decode("latin-1"))
        held = False if token is None else self._held(token)
        if held is None:
            return LATER
        return None if held else self.refused

    def _held(self, token: str) -> bool | None:
        """Whether ``token`` may be in force (else it is refused here): on the list, or
        not on the list when the list may be out of date (a new one is then asked for),
        or None while a new list or the ledger file's head is awaited (a request handed
        over takes its connection to the server for good, so a token likely to be
        refused waits a little for the gate to tell). The head is read for every
        token, listed or not, so that the time taken does not say which."""
        key, secret = split_token(token) or ("", "")
        stored = self.tokens.get(key)
        listed = matches(secret, stored or _NO_HASH) and stored is not None
        head = self._store_head()
        current = head is not None and head == self.tokens_head
        if head is not None and not current:
            self._ask()
        if listed:
            return True
        if self.db is None:
            return True  # no head to read (PostgreSQL): the server's to tell
        return None if not current else False

    def _store_head(self) -> object:
        """The ledger file's analysts' head now, or None where it cannot be told now."""
        return None if self.db is None else self.db.head()

    def _ask(self) -> None:
        """Ask the server for the tokens in force; again after :data:`ASK_AGAIN` seconds
        without a list (an ask dropped on a full socket pair, a list the server could
        not read), at the next request that needs one."""
        now = self.loop.time()
        if self.asked_at is not None and now - self.asked_at < ASK_AGAIN:
            return
        try:
            self.ctrl.send(REFRESH)
        except OSError:
            return  # (full: the next try asks)
        self.asked_at = now

    def take_tokens(self, message: bytes) -> None:
        got = json.loads(message)
        self.tokens = {str(k): str(v) for k, v in got["tokens"].items()}
        self.tokens_head = str(got["head"])
        self.asked_at = None

    # --- answers and handovers ----------------------------------------------------------

    def answer(self, conn: h11.Connection, refusal: Refusal) -> bytes:
        headers = [(b"date", formatdate(usegmt=True).encode()), *self.defaults, *refusal.headers]
        return b"".join(
            [
                conn.send(
                    h11.Response(status_code=refusal.status, headers=headers, reason=refusal.reason)
                ),
                conn.send(h11.Data(data=refusal.body)),
                conn.send(h11.EndOfMessage()),
            ]
        )

    def hand_off(self, connection: Connection, data: bytes) -> None:
        self.handing[connection] = data
        self.send_handoffs()

    def send_handoffs(self) -> None:
        """Pass each waiting connection's socket to the server, once the answers the
        gate wrote on it are sent (the server's must come after them); retried soon
        while the socket pair is full."""
        for connection, data in list(self.handing.items()):
            transport = connection.transport
            if transport is None or transport.is_closing():
                del self.handing[connection]
                continue
            if transport.get_write_buffer_size():
                continue  # its resume_writing calls again
            sock = transport.get_extra_info("socket")
            try:
                socket.send_fds(self.ctrl, [HANDOFF + data], [sock.fileno()])
            except BlockingIOError:
                if not self.retrying:
                    self.retrying = True
                    self.loop.call_later(0.002, self._retry)
                return
            except OSError as err:
                _note(f"cannot hand a connection to the server: {err.strerror or err}")
                transport.abort()
                continue
            del self.handing[connection]
            transport.abort()  # the gate's descriptor only: the server holds the socket

    def _retry(self) -> None:
        self.retrying = False
        self.send_handoffs()

    def opened(self, connection: Connection) -> None:
        self.connections[connection] = None
        if len(self.connections) > self.max_connections:
            oldest = next(iter(self.connections))
            _note(f"closed a connection: more than max_connections = {self.max_connections} open")
            oldest.abort()

    def closed(self, connection: Connection) -> None:
        self.connections.pop(connection, None)
        self.handing.pop(connection, None)


class Connection(asyncio.BufferedProtocol):
    """One client connection while the gate holds it: its requests read with h11 until
    one is not the gate's to refuse.

    Reading runs only while nothing stops it: no request waiting to be decided, no
    answer the client has not taken (asyncio calls ``pause_writing`` at the first byte
    left unsent), not handed over. So what the gate holds of a connection stays within
    one read and the answers to it, and a client that takes no answers has
    ``read_timeout`` seconds before it is closed, as in the server."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.buffer = bytearray(READ_SIZE)
        self.h11 = h11.Connection(h11.SERVER)
        self.unanswered = bytearray()  # read since the last answer: what a handover carries
        self.transport: asyncio.Transport | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.idle: asyncio.TimerHandle | None = None  # uvicorn's keep-alive, after an answer
        self.pending: Refusal | None = None
        self.gone = False  # closed, closing or handed over: nothing more is read here
        self.deciding = False  # a request waits to be decided (Gate.refusal said LATER)
        self.write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # pause_writing while any answer is unsent, resume_writing once it all is: the
        # moment a connection handed over with output pending may go
        transport.set_write_buffer_limits(high=0)
        self.gate.opened(self)
        self._arm(_REQUEST)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._not_idle()
        self.gone = True
        self.gate.closed(self)
        self.transport = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self._not_idle()
        data = bytes(self.buffer[:nbytes])
        self.unanswered += data
        self.h11.receive_data(data)
        self._events()

    def eof_received(self) -> bool:
        """The client sent all it will (uvicorn reads nothing more either): a connection
        being handed over goes as it is; any other is closed once its answers are sent."""
        if self.gone or self.deciding:
            return True
        self._close()
        return True

    def pause_writing(self) -> None:
        self.write_paused = True
        self._reading()
        self._arm(_TAKE)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is None:
            return
        if self in self.gate.handing:
            self.gate.send_handoffs()
        elif not self.gone:
            self._arm(_REQUEST)
            self._reading()
            self._events()

    def _reading(self) -> None:
        """Read on exactly when nothing stops it (the class docstring)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        if self.gone or self.deciding or self.write_paused:
            t.pause_reading()
        else:
            t.resume_reading()

    def _events(self) -> None:
        while self.transport is not None and not (self.gone or self.deciding or self.write_paused):
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError:
                self._malformed()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                self.abort()
                return
            if isinstance(event, h11.Request):
                if not self._decide(event, self.gate.loop.time() + HEAD_WAIT, HEAD_RETRY):
                    return
            elif isinstance(event, h11.EndOfMessage) and self.pending is not None:
                self._answer(self.pending)

    def _decide(self, request: h11.Request, until: float, wait: float) -> bool:
        """Decide ``request``: refused (True: read on, to its end), handed over, or
        decided again in ``wait`` seconds (reading paused), until ``until``."""
        got = self.gate.refusal(request)
        if isinstance(got, Refusal):
            self.deciding = False
            self.pending = got
            return True
        if got is LATER and self.gate.loop.time() < until:
            self._disarm()  # the request is whole: the server never times one out
            self.deciding = True
            self._reading()
            self.gate.loop.call_later(wait, self._again, request, until, min(2 * wait, RETRY_MAX))
        else:
            self.deciding = False
            self._hand_off()
        return False

    def _again(self, request: h11.Request, until: float, wait: float) -> None:
        if self.transport is None or self.gone:
            return
        if self._decide(request, until, wait):
            self._reading()
            self._events()

    def _answer(self, refusal: Refusal) -> None:
        assert self.transport is not None
        self.pending = None
        self._arm(_REQUEST)  # from the end of this answer (writing may pause: then _TAKE)
        self.transport.write(self.gate.answer(self.h11, refusal))
        if self.h11.our_state is h11.MUST_CLOSE:
            self._close()
            return
        self.h11.start_next_cycle()
        self.unanswered = bytearray(self.h11.trailing_data[0])
        if not self.unanswered:
            self.idle = self.gate.loop.call_later(self.gate.keep_alive, self._close)

    def _malformed(self) -> None:
        """A request h11 cannot read. On a connection the gate has answered before, the
        server's h11 would know the client's HTTP version: answer as uvicorn does then
        (its 400, then close). Else the server reads the same bytes from the start."""
        if self.h11.their_http_version is None or self.h11.our_state is not h11.IDLE:
            self._hand_off()
            return
        assert self.transport is not None
        log.warning("Invalid HTTP request received.")
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        reason = HTTPStatus(400).phrase.encode()
        self.transport.write(
            b"".join(
                [
                    self.h11.send(h11.Response(status_code=400, headers=headers, reason=reason)),
                    self.h11.send(h11.Data(data=b"Invalid HTTP request received.")),
                    self.h11.send(h11.EndOfMessage()) or b"",
                ]
            )
        )
        self._close()

    def _close(self) -> None:
        """Close once the answers are sent (within ``read_timeout``, else aborted)."""
        self._not_idle()
        self.gone = True
        self.gate.closed(self)
        if self.transport is not None and not self.transport.is_closing():
            self._arm(_TAKE)  # asyncio holds a closed connection until its output is sent
            self.transport.close()

    def _hand_off(self) -> None:
        assert self.transport is not None
        self.gone = True
        self._not_idle()
        self._arm(_TAKE)  # (only while an answer is unsent)
        self._reading()
        self.gate.hand_off(self, bytes(self.unanswered))

    def _not_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    def _arm(self, what: str) -> None:
        self._disarm()
        self.deadline = self.gate.loop.call_later(self.gate.read_timeout, self._timed_out, what)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _timed_out(self, what: str) -> None:
        self.deadline = None
        _note(f"closed a connection that {what} in {self.gate.read_timeout:g} s")
        self.abort()

    def abort(self) -> None:
        self._disarm()
        self._not_idle()
        self.gone = True
        self.gate.closed(self)  # now: the next connection past the cap closes another
        if self.transport is not None:
            self.transport.abort()


#: What a connection's deadline waits for (the words of its note when it passes).
_REQUEST, _TAKE = "did not send a whole request", "did not take its answer"


class HeadReader:
    """Reads the analysts' head of a ledger file (SQLite, journal mode TRUNCATE) without
    waiting.

    While a commit is being written, readers are locked out, and under a flood of
    charges that is often. Then the head last read is still the file's when no commit
    has reached the file since: SQLite's file change counter (4 bytes at offset 24 of
    the header, in page 1) grows with every commit that changes the file, and page 1 is
    written first. So the counter is read with the head (inside one read transaction,
    where no commit can land) and again, without a lock, when the file is busy: the
    same counter, the same head. A commit not yet written is not done, and its
    analyst not added yet. A file replaced under the same name is never read (None)."""

    def __init__(self, path: str) -> None:
        from dpcurator.curator.stores.sqlite import lookup_connection

        self.path = path
        self.db = lookup_connection(path)
        # one descriptor for the reader's life: closing any descriptor of a file drops
        # the process's POSIX locks on it, SQLite's read lock among them
        self.fd = os.open(path, os.O_RDONLY)
        st = os.fstat(self.fd)
        self.file = (st.st_dev, st.st_ino)
        self.last: tuple[bytes | None, object] | None = None  # (counter, head), read together

    def head(self) -> object:
        try:
            if not self._same_file():
                return None
            self.db.execute("BEGIN")
            try:
                row = self.db.execute(
                    "SELECT value FROM meta WHERE key = 'analysts_head'"
                ).fetchone()
                counter = self._counter()
            finally:
                self.db.execute("COMMIT")
        except (sqlite3.Error, OSError):
            with contextlib.suppress(sqlite3.Error):
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            return self._unchanged()
        head = None if row is None else row[0]
        self.last = (counter, head)
        return head

    def _unchanged(self) -> object:
        if self.last is None or self.last[0] is None:
            return None
        try:
            same = self._same_file() and self._counter() == self.last[0]
        except OSError:
            return None
        return self.last[1] if same else None

    def _same_file(self) -> bool:
        st = os.stat(self.path)
        return (st.st_dev, st.st_ino) == self.file

    def _counter(self) -> bytes | None:
        """The file change counter, or None where it does not grow with each commit:
        bytes 18 and 19 of the header are 1 in the rollback-journal modes the ledger
        uses, 2 in WAL mode (someone may switch a file to WAL while the server runs),
        where a commit reaches the main file only at a checkpoint."""
        header = os.pread(self.fd, 10, 18)
        if len(header) < 10 or header[0] != 1 or header[1] != 1:
            return None
        return header[6:10]


async def _read_tokens(gate: Gate, tokens: socket.socket) -> None:
    """The server's lists of tokens in force, each a length and JSON, as they come;
    returns when the server closes its end."""
    reader, writer = await asyncio.open_connection(sock=tokens)
    try:
        while True:
            try:
                (n,) = struct.unpack("!I", await reader.readexactly(4))
                gate.take_tokens(await reader.readexactly(n))
            except asyncio.IncompleteReadError:
                return
    finally:
        writer.close()


async def _run(settings: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket(fileno=settings["listen_fd"])
    ctrl = socket.socket(fileno=settings["ctrl_fd"])
    tokens = socket.socket(fileno=settings["tokens_fd"])
    ctrl.setblocking(False)
    gate = Gate(settings, ctrl)
    loop.set_exception_handler(noting_accept_errors)
    server = await loop.create_server(lambda: Connection(gate), sock=listener, backlog=128)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    gone = loop.create_task(_read_tokens(gate, tokens))
    gone.add_done_callback(lambda _: stop.set())  # the server ended
    ctrl.send(READY)
    await stop.wait()
    server.close()
    for connection in list(gate.connections):
        connection.abort()
    gone.cancel()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    settings = json.loads(sys.stdin.readline())
    with contextlib.suppress(OSError, AttributeError):  # end with the server (Linux)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != settings["server_pid"]:
        return
    asyncio.run(_run(settings))


if __name__ == "__main__":
    main()
