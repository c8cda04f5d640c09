"""The exact maximum-overlap computations in worker processes.

Why. An exact check may be seconds of pure-Python search (the problem is NP-hard on
boolean queries). Run in a thread of the server, it holds the interpreter lock most of
that time, and every other request, a trivial count, the event loop reading an HTTP
request, the refusal of a bad token, waits its turn: under a flood of such checks a
victim's count took up to 2 s. In a worker process the search holds only its own
interpreter; the request's thread waits on a pipe, which releases the lock.

What crosses the pipe: the charges near the request (their queries and costs), the
region, the time limit, the threshold, and the request's deadline (a point of
``time.monotonic()``, one clock for every process of the host). The worker runs
:func:`~dpcurator.curator.overlap_filter.max_loss` under that deadline
(:mod:`dpcurator.deadlines`), so it stops at its next check once the deadline passes, and
sends back the loss or the error. The requesting thread waits until the deadline plus
:data:`GRACE` (or, without a deadline, the solver's time limit plus :data:`SLACK`); a
worker that has not answered by then is killed (and replaced on the next request), so an
overrun cannot hold a worker, and the request is answered ``Undecided`` with nothing
charged. Closing the curator kills the workers.

Workers start on first use, from a fork server that has imported the solver once (the
server's own threads are never forked). At most ``workers`` run; the curator's solver
pool (:mod:`dpcurator.curator.solver_pool`) already bounds how many checks run at once
and shares them fairly between analysts. Which requests wait or time out depends on the
public requests and the server's load, never on the data.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import threading
import time
from collections.abc import Iterable
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

from dpcurator import deadlines
from dpcurator.curator.overlap_filter import Loss, max_loss, quick_loss
from dpcurator.curator.table_index import Charge
from dpcurator.deadlines import Deadline
from dpcurator.errors import InvalidParameter, Undecided
from dpcurator.queries import Query
from dpcurator.queries.boolean import BooleanQuery

#: Seconds a request waits for its worker past its deadline before killing it.
GRACE = 0.1
#: Seconds past the solver's time limit a request without a deadline waits.
SLACK = 5.0
#: Seconds between looks at the curator's stop event while waiting.
POLL = 0.05
#: Grids of at most this many cells are computed in the request's thread (a few
#: milliseconds of vector operations, less than the trip to a worker).
LOCAL_CELLS = 50_000

_PRELOAD = ["dpcurator.curator.solver_processes"]


def _context() -> Any:
    """A fork server (the parent's threads are never forked), or spawn where there is
    none."""
    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:
        return multiprocessing.get_context("spawn")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _serve(conn: Connection) -> None:
    """A worker: compute what the pipe brings until it closes."""
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        charges, within, time_limit, at_most, at, seconds = job
        try:
            with deadlines.within(Deadline(at, seconds)):
                reply: tuple[bool, object] = (
                    True,
                    max_loss(charges, within, time_limit=time_limit, at_most=at_most),
                )
        except Exception as err:
            reply = (False, err)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), daemon=True, name="dpc-solver")
        self.process.start()
        child.close()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.join(1.0)


class SolverProcesses:
    """At most ``workers`` processes that compute :func:`max_loss` for the filter."""

    def __init__(self, workers: int = 4) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise InvalidParameter(f"workers must be an integer in [1, 64], got {workers!r}")
        self.workers = workers
        #: grids of at most this many cells stay in the request's thread
        self.local_cells = LOCAL_CELLS
        self._ctx = _context()
        self._free: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._started = 0
        self._closed = False
        self._cond = threading.Condition()

    def _take(self, deadline: Deadline) -> _Worker:
        with self._cond:
            while not self._free and self._started >= self.workers:
                if self._closed:
                    raise Undecided("the curator is shutting down; nothing was charged")
                left = deadline.left()
                if left <= 0:
                    raise deadline.error()
                self._cond.wait(None if math.isinf(left) else left)
            if self._closed:
                raise Undecided("the curator is shutting down; nothing was charged")
            if self._free:
                worker = self._free.pop()
                self._busy.add(worker)
                return worker
            self._started += 1
        try:
            worker = _Worker(self._ctx)
        except BaseException:
            self._lost(None)
            raise
        with self._cond:
            self._busy.add(worker)
        return worker

    def _give(self, worker: _Worker) -> None:
        with self._cond:
            self._busy.discard(worker)
            if self._closed:
                worker.kill()
            else:
                self._free.append(worker)
            self._cond.notify()

    def _lost(self, worker: _Worker | None) -> None:
        if worker is not None:
            worker.kill()
        with self._cond:
            self._busy.discard(worker)  # type: ignore[arg-type]
            self._started -= 1
            self._cond.notify()

    def max_loss(
        self,
        charges: Iterable[Charge],
        within: Query | BooleanQuery | None = None,
        *,
        time_limit: float,
        at_most: Fraction | None = None,
    ) -> Loss:
        """:func:`max_loss` in a worker, under the current request's deadline."""
        charges = list(charges)
        quick = quick_loss(charges, within, self.local_cells)  # not worth a trip
        if quick is not None:
            return quick
        deadline, stop = deadlines.current(), deadlines.stopper()
        worker = self._take(deadline)
        done = False
        try:
            worker.conn.send((charges, within, time_limit, at_most, deadline.at, deadline.seconds))
            wait = deadline.left() + GRACE if deadline.at != math.inf else time_limit + SLACK
            until = time.monotonic() + wait
            while not worker.conn.poll(min(POLL, max(0.0, until - time.monotonic()))):
                if stop is not None and stop.is_set():
                    raise Undecided("the curator is shutting down; nothing was charged")
                if time.monotonic() >= until:
                    raise deadline.error() if deadline.at != math.inf else Undecided(
                        f"the exact check did not finish within {wait:g} s; nothing was "
                        "charged"
                    )
            ok, value = worker.conn.recv()
            done = True
        except (EOFError, OSError, BrokenPipeError):
            raise Undecided(
                "the exact check's worker process stopped; nothing was charged"
            ) from None
        finally:
            if done:
                self._give(worker)
            else:
                self._lost(worker)
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def close(self) -> None:
        """Kill every worker (computations in flight end as undecided)."""
        with self._cond:
            self._closed = True
            every, self._free = [*self._free, *self._busy], []
            self._cond.notify_all()
        for w in every:
            w.kill()
