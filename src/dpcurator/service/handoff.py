"""The server's side of its gate (:mod:`dpcurator.service.gate`): what the gate may
refuse, starting it, and taking the connections it hands over.

What the gate may refuse is found by asking the application itself, at start, never
written down twice: each route without path parameters is sent, in process, a request
with no ``Authorization`` header, one with a malformed token, one with a well-formed
token no one holds (its query string junk); a route goes on the gate's list only when
all three are 401s identical, byte for byte, to those of every other route on it.
Those two 401s (a missing header's and a refused token's) are what the gate writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from dpcurator.curator.credentials import MISSING_TOKEN, REFUSED_TOKEN
from dpcurator.curator.ledger import Ledger
from dpcurator.errors import DpCuratorError
from dpcurator.service.gate import HANDOFF, READ_SIZE, READY, REFRESH

log = logging.getLogger("dpcurator.service")

#: A token of the right form whose key no one holds (its secret 43 characters).
_NOBODY = "dpc_" + "0" * 16 + "_" + "A" * 43
#: Seconds the gate has to say it listens.
START_TIMEOUT = 30.0
#: Most sockets one message of the gate carries (one), and its longest message: what
#: it read of a connection (h11 refuses a head past 16 kB; the gate reads 16 kB at a
#: time), with room to spare. A message cut short is refused, its connection closed.
_MAX_FDS = 4
_MAX_MESSAGE = 16 * READ_SIZE


class GateError(DpCuratorError):
    """The gate could not be started."""


# --- what the gate refuses ----------------------------------------------------------------


def gate_plan(app: FastAPI) -> dict[str, Any]:
    """The routes the gate may refuse and the two 401s it writes (module docstring)."""
    return asyncio.run(_plan(app))


async def _plan(app: FastAPI) -> dict[str, Any]:
    routes: list[tuple[str, str]] = []
    canned: dict[str, tuple[int, list[tuple[str, str]], str]] = {}
    probes = {
        "missing": ([], b""),
        "refused": ([(b"authorization", b"Basic x")], b"table=%00&x"),
        "nobody": ([(b"authorization", f"Bearer {_NOBODY}".encode())], b"%ff=1"),
    }
    for route in app.routes:
        if not isinstance(route, APIRoute) or "{" in route.path:
            continue
        for method in sorted(route.methods):
            try:
                got = {k: await _call(app, method, route.path, *v) for k, v in probes.items()}
            except Exception:  # a route that fails so is the server's to answer
                continue
            if got["nobody"] != got["refused"]:
                continue
            wanted = {"missing": MISSING_TOKEN, "refused": REFUSED_TOKEN}
            if not all(got[k][0] == 401 and wanted[k] in got[k][2] for k in wanted):
                continue
            if any(canned.setdefault(k, got[k]) != got[k] for k in wanted):
                continue
            routes.append((method, route.path))
    if not routes:
        raise GateError("the application refuses no request the gate could refuse")
    return {
        "routes": routes,
        **{k: {"status": s, "headers": h, "body": b} for k, (s, h, b) in canned.items()},
    }


async def _call(
    app: FastAPI, method: str, path: str, headers: list[tuple[bytes, bytes]], query: bytes
) -> tuple[int, list[tuple[str, str]], str]:
    """(status, headers, body) of one request sent to ``app`` in process."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    sent: list[dict[str, Any]] = []
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if asked:
            return {"type": "http.disconnect"}
        asked = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    heads = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    return start["status"], heads, body.decode("latin-1")


# --- the gate's process -------------------------------------------------------------------


