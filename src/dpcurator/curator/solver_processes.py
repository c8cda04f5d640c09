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
:data:`GRACE` (or, without a deadline, the solver's time limit plus :data:`SLACK`); then
the request is answered ``Undecided`` with nothing charged. The late worker is not
killed at once: on a busy machine it usually stops, at its own look at the deadline, a
moment later; its reply is read and dropped and it serves again. One that has not
replied within :data:`DRAIN` seconds is killed (and replaced on the next request), so an
overrun cannot hold a worker. Closing the curator kills the workers.

Workers are forks of one *template*, a fresh interpreter that imports the solver only
(:mod:`dpcurator.curator.solver_template`): the template takes a few tenths of a second
to start, each worker a few milliseconds, so a burst of checks after a restart has its
workers at once instead of one every half second. They start on first need, one at a
time. A request waits for a worker, within its deadline, rather than search in its own
thread: there the search would hold the interpreter lock for up to the solver's time
limit. Only the first check of a pool no one warmed runs in its request's thread, while
the template and the first worker start (``dpcurator serve`` warms its pool as it
starts: there no check ever searches in a request's thread). If no worker can start,
checks that find none search in their threads for :data:`RETRY_START` seconds, then a
worker is tried again. Neither the template nor the workers are children made by
:mod:`multiprocessing` (spawn or its fork server): those import the caller's
``__main__`` again, so a script's top-level code would run in every worker, and a script
read from stdin could start none.

Workers run at :data:`NICENESS` 10: the kernel gives a core to the server (its event loop,
the requests' threads, the group commit) whenever it wants one, and the search takes the
rest, so a flood of exact checks slows other checks, not every request. Measured
(benchmarks/stall.py, 2 cores, four runs each): under the flood a malformed token's 401
took 3 ms at p50 and 20-55 ms at most (6-7 ms and 35-132 ms at niceness 0), the victim's
trivial count 10-14 ms at p50 (22-25 ms); of the flood's own hard requests, which mostly
end undecided at their time limit either way, 1-5 of about 28 were answered in a run (1-7
at niceness 0). (Earlier attempts failed only because a worker slow to read its
job was killed instead of drained; a job's pipe now holds the whole job.)

At most ``workers`` run; the curator's solver pool (:mod:`dpcurator.curator.solver_pool`)
already bounds how many checks run at once and shares them fairly between analysts. Which requests wait or time out depends on the
public requests and the server's load, never on the data.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Iterable
from fractions import Fraction
from multiprocessing.connection import Connection

from dpcurator import deadlines
from dpcurator.curator.overlap_filter import Loss, max_loss, quick_loss
from dpcurator.curator.solver_template import (
    Template,
    WorkerProcess,
    close_quietly,
    forking_available,
    spawn_worker,
    writable,
)
from dpcurator.curator.table_index import Charge
from dpcurator.curator.turns import away
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

#: Seconds a late worker (see :meth:`SolverProcesses._drain`) has to reply before it is
#: killed.
DRAIN = 2.0
#: Seconds a starting worker has to say it is ready before it is given up.
START_TIMEOUT = 60.0
#: Seconds after a worker failed to start before one is tried again (meanwhile a check
#: that finds no worker searches in its own thread, as without workers).
RETRY_START = 30.0
#: The workers' niceness (Unix's ``nice``): the search takes the cores the server's
#: threads leave (see the module docstring).
NICENESS = 10

_log = logging.getLogger(__name__)

#: A job's frame on the pipe to a worker: its length, then the pickled job.
_FRAME = struct.Struct("!Q")


def _read_exactly(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        got = os.read(fd, min(left, 1 << 20))
        if not got:
            raise EOFError
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def serve(jobs: int, send: Connection) -> None:
    """A worker: say it is ready, then compute the jobs read from the file descriptor
    ``jobs`` until it closes (or, as it starts, until its server is gone: a server
    stopped while this worker imported the solver, as a warmed one can be)."""
    try:
        send.send(("ready", os.getpid()))
    except (OSError, ValueError):
        return
    while True:
        try:
            (n,) = _FRAME.unpack(_read_exactly(jobs, _FRAME.size))
            job = pickle.loads(_read_exactly(jobs, n))
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
            send.send(reply)
        except (OSError, ValueError):
            return


#: The most bytes a job's pipe is widened to hold (Linux; at most
#: /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_BYTES = 1 << 20


def _widen(fd: int, need: int) -> None:
    """Let the pipe ``fd`` hold ``need`` bytes (up to :data:`PIPE_BYTES`), so that a job
    is handed over whole, without waiting for the worker to read it: on a busy machine a
    worker may not run for a while, and a request whose job is half written when its
    deadline passes must kill the worker (a pipe with half a frame in it cannot be used
    again), where one whose job was written whole only waits for it to finish.

    Only as wide as a job needs, when it needs it: the kernel counts every pipe's buffer
    against its user (/proc/sys/fs/pipe-user-pages-soft, 64 MiB by default), and past
    that gives that user's new pipes two pages each, this server's and every other
    program's. Where the size cannot be set (another system, a limit reached), the job
    is written as the worker reads it, as before."""
    try:
        import fcntl  # not on Windows

        if need > fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ):  # type: ignore[attr-defined]
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(need, PIPE_BYTES))  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


class _Worker:
    """One worker process and the server's ends of its two pipes."""

    def __init__(
        self, process: WorkerProcess | subprocess.Popen[bytes], jobs: int, recv: Connection
    ) -> None:
        self.process = process
        #: where jobs are written, without blocking (see :meth:`give`)
        self.jobs = jobs
        os.set_blocking(self.jobs, False)
        self.recv = recv
        # a curator dropped without close(): its workers read end-of-file and end
        self._close_jobs = weakref.finalize(self, close_quietly, jobs)

    def ready(self, until: float, closed: threading.Event) -> bool:
        """Whether it said it is ready before ``until`` (a point of the monotonic clock)."""
        try:
            while not self.recv.poll(POLL):
                if closed.is_set() or time.monotonic() >= until:
                    return False
            return bool(self.recv.recv() == ("ready", self.process.pid))
        except (EOFError, OSError):
            return False

    def give(self, job: object, until: float) -> bool:
        """Write ``job`` to the worker; False if the pipe did not take all of it by
        ``until`` (a point of the monotonic clock): a worker that stopped reading (hung,
        stopped, swapped out) cannot hold a request past its deadline. A job half
        written leaves the pipe unusable: the caller kills the worker."""
        data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_FRAME.pack(len(data)) + data)
        _widen(self.jobs, len(view))
        while view:
            left = until - time.monotonic()
            if left <= 0:
                return False
            if writable(self.jobs, min(left, POLL)):
                with contextlib.suppress(BlockingIOError):
                    view = view[os.write(self.jobs, view) :]
        return True

    def kill(self) -> None:
        self._close_jobs()
        with contextlib.suppress(Exception):
            self.recv.close()
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.wait(1.0)


class SolverProcesses:
    """At most ``workers`` processes that compute :func:`max_loss` for the filter."""

    def __init__(self, workers: int = 4) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise InvalidParameter(f"workers must be an integer in [1, 64], got {workers!r}")
        self.workers = workers
        #: grids of at most this many cells stay in the request's thread
        self.local_cells = LOCAL_CELLS
        self._free: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._draining: set[_Worker] = set()  # late: their reply is awaited, then discarded
        self._starting = False
        self._wanted = 0  # workers asked for by :meth:`start` or :meth:`warm`
        # a worker has been ready: from then on a check waits for one (see _take)
        self._ready_once = False
        # a worker could not start: until then, a check with no worker searches in its thread
        self._failed_until = -math.inf
        self._closed = threading.Event()
        self._cond = threading.Condition()
        self._template: Template | None = None  # started with the first worker
        self._forking = forking_available()  # else each worker spawned on its own

    def _failing(self) -> bool:
        """Whether a worker failed to start less than :data:`RETRY_START` s ago."""
        return time.monotonic() < self._failed_until

    def _count(self) -> int:
        """Workers ready or busy. Under ``self._cond``. A worker draining a late reply
        does not count: it holds no request, and must not keep one from a worker (at
        most ``workers`` more processes exist while some drain)."""
        return len(self._free) + len(self._busy)

    @property
    def running(self) -> int:
        """How many workers are running (free, busy, or draining a late reply)."""
        with self._cond:
            return self._count()

    def start(self, timeout: float = START_TIMEOUT) -> int:
        """Start every worker now and wait (at most ``timeout`` seconds) until they are
        ready; how many are. For a server that wants its workers before its load, and
        for tests."""
        until = time.monotonic() + timeout
        with self._cond:
            self._wanted = self.workers
            self._start_next()
            while self._count() < self.workers and not (self._failing() or self._closed.is_set()):
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._count()

    def warm(self) -> None:
        """Start the template and one worker in the background now, without waiting
        for them: a server's first exact check then waits for its worker (the template's
        few tenths of a second) rather than search in the request's thread (see
        :meth:`_take`)."""
        with self._cond:
            self._wanted = max(self._wanted, 1)
            self._start_next()

    def _start_next(self) -> None:
        """Start one more worker in the background, unless one is starting already, the
        bound is reached, or workers cannot start here. Under ``self._cond``."""
        if (
            self._starting
            or self._failing()
            or self._closed.is_set()
            or self._count() >= self.workers
        ):
            return
        self._starting = True
        threading.Thread(target=self._start_one, name="dpc-solver-start", daemon=True).start()

    def _template_ready(self) -> Template | None:
        """The template, started (again, if it died) and ready; None if it cannot be.
        Only in the thread that starts workers (one at a time)."""
        if self._template is not None and self._template.alive():
            return self._template
        if self._template is not None:
            self._template.kill()
        if self._closed.is_set():
            return None
        self._template = template = Template()
        if not self._closed.is_set() and template.ready(
            time.monotonic() + START_TIMEOUT, self._closed
        ):
            return template
        template.kill()  # not ready in time, or close() may have missed it
        return None

    def _new_worker(self) -> _Worker | None:
        """A new worker: forked from the template (from a new template if this one did
        not fork it: it died, or hung, since it was last seen), or spawned on its own
        where templates cannot be used."""
        if not self._forking:
            return _Worker(*spawn_worker())
        for _ in range(2):
            template = self._template_ready()
            if template is None:
                return None
            forked = template.fork(self._closed)
            if forked is not None:
                return _Worker(*forked)
            template.kill()
        return None

    def _start_one(self) -> None:
        worker: _Worker | None = None
        try:
            worker = self._new_worker()
            ok = worker is not None and worker.ready(time.monotonic() + START_TIMEOUT, self._closed)
        except Exception:
            ok = False
        with self._cond:
            self._starting = False
            if ok and worker is not None and not self._closed.is_set():
                self._free.append(worker)
                self._ready_once = True
                if self._wanted > self._count():
                    self._start_next()
                worker = None
            elif not self._closed.is_set():
                self._failed_until = time.monotonic() + RETRY_START
                _log.warning(
                    "a solver worker process could not start; exact checks that find no "
                    "worker run in the requests' threads for %g s, then a worker is tried "
                    "again",
                    RETRY_START,
                )
            self._cond.notify_all()
        if worker is not None:
            worker.kill()

    def _take(self, deadline: Deadline) -> _Worker | None:
        """A free worker, waiting for one (started if the bound allows) until the
        deadline; None (compute in this thread) if workers cannot start here, or for the
        first check of a pool no one warmed (:meth:`warm`, :meth:`start`) while its first
        worker starts (a one-off check from the command line need not wait for an
        interpreter to import the solver). Otherwise waiting is better than computing
        here, also while every worker drains a late reply: a search in this thread holds
        the interpreter lock every other request needs for up to the solver's time
        limit, and the next worker is a fork away. Under
        benchmarks/stall.py's flood many checks overrun their deadline and their workers
        drain: a profile of the server (py-spy, 15 s at 200 Hz, samples of the thread
        holding the lock) found such searches in the requests' threads in 301 of the 821
        samples; with waiting, in none, and the lock was held in 231 samples in all."""
        with self._cond:
            while True:
                if self._closed.is_set():
                    raise Undecided("the curator is shutting down; nothing was charged")
                while self._free:
                    worker = self._free.pop()
                    if worker.process.poll() is not None:  # died idle (killed, OOM)
                        worker.kill()
                        continue
                    self._busy.add(worker)
                    return worker
                if self._failing() and not self._busy and not self._draining:
                    return None
                self._start_next()
                if not (self._busy or self._draining or self._ready_once or self._wanted):
                    return None  # a lazy pool's first check, while its first worker starts
                left = deadline.left()
                if left <= 0:
                    raise deadline.error()
                self._cond.wait(None if math.isinf(left) else left)

    def _give(self, worker: _Worker) -> None:
        """Back to the free workers (from a request, or from draining)."""
        with self._cond:
            self._busy.discard(worker)
            self._draining.discard(worker)
            if self._closed.is_set():
                worker.kill()
            else:
                self._free.append(worker)
            self._cond.notify_all()

    def _lost(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            self._busy.discard(worker)
            self._draining.discard(worker)
            self._cond.notify_all()

    def _drain(self, worker: _Worker) -> None:
        """A worker whose request gave up on it (past the deadline and :data:`GRACE`):
        it stops at its own next look at the deadline, usually a moment later on a busy
        machine. Its reply is read and dropped, and it serves again; one that has not
        replied within :data:`DRAIN` seconds, or died, is killed."""
        with self._cond:
            self._busy.discard(worker)
            self._draining.add(worker)

        def drain() -> None:
            try:
                late = worker.recv.poll(DRAIN) and worker.recv.recv() is not None
            except (EOFError, OSError):
                late = False
            if late:
                self._give(worker)
            else:
                self._lost(worker)

        threading.Thread(target=drain, name="dpc-solver-drain", daemon=True).start()

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
        with away():  # waiting for a worker needs no turn
            worker = self._take(deadline)
        if worker is None:  # no worker can start here: as without them, in this thread
            return max_loss(charges, within, time_limit=time_limit, at_most=at_most)
        with away():  # nor does waiting for its answer
            return self._solve(worker, deadline, stop, (charges, within, time_limit, at_most))

    def _solve(
        self,
        worker: _Worker,
        deadline: Deadline,
        stop: threading.Event | None,
        task: tuple[list[Charge], Query | BooleanQuery | None, float, Fraction | None],
    ) -> Loss:
        """Hand ``task`` to ``worker`` and wait for its answer within ``deadline``."""
        charges, within, time_limit, at_most = task
        done = late = False
        wait = deadline.left() + GRACE if deadline.at != math.inf else time_limit + SLACK
        until = time.monotonic() + wait
        overdue = (
            deadline.error()
            if deadline.at != math.inf
            else Undecided(f"the exact check did not finish within {wait:g} s; nothing was charged")
        )
        try:
            job = (charges, within, time_limit, at_most, deadline.at, deadline.seconds)
            if not worker.give(job, until):
                raise overdue  # the worker did not read it: killed below
            while not worker.recv.poll(min(POLL, max(0.0, until - time.monotonic()))):
                if stop is not None and stop.is_set():
                    raise Undecided("the curator is shutting down; nothing was charged")
                if time.monotonic() >= until:
                    late = True
                    raise overdue
            ok, value = worker.recv.recv()
            done = True
        except (EOFError, OSError, BrokenPipeError):
            raise Undecided(
                "the exact check's worker process stopped; nothing was charged"
            ) from None
        finally:
            if done:
                self._give(worker)
            elif late:
                self._drain(worker)
            else:
                self._lost(worker)
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def close(self) -> None:
        """Kill every worker (computations in flight end as undecided)."""
        with self._cond:
            self._closed.set()
            every, self._free = [*self._free, *self._busy, *self._draining], []
            template, self._template = self._template, None
            self._cond.notify_all()
        for w in every:
            w.kill()
        if template is not None:  # after its children: while it runs, none is a zombie
            template.kill()
