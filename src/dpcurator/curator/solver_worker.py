"""The template of :mod:`dpcurator.curator.solver_template` and the workers it forks (or
a worker spawned on its own, where templates cannot be used).

The template imports the solver, says it is ready, and forks a worker for each request
read on its socket (its stdin); a worker reads jobs on one pipe (each its length, then
the pickled job) and writes results on the other (pickled, through
:class:`multiprocessing.connection.Connection`), see
:func:`dpcurator.curator.solver_processes.serve`. A module of its own, which nothing in
the server imports, so that the template loads the solver and nothing else."""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import socket
import time
from multiprocessing.connection import Connection

from dpcurator.curator.solver_processes import NICENESS, serve
from dpcurator.curator.solver_template import PID, READY

#: Milliseconds between the template's looks for children to reap.
REAP_EVERY = 1000
#: Seconds an ending template waits for its workers to end, to reap them (an orphan
#: would be left to a PID 1 that may never reap it, in a container).
LAST_REAP = 5.0


def main(mode: str) -> None:
    """``mode`` "template" (stdin is the template's socket) or "worker" (stdin and stdout
    are a spawned worker's pipes). Ctrl-C meant for the server (the terminal sends it to
    the whole process group) is left to the server, which kills its workers and the
    template when it closes; stdin and stdout are pointed away. Both run at
    :data:`~dpcurator.curator.solver_processes.NICENESS`, and end when the server closes
    their socket or pipe (or dies)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # (a platform without priorities: as it is)
        os.nice(NICENESS)
    first, second = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    if mode == "worker":
        serve(first, Connection(second, readable=False))
    else:
        os.close(second)
        template(socket.socket(fileno=first))


def reap(until: float = -math.inf) -> None:
    """Reap every child that has ended; with ``until`` (a point of the monotonic clock),
    also those that end before it."""
    with contextlib.suppress(ChildProcessError):
        while True:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
            if time.monotonic() >= until:
                return
            time.sleep(0.01)


def template(control: socket.socket) -> None:
    """Fork a worker for each request on ``control`` (its two pipe ends), and answer its
    pid and a pidfd of it, opened before the child can be reaped (so that the pidfd is
    this child's even if it died at once); reap the children that ended."""
    try:
        control.send(READY)
    except OSError:  # the server stopped while this imported the solver
        return
    watch = select.poll()
    watch.register(control.fileno(), select.POLLIN)
    while True:
        reap()
        if not watch.poll(REAP_EVERY):
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 2)
        except OSError:
            message, fds = b"", []
        if not message or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            # the server closed its end (or sent what it never sends): its workers end
            # too, killed before (see Template.kill) or at the end of their pipes
            reap(until=time.monotonic() + LAST_REAP)
            return
        pid = os.fork()
        if pid == 0:  # the worker: never back into this loop
            code = 0
            try:
                control.close()
                serve(fds[0], Connection(fds[1], readable=False))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            os.kill(pid, signal.SIGKILL)  # not reaped yet: still this child
            reply, passed = PID.pack(0), []
        else:
            reply, passed = PID.pack(pid), [pidfd]
        try:
            socket.send_fds(control, [reply], passed)
        except OSError:
            return
        finally:
            for fd in passed:
                os.close(fd)
