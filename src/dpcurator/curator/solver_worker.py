"""The template of :mod:`dpcurator.curator.solver_template` and the workers it forks.

The template imports the solver, says it is ready, and forks a worker for each request
read on its socket (its stdin); a worker reads jobs on one pipe (each its length, then
the pickled job) and writes results on the other (pickled, through
:class:`multiprocessing.connection.Connection`), see
:func:`dpcurator.curator.solver_processes.serve`. A module of its own, which nothing in
the server imports, so that the template loads the solver and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from multiprocessing.connection import Connection

from dpcurator.curator.solver_processes import NICENESS, serve
from dpcurator.curator.solver_template import PID, READY


def main() -> None:
    """Ctrl-C meant for the server (the terminal sends it to the whole process group) left
    to the server, which kills its workers and the template when it closes; stdin (the
    socket) and stdout pointed away; children reaped by the kernel. The template and its
    workers run at :data:`~dpcurator.curator.solver_processes.NICENESS`. It ends when
    its socket closes (the server closed or died)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # (a platform without priorities: as it is)
        os.nice(NICENESS)
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    control.send(READY)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 2)
        except OSError:
            return
        if not message or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            return  # the server closed its end (or sent what it never sends)
        pid = os.fork()
        if pid == 0:  # the worker: never back into this loop
            code = 0
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                serve(fds[0], Connection(fds[1], readable=False))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        try:
            control.send(PID.pack(pid))
        except OSError:
            return
