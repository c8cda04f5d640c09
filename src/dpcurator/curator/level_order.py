"""The charges' hulls in order of level, so that the largest level among the charges
whose hulls meet a query is found without looking at most of them.

The filter's quick bound on a query's loss is the largest level among the charges whose
per-attribute hulls meet the query's (see :mod:`dpcurator.curator.overlap_filter`). A
vector pass over every charge finds it in O(history) per query: 10^4 queries of a batch
against 10^6 charges would take minutes. Sorted by level, the charges are scanned from
the top in chunks, and the scan stops at the first chunk whose highest level is at most
the best found: when the query meets some high charge (the common case, since high
levels are where charges pile up), a few chunks decide it, whatever the history. A
query that meets no charge still scans them all (vectorised, as before).

Levels are only ever lowered, never raised, so a level recorded when the order was
built is at least the charge's current one: the stop rule stays sound, and the value
returned is read from the current levels. Charges added since the build are a tail,
scanned whole on every query; the order is rebuilt once the tail passes :data:`TAIL`
charges (a sort: about 0.1 s at 10^6 charges, once per 4,096 charges), and an order
built by one fork of the filter serves the filter and its later forks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Charges per step of the scan from the top.
CHUNK = 1024
#: The most charges since the last build (the tail, scanned whole) before a rebuild.
TAIL = 4096

Box = Sequence[tuple[int, int, int]]  # (attribute index, lo, hi) of a query's hull


@dataclass(frozen=True)
class LevelOrder:
    """The first ``count`` charges sorted by level, highest first: their positions,
    their levels when sorted (each at least the current one), and their hulls, stored
    contiguously in that order. Never written after it is built, so snapshots of the
    filter share it freely."""

    count: int
    positions: np.ndarray
    levels: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @staticmethod
    def build(lo: np.ndarray, hi: np.ndarray, level: np.ndarray, count: int) -> LevelOrder:
        # One copy of the levels, sorted and recorded: another thread may lower a level
        # of the shared array meanwhile, and reading it twice could leave the recorded
        # levels out of order (the stop rule would then skip a higher chunk). Every
        # copied level is at least its later values, which is all the scan needs.
        levels = level[:count].copy()
        order = np.argsort(-levels, kind="stable")
        return LevelOrder(count, order, levels[order], lo[order], hi[order])

    def stale(self, n: int) -> bool:
        """Whether the filter, now at ``n`` charges, should rebuild this order."""
        return self.count > n or n - self.count > TAIL

    def top_meeting(self, box: Box, level: np.ndarray, best: float) -> float:
        """The largest current ``level`` among these charges whose hulls meet ``box``,
        or ``best`` if that is larger (or none meets it)."""
        for start in range(0, self.count, CHUNK):
            if self.levels[start] <= best:
                break  # no charge from here on can beat it
            stop = start + CHUNK
            mask = meeting(self.lo[start:stop], self.hi[start:stop], box)
            if mask.any():
                best = max(best, float(level[self.positions[start:stop][mask]].max()))
        return best


def meeting(lo: np.ndarray, hi: np.ndarray, box: Box) -> np.ndarray:
    """Which of these hulls are non-empty and meet ``box`` on every attribute it names."""
    mask = hi[:, 0] > lo[:, 0]
    for j, qlo, qhi in box:
        mask &= (lo[:, j] < qhi) & (hi[:, j] > qlo)
    return mask
