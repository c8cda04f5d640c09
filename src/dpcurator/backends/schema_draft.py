"""A first schema read from the data, for the custodian to review (``schema draft``).

A domain read from the data is not public: its bounds reveal the extremes and its
values reveal which rare values occur. The draft therefore rounds integer bounds
outward (to two significant digits of the larger magnitude) and lists, column by
column, what came from the data, so that the custodian replaces it by a public domain
before releasing anything. The values are read as the loader reads them
(CSV fields as text, ``trim(CAST(column AS VARCHAR))``), so that the draft loads the
file it was read from (but for fractional numbers, which it says need rescaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from dpcurator.backends._sql import ident
from dpcurator.backends._validation import WHITESPACE, first_line
from dpcurator.errors import DataError

#: A categorical with more values than this is probably an identifier or free text.
MANY_VALUES = 50
#: Values seen in fewer rows than this are "rare": publishing them reveals them.
RARE_ROWS = 5
#: The texts the loader reads as missing by default (besides NULL and a float NaN).
MISSING_TOKENS = ("", "?", "NA")
_INT_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
              "UINTEGER", "UBIGINT"}  # fmt: skip
_NUMBER_TYPES = {"FLOAT", "DOUBLE", "REAL", "DECIMAL"}
_TIME_TYPES = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")


@dataclass
class Column:
    """One column's proposal: its attribute (None when left out) and what to review."""

    name: str
    attribute: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def round_out(lo: int, hi: int) -> tuple[int, int]:
    """``[lo, hi]`` widened to multiples of a power of ten: two significant digits of the
    larger magnitude (``[1, 2359]`` becomes ``[0, 2400]``), so that the exact extremes
    are not published."""
    top = max(abs(lo), abs(hi))
    step = 10 ** max(0, len(str(top)) - 2)
    return (lo // step) * step, -((-hi) // step) * step


def _relation(con: duckdb.DuckDBPyConnection, data: str, separator: str) -> str:
    path = Path(data)
    if not path.is_file():
        raise DataError(f"{data}: no such file")
    lit = str(path).replace("'", "''")
    if path.suffix.lower() in (".parquet", ".pq"):
        return f"read_parquet('{lit}')"
    sep = separator.replace("'", "''")
    return f"read_csv('{lit}', delim='{sep}', header=true, all_varchar=true)"


def draft(data: str, *, separator: str = ",") -> list[Column]:
    """Each column's proposed attribute and notes (CSV with a header, or Parquet)."""
    con = duckdb.connect()
    try:
        src = _relation(con, data, separator)
        try:
            con.execute(f"CREATE TEMP TABLE t AS SELECT * FROM {src}")
        except duckdb.Error as err:
            raise DataError(f"{data}: cannot read: {first_line(str(err))}") from None
        cols = [(str(r[0]), str(r[1]).upper()) for r in con.execute("DESCRIBE t").fetchall()]
        return [_column(con, name, kind) for name, kind in cols]
    finally:
        con.close()


def _column(con: duckdb.DuckDBPyConnection, name: str, kind: str) -> Column:
    col = ident(name)
    base = kind.split("(")[0]
    if base.startswith(_TIME_TYPES):
        return Column(name, None, [f"{kind.lower()} column: not supported yet, left out"])
    nan = f" OR isnan(CAST({col} AS DOUBLE))" if base in _NUMBER_TYPES - {"DECIMAL"} else ""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE c AS SELECT trim(CAST({col} AS VARCHAR), ?) AS v, "
        f"({col} IS NULL{nan}) AS m FROM t",
        [WHITESPACE],
    )
    con.execute("UPDATE c SET m = true WHERE v IN (SELECT unnest(?::VARCHAR[]))",
                [list(MISSING_TOKENS)])  # fmt: skip
    n_rows, n_missing = con.execute("SELECT count(*), count(*) FILTER (WHERE m) FROM c").fetchall()[
        0
    ]
    if n_missing == n_rows:
        return Column(name, None, ["every value is missing: left out"])
    if (
        base == "VARCHAR"
        and not con.execute(
            "SELECT count(*) FROM c WHERE NOT m AND TRY_CAST(v AS TIMESTAMP) IS NULL"
        ).fetchall()[0][0]
    ):
        return Column(name, None, ["dates or times: not supported yet, left out"])
    notes: list[str] = []
    attr: dict[str, Any]
    numeric = base in _INT_TYPES or base in _NUMBER_TYPES
    if not numeric and base != "BOOLEAN":
        # CSV fields are text (as the loader reads them): numbers are recognised here
        not_number = con.execute(
            "SELECT count(*) FROM c WHERE NOT m AND TRY_CAST(v AS DOUBLE) IS NULL"
        ).fetchall()[0][0]
        numeric = not_number == 0
    if numeric:
        lo, hi, fractional = con.execute(
            "SELECT min(d), max(d), count(*) FILTER (WHERE d <> floor(d)) FROM "
            "(SELECT TRY_CAST(v AS DOUBLE) AS d FROM c WHERE NOT m) WHERE isfinite(d)"
        ).fetchall()[0]
        if lo is None:
            return Column(name, None, ["no finite number in the column: left out"])
        low, high = round_out(math.floor(lo), math.ceil(hi))
        attr = {"name": name, "type": "integer", "min": low, "max": high}
        notes.append(
            f"bounds [{low}, {high}] read from the data (rounded outward): they reveal the "
            "order of magnitude of its extremes; prefer public bounds"
        )
        if fractional:
            notes.append(
                f"{fractional:,} values have a fraction: only integers load; rescale the "
                "column (e.g. times 10) or leave it out"
            )
        elif base in _NUMBER_TYPES:
            notes.append("written as floats (517.0): they load as integers")
    else:
        rows = con.execute("SELECT v, count(*) FROM c WHERE NOT m GROUP BY v ORDER BY v").fetchall()
        values = [str(r[0]) for r in rows]
        attr = {"name": name, "type": "categorical", "values": values}
        rare = [v for v, n in rows if n < RARE_ROWS]
        notes.append(f"{len(values):,} values read from the data; prefer a public list")
        if rare:
            shown = ", ".join(repr(v) for v in rare[:10]) + (" ..." if len(rare) > 10 else "")
            notes.append(
                f"{len(rare):,} values occur in fewer than {RARE_ROWS} rows ({shown}): "
                "publishing them reveals that they occur"
            )
        if len(values) > MANY_VALUES:
            notes.append(
                f"more than {MANY_VALUES} values, written inline (the schema has no values "
                "file); an identifier or free text does not belong in a schema"
            )
    if n_missing:
        marker = next(m for m in ("NA", "?", "<missing>") if m not in attr.get("values", ()))
        attr["missing"] = marker
        notes.append(f"{n_missing:,} rows missing: blank and NULL cells load as {marker!r}")
    return Column(name, attr, notes)
