"""Turns: at most a few request threads run the curator's Python at once.

Why. The interpreter lock lets one thread run Python at a time, whatever the cores. When
sixteen requests run the curator's Python together, every point where one of them lets
the lock go (each SQLite statement, each DuckDB call, each file write) hands it to
another, and a handover to a sleeping thread is a context switch: measured under sixteen
HTTP clients, 230-270 context switches per count, and a quarter of the server's CPU
time in the kernel switching threads. Worse, the group commit's writer (the one thread
that every other request waits for, see :mod:`dpcurator.curator.group_commit`) stood in
that queue at each of its ~30 statements and file writes: 20-28 ms to write a group whose
work takes 2 ms alone. A request therefore takes a *turn* to run the curator's Python
(:data:`TURNS` at once, first come first served), and gives it up while it does not
need the interpreter lock:

* while it counts (the backend's engine runs without the lock) and while it waits for
  the solver's workers or for its group's commit, see :func:`away`;
* the group's writer writes without a turn, so it competes with at most :data:`TURNS`
  threads and the event loop instead of every request in flight.

A turn is a courtesy, not a lock: a request that has waited :data:`PATIENCE` seconds
for one goes on without it (as every request did before turns existed), so a request
that holds its turn for long (a large batch being parsed, an exact check in its own
thread) delays the others by at most that much, and no wait can deadlock. Which
requests wait depends on the public requests and the server's load, never on the data.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from dpcurator.errors import InvalidParameter

#: How many requests run the curator's Python at once. The interpreter lock runs one
#: at a time anyway; a second keeps the lock busy while the first lets it go briefly.
TURNS = 2
#: Seconds a request waits for a turn before it goes on without one.
PATIENCE = 0.025

_local = threading.local()


class Turns:
    """Turns for the requests of one curator (see the module docstring)."""

    def __init__(self, turns: int = TURNS, patience: float = PATIENCE) -> None:
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise InvalidParameter(f"turns must be an integer of at least 1, got {turns!r}")
        if not patience > 0:
            raise InvalidParameter(f"patience must be positive seconds, got {patience!r}")
        self.turns = turns
        self.patience = patience
        self._lock = threading.Lock()
        self._free = turns
        self._waiting: deque[threading.Event] = deque()

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Run the block in a turn (a request nested in another keeps the outer one's)."""
        if getattr(_local, "turns", None) is not None:
            yield
            return
        _local.turns, _local.held = self, self._take()
        try:
            yield
        finally:
            if _local.held:
                self._give()
            _local.turns, _local.held = None, False

    def _take(self) -> bool:
        """A turn (True), or False once :attr:`patience` has passed without one."""
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return True
            handed = threading.Event()
            self._waiting.append(handed)
        if handed.wait(self.patience):
            return True
        with self._lock:  # a turn handed over just now is ours; else leave the line
            if handed.is_set():
                return True
            self._waiting.remove(handed)
            return False

    def _give(self) -> None:
        """Hand the turn to the first in line, or put it back."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1

    @property
    def waiting(self) -> int:
        """Requests waiting for a turn now (for tests and diagnostics)."""
        return len(self._waiting)


@contextmanager
def away() -> Iterator[None]:
    """Give up this thread's turn for the block (it needs no interpreter lock, or waits
    for another thread), and take one again after it; nothing outside a turn, or inside
    another such block."""
    turns: Turns | None = getattr(_local, "turns", None)
    if turns is None or getattr(_local, "away", False):
        yield
        return
    if _local.held:
        turns._give()
        _local.held = False
    _local.away = True
    try:
        yield
    finally:
        _local.away = False
        _local.held = turns._take()


def holding() -> bool:
    """Whether this thread holds a turn now."""
    return bool(getattr(_local, "held", False))
