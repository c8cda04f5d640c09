"""The backend protocol: count rows that satisfy predicate queries, nothing else.

A backend holds the sensitive table (DESIGN.md §2). It evaluates *exact* counts and
clipped sums; it never adds noise, never sees a budget and never returns rows. The
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
        every row.
        """
        ...

    def clipped_sum(
        self,
        attribute: str,
        lower: int | float,
        upper: int | float,
        where: Query | None = None,
    ) -> float:
        """Sum of ``min(max(value, lower), upper)`` of an integer attribute over the rows
        satisfying ``where`` (all rows if ``None``)."""
        ...

    def close(self) -> None:
        """Release the data; the backend cannot be used afterwards."""
        ...
