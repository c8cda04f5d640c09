"""Who may run an exact maximum-overlap computation, and for how long.

Most requests are decided by the levels' bounds in microseconds. The rest need the
exact computation, which may take seconds of pure-Python work; run in the request's own
thread, a few analysts sending such requests would occupy every worker and, through the
interpreter lock, slow everyone else. So the exact computations go through a pool:

* at most ``workers`` of them run at once, server-wide, and at most ``per_analyst`` of
  one analyst's (fair sharing: a flood from a few analysts waits in their own queue);
* each runs in a worker thread under the request's deadline
  (:mod:`dpcurator.deadlines`), and the request waits for it only until that deadline
  plus :data:`GRACE`: past it the request is answered ``Undecided`` (nothing charged)
  even if the computation overruns; the worker stops at its next check of the deadline
  and only then frees its slot, so an overrun cannot pile up work.

A request whose turn does not come before its deadline is ``Undecided`` too. Which
requests wait depends on the public requests and the server's load, never on the data.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from dpcurator import deadlines
from dpcurator.curator.turns import away
from dpcurator.deadlines import Deadline
from dpcurator.errors import InvalidParameter, Undecided

T = TypeVar("T")

#: Seconds a request waits for its computation past its deadline before it gives up.
GRACE = 0.1


class SolverPool:
    """Runs exact computations with bounded concurrency, per analyst and in all."""

    def __init__(self, workers: int = 4, per_analyst: int = 1) -> None:
        for name, v in (("workers", workers), ("per_analyst", per_analyst)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 64:
                raise InvalidParameter(f"{name} must be an integer in [1, 64], got {v!r}")
        self.workers = workers
        self.per_analyst = per_analyst
        self._slots = threading.BoundedSemaphore(workers)
        self._mine: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="solver")

    def _analyst_slot(self, analyst: str) -> threading.BoundedSemaphore:
        with self._lock:
            sem = self._mine.get(analyst)
            if sem is None:
                sem = self._mine[analyst] = threading.BoundedSemaphore(self.per_analyst)
            return sem

    def run(self, work: Callable[[], T], analyst: str | None, deadline: Deadline) -> T:
        """``work()`` in a worker thread under ``deadline``; its result, or its error.

        Raises :class:`~dpcurator.errors.Undecided` when no slot frees up before the
        deadline, or when the work has not finished by the deadline plus :data:`GRACE`.
        """
        with away():  # waiting for a slot, then for the result, needs no turn
            return self._run(work, analyst, deadline)

    def _run(self, work: Callable[[], T], analyst: str | None, deadline: Deadline) -> T:
        held: list[threading.BoundedSemaphore] = []
        try:
            for sem in ((self._analyst_slot(analyst),) if analyst else ()) + (self._slots,):
                if not sem.acquire(timeout=_timeout(deadline.left())):
                    raise Undecided(
                        f"the request could not be decided within its time limit of "
                        f"{deadline.seconds:g} s: other requests' exact checks held the "
                        "solver; nothing was charged"
                    )
                held.append(sem)
            future: Future[T] = self._executor.submit(_under, deadline, deadlines.stopper(), work)
        except BaseException:
            for sem in held:
                sem.release()
            raise
        future.add_done_callback(lambda _: [sem.release() for sem in held])
        try:
            return future.result(timeout=_timeout(deadline.left() + GRACE))
        except FutureTimeout:
            raise deadline.error() from None

    def close(self) -> None:
        """Stop taking work; computations in flight finish at their deadlines."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _timeout(seconds: float) -> float | None:
    return None if seconds == float("inf") else seconds


def _under(deadline: Deadline, stop: threading.Event | None, work: Callable[[], T]) -> T:
    with deadlines.within(deadline, stop):
        return work()
