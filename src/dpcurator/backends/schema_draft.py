"""A first schema read from the data, for the custodian to review (``schema draft``).

A domain read from the data is not public: its bounds reveal the extremes and its
values reveal which rare values occur. The draft therefore rounds bounds outward (to two
significant digits of the larger magnitude; times to whole years) and lists, column by
column, what came from the data, so that the custodian replaces it by a public domain
before releasing anything. The values are read as the loader reads them (CSV fields as
text, ``trim(CAST(column AS VARCHAR))``; dates, times, decimals and booleans by the
reader the loaders share), so that the draft loads the file it was read from.

A CSV header is read as the loader reads it (the file headerless, its first row the
names, exactly as written), so the names the draft writes are the names loading and
``schema check`` match. A column the loader could not find by name is left out with a
note: one without a name (pandas' index, written by ``DataFrame.to_csv(path)``), and
columns whose names collide (``x,x``; the loader refuses an attribute matching two).

Each column becomes the first type that fits every value that is not missing: boolean
(``true``/``false`` in any case), date (``YYYY-MM-DD``), timestamp (ISO 8601 times),
integer (every value an integer as the loader reads it, within 64 bits), float (a step
of the decimal places nearly every value has, coarsened until the schema takes it) or
categorical. Every attribute is checked by the schema and the loader's own rules before
it is proposed (:func:`_accepted`): a column no grid type can hold (integers beyond 64
bits, floats beyond 10^15) falls back to a categorical with a warning, so the draft
always loads the file it was read from.
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
from dpcurator.backends._validation import (
    INT_TEXT_PATTERN,
    WHITESPACE,
    ZERO_FRACTION,
    check_load_options,
    first_line,
    matches,
)
from dpcurator.backends.duckdb_load import _parquet_names
from dpcurator.errors import DataError, DpCuratorError
from dpcurator.queries import values as read
from dpcurator.queries.schema import MAX_FLOAT_DIGITS, Schema

#: A categorical with more values than this is probably an identifier or free text; its
#: values go to a file of their own when the schema is written to one.
MANY_VALUES = 50
#: Values seen in fewer rows than this are "rare": publishing them reveals them.
RARE_ROWS = 5
#: The texts the loader reads as missing by default (besides NULL and a float NaN).
MISSING_TOKENS = ("", "?", "NA")
#: A float's step keeps this share of the values exact (the rest are rounded on load).
EXACT_SHARE = 0.99
#: The most positions a drafted float's grid has: a finer step is coarsened (a median
#: over the whole domain then needs no candidates under the default limits).
MAX_POSITIONS = 10**6
#: When rounding to a float's step merges more than this share of its distinct values
#: with others, the draft warns: the column has lost most of what told rows apart.
MERGED_SHARE = 0.5
#: Decimal numbers as :func:`dpcurator.queries.values.parse_number` reads them (ASCII).
_NUMBER_TEXT = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
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
    #: What the custodian must not miss: a fallback, a step that merges most values.
    warnings: list[str] = field(default_factory=list)


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


def _read(con: duckdb.DuckDBPyConnection, data: str, separator: str) -> list[tuple[str, str]]:
    """Table ``t`` of the data rows, columns ``k0``, ``k1``, ... by position, and each
    column's name and type. A CSV file is read as the loader reads it (headerless, text,
    its first row the names as written), so that the names are the ones it matches."""
    path = Path(data)
    if not path.is_file():
        raise DataError(f"{data}: no such file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            rel = con.read_parquet(str(path))
            names = _parquet_names(path, list(rel.columns))
            first = 0
        else:
            rel = con.read_csv(str(path), delimiter=separator, header=False, all_varchar=True,
                               quotechar='"', escapechar='"')  # fmt: skip
            names, first = [], 1
        rel.create_view("src")
        select = ", ".join(f"#{j + 1} AS k{j}" for j in range(len(rel.columns)))
        con.execute(f"CREATE TEMP TABLE raw AS SELECT {select} FROM src")
        if first:
            row = con.execute("SELECT * FROM raw WHERE rowid = 0").fetchall()
            if not row:
                raise DataError(f"{data}: the file is empty")
            names = ["" if v is None else str(v) for v in row[0]]
        con.execute(f"CREATE TEMP TABLE t AS SELECT * FROM raw WHERE rowid >= {first}")
        kinds = [str(r[1]).upper() for r in con.execute("DESCRIBE t").fetchall()]
    except duckdb.Error as err:
        raise DataError(f"{data}: cannot read: {first_line(str(err))}") from None
    return list(zip(names, kinds, strict=True))


def draft(data: str, *, separator: str = ",") -> list[Column]:
    """Each column's proposed attribute and notes (CSV with a header, or Parquet)."""
    con = duckdb.connect()
    try:
        cols = _read(con, data, separator)
        names = [n for n, _ in cols]
        out = []
        for j, (name, kind) in enumerate(cols):
            if not name.strip(WHITESPACE):
                out.append(_unnamed(j))
            elif len(found := matches(names, name)) > 1:
                where = ", ".join(str(i + 1) for i in found)
                out.append(Column(name, None, warnings=[
                    f"columns {where} are all named {name!r}: left out (loading could not "
                    "tell them apart); give each its own name in the header to keep them"
                ]))  # fmt: skip
            else:
                out.append(_column(con, name, f"k{j}", kind))
        return out
    finally:
        con.close()


