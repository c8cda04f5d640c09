"""Solver workers forked from a template interpreter.

Why. A worker is an interpreter that has imported the solver (numpy, scipy's sparse
graphs, the overlap search): 0.4-0.5 s of a core to start on an idle machine, more on a
busy one. Started one at a time as checks needed them, the fourth worker of a server
that had just started came seconds after the first check; a trivial count that needed
one small exact check (the worst point of another table, 20 ms of search) waited behind
a flood's checks for a worker to exist, and under a loaded machine past its deadline.
So a server starts one *template*: a fresh interpreter (never a fork of the server, and
never running the caller's ``__main__``: a script without a main guard runs once) that
imports the solver and then only forks. Each worker is a fork of it: a few milliseconds,
the solver's pages shared.

The template is single-threaded (the BLAS and OpenMP libraries are told to start no
threads, so that a fork copies a whole, consistent process, and a worker takes one core)
and runs at the workers' niceness, which its children inherit. It reads fork requests on
a Unix socket, each carrying the two pipe ends a worker needs (``SCM_RIGHTS``), forks,
and answers the child's pid with a pidfd of it, opened before the child can be reaped,
so the server signals the process it means and never another that took its pid. It
reaps its children, and ends when the socket closes: the server closed, or died.

Where pidfds or descriptor passing are missing (not Linux 5.3+, or a sandbox refusing
``pidfd_open``), each worker is a fresh interpreter of its own, a child of the server
(:func:`spawn_worker`), as before templates.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any

#: Seconds between looks at the curator's stop event while waiting for the template.
POLL = 0.05
#: Seconds the template has to fork a worker (it takes milliseconds): past them it is
#: taken for stopped or hung, killed, and a new one started.
FORK_TIMEOUT = 5.0
#: Seconds the template has to end once its socket is closed before it is killed.
END_TIMEOUT = 1.0
#: What the template's interpreter (or a spawned worker's) runs: the parent's import path
#: (a source checkout, a path added at run time), then the worker module.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from dpcurator.curator.solver_worker import main; main(sys.argv[2])"
)
#: The template's reply to a fork request: the child's pid (0: it could not fork), with
#: a pidfd of the child.
PID = struct.Struct("!q")
#: Said once by the template when it has imported the solver.
READY = b"ready"
#: The environment variables that make numerical libraries start no threads.
SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def forking_available() -> bool:
    """Whether workers can be forks of a template here: pidfds that this process may
    open (Linux 5.3+, not refused by a sandbox) and Unix sockets of packets that pass
    descriptors."""
    if not (
        hasattr(os, "pidfd_open")
        and hasattr(signal, "pidfd_send_signal")
        and hasattr(socket, "send_fds")
        and hasattr(socket, "SOCK_SEQPACKET")
    ):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:
        return False
    a.close()
    b.close()
    return True


def readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` is readable (or closed at the other end) within ``timeout``
    seconds. ``poll``, not ``select``: a busy server's descriptors pass 1024, which
    ``select`` cannot watch."""
    return _ready(fd, select.POLLIN, timeout)


