"""Counting boolean queries: a union of disjoint boxes counts as the sum of its boxes.

A backend counts conjunctions (boxes) natively; a
:class:`~dpcurator.queries.boolean.BooleanQuery` covers pairwise-disjoint boxes, so its
count (or clipped sum) is exactly the sum over its boxes: no row is in two of them.
Backends call :func:`expand` first and :func:`fold` after, and so stay exact for any
predicate. Nothing about the object is trusted: its boxes are checked to be
conjunctions of this schema, and pairwise disjoint.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from dpcurator.errors import InvalidParameter, QueryError
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.boxes import MAX_BOXES
from dpcurator.queries.predicates import Query, disjoint


def boxes(q: object) -> tuple[Query, ...]:
    """The disjoint boxes of a boolean query, checked."""
    if not isinstance(q, BooleanQuery):
        raise InvalidParameter(f"expected a Query, got {type(q).__name__}")
    parts = q.boxes
    if not isinstance(parts, tuple) or not all(isinstance(b, Query) for b in parts):
        raise QueryError("a boolean query's boxes must be Query objects")
    if len(parts) > MAX_BOXES:
        raise QueryError(f"a boolean query has at most {MAX_BOXES} boxes")
    for a, b in itertools.combinations(parts, 2):
        if not disjoint(a, b):
            raise QueryError("a boolean query's boxes must be pairwise disjoint")
    return parts


def expand(queries: Sequence[object]) -> tuple[list[object], np.ndarray | None]:
    """(the boxes to count, the query each belongs to), or (queries, None) when every
    query is already a box."""
    if all(not isinstance(q, BooleanQuery) for q in queries):
        return list(queries), None
    flat: list[object] = []
    owner: list[int] = []
    for i, q in enumerate(queries):
        parts = boxes(q) if isinstance(q, BooleanQuery) else (q,)
        flat.extend(parts)
        owner.extend([i] * len(parts))
    return flat, np.asarray(owner, dtype=np.int64)


def fold(counts: np.ndarray, owner: np.ndarray | None, n: int) -> np.ndarray:
    """Each query's count: the sum of its boxes' counts (exact int64)."""
    if owner is None:
        return counts
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, owner, np.asarray(counts, dtype=np.int64))
    return out
