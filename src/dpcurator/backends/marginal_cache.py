"""Dense contingency arrays (marginals) of the attribute sets a table is asked about often.

A curator answers many analysts over one table that does not change while it is
loaded, and their counts mostly constrain the same few attribute sets (age x week,
region x sex, ...). A lone count pushed down to SQL scans the whole table (about 1 ms
of CPU at 10^5 rows, with DuckDB's fixed cost per statement); the marginal of its
attribute set, once built by one ``GROUP BY`` scan, answers every later count on that
set with a few look-ups in its summed-area table (microseconds), exactly.

When to build is the ski-rental rule: a ``GROUP BY`` scan costs about as much as
``after`` lone counts, so a set's marginal is built once the set has been asked more
than ``after`` times; the work spent on counts that could have used it is then at most
what the scan cost, whatever the order of the queries. Marginals are kept within a total
of ``cells`` cells (each holds the array and its summed-area table, 16 bytes a cell),
the least recently used dropped first. What is kept depends only on which attribute
sets were asked, never on the data (the arrays' sizes are the public domain sizes).

The cache is only correct while the table does not change: a backend uses it only on a
connection it owns (its table is written once, at load).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from dpcurator.backends._contract import contract, prefix_sums
from dpcurator.queries.predicates import IntervalSet

#: Cells kept in all of one table's marginals together (about 32 MiB with their
#: summed-area tables).
CACHE_CELLS = 1 << 21
#: Attribute sets whose asks are remembered; past it the tally starts again (a bound on
#: memory whatever the queries: only asks made since are counted towards a build).
_TALLIED_SETS = 4096


class Marginal:
    """One attribute set's dense counts and their summed-area table (both read-only)."""

    __slots__ = ("dense", "psum")

    def __init__(self, dense: np.ndarray) -> None:
        self.dense = dense
        self.psum = prefix_sums(dense)
        self.dense.flags.writeable = False
        self.psum.flags.writeable = False

    @property
    def cells(self) -> int:
        return int(self.dense.size)

    def counts(self, coverages: Sequence[Sequence[IntervalSet]]) -> np.ndarray:
        """Exact counts of queries constraining exactly this set (coverages in its order)."""
        return contract(self.dense, coverages, psum=self.psum)


class MarginalCache:
    """Thread-safe: counts on several threads look up, tally and add at once. A marginal
    built by two threads at the same time is kept once (both are the same numbers)."""

    def __init__(self, *, cells: int = CACHE_CELLS, after: int) -> None:
        self._cells = cells
        self._after = after
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[int, ...], Marginal] = OrderedDict()
        self._used = 0
        self._asked: dict[tuple[int, ...], int] = {}

    def get(self, key: tuple[int, ...]) -> Marginal | None:
        """The marginal of ``key`` if kept (then it becomes the most recently used)."""
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None:
                self._kept.move_to_end(key)
            return hit

    def due(self, key: tuple[int, ...], asked: int, cells: int) -> bool:
        """Tally ``asked`` more counts of ``key`` (whose marginal has ``cells`` cells);
        True when its marginal should now be built and kept."""
        if cells > self._cells:
            return False
        with self._lock:
            if key not in self._asked and len(self._asked) >= _TALLIED_SETS:
                self._asked.clear()
            total = self._asked.get(key, 0) + asked
            self._asked[key] = total
            return total > self._after

    def keep(self, key: tuple[int, ...], dense: np.ndarray) -> Marginal | None:
        """Keep ``dense`` as the marginal of ``key`` if it fits; the kept marginal, or
        None when it is larger than the whole cache."""
        if dense.size > self._cells:
            return None
        made = Marginal(dense)
        with self._lock:
            old = self._kept.get(key)
            if old is not None:
                self._kept.move_to_end(key)
                return old
            while self._kept and self._used + made.cells > self._cells:
                _, dropped = self._kept.popitem(last=False)
                self._used -= dropped.cells
            self._kept[key] = made
            self._used += made.cells
            self._asked.pop(key, None)
            return made

    @property
    def kept(self) -> tuple[tuple[int, ...], ...]:
        """The attribute sets whose marginals are kept, least recently used first."""
        with self._lock:
            return tuple(self._kept)
