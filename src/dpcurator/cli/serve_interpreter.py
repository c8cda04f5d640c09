"""The interpreter settings of ``dpcurator serve``: how long a thread keeps the
interpreter lock, and how the cyclic garbage collector is kept from stalling requests.

Why. The server's threads are few and mostly waiting (on the disk, DuckDB, a solver
worker), but each request needs the interpreter lock a few times, and every thread
stops while the collector runs. Measured under benchmarks/stall.py (2 cores):

* Python's default slice is 5 ms: a request that wakes stands behind a thread parsing a
  batch of 2,000 queries for a whole slice at each step. At 1 ms the slowest trivial
  count and the slowest 401 of the flood roughly halved.
* A full collection walks every object the collector tracks. With the start-up heap
  (modules, the filter rebuilt from the ledger) in it, one took 0.12-0.14 s; and as the
  filter grows, each charge's query adds objects that are never garbage: at 20,000
  charges a full collection took 0.13 s and found nothing. :func:`gc.freeze` moves the
  objects alive at that moment out of the collector's way for good.

The policy: freeze once at start (after a full collection), and again whenever a full
collection has taken longer than :data:`SLOW_COLLECTION` seconds (its survivors were all
just found alive; a frozen object is still freed when its last reference goes, only a
cycle among frozen objects that later becomes garbage is never collected: the objects of
the few requests in flight at that moment, at most). The next full collections then walk
only what came after, and stay short.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

#: Seconds a thread holds the interpreter lock before another waiting for it gets it.
SWITCH_INTERVAL = 0.001
#: A full collection longer than this freezes its survivors (see the module docstring).
SLOW_COLLECTION = 0.02
#: Seconds between the freezer's looks at whether a collection was slow.
FREEZER_PERIOD = 1.0


class _Freezer:
    """Times full collections (a :data:`gc.callbacks` entry) and freezes, from a thread
    of its own, after a slow one (not inside the collector's callback)."""

    def __init__(self) -> None:
        self._started = 0.0
        self.slow = threading.Event()
        self.freezes = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif time.perf_counter() - self._started > SLOW_COLLECTION:
            self.slow.set()

    def run(self) -> None:
        while True:
            self.slow.wait()
            self.slow.clear()
            gc.freeze()
            self.freezes += 1
            time.sleep(FREEZER_PERIOD)  # at most one freeze a period


_freezer: _Freezer | None = None


def tune() -> None:
    """Apply the settings (once per process; a second call changes nothing)."""
    global _freezer
    sys.setswitchinterval(SWITCH_INTERVAL)
    if _freezer is not None:
        return
    gc.collect()
    gc.freeze()
    _freezer = _Freezer()
    gc.callbacks.append(_freezer)
    threading.Thread(target=_freezer.run, name="dpc-gc-freezer", daemon=True).start()