def writable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` takes a write (or is closed at the other end) within ``timeout``
    seconds (see :func:`readable`)."""
    return _ready(fd, select.POLLOUT, timeout)


def _ready(fd: int, events: int, timeout: float) -> bool:
    p = select.poll()
    p.register(fd, events)
    return bool(p.poll(max(0, math.ceil(timeout * 1000))))


def _command(mode: str) -> list[str]:
    return [sys.executable, "-c", _BOOT, json.dumps(sys.path), mode]


def _spawn(mode: str, **streams: Any) -> subprocess.Popen[bytes]:
    """A fresh interpreter running the worker module in ``mode``, single-threaded."""
    env = {**os.environ, **dict.fromkeys(SINGLE_THREADED, "1")}
    return subprocess.Popen(_command(mode), close_fds=True, env=env, **streams)


def close_quietly(fd: int) -> None:
    """Close ``fd``, whatever state it is in (a finalizer's, or a kill's)."""
    with contextlib.suppress(OSError):
        os.close(fd)


class WorkerProcess:
    """A forked worker as the server holds it, by a pidfd, with the part of
    :class:`subprocess.Popen`'s interface the pool uses: ``pid``, ``poll``, ``wait``,
    ``kill``. Its exit status went to the template: once it has ended, ``poll`` and
    ``wait`` give -1."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd  # closed once the process has ended (or when this is dropped)
        self._close = weakref.finalize(self, close_quietly, pidfd)
        self._lock = threading.Lock()

    def _ended(self, timeout: float) -> bool:
        with self._lock:
            if self.returncode is None and readable(self._pidfd, timeout):
                # Ours to reap only if the template died first and this process is the
                # orphans' reaper (PID 1 of a container, a subreaper); else the template's.
                with contextlib.suppress(ChildProcessError, OSError, AttributeError):
                    os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)
                self._close()
                self.returncode = -1
            return self.returncode is not None

    def poll(self) -> int | None:
        """None while it runs, else -1."""
        return self.returncode if self._ended(0) else None

    def wait(self, timeout: float) -> int:
        """-1 once it has ended; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"solver worker {self.pid}", timeout)
        return -1

    def kill(self) -> None:
        with self._lock, contextlib.suppress(ProcessLookupError):
            if self.returncode is None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class Template:
    """The template interpreter (see the module docstring), started at construction."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = _spawn("template", stdin=theirs.fileno(), stdout=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours

    def _receive(self, until: float, closed: threading.Event) -> tuple[bytes, list[int]] | None:
        """The template's next message and the descriptors it carries, or None (it
        ended, ``until`` passed, or the curator closed)."""
        while True:
            left = until - time.monotonic()
            if left <= 0 or closed.is_set():
                return None
            if readable(self._control.fileno(), min(left, POLL)):
                try:
                    message, fds, _, _ = socket.recv_fds(self._control, 64, 1)
                except OSError:
                    return None
                if message:
                    return message, fds
                for fd in fds:
                    os.close(fd)
                return None

    def ready(self, until: float, closed: threading.Event) -> bool:
        """Whether it said it is ready before ``until`` (a point of the monotonic clock)."""
        got = self._receive(until, closed)
        if got is not None:
            for fd in got[1]:
                os.close(fd)
        return got is not None and got[0] == READY

    def fork(self, closed: threading.Event) -> tuple[WorkerProcess, int, Connection] | None:
        """A new worker: its process, the pipe end its jobs are written to, and the
        connection its replies are read from; None if the template did not fork one
        within :data:`FORK_TIMEOUT` (the caller then kills it)."""
        jobs_read, jobs_write = os.pipe()
        replies_read, replies_write = os.pipe()
        try:
            socket.send_fds(self._control, [b"fork"], [jobs_read, replies_write])
            reply = self._receive(time.monotonic() + FORK_TIMEOUT, closed)
        except OSError:
            reply = None
        finally:
            os.close(jobs_read)
            os.close(replies_write)
        message, fds = reply if reply is not None else (b"", [])
        pid = PID.unpack(message)[0] if len(message) == PID.size else 0
        if pid <= 0 or len(fds) != 1:
            for fd in (jobs_write, replies_read, *fds):
                os.close(fd)
            return None
        process = WorkerProcess(pid, fds[0])
        return process, jobs_write, Connection(replies_read, writable=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Close its socket: it reaps the workers that have ended and ends; killed if it
        has not within :data:`END_TIMEOUT` (stopped, hung)."""
        with contextlib.suppress(OSError):
            self._control.close()
        try:
            self.process.wait(END_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(Exception):
                self.process.kill()
                self.process.wait(1.0)


def spawn_worker() -> tuple[subprocess.Popen[bytes], int, Connection]:
    """A worker that is a fresh interpreter of its own, where templates cannot be used:
    its process, the pipe end its jobs are written to, the connection its replies are
    read from."""
    process = _spawn("worker", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    jobs = os.dup(process.stdin.fileno())
    replies = Connection(os.dup(process.stdout.fileno()), writable=False)
    process.stdin.close()
    process.stdout.close()
    return process, jobs, replies
