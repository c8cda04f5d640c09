"""Loading for the DuckDB backend: raw rows in file order -> coded, validated table.

The pipeline (:class:`Loader`) reads the source into a raw table with generated column
names, codes and validates every value in SQL, applies the privacy unit (a keyed, uniformly
random choice of each unit's rows: :mod:`dpcurator.backends.unit_rows`) and writes the
final table of integer codes. :class:`~dpcurator.backends.duckdb_backend.DuckDBBackend`
counts over that table.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from dpcurator.backends._sql import ident
from dpcurator.backends._validation import (
    INT_TEXT_PATTERN,
    MAPPED_TYPES,
    NOT_SHOWN,
    WHITESPACE,
    ZERO_FRACTION,
    LoadReport,
    check_dropped,
    check_load_options,
    column_count_message,
    duplicate_column_message,
    first_line,
    invalid_message,
    matches,
    missing_id_message,
    missing_texts,
    no_column_message,
    no_unit_column_message,
    value_codes,
)
from dpcurator.backends.unit_rows import (
    FLOAT_INTEGERS,
    NUMBER,
    SCHEME,
    SEPARATOR,
    UNIT_COLUMN,
    UnitReport,
    key_text,
)
from dpcurator.errors import (
    DataError,
    InvalidParameter,
)
from dpcurator.queries.schema import Schema

_INT_TYPES = {
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
}
_FLOAT_TYPES = {"FLOAT", "DOUBLE", "REAL"}


def _code_type(size: int) -> str:
    if size <= 1 << 8:
        return "UTINYINT"
    if size <= 1 << 16:
        return "USMALLINT"
    if size <= 1 << 32:
        return "UINTEGER"
    return "UBIGINT"


def code_column(i: int) -> str:
    """Column of the stored table holding the codes of attribute ``i`` (schema order).

    Attribute names never enter SQL text: DuckDB matches identifiers case-insensitively
    (``A`` and ``a`` would clash), gives every table a ``rowid`` pseudo-column that a real
    column shadows, and lets ``GROUP BY`` see select-list aliases. Generated names avoid
    all of it; the schema maps attributes to positions.
    """
    return f"c{i}"


def _canonical_id(text: str) -> str:
    """SQL of :func:`~dpcurator.backends.unit_rows.canonical_id` of the SQL text
    ``text`` (scheme 2): one that reads as a decimal number whose value is an integer
    below 2^53 in magnitude, as that integer; any other as it is."""
    d = f"TRY_CAST({text} AS DOUBLE)"
    return (
        f"CASE WHEN regexp_full_match({text}, '{NUMBER}') AND isfinite({d}) "
        f"AND abs({d}) < {FLOAT_INTEGERS!r} AND {d} = floor({d}) "
        f"THEN CAST(CAST({d} AS BIGINT) AS VARCHAR) ELSE {text} END"
    )


def _id_text(id_type: str, scheme: int) -> str:
    """SQL of the unit id's text in the hashed row (see :mod:`dpcurator.backends.unit_rows`).
    Scheme 2: the stage's id, already canonical text. Scheme 1: text as stripped,
    integers in decimal, a float that is an integer below 2^53 as that integer, anything
    else as DuckDB writes it."""
    if scheme != 1:
        return "__id"
    if id_type.split("(")[0] in _FLOAT_TYPES:
        return (
            f"CASE WHEN __id = floor(__id) AND abs(__id) < {FLOAT_INTEGERS!r} "
            "THEN CAST(CAST(__id AS BIGINT) AS VARCHAR) ELSE CAST(__id AS VARCHAR) END"
        )
    return "CAST(__id AS VARCHAR)"


def _raw_column(j: int) -> str:
    """Column of the staging table holding source column ``j`` (source order)."""
    return f"k{j}"


def _parquet_names(path: Path, duck: list[str]) -> list[str]:
    """Exact top-level column names of a Parquet file (DuckDB renames case-insensitive
    duplicates), by position; DuckDB's names if the file's schema cannot be matched."""
    try:
        names = [str(n) for n in pq.read_schema(path).names]
    except (OSError, pa.ArrowException):
        return duck
    return names if len(names) == len(duck) else duck


class Loader:
    """The load pipeline: raw table -> coded stage -> validation -> final coded table."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        schema: Schema,
        *,
        show_values: bool,
        missing: tuple[str, ...],
    ) -> None:
        self.con = con
        self.schema = schema
        self.show_values = show_values
        self.missing = missing
        tag = uuid.uuid4().hex[:12]
        self.raw = f"__dpc_raw_{tag}"
        self.stage = f"__dpc_stage_{tag}"
        self.tag = tag
        #: The scheme that chooses a privacy unit's rows (:mod:`~dpcurator.backends.unit_rows`).
        self.unit_rows = SCHEME
        self.views: list[str] = []
        self.tables: list[str] = []
        self.source = "data"
        #: Exact names of the source's columns, by position (raw column ``k{j}``).
        self.names: list[str] = []
        #: ``rowid`` of the first data row of the raw table (1 after a CSV header).
        self.first_data = 0
        #: Raw column of each attribute (set by encode()).
        self.attr_columns: list[str] = []
        self._order_was: object = None

    def _sql(self, sql: str, params: Sequence[object] = ()) -> duckdb.DuckDBPyConnection:
        try:
            return self.con.execute(sql, list(params))
        except duckdb.Error as err:
            raise DataError(f"{self.source}: {first_line(str(err))}") from None

    def cleanup(self) -> None:
        if self._order_was is not None:
            with contextlib.suppress(duckdb.Error):
                self.con.execute(f"SET preserve_insertion_order = {bool(self._order_was)}")
            self._order_was = None
        for v in self.views:
            with contextlib.suppress(duckdb.Error):
                self.con.unregister(v)
        for t in self.tables:
            with contextlib.suppress(duckdb.Error):
                self.con.execute(f"DROP TABLE IF EXISTS {ident(t)}")
        self.views.clear()
        self.tables.clear()

    # -- step 1: raw rows, in file order (rowid - first_data + 1 is the 1-based data row)

    def ingest(
        self,
        data: Any,
        *,
        separator: str,
        header: bool | None,
        columns: Sequence[str] | None,
        skip: int,
    ) -> None:
        if columns is not None and not isinstance(data, str | Path):
            raise InvalidParameter("columns= applies to CSV files only")
        con = self.con
        src = f"__dpc_src_{self.tag}"
        is_csv = False
        if isinstance(data, str | Path):
            path = Path(data)
            self.source = str(path)
            if not path.is_file():
                raise DataError(f"{path}: no such data file")
            try:
                if path.suffix.lower() in (".parquet", ".pq"):
                    rel = con.read_parquet(str(path))
                    names = _parquet_names(path, list(rel.columns))
                else:
                    # Always headerless: DuckDB would trim, dedupe and rename header names
                    # (``a``, ``A`` -> ``a``, ``A_1``); the header row is read as data.
                    rel = con.read_csv(
                        str(path),
                        delimiter=separator,
                        header=False,
                        all_varchar=True,
                        quotechar='"',
                        escapechar='"',
                        skiprows=skip,
                    )
                    is_csv, names = True, []
            except duckdb.Error as err:
                raise DataError(f"{path}: cannot read data: {first_line(str(err))}") from None
        else:
            rel, names = self._from_object(data)
        width = len(rel.columns)
        try:
            rel.create_view(src)
        except duckdb.Error as err:
            raise DataError(f"{self.source}: cannot read data: {first_line(str(err))}") from None
        self.views.append(src)
        # File order is the raw table's insertion order: make DuckDB keep it even on a
        # connection whose owner turned it off (restored by cleanup()).
        setting = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()
        if setting and not setting[0][0]:
            self._order_was = setting[0][0]
            con.execute("SET preserve_insertion_order = true")
        # Columns by position (#n): no source name ever enters SQL text.
        select = ", ".join(f"#{j + 1} AS {_raw_column(j)}" for j in range(width))
        self.tables.append(self.raw)
        self._sql(f"CREATE TEMP TABLE {ident(self.raw)} AS SELECT {select} FROM {ident(src)}")
        if is_csv:
            names = self._csv_names(Path(data), width, header, columns)
        self.names = names

    def _from_object(self, data: Any) -> tuple[duckdb.DuckDBPyRelation, list[str]]:
        con = self.con
        if isinstance(data, pa.Table):
            self.source = "Arrow table"
            names = [str(c) for c in data.column_names]
            return con.from_arrow(
                data.rename_columns([_raw_column(j) for j in range(len(names))])
            ), names
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is optional
            pd = None
        if pd is not None and isinstance(data, pd.DataFrame):
            self.source = "DataFrame"
            names = [str(c) for c in data.columns]
            # The frame's positional row order is the file order (not its index, and not
            # a column that happens to be called rowid).
            frame = data.copy(deep=False)
            frame.columns = [_raw_column(j) for j in range(len(names))]
            return con.from_df(frame), names
        raise InvalidParameter(
            "data must be a CSV or Parquet path, a pandas DataFrame or a pyarrow Table, "
            f"got {type(data).__name__}"
        )

    def _csv_names(
        self, path: Path, width: int, header: bool | None, columns: Sequence[str] | None
    ) -> list[str]:
        """Column names of a CSV file read headerless; sets ``first_data``."""
        row = self._sql(f"SELECT * FROM {ident(self.raw)} WHERE rowid = 0").fetchall()
        if not row:
            raise DataError(f"{path}: the file is empty")
        first = ["" if v is None else str(v) for v in row[0]]
        if header is None:
            wanted = list(columns) if columns is not None else list(self.schema.names)
            header = all(matches(first, w) for w in wanted)
        self.first_data = 1 if header else 0
        if header and columns is None:
            return first
        names = list(columns) if columns is not None else list(self.schema.names)
        refusal = column_count_message(str(path), width, names, columns is not None)
        if refusal is not None:
            raise DataError(refusal)
        return names

    def column(self, name: str, what: str) -> str | None:
        """The raw column holding ``name`` (exact name first, then ignoring surrounding
        whitespace), None if there is none; two candidates are an error."""
        found = matches(self.names, name)
        if len(found) > 1:
            raise DataError(duplicate_column_message(self.source, name, what))
        return _raw_column(found[0]) if found else None

    # -- step 2: codes, validation, privacy unit, final table

    @staticmethod
    def _key_sql(col: str, ctype: str) -> str:
        """How a mapped attribute's field is written for :func:`value_codes`: text as it
        is, a typed value as DuckDB writes it (a time with its offset; a binary float
        by its shortest decimal)."""
        return f"CAST({col} AS VARCHAR)"

    def _column_types(self) -> dict[str, str]:
        rows = self._sql(f"DESCRIBE {ident(self.raw)}").fetchall()
        return {r[0]: str(r[1]).upper() for r in rows}

    def encode(
        self,
        name: str,
        *,
        on_invalid: str,
        replace: Mapping[str, int],
        privacy_unit: tuple[str, int] | None,
        unit_key: bytes | None,
        max_dropped: float = 0.05,
        unit_rows: int = SCHEME,
    ) -> LoadReport:
        schema = self.schema
        self.unit_rows = unit_rows
        types, id_col = self._stage(name, privacy_unit)
        stats = self._stats(replace, privacy_unit)
        n_attr = len(schema.attributes)
        rows_read = int(stats[0])
        bad: list[tuple[int, int, int]] = []  # (attribute index, rows, first row)
        replaced: dict[str, int] = {}
        for i, attr in enumerate(schema.attributes):
            n_bad, first = int(stats[1 + 2 * i]), stats[2 + 2 * i]
            if n_bad == 0:
                continue
            if attr.name in replace:
                replaced[attr.name] = n_bad
            else:
                bad.append((i, n_bad, int(first)))
        id_bad = None
        if on_invalid == "drop":
            invalid_rows = int(stats[1 + 2 * n_attr])
            check_dropped(
                self.source, schema, [(i, n) for i, n, _ in bad], invalid_rows, rows_read,
                max_dropped,
            )  # fmt: skip
        if privacy_unit is not None and int(stats[-2]):
            id_bad = (int(stats[-2]), int(stats[-1]))
        if on_invalid == "error":
            if bad:
                raise DataError(self._invalid_message(bad))
            if id_bad is not None:
                raise DataError(
                    missing_id_message(self.source, privacy_unit[0], *id_bad)  # type: ignore[index]
                )

        # Final table: replacements, the drop rule, then the privacy unit's choice.
        missing_ids = id_bad[0] if id_bad else 0
        n_rows, unit = self._final_table(
            name,
            drop=on_invalid == "drop",
            replace=replace,
            privacy_unit=privacy_unit,
            unit_key=unit_key,
            id_type=types[id_col] if id_col is not None else "",
            missing_ids=missing_ids,
        )
        dropped_unit = missing_ids + unit.dropped_by_cap if unit is not None else 0
        # Under the drop rule, the rest of the shortfall is invalid rows.
        dropped_invalid = rows_read - dropped_unit - n_rows if on_invalid == "drop" else 0
        return LoadReport(
            rows_read=rows_read,
            rows=n_rows,
            dropped_invalid=dropped_invalid,
            dropped_privacy_unit=dropped_unit,
            replaced=replaced,
            unit=unit,
        )

    def _stage(
        self, name: str | None, privacy_unit: tuple[str, int] | None
    ) -> tuple[dict[str, str], str | None]:
        """The stage: every attribute's code (NULL where invalid) and the privacy unit's
        id, per raw row (``name``: the final table's, checked to be free first)."""
        con = self.con
        schema = self.schema
        types = self._column_types()
        cols: list[str] = []  # raw column of each attribute
        for attr in schema.attributes:
            col = self.column(attr.name, f"attribute {attr.name!r}")
            if col is None:
                raise DataError(no_column_message(self.source, attr.name))
            cols.append(col)
        self.attr_columns = cols
        id_col = None
        if privacy_unit is not None:
            id_col = self.column(privacy_unit[0], "the privacy unit")
            if id_col is None:
                raise DataError(no_unit_column_message(self.source, privacy_unit[0]))
        # DuckDB catalog names are case-insensitive: "Data" and "data" are one table.
        exists = (
            None
            if name is None
            else con.execute(
                "SELECT count(*) FROM (SELECT table_name AS t, schema_name AS s FROM duckdb_tables() "
                "WHERE NOT temporary UNION ALL SELECT view_name, schema_name FROM duckdb_views() "
                "WHERE NOT temporary) WHERE lower(t) = lower(?) AND s = current_schema()",
                [name],
            ).fetchall()[0]
        )
        if exists and exists[0]:
            raise InvalidParameter(f"table {name!r} already exists in the connection")

        # Inner select: per attribute a parsed value (integers) or a code (categoricals),
        # and for an attribute that may be missing, whether the raw field is missing.
        params: list[object] = []
        outer_params: list[object] = []
        # rowid is safe here: the raw table's columns all have generated names.
        inner: list[str] = [f"r.rowid + {1 - self.first_data} AS __row"]
        joins: list[str] = []
        mapped_joins: list[str] = []  # no parameters: after the categoricals' joins
        outer: list[str] = ["__row"]
        for i, attr in enumerate(schema.attributes):
            col = f"r.{cols[i]}"
            ctype = types[cols[i]]
            if attr.type in MAPPED_TYPES:
                # Each distinct text of the column read once, in Python (the reader both
                # backends share), and joined back: the code, or NULL where invalid.
                key = self._key_sql(col, ctype)
                view = f"__dpc_dom{i}_{self.tag}"
                self.tables.append(view)
                raw_keys = self._sql(
                    f"SELECT DISTINCT {key} FROM {ident(self.raw)} r "
                    f"WHERE r.rowid >= {self.first_data} AND {col} IS NOT NULL"
                ).fetchall()
                texts = [k[0] for k in raw_keys]
                binary = ctype.split("(")[0] in _FLOAT_TYPES
                found = value_codes(attr, texts, self.missing, binary)
                kept = [(t, c) for t, c in zip(texts, found, strict=True) if c is not None]
                self._sql(
                    f"CREATE TEMP TABLE {ident(view)} AS "
                    "SELECT unnest(?::VARCHAR[]) AS v, unnest(?::BIGINT[]) AS p",
                    [[t for t, _ in kept], [c for _, c in kept]],
                )
                mapped_joins.append(f"LEFT JOIN {ident(view)} d{i} ON d{i}.v = {key}")
                inner.append(f"d{i}.p AS v{i}")
                if attr.missing is None:
                    outer.append(f"v{i} AS c{i}")
                else:  # a NULL field is the missing value (blank and tokens are mapped)
                    inner.append(f"({col} IS NULL) AS m{i}")
                    outer.append(
                        f"CASE WHEN v{i} IS NOT NULL THEN v{i} WHEN m{i} THEN ? END AS c{i}"
                    )
                    outer_params.append(attr.missing_position)
                continue
            if attr.type == "categorical":
                view = f"__dpc_dom{i}_{self.tag}"
                # the values as bound parameters (registering an Arrow table would make
                # DuckDB import pandas: a quarter of a second at every start)
                self.tables.append(view)
                self._sql(
                    f"CREATE TEMP TABLE {ident(view)} AS "
                    "SELECT unnest(?::VARCHAR[]) AS v, unnest(range(?)) AS p",
                    [list(attr.values), attr.value_count],
                )
                joins.append(
                    f"LEFT JOIN {ident(view)} d{i} ON d{i}.v = trim(CAST({col} AS VARCHAR), ?)"
                )
                inner.append(f"d{i}.p AS v{i}")
                if attr.missing is None:
                    outer.append(f"v{i} AS c{i}")
                else:
                    outer.append(
                        f"CASE WHEN v{i} IS NOT NULL THEN v{i} WHEN m{i} THEN ? END AS c{i}"
                    )
                    outer_params.append(attr.missing_position)
            else:
                # Every integer is parsed exactly into HUGEINT (NULL if it is not an
                # integer); the outer select checks [min, max] exactly.
                base = ctype.split("(")[0]
                if base in _INT_TYPES:
                    inner.append(f"TRY_CAST({col} AS HUGEINT) AS v{i}")
                elif base.startswith("DECIMAL"):  # exact decimal arithmetic, < 10^38
                    inner.append(
                        f"CASE WHEN {col} = floor({col}) THEN CAST({col} AS HUGEINT) END AS v{i}"
                    )
                elif base in _FLOAT_TYPES:
                    d = f"CAST({col} AS DOUBLE)"
                    inner.append(
                        f"CASE WHEN isfinite({d}) AND {d} = floor({d}) AND abs({d}) < ? "
                        f"THEN CAST({d} AS HUGEINT) END AS v{i}"
                    )
                    params.append(2.0**126)
                else:
                    s = f"trim(CAST({col} AS VARCHAR), ?)"
                    inner.append(
                        f"CASE WHEN regexp_full_match({s}, ?) "
                        f"THEN CAST(regexp_replace({s}, ?, '') AS HUGEINT) END AS v{i}"
                    )
                    params.extend((WHITESPACE, INT_TEXT_PATTERN, WHITESPACE, ZERO_FRACTION))
                if attr.missing is None:
                    outer.append(f"CASE WHEN v{i} BETWEEN ? AND ? THEN v{i} - ? END AS c{i}")
                    outer_params.extend((attr.min, attr.max, attr.min))
                else:  # an integer marker (-1) is missing in every form it is written
                    by_value = f" OR v{i} = ?" if isinstance(attr.missing, int) else ""
                    outer.append(
                        f"CASE WHEN v{i} BETWEEN ? AND ? THEN v{i} - ? "
                        f"WHEN m{i}{by_value} THEN ? END AS c{i}"
                    )
                    outer_params.extend((attr.min, attr.max, attr.min))
                    if by_value:
                        outer_params.append(attr.missing)
                    outer_params.append(attr.missing_position)
            if attr.missing is not None:
                typed_float = ctype.split("(")[0] in _FLOAT_TYPES
                nan = f" OR isnan(CAST({col} AS DOUBLE))" if typed_float else ""
                inner.append(
                    f"({col} IS NULL OR trim(CAST({col} AS VARCHAR), ?) IN "
                    f"(SELECT unnest(?::VARCHAR[])){nan}) AS m{i}"
                )
                params.extend((WHITESPACE, missing_texts(attr, self.missing)))
        # Join parameters come after the select-list parameters in SQL text order.
        join_params = [WHITESPACE] * sum(1 for a in schema.attributes if a.type == "categorical")
        if id_col is not None:
            id_type = types[id_col].split("(")[0]
            if id_type == "VARCHAR":
                inner.append(
                    f"CASE WHEN trim(r.{id_col}, ?) IN (SELECT unnest(?::VARCHAR[])) THEN NULL "
                    f"ELSE trim(r.{id_col}, ?) END AS __id"
                )
                params.extend((WHITESPACE, list(self.missing), WHITESPACE))
            else:
                inner.append(f"r.{id_col} AS __id")
            # scheme 2: every id as its canonical text (a unit is the rows of one text); a
            # 32-bit float as the double it is (DuckDB writes 123456792f as 1.2345679e+08,
            # which reads back as another integer; Spark writes the double); NaN, no id
            typed = (
                "CASE WHEN isnan(__id) THEN NULL ELSE CAST(__id AS DOUBLE) END"
                if id_type in _FLOAT_TYPES
                else "__id"
            )
            outer.append(
                "__id"
                if self.unit_rows == 1
                else f"{_canonical_id(f'CAST({typed} AS VARCHAR)')} AS __id"
            )
        sql = (
            f"CREATE TEMP TABLE {ident(self.stage)} AS SELECT {', '.join(outer)} FROM ("
            f"SELECT {', '.join(inner)} FROM {ident(self.raw)} r {' '.join(joins + mapped_joins)} "
            f"WHERE r.rowid >= {self.first_data})"
        )
        self.tables.append(self.stage)
        self._sql(sql, [*outer_params, *params, *join_params])

        return types, id_col

    def _stats(self, replace: Mapping[str, int], privacy_unit: tuple[str, int] | None) -> Any:
        """Over every staged row: the rows, and per attribute its invalid rows and the
        first; the rows the drop rule removes; rows without a unit id and the first."""
        schema = self.schema
        # Validation over every row: count and first row of invalid values per attribute.
        n_attr = len(schema.attributes)
        aggs = ["count(*)"]
        for i in range(n_attr):
            aggs.append(f"count(*) FILTER (WHERE c{i} IS NULL)")
            aggs.append(f"min(__row) FILTER (WHERE c{i} IS NULL)")
        checked = [
            f"c{i} IS NULL" for i, a in enumerate(schema.attributes) if a.name not in replace
        ]
        # rows the drop rule removes for their values: a row without a unit id is the
        # unit's to drop (and counted there), as Spark counts it
        no_id = " AND __id IS NOT NULL" if privacy_unit is not None else ""
        aggs.append(f"count(*) FILTER (WHERE ({' OR '.join(checked) or 'false'}){no_id})")
        if privacy_unit is not None:
            aggs.append("count(*) FILTER (WHERE __id IS NULL)")
            aggs.append("min(__row) FILTER (WHERE __id IS NULL)")
        stats = self._sql(f"SELECT {', '.join(aggs)} FROM {ident(self.stage)}").fetchall()[0]
        assert stats is not None
        return stats

    def refusals(self) -> tuple[int, list[tuple[str, int, str]]]:
        """Every attribute's invalid rows at once, for ``dpcurator schema check``: the rows
        read, and per attribute with invalid rows (name, rows, the refusal a load would
        give for it alone: its first row, value and fix)."""
        self._stage(None, None)
        stats = self._stats({}, None)
        out = []
        for i, attr in enumerate(self.schema.attributes):
            n_bad, first = int(stats[1 + 2 * i]), stats[2 + 2 * i]
            if n_bad:
                out.append((attr.name, n_bad, self._invalid_message([(i, n_bad, int(first))])))
        return int(stats[0]), out

    def _final_table(
        self,
        name: str,
        *,
        drop: bool,
        replace: Mapping[str, int],
        privacy_unit: tuple[str, int] | None,
        unit_key: bytes | None,
        id_type: str,
        missing_ids: int,
    ) -> tuple[int, UnitReport | None]:
        """Write the coded table: replacements, then (``drop``) only rows whose every
        value is valid, then each unit's k rows of smallest keyed hash (see
        :mod:`dpcurator.backends.unit_rows`: the choice reads only the unit's own valid
        rows). Returns its rows and the unit report (one more aggregate query)."""
        schema = self.schema
        sel = []
        params: list[object] = []
        for i, attr in enumerate(schema.attributes):
            ctype = _code_type(attr.size)
            if attr.name in replace:
                sel.append(f"CAST(coalesce(c{i}, ?) AS {ctype}) AS {code_column(i)}")
                params.append(replace[attr.name])
            else:
                sel.append(f"CAST(c{i} AS {ctype}) AS {code_column(i)}")
        conds: list[str] = []
        if drop:
            conds.extend(
                f"c{i} IS NOT NULL"
                for i, attr in enumerate(schema.attributes)
                if attr.name not in replace
            )
        if privacy_unit is None:
            where = f" WHERE {' AND '.join(conds)}" if conds else ""
            self._sql(
                f"CREATE TABLE {ident(name)} AS SELECT {', '.join(sel)} "
                f"FROM {ident(self.stage)}{where}",
                params,
            )
            rows = self._sql(f"SELECT count(*) FROM {ident(name)}").fetchall()[0]
            return (int(rows[0]) if rows else 0), None
        assert unit_key is not None  # check_load_options requires it
        where = " WHERE " + " AND ".join(["__id IS NOT NULL", *conds])
        codes = [code_column(i) for i in range(len(schema.attributes))]
        copy = [] if self.unit_rows == 1 else ["CAST(__copy AS VARCHAR)"]
        text = ", ".join(
            [
                "?",
                *(f"CAST({c} AS VARCHAR)" for c in codes),
                *copy,
                _id_text(id_type, self.unit_rows),
            ]
        )
        valid = f"SELECT {', '.join(sel)}, __id FROM {ident(self.stage)}{where}"
        if self.unit_rows != 1:  # each row's number among its unit's identical rows
            valid = (
                f"SELECT *, row_number() OVER (PARTITION BY __id, {', '.join(codes)}) - 1 "
                f"AS __copy FROM ({valid})"
            )
        sized = f"SELECT *, count(*) OVER (PARTITION BY __id) AS __n FROM ({valid})"
        # A unit of at most k rows keeps them all: only larger units' rows are hashed.
        ranked = (
            f"SELECT *, row_number() OVER (PARTITION BY __id ORDER BY CASE WHEN __n > ? "
            f"THEN sha256(concat_ws('{SEPARATOR}', {text})) END) AS __rank FROM ({sized})"
        )
        k = privacy_unit[1]
        # The unit's id is kept as ``__unit`` (never returned: only its distinct count).
        self._sql(
            f"CREATE TABLE {ident(name)} AS SELECT {', '.join(codes)}, __id AS {UNIT_COLUMN} "
            f"FROM ({ranked}) WHERE __rank <= ?",
            [k, key_text(unit_key), *params, k],
        )
        rows = self._sql(f"SELECT count(*) FROM {ident(name)}").fetchall()[0]
        sizes = self._sql(
            f"SELECT n, count(*) FROM (SELECT count(*) AS n FROM {ident(self.stage)}{where} "
            "GROUP BY __id) GROUP BY n"
        ).fetchall()
        unit = UnitReport.from_sizes(privacy_unit[0], privacy_unit[1], dict(sizes), missing_ids)
        return (int(rows[0]) if rows else 0), unit

    def _invalid_message(self, bad: list[tuple[int, int, int]]) -> str:
        raw: object = NOT_SHOWN
        if self.show_values:
            i, _, first = bad[0]
            row = self._sql(
                f"SELECT CAST({self.attr_columns[i]} AS VARCHAR) FROM {ident(self.raw)} "
                "WHERE rowid = ?",
                [first - 1 + self.first_data],
            ).fetchall()[0]
            raw = row[0] if row else None
        return invalid_message(self.source, self.schema, bad, raw=raw, missing=self.missing)


