"""The backend protocol: count rows that satisfy predicate queries, nothing else.

A backend holds the sensitive table. It evaluates *exact* counts, clipped sums (and,
per group, clipped sums of squares and counts per bin); it never adds noise, never sees a budget and never returns rows. The
curator is the only caller and the only place where data, noise and budget meet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from dpcurator.queries.predicates import Query
from dpcurator.queries.schema import Schema


@runtime_checkable
class Backend(Protocol):
    """What the curator needs from a data backend."""

    schema: Schema

    def counts(self, queries: Sequence[Query]) -> np.ndarray:
        """Exact counts (``int64``), one per query, in order.

        An empty query (a contradiction) counts 0; a query with no predicate counts
        every row. A query that is not over ``schema`` (its schema, a predicate's
        attribute, or a coverage that is not sorted, disjoint intervals inside the
        domain) is refused, not counted.
        """
        ...

    def clipped_sum(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: Query | None = None,
        *,
        unit: object = 1,
    ) -> int:
        """Sum of ``min(max(value, lower), upper)`` of an integer or float attribute
        over the rows satisfying ``where`` (all rows if ``None``), as an exact Python
        ``int``, counted in ``unit``: 1 for integers; for a float, a positive exact
        number (its step, or a power of ten below it) of which every value and both
        bounds are whole multiples, the bounds given in that unit.

        The bounds are integers of any size (not bools, not floats); the sum is never
        rounded, so the sensitivity ``max(|lower|, |upper|)`` the curator calibrates the
        noise to holds exactly. An empty ``where`` sums to 0.
        """
        ...

    def clipped_moments(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: Query | None = None,
        by: Sequence[str] = (),
        squares: bool = True,
        *,
        unit: object = 1,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Per group cell of ``by`` (attribute names or parts of times such as
        ``month(t)``: every combination of their groups, in :func:`itertools.product`
        order; one cell without ``by``): the number of rows satisfying ``where``, the sum
        of ``min(max(value, lower), upper)`` and, with ``squares``, the sum of its
        squares, counted in ``unit`` (see :meth:`clipped_sum`), as ``object`` arrays of
        exact Python ints."""
        ...

    def binned_counts(
        self,
        attribute: str,
        edges: Sequence[int],
        where: Query | None = None,
        by: Sequence[str] = (),
    ) -> np.ndarray:
        """Rows satisfying ``where`` per group cell of ``by`` and per half-open bin
        ``[edges[j], edges[j + 1])`` of the attribute's value positions (``value - min``
        for an integer, the index in ``values`` for a categorical): ``int64``, shape
        (cells, bins)."""
        ...

    def close(self) -> None:
        """Release the data; the backend cannot be used afterwards."""
        ...