class GateLink:
    """The gate's process and the two socket pairs to it: connections and requests for
    the tokens in force come on ``ctrl``, lists of tokens go on ``tokens``."""

    def __init__(
        self,
        listener: socket.socket,
        plan: dict[str, Any],
        *,
        ledger: Ledger,
        read_timeout: float,
        max_connections: int,
        default_headers: list[tuple[str, str]],
        keep_alive: float,
    ) -> None:
        self.ledger = ledger
        try:
            self.ctrl, theirs_ctrl = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.tokens, theirs_tokens = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as err:  # (no SEQPACKET on some systems)
            raise GateError(f"cannot start the gate: {err.strerror or err}") from None
        settings = {
            **plan,
            "listen_fd": listener.fileno(),
            "ctrl_fd": theirs_ctrl.fileno(),
            "tokens_fd": theirs_tokens.fileno(),
            "ledger": ledger.analysts_file,
            "read_timeout": read_timeout,
            "max_connections": max_connections,
            "default_headers": default_headers,
            "keep_alive": keep_alive,
            "server_pid": os.getpid(),
        }
        try:
            self.proc = subprocess.Popen(
                # -P: not the working directory first on sys.path (a h11.py there)
                [sys.executable, "-P", "-m", "dpcurator.service.gate"],
                stdin=subprocess.PIPE,
                pass_fds=(listener.fileno(), theirs_ctrl.fileno(), theirs_tokens.fileno()),
            )
        except OSError as err:
            raise GateError(f"cannot start the gate: {err}") from None
        finally:
            theirs_ctrl.close()
            theirs_tokens.close()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(settings) + "\n").encode())
            self.proc.stdin.close()
            self.ctrl.settimeout(START_TIMEOUT)
            ready = self.ctrl.recv(1)
        except OSError:
            ready = b""
        if ready != READY:
            self.stop()
            raise GateError(f"the gate did not start within {START_TIMEOUT:g} s")
        self.ctrl.setblocking(False)
        self.tokens.setblocking(False)
        self.ended: Callable[[], None] = lambda: None
        self.closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._create: Callable[[], asyncio.Protocol] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def attach(self, create_protocol: Callable[[], asyncio.Protocol]) -> None:
        """Take the gate's connections in this event loop, each made with
        ``create_protocol`` as if accepted here."""
        self._loop = asyncio.get_running_loop()
        self._create = create_protocol
        _, self._writer = await asyncio.open_connection(sock=self.tokens)
        await self._send_tokens()  # the gate's first list, before it needs one
        self._loop.add_reader(self.ctrl.fileno(), self._readable)

    def _readable(self) -> None:
        assert self._loop is not None
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(self.ctrl, _MAX_MESSAGE, _MAX_FDS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                data, fds = b"", []
                log.error("the gate's socket failed: %s", err)
            if not data:
                self._loop.remove_reader(self.ctrl.fileno())
                if not self.closing:
                    log.error("the gate ended; the server stops")
                    self.ended()
                return
            if data[:1] == HANDOFF and len(fds) == 1 and not flags & socket.MSG_TRUNC:
                self._take(fds[0], data[1:])
            else:
                for fd in fds:
                    os.close(fd)
                if data == REFRESH:
                    self._loop.create_task(self._send_tokens())

    def _take(self, fd: int, prefix: bytes) -> None:
        assert self._loop is not None and self._create is not None
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return
        create = self._create

        def protocol() -> asyncio.Protocol:
            made = create()
            made.handoff = prefix  # type: ignore[attr-defined]  # read first (http_protocol)
            return made

        task = self._loop.create_task(self._loop.connect_accepted_socket(protocol, sock))
        task.add_done_callback(_quiet)

    async def _send_tokens(self) -> None:
        try:
            got = await asyncio.to_thread(self.ledger.tokens_in_force)
        except DpCuratorError as err:  # the gate asks again (gate.ASK_AGAIN)
            log.error("cannot read the tokens in force for the gate: %s", err)
            return
        if got is None or self._writer is None:
            return
        head, tokens = got
        data = json.dumps({"head": head, "tokens": tokens}).encode()
        self._writer.write(struct.pack("!I", len(data)) + data)
        with contextlib.suppress(OSError):
            await self._writer.drain()

    def close(self) -> None:
        """Have the gate accept nothing more, and end (:meth:`stop` waits for it)."""
        self.closing = True
        with contextlib.suppress(OSError):
            self.proc.terminate()

    def stop(self) -> None:
        """End the gate and wait for it."""
        self.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for s in (self.ctrl, self.tokens):
            with contextlib.suppress(OSError):
                s.close()


def _quiet(task: asyncio.Task[Any]) -> None:
    """A connection the server could not take (its client already gone) is closed."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("a handed-over connection failed: %s", task.exception())
