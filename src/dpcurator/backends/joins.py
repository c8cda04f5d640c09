"""Two loaded tables joined on their privacy unit: a backend of its own.

The joined table (its schema: :mod:`dpcurator.queries.joins`) holds, for every unit,
the pairs of its kept rows of each table (an inner join on the unit's id). A unit with
more than k pairs keeps the k of smallest keyed hash over their content (the ledger's
key, as :mod:`dpcurator.backends.unit_rows` chooses a table's rows): a choice that reads
only the unit's own rows and is the same in every process, so the per-point filter's
bound holds for the joined table as for any table (docs/design.md §7). The result is an
ordinary backend: it counts, and knows nothing of budgets.
"""

from __future__ import annotations

from typing import Any

from dpcurator.backends._sql import ident
from dpcurator.backends._validation import LoadReport
from dpcurator.backends.unit_rows import (
    SCHEME,
    SEPARATOR,
    UNIT_COLUMN,
    UnitReport,
    check_scheme,
    key_text,
)
from dpcurator.errors import InvalidParameter
from dpcurator.queries.joins import JoinedSchema


def join_tables(
    left: Any, right: Any, joined: JoinedSchema, k: int, key: bytes, scheme: int = SCHEME
) -> Any:
    """The backend of ``left JOIN right`` on the unit (both of one engine); ``scheme``:
    the ledger's (:mod:`dpcurator.backends.unit_rows`; scheme 2 numbers a unit's
    identical pairs, so that each has a hash of its own)."""
    check_scheme(scheme)
    from dpcurator.backends.duckdb_backend import DuckDBBackend

    if isinstance(left, DuckDBBackend) and isinstance(right, DuckDBBackend):
        return _duckdb(left, right, joined, k, key, scheme)
    try:
        from dpcurator.backends.spark_backend import SparkBackend
    except InvalidParameter:  # no pyspark: then no Spark backend either
        SparkBackend = None  # type: ignore[assignment,misc]
    if (
        SparkBackend is not None
        and isinstance(left, SparkBackend)
        and isinstance(right, SparkBackend)
    ):
        return _spark(left, right, joined, k, key, scheme)
    raise InvalidParameter("a join needs both tables on one backend")


def _sources(left: Any, right: Any, joined: JoinedSchema) -> list[tuple[str, int]]:
    """(side, code column index) of every joined attribute."""
    names = {left.table: ("l", left.schema), right.table: ("r", right.schema)}
    out = []
    for table, attr in joined.sources:
        side, schema = names[table]
        out.append((side, schema.index(attr)))
    return out