def _unnamed(j: int) -> Column:
    """A column without a name: loading finds columns by name, so it cannot be kept."""
    what = " (pandas writes its index so: DataFrame.to_csv(path) without index=False)"
    return Column(
        f"column {j + 1}",
        None,
        [f"no name in the header{what if j == 0 else ''}: left out; give it a name in "
         "the header to keep it"],
    )  # fmt: skip


def _accepted(attr: dict[str, Any]) -> bool:
    """Whether the schema and the loader take ``attr`` (a grid type's limits: a float's
    15 significant digits and magnitude below 10^15, an integer's 64 bits)."""
    try:
        check_load_options(Schema.from_dict({"attributes": [attr]}))
    except DpCuratorError:
        return False
    return True


def _count(con: duckdb.DuckDBPyConnection, where: str, params: list[Any] | None = None) -> int:
    return int(
        con.execute(f"SELECT count(*) FROM c WHERE NOT m AND ({where})", params or []).fetchall()[
            0
        ][0]
    )


def _column(con: duckdb.DuckDBPyConnection, name: str, raw: str, kind: str) -> Column:
    """Column ``name`` (table ``t``'s column ``raw``, of DuckDB type ``kind``) proposed."""
    col = ident(raw)
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
    got: tuple[dict[str, Any], list[str]] | Column
    if base == "BOOLEAN" or _count(con, "lower(v) IN ('true', 'false')") == present:
        got = {"name": name, "type": "boolean"}, []
    elif base == "DATE" or _count(con, "regexp_full_match(v, ?)", [_DATE]) == present:
        got = _times(con, name, date=True)
    elif (
        base.startswith("TIMESTAMP")
        or _count(con, "regexp_full_match(v, ?)", [_INSTANT]) == present
    ):
        got = _times(con, name, date=False)
    elif (
        base in _INT_TYPES
        or base in _NUMBER_TYPES
        or _count(con, "regexp_full_match(v, ?)", [_NUMBER_TEXT]) == present
    ):
        got = _number(con, name, base, present)
    else:
        got = _categorical(con, name)
    if isinstance(got, Column):
        return got
    attr, notes = got
    warnings = attr.pop("warnings", [])
    if n_missing:
        marker = next(m for m in ("NA", "?", "<missing>") if m not in attr.get("values", ()))
        attr["missing"] = marker
        notes.append(f"{n_missing:,} rows missing: blank and NULL cells load as {marker!r}")
    return Column(name, attr, notes, warnings)


