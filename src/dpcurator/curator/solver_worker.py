"""A worker process of :mod:`dpcurator.curator.solver_processes`: it reads jobs on its
stdin (each its length, then the pickled job) and writes results on its stdout (pickled,
through :class:`multiprocessing.connection.Connection`). A module of its own, which nothing in
the server imports, so that a worker loads the solver and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
from multiprocessing.connection import Connection

from dpcurator.curator.solver_processes import NICENESS, serve


def main() -> None:
    """Its own pipe ends; stdin and stdout pointed away from them; Ctrl-C meant for the
    server (the terminal sends it to the whole process group) left to the server, which
    kills its workers when it closes. A worker whose server died reads end-of-file and
    ends. It runs at :data:`~dpcurator.curator.solver_processes.NICENESS`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # (a platform without priorities: as it is)
        os.nice(NICENESS)
    jobs = os.dup(0)
    send = Connection(os.dup(1), readable=False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    serve(jobs, send)
