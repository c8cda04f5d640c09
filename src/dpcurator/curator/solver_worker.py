"""A worker process of :mod:`dpcurator.curator.solver_processes`:
``python -m dpcurator.curator.solver_worker`` reads jobs on stdin and writes results on
stdout (pickled, through :class:`multiprocessing.connection.Connection`). A module of its
own, which nothing imports, so that running it as ``__main__`` loads it once."""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

from dpcurator.curator.solver_processes import serve


def main() -> None:
    """Its own pipe ends; stdin and stdout pointed away from them."""
    recv = Connection(os.dup(0), writable=False)
    send = Connection(os.dup(1), readable=False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    serve(recv, send)


if __name__ == "__main__":
    main()