def _categorical(con: duckdb.DuckDBPyConnection, name: str) -> tuple[dict[str, Any], list[str]]:
    """The values as the loader compares them (the text, stripped), and what they reveal."""
    rows = con.execute("SELECT v, count(*) FROM c WHERE NOT m GROUP BY v ORDER BY v").fetchall()
    vals = [str(r[0]) for r in rows]
    notes = [f"{len(vals):,} values read from the data; prefer a public list"]
    rare = [v for v, n in rows if n < RARE_ROWS]
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
    return {"name": name, "type": "categorical", "values": vals}, notes


def _as_categorical(
    con: duckdb.DuckDBPyConnection, name: str, why: str
) -> tuple[dict[str, Any], list[str]]:
    """The fallback for numbers no grid type holds: their texts, with a warning."""
    attr, notes = _categorical(con, name)
    attr["warnings"] = [
        f"{why}: drafted as a categorical of the values as written (no ranges, sums or "
        "means); an identifier does not belong in a schema, a measure needs a rescaled column"
    ]
    return attr, notes


def _number(
    con: duckdb.DuckDBPyConnection, name: str, base: str, present: int
) -> tuple[dict[str, Any], list[str]] | Column:
    """An integer when every value is one as the loader reads it (``517.0`` too), else a
    float on the step nearly every value is written to; a categorical when neither grid
    type holds the values."""
    if base in _INT_TYPES or _count(con, "regexp_full_match(v, ?)", [INT_TEXT_PATTERN]) == present:
        return _integer(con, name, base)
    lo, hi, infinite = con.execute(
        "SELECT min(d) FILTER (WHERE isfinite(d)), max(d) FILTER (WHERE isfinite(d)), "
        "count(*) FILTER (WHERE NOT isfinite(d)) "
        "FROM (SELECT TRY_CAST(v AS DOUBLE) AS d FROM c WHERE NOT m)"
    ).fetchall()[0]
    if lo is None:
        return Column(name, None, ["no finite number in the column: left out"])
    low = read.parse_number(repr(float(lo))) or Fraction(0)
    high = read.parse_number(repr(float(hi))) or Fraction(0)
    if max(abs(low), abs(high)) >= 10**MAX_FLOAT_DIGITS:
        big = read.decimal_text(high if abs(high) >= abs(low) else low)
        return _as_categorical(
            con, name, f"values up to {big}: a float holds magnitudes below 10^15 "
            f"({MAX_FLOAT_DIGITS} significant digits)"
        )  # fmt: skip
    # exact decimal places of each value as written (1.5e-09 has 10, 1.5e+20 none)
    places = dict(con.execute(
        "SELECT least(greatest(length(regexp_extract(x, '\\.([0-9]*[1-9])0*(e|$)', 1)) "
        "- coalesce(TRY_CAST(regexp_extract(x, 'e([+-]?[0-9]+)$', 1) AS BIGINT), 0), 0), 99) "
        "AS p, count(*) FROM (SELECT lower(v) AS x FROM c WHERE NOT m) GROUP BY p"
    ).fetchall())  # fmt: skip
    total, exact, wanted = sum(places.values()), 0, max(places)
    for p in sorted(places):
        exact += places[p]
        if exact >= EXACT_SHARE * total:
            wanted = p
            break
    attr: dict[str, Any] = {}
    step_places = wanted
    while True:  # coarser until the schema and the loader take it (at worst 10^15)
        a, b = round_out_decimal(low, high, step_places)
        step = Fraction(10) ** -step_places
        attr = {"name": name, "type": "float", "min": _number_json(a), "max": _number_json(b),
                "step": _number_json(step)}  # fmt: skip
        if (b - a) / step < MAX_POSITIONS and _accepted(attr):
            break
        if step_places < -MAX_FLOAT_DIGITS:  # bounds rounded to 10^15 fit no step
            return _as_categorical(con, name, "values too near 10^15 for a float's grid")
        step_places -= 1
    notes: list[str] = []
    warnings: list[str] = []
    step_text = read.decimal_text(step)
    numbers = "SELECT TRY_CAST(v AS DOUBLE) AS d FROM c WHERE NOT m"
    # each distinct value's cell on the grid: how many distinct values share a cell
    distinct, merged, finer = con.execute(
        "SELECT sum(n), coalesce(sum(n) FILTER (WHERE n > 1), 0), sum(off) FROM (SELECT "
        "count(DISTINCT d) AS n, count(*) FILTER (WHERE d <> round(d / ?) * ?) AS off "
        f"FROM ({numbers}) WHERE isfinite(d) GROUP BY round(d / ?))",
        [float(step)] * 3,
    ).fetchall()[0]
    if step_places >= 0:  # exactly, from the digits as written
        finer = sum(n for p, n in places.items() if p > step_places)
    if finer:
        notes.append(
            f"{finer:,} values are finer than the step {step_text}: they are rounded to it on load"
        )
    if step_places < wanted:
        notes.append(
            f"step {step_text}, not {read.decimal_text(Fraction(10) ** -wanted)}: at most "
            f"{MAX_POSITIONS:,} positions from {read.decimal_text(a)} to {read.decimal_text(b)}"
            f", within {MAX_FLOAT_DIGITS} digits"
        )
    if merged > MERGED_SHARE * distinct:
        warnings.append(
            f"rounding to the step {step_text} merges {merged:,} of its {distinct:,} distinct "
            "values with others: most differences between rows are lost; rescale the column "
            "(e.g. to other units) or give it a public step and narrower bounds"
        )
    if infinite:
        warnings.append(f"{infinite:,} values are infinite: they do not load")
    notes.insert(
        0,
        f"bounds [{read.decimal_text(a)}, {read.decimal_text(b)}] read from the data (rounded "
        "outward): they reveal the order of magnitude of its extremes; prefer public bounds",
    )
    attr["warnings"] = warnings
    return attr, notes


