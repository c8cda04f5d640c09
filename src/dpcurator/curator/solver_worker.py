"""A worker process of :mod:`dpcurator.curator.solver_processes`: it reads jobs on its
stdin (each its length, then the pickled job) and writes results on its stdout (pickled,
through :class:`multiprocessing.connection.Connection`). A module of its own, which nothing in
the server imports, so that a worker loads the solver and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
from multiprocessing.connection import Connection

from dpcurator.curator.solver_processes import serve

#: How much lower a worker's scheduling priority is than its server's. A search is
#: seconds of CPU and may wait; a trivial count, the event loop and the refusal of a bad
#: token are milliseconds each and should not: on two cores four searching workers at
#: the server's priority left it a third of the CPU, and a victim's count waited a second.
NICENESS = 10


def main() -> None:
    """Its own pipe ends; stdin and stdout pointed away from them; a lower priority than
    the server's (:data:`NICENESS`); Ctrl-C meant for the
    server (the terminal sends it to the whole process group) left to the server, which
    kills its workers when it closes. A worker whose server died reads end-of-file and
    ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # a search yields the cores to the server's requests
        os.nice(NICENESS)
    jobs = os.dup(0)
    send = Connection(os.dup(1), readable=False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    serve(jobs, send)