def _duckdb(left: Any, right: Any, joined: JoinedSchema, k: int, key: bytes, scheme: int) -> Any:
    import duckdb

    from dpcurator.backends.duckdb_backend import DuckDBBackend
    from dpcurator.backends.duckdb_load import code_column

    con = duckdb.connect()
    try:
        for alias, be in (("l", left), ("r", right)):
            with be._reader() as src:  # the kept rows, codes and ids, as Arrow
                rel = src.sql(f"SELECT * FROM {ident(be.table)}")
                arrow = (getattr(rel, "to_arrow_table", None) or rel.arrow)()
            con.register(f"__src_{alias}", arrow)
            con.execute(f"CREATE TEMP TABLE __{alias} AS SELECT * FROM __src_{alias}")
            con.unregister(f"__src_{alias}")
        cols = [
            f"{side}.{code_column(j)} AS {code_column(i)}"
            for i, (side, j) in enumerate(_sources(left, right, joined))
        ]
        pairs = (
            f"SELECT {', '.join(cols)}, l.{UNIT_COLUMN} AS {UNIT_COLUMN} FROM __l l "
            f"JOIN __r r ON l.{UNIT_COLUMN} = r.{UNIT_COLUMN}"
        )
        codes = [code_column(i) for i in range(len(joined.schema))]
        copy = [] if scheme == 1 else ["CAST(__copy AS VARCHAR)"]
        text = ", ".join(
            [
                "?",
                *(f"CAST({c} AS VARCHAR)" for c in codes),
                *copy,
                f"CAST({UNIT_COLUMN} AS VARCHAR)",
            ]
        )
        numbered = pairs
        if scheme != 1:  # each pair's number among its unit's identical pairs
            numbered = (
                f"SELECT *, row_number() OVER (PARTITION BY {UNIT_COLUMN}, {', '.join(codes)}) "
                f"- 1 AS __copy FROM ({pairs})"
            )
        sized = f"SELECT *, count(*) OVER (PARTITION BY {UNIT_COLUMN}) AS __n FROM ({numbered})"
        ranked = (
            f"SELECT *, row_number() OVER (PARTITION BY {UNIT_COLUMN} ORDER BY CASE WHEN __n > ? "
            f"THEN sha256(concat_ws('{SEPARATOR}', {text})) END) AS __rank FROM ({sized})"
        )
        name = "joined"
        con.execute(
            f"CREATE TABLE {name} AS SELECT {', '.join(codes)}, {UNIT_COLUMN} FROM ({ranked}) "
            "WHERE __rank <= ?",
            [k, key_text(key), k],
        )
        read = int(con.execute(f"SELECT count(*) FROM ({pairs})").fetchall()[0][0])
        sizes = dict(
            con.execute(
                f"SELECT n, count(*) FROM (SELECT count(*) AS n FROM ({pairs}) GROUP BY "
                f"{UNIT_COLUMN}) GROUP BY n"
            ).fetchall()
        )
        kept = int(con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0])
        con.execute("DROP TABLE __l")
        con.execute("DROP TABLE __r")
    except BaseException:
        con.close()
        raise
    column = left.report.unit.column if left.report.unit is not None else UNIT_COLUMN
    unit = UnitReport.from_sizes(column, k, sizes, 0)
    report = LoadReport(rows_read=read, rows=kept, dropped_privacy_unit=read - kept, unit=unit)
    return DuckDBBackend(con, joined.schema, name, owns_connection=True, report=report)


def _spark(left: Any, right: Any, joined: JoinedSchema, k: int, key: bytes, scheme: int) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from dpcurator.backends.spark_backend import SparkBackend
    from dpcurator.backends.spark_load import code_column

    lf = left.dataframe.alias("l")
    rf = right.dataframe.alias("r")
    cols = [
        F.col(f"{side}.{code_column(j)}").alias(code_column(i))
        for i, (side, j) in enumerate(_sources(left, right, joined))
    ]
    pairs = lf.join(rf, F.col(f"l.{UNIT_COLUMN}") == F.col(f"r.{UNIT_COLUMN}")).select(
        *cols, F.col(f"l.{UNIT_COLUMN}").alias(UNIT_COLUMN)
    )
    codes = [code_column(i) for i in range(len(joined.schema))]
    copy = []
    numbered = pairs
    if scheme != 1:  # each pair's number among its unit's identical pairs
        same = Window.partitionBy(UNIT_COLUMN, *codes).orderBy(*codes)
        numbered = pairs.withColumn("__copy", F.row_number().over(same) - 1)
        copy = [F.col("__copy").cast("string")]
    text = F.concat_ws(
        SEPARATOR,
        F.lit(key_text(key)),
        *(F.col(c).cast("string") for c in codes),
        *copy,
        F.col(UNIT_COLUMN).cast("string"),
    )
    by_unit = Window.partitionBy(UNIT_COLUMN)
    ordered = by_unit.orderBy("__h")
    ranked = (
        numbered.withColumn("__n", F.count(F.lit(1)).over(by_unit))
        .withColumn("__h", F.when(F.col("__n") > k, F.sha2(text, 256)))
        .withColumn("__rank", F.row_number().over(ordered))
    )
    table = ranked.where(F.col("__rank") <= k).select(*codes, UNIT_COLUMN).cache()
    read = pairs.count()
    kept = table.count()
    sizes = {
        int(r[0]): int(r[1])
        for r in pairs.groupBy(UNIT_COLUMN).count().groupBy("count").count().collect()
    }
    column = left.report.unit.column if left.report.unit is not None else UNIT_COLUMN
    unit = UnitReport.from_sizes(column, k, sizes, 0)
    report = LoadReport(rows_read=read, rows=kept, dropped_privacy_unit=read - kept, unit=unit)
    return SparkBackend(
        left.session, table, joined.schema, joined.name.replace(" ", "_"),
        report=report, owns_session=False, cached=[table],
    )  # fmt: skip