def _integer(
    con: duckdb.DuckDBPyConnection, name: str, base: str
) -> tuple[dict[str, Any], list[str]]:
    """Integer bounds read exactly (not through a binary float), rounded outward where
    the loader's 64 bits allow; beyond them, a categorical."""
    lo, hi = con.execute(
        "SELECT min(x), max(x) FROM (SELECT CAST(regexp_replace(v, ?, '') AS HUGEINT) AS x "
        "FROM c WHERE NOT m)",
        [ZERO_FRACTION],
    ).fetchall()[0]
    lo, hi = int(lo), int(hi)
    low, high = round_out(lo, hi)
    limit = 2**63 - 1
    candidates = [
        (low, high, "rounded outward"),
        (max(low, -limit - 1), min(high, limit), "rounded outward within 64 bits"),
        (lo, hi, "exact: rounding outward would pass 64 bits"),
    ]
    fits = [(a, b, how) for a, b, how in candidates if _accepted(_int_attr(name, a, b))]
    if not fits:
        return _as_categorical(
            con, name, f"integers from {lo} to {hi}: an integer attribute holds 64 bits "
            f"(-2^63 to 2^63 - 1, at most 2^63 - 1 values)"
        )  # fmt: skip
    a, b, how = fits[0]
    attr = _int_attr(name, a, b)
    notes = [
        f"bounds [{a}, {b}] read from the data ({how}): they reveal the order of magnitude "
        "of its extremes; prefer public bounds"
    ]
    if base in _NUMBER_TYPES or _count(con, "contains(v, '.')"):
        notes.append("written as floats (517.0): they load as integers")
    return attr, notes


def _int_attr(name: str, lo: int, hi: int) -> dict[str, Any]:
    return {"name": name, "type": "integer", "min": lo, "max": hi}


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
        "max": end.replace(tzinfo=None).isoformat(timespec="seconds") + "Z",  # year 1: 0001
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
