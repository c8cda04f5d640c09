"""A first schema read from the data, for the custodian to review (``schema draft``).

A domain read from the data is not public: its bounds reveal the extremes and its
values reveal which rare values occur. The draft therefore rounds bounds outward (to two
significant digits of the larger magnitude; times to whole years) and lists, column by
column, what came from the data, so that the custodian replaces it by a public domain
before releasing anything. The values are read as the loader reads them (CSV fields as
text, ``trim(CAST(column AS VARCHAR))``; dates, times, decimals and booleans by the
reader the loaders share), so that the draft loads the file it was read from.

Each column becomes the first type that fits every value that is not missing: boolean
(``true``/``false`` in any case), date (``YYYY-MM-DD``), timestamp (ISO 8601 times),
integer, float (a step of the decimal places nearly every value has) or categorical.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb

from dpcurator.backends._sql import ident
from dpcurator.backends._validation import WHITESPACE, first_line
from dpcurator.errors import DataError
from dpcurator.queries import values as read

#: A categorical with more values than this is probably an identifier or free text; its
#: values go to a file of their own when the schema is written to one.
MANY_VALUES = 50
#: Values seen in fewer rows than this are "rare": publishing them reveals them.
RARE_ROWS = 5
#: The texts the loader reads as missing by default (besides NULL and a float NaN).
MISSING_TOKENS = ("", "?", "NA")
#: A float's step keeps this share of the values exact (the rest are rounded on load).
EXACT_SHARE = 0.99
#: The finest step a draft proposes.
MAX_PLACES = 6
_INT_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
              "UINTEGER", "UBIGINT"}  # fmt: skip
_NUMBER_TYPES = {"FLOAT", "DOUBLE", "REAL", "DECIMAL"}
_DATE = r"\d{4}-\d{2}-\d{2}"
_INSTANT = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}.*"


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


def round_out_decimal(lo: Fraction, hi: Fraction, places: int) -> tuple[Fraction, Fraction]:
    """``[lo, hi]`` widened to multiples of a power of ten (two significant digits of the
    larger magnitude, and never finer than ``10^-places``)."""
    top = max(abs(lo), abs(hi))
    k = (math.floor(math.log10(top)) - 1) if top > 0 else -places
    unit = Fraction(10) ** max(k, -places)
    return math.floor(lo / unit) * unit, math.ceil(hi / unit) * unit


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


def _count(con: duckdb.DuckDBPyConnection, where: str, params: list[Any] | None = None) -> int:
    return int(
        con.execute(f"SELECT count(*) FROM c WHERE NOT m AND ({where})", params or []).fetchall()[
            0
        ][0]
    )


def _column(con: duckdb.DuckDBPyConnection, name: str, kind: str) -> Column:
    col = ident(name)
    base = kind.split("(")[0]
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
    present = n_rows - n_missing
    notes: list[str] = []
    attr: dict[str, Any]
    if base == "BOOLEAN" or _count(con, "lower(v) IN ('true', 'false')") == present:
        attr = {"name": name, "type": "boolean"}
    elif base == "DATE" or _count(con, "regexp_full_match(v, ?)", [_DATE]) == present:
        got = _times(con, name, date=True)
        if isinstance(got, Column):
            return got
        attr, notes = got
    elif (
        base.startswith("TIMESTAMP")
        or _count(con, "regexp_full_match(v, ?)", [_INSTANT]) == present
    ):
        got = _times(con, name, date=False)
        if isinstance(got, Column):
            return got
        attr, notes = got
    elif (
        base in _INT_TYPES
        or base in _NUMBER_TYPES
        or (_count(con, "TRY_CAST(v AS DOUBLE) IS NULL") == 0)
    ):
        got = _number(con, name, base)
        if isinstance(got, Column):
            return got
        attr, notes = got
    else:
        rows = con.execute("SELECT v, count(*) FROM c WHERE NOT m GROUP BY v ORDER BY v").fetchall()
        vals = [str(r[0]) for r in rows]
        attr = {"name": name, "type": "categorical", "values": vals}
        rare = [v for v, n in rows if n < RARE_ROWS]
        notes.append(f"{len(vals):,} values read from the data; prefer a public list")
        if rare:
            shown = ", ".join(repr(v) for v in rare[:10]) + (" ..." if len(rare) > 10 else "")
            notes.append(
                f"{len(rare):,} values occur in fewer than {RARE_ROWS} rows ({shown}): "
                "publishing them reveals that they occur"
            )
        if len(vals) > MANY_VALUES:
            notes.append(
                f"more than {MANY_VALUES} values (an identifier or free text does not belong "
                "in a schema; a long public list can live in a values file)"
            )
    if n_missing:
        marker = next(m for m in ("NA", "?", "<missing>") if m not in attr.get("values", ()))
        attr["missing"] = marker
        notes.append(f"{n_missing:,} rows missing: blank and NULL cells load as {marker!r}")
    return Column(name, attr, notes)


def _number(
    con: duckdb.DuckDBPyConnection, name: str, base: str
) -> tuple[dict[str, Any], list[str]] | Column:
    """An integer, or a float with the step nearly every value is written to."""
    lo, hi = con.execute(
        "SELECT min(d), max(d) FROM (SELECT TRY_CAST(v AS DOUBLE) AS d FROM c WHERE NOT m) "
        "WHERE isfinite(d)"
    ).fetchall()[0]
    if lo is None:
        return Column(name, None, ["no finite number in the column: left out"])
    # decimal places of each value as written (exponent forms by their shortest decimal)
    places = con.execute(
        "SELECT p, count(*) FROM (SELECT CASE WHEN contains(lower(v), 'e') THEN -1 ELSE "
        "length(regexp_extract(v, '\\.(\\d*[1-9])0*$', 1)) END AS p FROM c WHERE NOT m) "
        "GROUP BY p ORDER BY p"
    ).fetchall()
    total = sum(n for _, n in places)
    exact = 0
    step_places = MAX_PLACES
    for p, n in sorted(((MAX_PLACES + 1 if p < 0 else p), n) for p, n in places):
        exact += n
        if exact >= EXACT_SHARE * total:
            step_places = min(p, MAX_PLACES)
            break
    notes: list[str] = []
    if step_places == 0:
        low, high = round_out(math.floor(lo), math.ceil(hi))
        attr: dict[str, Any] = {"name": name, "type": "integer", "min": low, "max": high}
        if base in _NUMBER_TYPES or _count(con, "contains(v, '.')"):
            notes.append("written as floats (517.0): they load as integers")
        shown = f"[{low}, {high}]"
    else:
        a, b = round_out_decimal(
            read.parse_number(repr(float(lo))) or Fraction(0),
            read.parse_number(repr(float(hi))) or Fraction(0),
            step_places,
        )
        step = Fraction(1, 10**step_places)
        attr = {
            "name": name,
            "type": "float",
            "min": _number_json(a),
            "max": _number_json(b),
            "step": _number_json(step),
        }
        finer = sum(n for p, n in places if p < 0 or p > step_places)
        if finer:
            notes.append(
                f"{finer:,} values have more than {step_places} decimal places: they are "
                f"rounded to the step {read.decimal_text(step)} on load"
            )
        shown = f"[{read.decimal_text(a)}, {read.decimal_text(b)}]"
    notes.insert(
        0,
        f"bounds {shown} read from the data (rounded outward): they reveal the order of "
        "magnitude of its extremes; prefer public bounds",
    )
    return attr, notes


def _number_json(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(read.as_decimal(x))


def _times(
    con: duckdb.DuckDBPyConnection, name: str, *, date: bool
) -> tuple[dict[str, Any], list[str]] | Column:
    """A date or a timestamp: every distinct value read by the loaders' reader, bounds
    widened to whole years, a timestamp's unit the coarsest its values are whole in."""
    texts = [r[0] for r in con.execute("SELECT DISTINCT v FROM c WHERE NOT m").fetchall()]
    if date:
        days = [read.parse_date(t) for t in texts]
        bad = [t for t, d in zip(texts, days, strict=True) if d is None]
        if bad:
            return Column(name, None, [f"dates that are not YYYY-MM-DD ({bad[0]!r}): left out"])
        first, last = read.date_of(min(days)), read.date_of(max(days))  # type: ignore[type-var]
        attr = {
            "name": name,
            "type": "date",
            "min": dt.date(first.year, 1, 1).isoformat(),
            "max": dt.date(last.year, 12, 31).isoformat(),
        }
        return attr, [
            f"bounds [{attr['min']}, {attr['max']}] read from the data (whole years): they "
            "reveal which years occur; prefer public bounds"
        ]
    seconds = [read.parse_instant(t) for t in texts]
    bad = [t for t, s in zip(texts, seconds, strict=True) if s is None]
    if bad:
        return Column(name, None, [f"times that are not ISO 8601 ({bad[0]!r}): left out"])
    whole = [s for s in seconds if s is not None]
    unit = next(
        (u for u in ("hour", "minute") if all(s % read.TIME_UNITS[u] == 0 for s in whole)),
        "second",
    )
    first = read.local_time(math.floor(min(whole)), "UTC")
    last = read.local_time(math.floor(max(whole)), "UTC")
    end = dt.datetime(last.year + 1, 1, 1, tzinfo=dt.UTC) - dt.timedelta(
        seconds=read.TIME_UNITS[unit]
    )
    attr = {
        "name": name,
        "type": "timestamp",
        "min": f"{first.year:04d}-01-01T00:00:00Z",
        "max": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "unit": unit,
    }
    notes = [
        f"bounds [{attr['min']}, {attr['max']}] read from the data (whole years): they "
        "reveal which years occur; prefer public bounds",
        f"kept by the {unit}"
        + ("" if unit == "second" else f" (every value is a whole {unit})")
        + '; parts such as hour(t) are told in UTC: add "timezone" (e.g. '
        '"America/New_York") for local hours and days',
    ]
    if any(s.denominator != 1 for s in whole):
        notes.append("some values have fractions of a second: truncated to the second on load")
    offsetless = _count(con, "NOT regexp_full_match(v, '.*(Z|z|UTC|[+-]\\d{2}(:?\\d{2})?)')")
    if offsetless:
        notes.append(
            f'{offsetless:,} values have no time zone: read in "timezone" (UTC unless the '
            "schema says otherwise)"
        )
    return attr, notes
