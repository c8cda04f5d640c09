"""Atoms: the values of one attribute that the queries cannot tell apart.

On each attribute the queries' coverages cut the values into *atoms* (values with the
same membership signature); a point of the domain only matters through one atom per
attribute, so every other strategy works on atoms, never on the domain. An atom whose
covering set is a subset of another's is dropped (dominance): with non-negative weights
choosing the larger one is never worse, whatever the other attributes take.

When it decides alone: a component with one attribute, whose optimum is its best atom
(:func:`best_atom`). Exact. Cost: O(c log c) for c distinct coverage intervals, plus the
dominance check, O(atoms^2 x coverages / 64), skipped when that would exceed ~4e9.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator.queries.predicates import IntervalSet


@dataclass
class Attr:
    """One attribute of a component: its atoms and who covers them."""

    qidx: np.ndarray  # local indices of the queries that constrain it
    cover: np.ndarray  # bool (atoms, len(qidx)): atom a is covered by query qidx[k]
    pos: np.ndarray  # a representative value position per atom


def atoms(
    size: int,
    covs: Sequence[IntervalSet],
    qidx: np.ndarray,
    cid: np.ndarray | None = None,
) -> Attr:
    """Cut ``[0, size)`` into atoms by the membership signature of ``covs``.

    With ``cid``, ``covs`` are the *distinct* coverages and query ``qidx[k]`` has
    coverage ``covs[cid[k]]``: atoms and dominance are computed on the (few) distinct
    coverages and expanded to the queries at the end.
    """
    if covs and all(len(c) == 1 for c in covs):
        member, breaks, first = _interval_membership(size, covs)
    else:
        member, breaks, first = _membership(size, covs)
    cover = member[:, first].T.copy()
    keep = undominated(cover)
    cover, first = cover[keep], first[keep]
    if cid is not None:
        cover = cover[:, cid]
    return Attr(qidx, cover, breaks[first])


def _interval_membership(
    size: int, covs: Sequence[IntervalSet]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coverages x segments membership, segment starts, every segment) for one interval
    per coverage."""
    iv = np.asarray([c[0] for c in covs], np.int64)
    breaks = np.unique(np.concatenate([iv.ravel(), [0, size]]))
    seg = breaks[:-1]
    member = (iv[:, :1] <= seg[None, :]) & (seg[None, :] < iv[:, 1:])
    return member, breaks, np.arange(len(seg))


def _membership(
    size: int, covs: Sequence[IntervalSet]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coverages x segments membership, segment starts, one segment per distinct
    signature) for any coverages, by a difference array over the segments."""
    ends = [size, 0]
    rows, starts, stops = [], [], []
    for row, cov in enumerate(covs):
        for s, e in cov:
            ends.append(s)
            ends.append(e)
            rows.append(row)
            starts.append(s)
            stops.append(e)
    breaks = np.unique(np.asarray(ends, dtype=np.int64))
    nseg = len(breaks) - 1
    width = nseg + 1
    if rows:
        r = np.asarray(rows, np.int64) * width
        cells = len(covs) * width
        diff = np.bincount(r + np.searchsorted(breaks, starts), minlength=cells) - np.bincount(
            r + np.searchsorted(breaks, stops), minlength=cells
        )
        diff = diff.reshape(len(covs), width)
    else:
        diff = np.zeros((len(covs), width), np.int64)
    member = np.cumsum(diff, axis=1)[:, :nseg] > 0  # (coverages, segments)
    packed = np.packbits(member, axis=0).T.copy()  # one row of bytes per segment
    if not packed.size:
        return member, breaks, np.zeros(1, dtype=np.int64)
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return member, breaks, first


def subsets(rows: np.ndarray) -> np.ndarray:
    """``sub[a, b]``: row a (a set, as booleans) is a subset of row b, a != b.

    Bit-packed, without BLAS (a threaded matrix product is erratic on a busy machine).
    """
    n, m = rows.shape
    if n * n * m <= 1 << 20:
        sub = ~(rows[:, None, :] & ~rows[None, :, :]).any(axis=2)
        np.fill_diagonal(sub, False)
        return sub
    words = -(-m // 64)
    packed = np.zeros((n, words * 8), np.uint8)
    packed[:, : -(-m // 8)] = np.packbits(rows, axis=1)
    bits = packed.view(np.uint64)
    sub = np.empty((n, n), bool)
    for a in range(n):
        sub[a] = ~(bits[a][None, :] & ~bits).any(axis=1)
    np.fill_diagonal(sub, False)
    return sub


def undominated(cover: np.ndarray) -> np.ndarray:
    """Mask of the atoms (rows) whose covering set is no strict subset of another's:
    choosing the larger one is never worse, whatever the other attributes take (weights
    are non-negative). Everything is kept when the check would be too costly."""
    n, m = cover.shape
    keep = np.ones(n, bool)
    if n <= 1 or n * n * max(m, 1) > 4e9:
        return keep
    sub = subsets(cover)  # sub[a, b]: a is a subset of b
    return ~(sub & ~sub.T).any(axis=1)


def best_atom(at: Attr, w: np.ndarray, alive: np.ndarray) -> tuple[float, int]:
    """(weight, atom) of the best atom of one attribute for the alive queries (local
    weights ``w``): exact when no other attribute is in play."""
    wq = np.where(alive[at.qidx], w[at.qidx], 0.0)
    scores = np.where(at.cover, wq[None, :], 0.0).sum(axis=1)
    best = int(np.argmax(scores))
    return float(scores[best]), best
