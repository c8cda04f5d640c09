"""The domain a strategy works on: each attribute cut into the pieces the workload sees.

A workload's queries constrain a few attributes; on each one their coverages cut the
values into *atoms*, values that every query treats alike (the same membership in every
coverage). A count over the original domain that a query asks is a sum of counts of
atom cells (one atom per constrained attribute), so measuring and reconstructing on the
atom domain loses nothing and never touches the full domain (Adult's seven attributes
have 2.3 million points; the atoms of its 1-2-way marginals are the same, but a
``histogram(age, bins=...)`` cuts age into its bins only).

Two cuts: ``merge=True`` groups values by membership signature (fewest atoms; an atom
may be a union of intervals), for marginal strategies; ``merge=False`` keeps every
*segment* (maximal interval between coverage boundaries) apart, so the pieces stay in
order, for range strategies (trees need neighbours).

Pure: queries in, arrays out.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.queries import Query
from dpcurator.queries.predicates import IntervalSet, normalize

#: The most pieces (atoms or segments) an attribute may be cut into for a strategy.
MAX_PIECES = 100_000


@dataclass(frozen=True)
class AtomDomain:
    """The constrained attributes (schema order), each cut into pieces, and every
    workload box as per-attribute 0/1 vectors over those pieces.

    ``boxes[q]`` lists query q's disjoint boxes; a box is a tuple with, per attribute,
    the index of its coverage in ``coverages[attribute]`` or -1 (unconstrained), and
    ``members[attribute][k]`` is the 0/1 vector of coverage k over the pieces.
    """

    names: tuple[str, ...]
    pieces: tuple[tuple[IntervalSet, ...], ...]
    members: tuple[np.ndarray, ...]  # per attribute: (coverages x pieces) bool
    boxes: tuple[tuple[tuple[int, ...], ...], ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(p) for p in self.pieces)

    @property
    def d(self) -> int:
        return len(self.names)

    def vector(self, attr: int, cov: int) -> np.ndarray:
        """Coverage ``cov`` of attribute ``attr`` as a 0/1 float vector (-1: all ones)."""
        if cov < 0:
            return np.ones(len(self.pieces[attr]))
        return self.members[attr][cov].astype(float)


def atom_domain(queries: Sequence[Query], *, merge: bool = True) -> AtomDomain:
    """Cut every constrained attribute of ``queries`` into pieces (see the module doc).

    Empty queries have no boxes (their count is exactly 0). Raises
    :class:`InvalidParameter` when an attribute would have more than
    :data:`MAX_PIECES` pieces."""
    qs = list(queries)
    live = [q for q in qs if not q.is_empty]
    if not live:
        return AtomDomain((), (), (), tuple(() for _ in qs))
    schema = live[0].schema
    names = sorted({n for q in live for b in q.boxes for n in b.attributes}, key=schema.index)
    pieces: list[tuple[IntervalSet, ...]] = []
    members: list[np.ndarray] = []
    cov_index: list[dict[IntervalSet, int]] = []
    for name in names:
        covs: dict[IntervalSet, int] = {}
        for q in live:
            for b in q.boxes:
                if name in b.attributes:
                    covs.setdefault(b.coverage(name), len(covs))
        size = schema.attribute(name).size
        p, m = _cut(size, list(covs), merge)
        pieces.append(p)
        members.append(m)
        cov_index.append(covs)
    boxes = []
    for q in qs:
        out = []
        for b in q.boxes:
            attrs = set(b.attributes)
            out.append(
                tuple(
                    cov_index[j][b.coverage(n)] if n in attrs else -1 for j, n in enumerate(names)
                )
            )
        boxes.append(tuple(out))
    return AtomDomain(tuple(names), tuple(pieces), tuple(members), tuple(boxes))


def _cut(
    size: int, covs: list[IntervalSet], merge: bool
) -> tuple[tuple[IntervalSet, ...], np.ndarray]:
    """Pieces of ``[0, size)`` and the (coverages x pieces) membership."""
    ends = {0, size}
    for c in covs:
        for s, e in c:
            ends.add(s)
            ends.add(e)
    breaks = np.array(sorted(ends), np.int64)
    starts = breaks[:-1]
    if len(starts) > MAX_PIECES * 4:
        raise InvalidParameter(
            f"the workload cuts an attribute into {len(starts):,} pieces, more than a "
            "strategy handles"
        )
    member = np.zeros((len(covs), len(starts)), bool)
    for k, c in enumerate(covs):
        for s, e in c:
            member[k, np.searchsorted(starts, s) : np.searchsorted(starts, e)] = True
    if not merge:
        if len(starts) > MAX_PIECES:
            raise InvalidParameter(
                f"the workload cuts an attribute into {len(starts):,} segments, more than "
                f"{MAX_PIECES:,}"
            )
        segs = tuple(((int(s), int(e)),) for s, e in itertools.pairwise(breaks))
        return segs, member
    _, first, inverse = np.unique(member.T, axis=0, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    order = np.argsort(first)  # atoms in the order of their first value
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    atom_of = rank[inverse]
    n = len(order)
    if n > MAX_PIECES:
        raise InvalidParameter(
            f"the workload cuts an attribute into {n:,} atoms, more than {MAX_PIECES:,}"
        )
    groups: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for i, a in enumerate(atom_of):
        groups[int(a)].append((int(breaks[i]), int(breaks[i + 1])))
    atoms = tuple(normalize(g) for g in groups)
    out = np.zeros((len(covs), n), bool)
    out[:, atom_of] = member
    return atoms, out
