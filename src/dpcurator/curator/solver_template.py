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
a Unix socket, each carrying the two pipe ends a worker needs (``SCM_RIGHTS``), forks, and
answers the child's pid; the kernel reaps its children (``SIGCHLD`` ignored). It ends
when the socket closes: the server closed, or died. The server holds each worker by a
pidfd (Linux 5.3 and later; elsewhere by its pid), so that it signals the process it
means even after the template has reaped it.
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
from multiprocessing.connection import Connection

#: Seconds between looks at the curator's stop event while waiting for the template.
POLL = 0.05
#: What the template's interpreter runs: the parent's import path (a source checkout, a
#: path added at run time), then the worker module's template loop.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from dpcurator.curator.solver_worker import main; main()"
)
#: The template's reply to a fork request: the child's pid.
PID = struct.Struct("!q")
#: Said once by the template when it has imported the solver.
READY = b"ready"
#: The environment variables that make numerical libraries start no threads.
SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


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


class WorkerProcess:
    """A forked worker as the server holds it, with the part of
    :class:`subprocess.Popen`'s interface the pool uses: ``pid``, ``poll``, ``wait``,
    ``kill``. Its exit status went to the template: once it has ended, ``poll`` and
    ``wait`` give -1."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # the pidfd is closed once the process has ended
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # not Linux 5.3+: by pid
            self._pidfd = None

    def _ended(self, timeout: float) -> bool:
        with self._lock:
            return self._ended_locked(timeout)

    def _ended_locked(self, timeout: float) -> bool:
        if self.returncode is not None:
            return True
        if self._pidfd is not None:
            ended = readable(self._pidfd, timeout)
        else:
            until = time.monotonic() + timeout
            while True:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    ended = True
                    break
                except OSError:
                    ended = False
                    break
                if time.monotonic() >= until:
                    ended = False
                    break
                time.sleep(min(0.01, max(0.0, until - time.monotonic())))
        if ended:
            self.returncode = -1
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return ended

    def poll(self) -> int | None:
        """None while it runs, else -1."""
        return self.returncode if self._ended(0) else None

    def wait(self, timeout: float) -> int:
        """-1 once it has ended; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"solver worker {self.pid}", timeout)
        return -1

    def send_signal(self, sig: int) -> None:
        with self._lock, contextlib.suppress(ProcessLookupError):
            if self.returncode is not None:
                return
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """The template interpreter (see the module docstring), started at construction."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env.update(dict.fromkeys(SINGLE_THREADED, "1"))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(sys.path)],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                close_fds=True,
                env=env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours

    def _receive(self, until: float, closed: threading.Event) -> bytes | None:
        """The template's next message, or None (it ended, ``until`` passed, or the
        curator closed)."""
        while True:
            left = until - time.monotonic()
            if left <= 0 or closed.is_set():
                return None
            if readable(self._control.fileno(), min(left, POLL)):
                try:
                    return self._control.recv(64) or None
                except OSError:
                    return None

    def ready(self, until: float, closed: threading.Event) -> bool:
        """Whether it said it is ready before ``until`` (a point of the monotonic clock)."""
        return self._receive(until, closed) == READY

    def fork(
        self, until: float, closed: threading.Event
    ) -> tuple[WorkerProcess, int, Connection] | None:
        """A new worker: its process, the pipe end its jobs are written to, and the
        connection its replies are read from; None if the template did not fork one."""
        jobs_read, jobs_write = os.pipe()
        replies_read, replies_write = os.pipe()
        try:
            socket.send_fds(self._control, [b"fork"], [jobs_read, replies_write])
            reply = self._receive(until, closed)
        except OSError:
            reply = None
        finally:
            os.close(jobs_read)
            os.close(replies_write)
        if reply is None or len(reply) != PID.size:
            os.close(jobs_write)
            os.close(replies_read)
            return None
        (pid,) = PID.unpack(reply)
        return WorkerProcess(pid), jobs_write, Connection(replies_read, writable=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Close its socket (it ends at once) and kill it."""
        with contextlib.suppress(OSError):
            self._control.close()
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.wait(1.0)