def refusals(
    data: str | Path, schema: Schema, *, separator: str = ","
) -> tuple[int, list[tuple[str, int, str]]]:
    """Which rows of a file ``schema`` would refuse, every attribute at once (one read of
    the file): the rows read, and per attribute with invalid rows its name, their number
    and the refusal a load would give (:meth:`Loader.refusals`). Charges nothing."""
    opts = check_load_options(schema, separator=separator)
    con = duckdb.connect()
    loader = Loader(con, opts.schema, show_values=True, missing=opts.missing)
    try:
        loader.ingest(data, separator=opts.separator, header=None, columns=None, skip=0)
        if loader.first_data == 0 and loader.names == list(opts.schema.names):
            _check_header(loader)
        return loader.refusals()
    finally:
        loader.cleanup()
        con.close()


def _check_header(loader: Loader) -> None:
    """Refuse a CSV file read headerless whose first row is a header all the same: it
    has at least half of the schema's names (a data row hardly would), but lacks some
    (an attribute misnamed, an unnamed pandas index). Read as data, that row and every
    attribute would be reported invalid, which says nothing of the cause."""
    row = loader._sql(f"SELECT * FROM {ident(loader.raw)} WHERE rowid = 0").fetchall()
    first = ["" if v is None else str(v) for v in row[0]] if row else []
    names = list(loader.schema.names)
    lacking = [n for n in names if not matches(first, n)]
    if lacking and 2 * (len(names) - len(lacking)) >= len(names):
        shown = ", ".join(repr(n) for n in lacking[:5]) + (" ..." if len(lacking) > 5 else "")
        raise DataError(
            f"{loader.source}: no header row found: the first row has {len(names) - len(lacking)} "
            f"of the schema's {len(names)} attribute names but lacks {shown}; name those "
            "attributes as the header does"
        )
