"""A request's time limit, seen by every loop the request runs, without a parameter.

One request of the curator (parse, boolean algebra, bounds, the exact maximum-overlap
computation, noise preparation) runs under one deadline. Threading a ``deadline``
argument through every pure function that may take long would touch the whole query
algebra, so the deadline lives in a :class:`contextvars.ContextVar`: :func:`within`
sets it for a block (per thread, and per task), and long loops call :func:`check`, which
raises :class:`~dpcurator.errors.Undecided` once it has passed. Reading the clock is the
only thing this module does; nothing here reads data, so a time-out reveals nothing
about it (it depends on the public request and the server's load).
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dpcurator.errors import Undecided


@dataclass(frozen=True)
class Deadline:
    """A point in ``time.monotonic()`` time, and the limit it came from (for messages)."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """The deadline ``seconds`` from now (None: never)."""
        if seconds is None or math.isinf(seconds):
            return NEVER
        return cls(time.monotonic() + seconds, float(seconds))

    def left(self) -> float:
        """Seconds until the deadline (0 once passed; inf if none)."""
        return max(0.0, self.at - time.monotonic()) if self.at != math.inf else math.inf

    @property
    def passed(self) -> bool:
        return time.monotonic() > self.at

    def error(self) -> Undecided:
        return Undecided(
            f"the request could not be decided within its time limit of {self.seconds:g} s; "
            "nothing was charged"
        )


NEVER = Deadline(math.inf, math.inf)

#: The current deadline, and an event that stops the work at once (a server shutting
#: down), if any.
_CURRENT: contextvars.ContextVar[tuple[Deadline, threading.Event | None]] = contextvars.ContextVar(
    "deadline", default=(NEVER, None)
)


def current() -> Deadline:
    """The deadline of the request this code runs for (:data:`NEVER` outside one)."""
    return _CURRENT.get()[0]


def check() -> None:
    """Raise :class:`~dpcurator.errors.Undecided` if the current deadline has passed,
    or the work was stopped."""
    d, stop = _CURRENT.get()
    if d.at != math.inf and time.monotonic() > d.at:
        raise d.error()
    if stop is not None and stop.is_set():
        raise Undecided("the curator is shutting down; nothing was charged")


@contextmanager
def within(deadline: Deadline, stop: threading.Event | None = None) -> Iterator[Deadline]:
    """Run the block under ``deadline``, or under the current one if it is earlier, and
    stop it (at its next :func:`check`) once ``stop`` is set."""
    outer, outer_stop = _CURRENT.get()
    token = _CURRENT.set((deadline if deadline.at < outer.at else outer, stop or outer_stop))
    try:
        yield _CURRENT.get()[0]
    finally:
        _CURRENT.reset(token)


def stopper() -> threading.Event | None:
    """The current stop event (to hand the work to another thread)."""
    return _CURRENT.get()[1]
