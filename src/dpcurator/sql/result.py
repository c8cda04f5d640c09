"""A SELECT's answer as a table (:class:`SqlResult`): what the curator, the HTTP service
and the client all give back. No SQL parser is needed to read one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
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
        """The answer as a DataFrame, each column typed by what it holds (see
        :func:`_column_type`): counts int64; a column of numbers with a fraction or a
        null (a mean, a percentile and its interval's ends) float64 with NaN; a boolean
        group with a null pandas' nullable ``boolean``; text (categories, times) as
        given."""
        import pandas as pd

        data = {}
        for j, name in enumerate(self.columns):
            values = [r[j] for r in self.rows]
            kind = _column_type(values)
            if kind == "float64":
                values = [math.nan if v is None else float(v) for v in values]
            data[name] = pd.Series(values, dtype=kind, name=name)
        return pd.DataFrame(data, columns=list(self.columns))

    def to_arrow(self) -> Any:
        """The answer as an Arrow table, typed as :meth:`to_pandas` (a missing number:
        null)."""
        import pyarrow as pa

        arrays = []
        for j in range(len(self.columns)):
            values = [r[j] for r in self.rows]
            kind = _column_type(values)
            typed = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
                     "boolean": pa.bool_()}.get(kind or "")  # fmt: skip
            if kind == "float64":
                values = [None if v is None else float(v) for v in values]
            elif kind is None and _huge_integers(values):  # exact, as 38 decimal digits
                values = [None if v is None else Decimal(v) for v in values]
                typed = pa.decimal128(38, 0)
            arrays.append(pa.array(values, type=typed))
        return pa.Table.from_arrays(arrays, names=list(self.columns))

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


def _column_type(values: list[Any]) -> str | None:
    """A column's dtype: ``int64`` for integers only, ``float64`` for numbers with a
    fraction or a null (and for a column of nulls only: a percentile's interval, which
    no released value fills), ``boolean`` for booleans with a null, else None (pandas
    infers: booleans, text)."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present) and present:
        return "boolean" if len(present) < len(values) else "bool"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        if present and len(present) == len(values) and all(isinstance(v, int) for v in present):
            return "int64" if all(-(2**63) <= v < 2**63 for v in present) else None
        return "float64"
    return None


def _huge_integers(values: list[Any]) -> bool:
    """Integers some of which int64 cannot hold, all within Arrow's 38-digit decimal."""
    present = [v for v in values if v is not None]
    return bool(present) and all(
        isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10**38 for v in present
    )
