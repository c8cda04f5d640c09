"""A SELECT's answer as a table (:class:`SqlResult`): what the curator, the HTTP service
and the client all give back. No SQL parser is needed to read one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SqlResult"]


@dataclass(frozen=True)
class SqlResult:
    """A SELECT's answer: ``columns`` and ``rows`` (one per group, group columns first,
    then each aggregate's value, low and high end), what it cost, what is left.

    ``to_pandas()`` and ``to_arrow()`` give the same table as a DataFrame or an Arrow
    table."""

    query: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    cost: float
    currency: str
    remaining: float | None
    charge_id: int | None = None
    remaining_exact: bool = True
    explain: bool = False
    #: An EXPLAIN's: whether the SELECT would be admitted now.
    admitted: bool | None = None

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([list(r) for r in self.rows], columns=list(self.columns))

    def to_arrow(self) -> Any:
        import pyarrow as pa

        return pa.Table.from_pylist([dict(zip(self.columns, r, strict=True)) for r in self.rows])

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the HTTP service answers with."""
        return {
            "query": self.query,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "cost": self.cost,
            "currency": self.currency,
            "remaining": self.remaining,
            "remaining_exact": self.remaining_exact,
            "charge_id": self.charge_id,
            "explain": self.explain,
            "admitted": self.admitted,
        }
