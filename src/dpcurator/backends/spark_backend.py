"""The Spark backend: the same exact counts as :class:`DuckDBBackend`, on a Spark cluster.

Loading validates every row against the public schema on the cluster, with DuckDB's
rules and messages (shared in :mod:`dpcurator.backends._validation`), and keeps a
persisted DataFrame of integer *codes*, one column per attribute, as DuckDB stores them.
A batch of queries is counted by ONE Spark query over that table: the attributes the
queries constrain are cut into the segments their intervals delimit, one ``GROUP BY`` per
(merged) attribute set returns every non-empty cell of those small contingency tables,
all unioned with ``count(CASE WHEN ...)`` aggregates for attribute sets still too large;
only these aggregate counts come back to the driver, where they are
contracted with the queries in numpy (see :mod:`dpcurator.backends._contract`). Clipped
sums are ``DECIMAL(38, 0)`` sums of codes, exact.

The curator, the filter, the ledger and the noise stay on the driver. The backend never
adds noise, never sees a budget and never returns rows.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpcurator.backends import _grouping, unions
from dpcurator.backends._contract import contract
from dpcurator.backends._sql import coverage_parts
from dpcurator.backends._validation import (
    INT64,
    INT_PATTERN,
    NOT_SHOWN,
    WHITESPACE,
    Coverages,
    LoadOptions,
    LoadReport,
    QueryChecker,
    check_load_options,
    clip_plan,
    column_count_message,
    duplicate_column_message,
    first_line,
    invalid_message,
    matches,
    missing_id_message,
    missing_texts,
    no_column_message,
    no_unit_column_message,
    summed_rows,
)
from dpcurator.errors import DataError, InvalidParameter
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.predicates import IntervalSet, Query
from dpcurator.queries.schema import Schema

try:
    from py4j.protocol import Py4JError
    from pyspark import StorageLevel
    from pyspark.errors import PySparkException
    from pyspark.sql import Column, DataFrame, SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError:  # pragma: no cover - depends on the environment
    raise InvalidParameter(
        "the Spark backend needs pyspark and Java 17: pip install 'dpcurator[spark]'"
    ) from None

#: Largest attribute set (product of domain sizes) counted through a dense array (as
#: the DuckDB backend).
DENSE_LIMIT = 2_000_000
#: Attribute sets are merged into one table while the merged table has at most this
#: many cells: one pass over the rows then serves all of them (their arrays are sums of
#: the merged one). Small: in Spark a larger hash aggregate costs more than a pass.
JOINT_CELLS = 1 << 16
#: Queries per aggregate on the fallback path (the aggregates are unioned: one query).
FILTER_CHUNK = 256
#: Attributes up to this size are cut into query segments by a constant look-up array;
#: larger ones by a binary search of at most this many segments (else not cut).
_LOOKUP_VALUES = 1 << 15
_TREE_SEGMENTS = 256
#: Categorical domains up to this size are coded by a literal map, larger ones by a join.
_MAP_VALUES = 1 << 12
#: A coded table of at least this many rows is spread over every core for counting.
_SPREAD_ROWS = 1 << 20

_DECIMAL = T.DecimalType(38, 0)
#: Spark errors worth turning into a one-line DataError during a load.
_SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JError)

# Sessions this module started (id of the SparkContext -> number of open backends).
_OWNED: dict[int, int] = {}
_OWNED_LOCK = threading.Lock()


def _spark_message(err: BaseException) -> str:
    """One line from a Spark error: the deepest Java cause's message, if any."""
    text = ""
    java = getattr(err, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            t, depth = java, 0
            while t is not None and depth < 20:
                msg = t.getMessage()
                if msg:
                    text = str(msg)
                t, depth = t.getCause(), depth + 1
    if not text:
        getter = getattr(err, "getMessage", None)
        with contextlib.suppress(Exception):
            text = str(getter()) if callable(getter) else ""
    line = first_line(text or str(err))
    cut = line.find(" SQLSTATE:")
    return line[:cut].rstrip() if cut > 0 else line


def _as_text(value: object, dtype: T.DataType) -> str | None:
    """A raw value as text, floats written as DuckDB writes them (shortest round-trip
    digits, Python's layout: ``1e+300``, ``2.5``, ``nan``)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(dtype, T.FloatType):
        return repr(float(str(np.float32(value))))
    if isinstance(dtype, T.DoubleType):
        return repr(float(value))  # type: ignore[arg-type]
    return str(value)


def _code_type(size: int) -> T.DataType:
    if size <= 1 << 15:
        return T.ShortType()
    if size <= 1 << 31:
        return T.IntegerType()
    return T.LongType()


def _raw_column(j: int) -> str:
    """Column holding source column ``j`` (source order): no source name is ever used."""
    return f"k{j}"


def _code_column(i: int) -> str:
    """Column of the stored table holding the codes of attribute ``i`` (schema order)."""
    return f"c{i}"


def _coverage_column(column: str, cov: IntervalSet, size: int) -> Column:
    """``code in cov`` as a Spark expression on a code column (codes are never NULL)."""
    shape = coverage_parts(cov, size)
    if shape is False:
        return F.lit(False)
    if shape is True:
        return F.lit(True)
    negate, singles, ranges = shape
    col = F.col(column)
    parts: list[Column] = []
    if len(singles) == 1:
        parts.append(col == F.lit(singles[0]))
    elif singles:
        parts.append(col.isin(singles))
    parts.extend(col.between(F.lit(a), F.lit(b)) for a, b in ranges)
    expr = functools.reduce(operator.or_, parts)
    return ~expr if negate else expr


def _is_local(text: str) -> bool:
    return "://" not in text and not text.startswith(("hdfs:", "s3a:", "s3:", "gs:", "abfs"))


def _acquire(spark: object) -> tuple[SparkSession, bool]:
    """The session to use, and whether this module started it."""
    if isinstance(spark, SparkSession):
        return spark, False
    if spark is not None and (not isinstance(spark, str) or not spark.strip()):
        raise InvalidParameter(
            "spark must be a SparkSession, a master URL such as 'local[2]' or "
            f"'spark://host:7077', or None, got {spark!r}"
        )
    from pyspark import SparkContext

    with _OWNED_LOCK:
        running = SparkContext._active_spark_context
        if running is not None:
            if spark is not None and running.master != spark:
                raise InvalidParameter(
                    f"a Spark session with master {running.master!r} is already running in "
                    f"this process; pass it as spark=, or stop it before using {spark!r}"
                )
            session = SparkSession.builder.getOrCreate()
            owned = id(running) in _OWNED
        else:
            master = spark if spark is not None else "local[*]"
            try:
                session = (
                    SparkSession.builder.master(master)
                    .appName("dpcurator")
                    .config("spark.ui.showConsoleProgress", "false")
                    .getOrCreate()
                )
            except (*_SPARK_ERRORS, RuntimeError, OSError) as err:
                raise InvalidParameter(
                    f"cannot start Spark with master {master!r}: {_spark_message(err)}"
                ) from None
            owned = True
        if owned:
            key = id(session.sparkContext)
            _OWNED[key] = _OWNED.get(key, 0) + 1
        return session, owned


def _reading_session(session: SparkSession) -> SparkSession:
    """A session with the settings of ``session`` (which is left as it is) for reading
    files: names are case-sensitive (a Parquet file may hold names equal but for case;
    columns are addressed by position anyway), and the CSV reader parses every column of
    every line, so that a line with too few or too many fields is an error, as in DuckDB
    (with column pruning Spark would only parse the columns it needs)."""
    try:
        clone = SparkSession(session.sparkContext, session._jsparkSession.cloneSession())
    except Exception:  # an internal API: fall back to a fresh session's settings
        clone = session.newSession()
    clone.conf.set("spark.sql.caseSensitive", "true")
    clone.conf.set("spark.sql.csv.parser.columnPruning.enabled", "false")
    return clone


def _release(session: SparkSession) -> None:
    """Stop a session this module started once its last backend is closed."""
    with _OWNED_LOCK:
        key = id(session.sparkContext)
        left = _OWNED.get(key, 0) - 1
        if left > 0:
            _OWNED[key] = left
            return
        _OWNED.pop(key, None)
    with contextlib.suppress(Exception):
        session.stop()


def _collect_arrow(df: DataFrame) -> Any:
    """Collect a (small, aggregated) DataFrame as a pyarrow Table."""
    import pyarrow as pa

    to_arrow = getattr(df, "toArrow", None)
    if callable(to_arrow):
        return to_arrow()
    batches = df._collect_as_arrow()  # pyspark 3.5
    if batches:
        return pa.Table.from_batches(batches)
    return pa.Table.from_pylist([], schema=pa.schema([(c, pa.int64()) for c in df.columns]))


class SparkBackend:
    """Exact counts over a validated, integer-coded table cached by Spark."""

    def __init__(
        self,
        session: SparkSession,
        table: DataFrame,
        schema: Schema,
        name: str,
        *,
        report: LoadReport,
        owns_session: bool,
        cached: Sequence[DataFrame],
    ) -> None:
        self.schema = schema
        self.table = name
        self.report = report
        self.session = session
        self._df: DataFrame | None = table
        self._cached = list(cached)
        self._owns = owns_session
        self._rows = report.rows
        self._checker = QueryChecker(schema)
        self._columns = [_code_column(i) for i in range(len(schema))]
        self._sizes = [a.size for a in schema.attributes]
        self._view = f"__dpc_{uuid.uuid4().hex[:16]}"
        table.createOrReplaceTempView(self._view)
        #: Counts in flight (Spark runs them concurrently); close() waits for them.
        self._readers = threading.Condition(threading.Lock())
        self._in_flight = 0

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        data: str | Path | Any,
        schema: Schema | str | Path | Mapping[str, Any],
        *,
        separator: str = ",",
        header: bool | None = None,
        columns: Sequence[str] | None = None,
        skip: int = 0,
        missing: Sequence[str] = ("", "?", "NA"),
        on_invalid: str = "error",
        replace: Mapping[str, object] | None = None,
        privacy_unit: tuple[str, int] | None = None,
        spark: SparkSession | str | None = None,
        name: str = "data",
        show_values: bool = True,
    ) -> SparkBackend:
        """Load, validate and encode a table on Spark.

        The options and their meaning are :meth:`DuckDBBackend.load`'s, with ``spark``
        instead of ``connection``: a ``SparkSession``, a master URL (``"local[2]"``,
        ``"spark://host:7077"``) or None (the running session, else a local one).

        ``data``: a CSV path (optionally gzip-compressed), a Parquet file or a folder of
        Parquet part files (as Spark writes them), a Spark DataFrame, a pandas DataFrame
        or a pyarrow Table. Paths may be any URI Spark reads (``hdfs://``, ``s3a://``);
        every executor must be able to read them. A URI ending in ``.parquet``, ``.pq``
        or ``/`` is read as Parquet.

        Row order (the privacy unit's "first k rows" and the row numbers in messages) is
        file order: lines of a CSV file, rows of a Parquet file, part files by name; a
        DataFrame's order is its partition order (sort it first if that matters).
        """
        opts = check_load_options(
            schema,
            separator=separator,
            header=header,
            columns=columns,
            skip=skip,
            missing=missing,
            on_invalid=on_invalid,
            replace=replace,
            privacy_unit=privacy_unit,
            name=name,
            show_values=show_values,
        )
        if columns is not None and not isinstance(data, str | Path):
            raise InvalidParameter("columns= applies to CSV files only")
        if isinstance(data, DataFrame):
            session, owned = data.sparkSession, False
        else:
            session, owned = _acquire(spark)
        loader = _Loader(session, opts)
        try:
            loader.ingest(data)
            table, report = loader.encode()
        except BaseException:
            loader.cleanup()
            if owned:
                _release(session)
            raise
        loader.cleanup()
        return cls(
            loader.session,
            table,
            opts.schema,
            opts.name,
            report=report,
            owns_session=owned,
            cached=loader.kept,
        )

    # ------------------------------------------------------------------ queries

    @property
    def dataframe(self) -> DataFrame:
        """The coded table (columns ``c0``, ``c1``, ...: codes of the attributes)."""
        if self._df is None:
            raise InvalidParameter("the backend is closed")
        return self._df

    @contextlib.contextmanager
    def _reader(self) -> Iterator[DataFrame]:
        """The table, for one call; refused once close() has begun, which waits until
        every call has left."""
        with self._readers:
            df = self.dataframe
            self._in_flight += 1
        try:
            yield df
        finally:
            with self._readers:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._readers.notify_all()

    def _check_query(self, q: object) -> Coverages | None:
        return self._checker.check(q)

    def counts(self, queries: Sequence[Query]) -> np.ndarray:
        """Exact counts (int64), one per query, in order, from one Spark query (a
        :class:`BooleanQuery` counts as the sum of its disjoint boxes). Thread-safe."""
        given = self._checker.query_list(queries)
        flat, owner = unions.expand(given)
        with self._reader() as df:
            return unions.fold(self._counts(df, flat), owner, len(given))

    def _counts(self, df: DataFrame, qs: list[Any]) -> np.ndarray:
        out = np.zeros(len(qs), dtype=np.int64)
        sizes = self._sizes
        groups: dict[tuple[int, ...], tuple[list[int], list[tuple[IntervalSet, ...]]]] = {}
        for i, q in enumerate(qs):
            preds = self._checker.check(q)
            if preds is None:  # covers nothing
                continue
            if not preds:
                out[i] = self._rows
                continue
            key = tuple(j for j, _ in preds)
            members = groups.setdefault(key, ([], []))
            members[0].append(i)
            members[1].append(tuple(c for _, c in preds))
        if not groups:
            return out
        cuts = self._cuts(groups)
        shape = {j: (len(c) - 1 if c is not None else sizes[j]) for j, c in cuts.items()}
        dense = [k for k in groups if math.prod(shape[j] for j in k) <= DENSE_LIMIT]
        sparse = [k for k in groups if k not in set(dense)]
        sets = self._grouping_sets(dense, shape)
        parts = [self._dense_part(g, s, shape, cuts) for g, (s, _) in enumerate(sets)]
        chunks: list[tuple[tuple[int, ...], list[int], list[tuple[IntervalSet, ...]]]] = []
        for key in sparse:
            idx, covs = groups[key]
            for start in range(0, len(covs), FILTER_CHUNK):
                chunks.append(
                    (key, idx[start : start + FILTER_CHUNK], covs[start : start + FILTER_CHUNK])
                )
        for t, (key, _, covs) in enumerate(chunks, start=1):
            parts.append(self._filter_part(df, t, key, covs))
        # ONE Spark query for the whole release; only aggregate counts come back.
        res = _collect_arrow(functools.reduce(DataFrame.unionAll, parts))
        tag, gid, cell, cnt = (_column(res, c) for c in ("t", "g", "x", "n"))
        # Dense path: scatter each table's cells, then sum out the merged attributes.
        for g, (s, members) in enumerate(sets):
            mask = (tag == 0) & (gid == g)
            dims = tuple(shape[j] for j in s)
            arr = np.zeros(math.prod(dims), dtype=np.int64)
            arr[cell[mask]] = cnt[mask]
            arr = arr.reshape(dims)
            for key in members:
                axes = tuple(a for a, j in enumerate(s) if j not in key)
                sub = arr.sum(axis=axes) if axes else arr
                idx, covs = groups[key]
                out[idx] = contract(sub, [self._coarse(key, c, cuts) for c in covs])
        # Fallback: one aggregate per chunk of queries, the count of query p at g == p.
        for t, (_, idx, _) in enumerate(chunks, start=1):
            mask = tag == t
            found = np.zeros(len(idx), dtype=np.int64)
            found[gid[mask]] = cnt[mask]
            out[idx] = found
        return out

    def _cuts(
        self, groups: Mapping[tuple[int, ...], tuple[list[int], list[tuple[IntervalSet, ...]]]]
    ) -> dict[int, np.ndarray | None]:
        """Per touched attribute, the sorted ends of every interval the queries use (with
        0 and the size), or None to keep every value.

        Between two consecutive ends every query either covers all values or none, so
        the contingency tables are counted over these segments instead of values: an
        attribute cut by a few ranges counts as a few cells however large its domain.
        """
        sizes = self._sizes
        ends: dict[int, set[int]] = {}
        for key, (_, covs) in groups.items():
            for qcovs in covs:
                for j, cov in zip(key, qcovs, strict=True):
                    e = ends.setdefault(j, {0, sizes[j]})
                    for a, b in cov:
                        e.add(a)
                        e.add(b)
        out: dict[int, np.ndarray | None] = {}
        for j, e in ends.items():
            segments = len(e) - 1
            mappable = sizes[j] <= _LOOKUP_VALUES or segments <= _TREE_SEGMENTS
            out[j] = (
                np.asarray(sorted(e), dtype=np.int64) if segments < sizes[j] and mappable else None
            )
        return out

    @staticmethod
    def _coarse(
        key: tuple[int, ...], covs: tuple[IntervalSet, ...], cuts: Mapping[int, np.ndarray | None]
    ) -> tuple[IntervalSet, ...]:
        """A query's coverages in segment positions (its ends are cuts: exact)."""
        out = []
        for j, cov in zip(key, covs, strict=True):
            c = cuts[j]
            if c is None:
                out.append(cov)
            else:
                pos = np.searchsorted(c, np.asarray(cov, dtype=np.int64).ravel())
                out.append(tuple(zip(pos[::2].tolist(), pos[1::2].tolist(), strict=True)))
        return tuple(out)

    def _grouping_sets(
        self, keys: list[tuple[int, ...]], shape: Mapping[int, int]
    ) -> list[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
        """Merge attribute sets into tables of at most :data:`JOINT_CELLS` cells (a set is
        merged into another that contains it whatever its size)."""
        merged: list[tuple[set[int], list[tuple[int, ...]]]] = []
        for key in sorted(keys, key=lambda k: (-math.prod(shape[j] for j in k), k)):
            best, best_cells = None, 0
            for m in merged:
                if m[0].issuperset(key):
                    best = m
                    break
                cells = math.prod(shape[j] for j in m[0] | set(key))
                if cells <= JOINT_CELLS and (best is None or cells < best_cells):
                    best, best_cells = m, cells
            if best is None:
                merged.append((set(key), [key]))
            else:
                best[0].update(key)
                best[1].append(key)
        return [(tuple(sorted(s)), members) for s, members in merged]

    def _segment_sql(self, j: int, cut: np.ndarray | None) -> str:
        """SQL of the segment of attribute ``j``'s code (the code itself without cuts)."""
        col = self._columns[j]
        if cut is None:
            return col
        if self._sizes[j] <= _LOOKUP_VALUES:  # a constant array, one look-up per row
            seg = np.searchsorted(cut, np.arange(self._sizes[j]), side="right") - 1
            return f"element_at(array({', '.join(map(str, seg.tolist()))}), {col} + 1)"

        def tree(lo: int, hi: int) -> str:  # segments lo .. hi-1: binary search
            if hi - lo == 1:
                return str(lo)
            mid = (lo + hi) // 2
            return f"IF({col} < {int(cut[mid])}, {tree(lo, mid)}, {tree(mid, hi)})"

        return tree(0, len(cut) - 1)

    def _dense_part(
        self,
        g: int,
        attrs: tuple[int, ...],
        shape: Mapping[int, int],
        cuts: Mapping[int, np.ndarray | None],
    ) -> DataFrame:
        """Every non-empty cell of one contingency table (over segments), from one pass
        over the cached table: rows ``(t = 0, g, x = cell number in its array, n)``.

        Each table is its own ``GROUP BY`` (the parts of a release are unioned into one
        query): in Spark that is faster than one ``GROUPING SETS`` aggregate, whose
        ``Expand`` copies every row once per set into a hash aggregate keyed by all of
        the sets' columns.
        """
        inner = ", ".join(f"{self._segment_sql(j, cuts[j])} AS s{j}" for j in attrs)
        stride, terms = 1, []
        for j in reversed(attrs):
            terms.append(f"CAST(s{j} AS BIGINT) * {stride}")
            stride *= shape[j]
        group = ", ".join(f"s{j}" for j in attrs)
        # Only generated names (the view, c<i>, s<i>) and integers enter the text.
        return self.session.sql(
            f"SELECT 0 AS t, CAST({g} AS BIGINT) AS g, {' + '.join(terms)} AS x, "
            f"count(*) AS n FROM (SELECT {inner} FROM {self._view}) GROUP BY {group}"
        )

    def _filter_part(
        self,
        df: DataFrame,
        tag: int,
        key: tuple[int, ...],
        covs: list[tuple[IntervalSet, ...]],
    ) -> DataFrame:
        """Counts of queries too large for a dense array: ``count(CASE WHEN q THEN 1)``,
        as rows ``(t = tag, g = query's place in the chunk, x = 0, n = count)``."""
        aggs = []
        for qcovs in covs:
            cond = functools.reduce(
                operator.and_,
                (
                    _coverage_column(self._columns[j], cov, self._sizes[j])
                    for j, cov in zip(key, qcovs, strict=True)
                ),
            )
            aggs.append(F.count(F.when(cond, F.lit(1))))
        row = df.agg(F.array(*aggs).alias("a"))
        exploded = row.select(F.posexplode("a").alias("g", "n"))
        return exploded.select(
            F.lit(tag).alias("t"),
            F.col("g").cast("bigint").alias("g"),
            F.lit(0).cast("bigint").alias("x"),
            F.col("n").cast("bigint").alias("n"),
        )

    def clipped_sum(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: Query | None = None,
    ) -> int:
        """Exact sum (a Python ``int``) over the rows satisfying ``where`` of
        ``min(max(value, lower), upper)``; the bounds are integers of any size. A
        :class:`BooleanQuery` sums over its disjoint boxes, in one Spark query."""
        if isinstance(where, BooleanQuery):
            parts: tuple[Any, ...] = unions.boxes(where)
            if not parts:
                return 0
        else:
            parts = (where,)
        with self._reader() as df:
            return self._clipped_sum(df, attribute, lower, upper, parts)

    def _clipped_sum(
        self, df: DataFrame, attribute: str, lower: int, upper: int, parts: tuple[Any, ...]
    ) -> int:
        plan = clip_plan(self.schema, attribute, lower, upper)
        boxes: list[Coverages] = []
        for q in parts:
            preds: Coverages | None = () if q is None else self._checker.check(q)
            if preds is not None:
                preds = summed_rows(preds, self.schema, plan.index)
            if preds is not None:
                boxes.append(preds)
        if not boxes:
            return 0
        rows = df
        if all(boxes):  # a box without predicates is every row
            cond = functools.reduce(operator.or_, (self._box(b) for b in boxes))
            rows = df.where(cond)
        if plan.constant is not None:
            n = self._rows if rows is df else rows.count()
            return plan.total(n, None)
        # Codes are below 2^63 and there are fewer than 2^63 rows: the DECIMAL(38, 0) sum
        # (up to 10^38 - 1 > 2^126) is exact and cannot overflow.
        col = F.col(self._columns[plan.index]).cast("bigint")
        clipped = F.least(F.greatest(col, F.lit(plan.low)), F.lit(plan.high))
        got = rows.agg(F.count(F.lit(1)), F.sum(clipped.cast(_DECIMAL))).collect()[0]
        return plan.total(int(got[0]), None if got[1] is None else int(got[1]))

    def _covered(self, df: DataFrame, where: Query | None) -> DataFrame | None:
        """The rows ``where`` covers (a union's disjoint boxes OR-ed), or None for none."""
        parts = unions.boxes(where) if isinstance(where, BooleanQuery) else (where,)
        boxes: list[Coverages] = []
        for q in parts:
            preds: Coverages | None = () if q is None else self._checker.check(q)
            if preds is not None:
                boxes.append(preds)
        if not boxes:
            return None
        if not all(boxes):  # a box without predicates is every row
            return df
        return df.where(functools.reduce(operator.or_, (self._box(b) for b in boxes)))

    def clipped_moments(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: Query | None = None,
        by: Sequence[str] = (),
        squares: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Per group cell of ``by``: the exact number of rows satisfying ``where``, the
        sum of ``clip(value, lower, upper)`` and (``squares``) the sum of its squares, as
        ``object`` arrays of Python integers; the same as DuckDB's, in one Spark query."""
        plan = _grouping.moments_plan(self.schema, attribute, lower, upper, squares)
        g = _grouping.groups(self.schema, by)
        with self._reader() as df:
            rows = self._covered(df, where)
            if rows is None:
                return _grouping.moments(
                    plan, g.cells, np.zeros(0, np.int64), [], [], [] if squares else None
                )
            keys = [self._columns[j] for j in g.indices]
            col = F.col(self._columns[plan.index]).cast("bigint")
            d = (
                F.least(F.greatest(col, F.lit(plan.low)), F.lit(plan.high)) - F.lit(plan.low)
            ).cast(_DECIMAL)
            aggs = [F.count(F.lit(1)).alias("n"), F.sum(d).alias("s1")]
            if squares:  # offsets below 2^32: their squares and sums fit DECIMAL(38, 0)
                aggs.append(F.sum((d * d).cast(_DECIMAL)).alias("s2"))
            got = (rows.groupBy(*keys) if keys else rows).agg(*aggs).collect()
        k = len(keys)
        cells = g.cell_of([np.array([r[i] for r in got], np.int64) for i in range(k)])
        if not keys:
            cells = np.zeros(len(got), np.int64)
        return _grouping.moments(
            plan,
            g.cells,
            cells,
            [r["n"] for r in got],
            [None if r["s1"] is None else int(r["s1"]) for r in got],
            [None if r["s2"] is None else int(r["s2"]) for r in got] if squares else None,
        )

    def binned_counts(
        self,
        attribute: str,
        edges: Sequence[int],
        where: Query | None = None,
        by: Sequence[str] = (),
    ) -> np.ndarray:
        """Rows satisfying ``where`` per group cell of ``by`` and per half-open bin of
        value positions: an ``int64`` array (cells, bins), the same as DuckDB's."""
        j, e = _grouping.check_edges(self.schema, attribute, edges)
        g = _grouping.groups(self.schema, by)
        with self._reader() as df:
            rows = self._covered(df, where)
            if rows is None:
                return np.zeros((g.cells, len(e) - 1), np.int64)
            cols = [self._columns[i] for i in g.indices] + [self._columns[j]]
            res = _collect_arrow(rows.groupBy(*cols).agg(F.count(F.lit(1)).alias("n")))
        k = len(cols) - 1
        cells = g.cell_of([_column(res, c) for c in cols[:k]])
        if k == 0:
            cells = np.zeros(res.num_rows, np.int64)
        return _grouping.bin_counts(g.cells, e, cells, _column(res, cols[k]), _column(res, "n"))

    def _box(self, preds: Coverages) -> Column:
        """A conjunction of coverages as one Spark condition."""
        return functools.reduce(
            operator.and_,
            (_coverage_column(self._columns[j], c, self._sizes[j]) for j, c in preds),
        )

    def close(self) -> None:
        """Drop the cached table; stop the Spark session if the backend started it (and
        no other backend uses it). New calls are refused at once; calls in flight finish
        first."""
        with self._readers:
            df, self._df = self._df, None
            if df is None:
                return
            while self._in_flight:
                self._readers.wait()
            with contextlib.suppress(*_SPARK_ERRORS):
                self.session.catalog.dropTempView(self._view)
            for d in self._cached:
                with contextlib.suppress(*_SPARK_ERRORS):
                    d.unpersist()
            self._cached.clear()
            if self._owns:
                _release(self.session)

    def __enter__(self) -> SparkBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._df is None else f"table {self.table!r}"
        return f"SparkBackend({len(self.schema)} attributes, {state})"


def _column(table: Any, name: str) -> np.ndarray:
    """A column of a collected Arrow table as int64 (NULL as 0)."""
    import pyarrow.compute as pc

    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, 0)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)


# ---------------------------------------------------------------------- loading


class _Loader:
    """raw rows with a file-order key -> coded, validated rows -> cached coded table.

    The raw DataFrame's columns are ``k0 ..`` (source columns by position) and the
    order key ``__f`` (file), ``__b`` (start of the file split), ``__m``
    (``monotonically_increasing_id``: partition index and place in the partition, taken
    right after the scan). Inside a file split the rows of a partition are in file order
    and their ids consecutive, and splits are ordered by their start, so ``(__f, __b,
    __m)`` orders the rows exactly as the files do, however Spark cuts them. Every step
    that compares keys does so within one pass over the data (the validation, which also
    numbers the rows; the privacy unit's window), so a different cut in another pass
    changes nothing; the header is the first row of the first split whatever the cut.
    """

    def __init__(self, session: SparkSession, opts: LoadOptions) -> None:
        self.session = session
        self.opts = opts
        self.schema = opts.schema
        self.source = "data"
        self.names: list[str] = []
        self.first_data = 0
        self.raw: DataFrame | None = None
        #: Order key of the header row (None without a header).
        self.header_key: tuple[str, int, int] | None = None
        self.kept: list[DataFrame] = []  # persisted DataFrames the backend keeps
        self._temp: list[DataFrame] = []  # persisted DataFrames dropped after the load

    def cleanup(self) -> None:
        for d in self._temp:
            with contextlib.suppress(*_SPARK_ERRORS):
                d.unpersist()
        self._temp.clear()

    def _persist(self, df: DataFrame, keep: bool = False) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        (self.kept if keep else self._temp).append(df)
        return df

    def _run(self, action: Any, what: str = "cannot read data: ") -> Any:
        """Run a Spark action, turning its failure into one line."""
        try:
            return action()
        except _SPARK_ERRORS as err:
            raise DataError(f"{self.source}: {what}{_spark_message(err)}") from None

    # -- step 1: raw rows with the order key

    def ingest(self, data: Any) -> None:
        if isinstance(data, str | Path):
            text = str(data)
            if _is_local(text):
                path = Path(text)
                self.source = str(path)
                if path.is_dir():
                    kind = "parquet"
                elif path.is_file():
                    kind = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
                else:
                    raise DataError(f"{path}: no such data file")
                uri = "file://" + str(path.resolve())
            else:
                self.source = uri = text
                kind = "parquet" if text.lower().endswith((".parquet", ".pq", "/")) else "csv"
            reader = _reading_session(self.session)
            self.session = reader
            if kind == "parquet":
                df = self._run(lambda: reader.read.parquet(uri))
                self.names = [str(n) for n in df.columns]
                self.raw = self._with_key(df, from_file=True)
            else:
                self._read_csv(reader, uri)
        else:
            df, self.names = self._from_object(data)
            self.raw = self._with_key(df, from_file=False)

    def _from_object(self, data: Any) -> tuple[DataFrame, list[str]]:
        if isinstance(data, DataFrame):
            self.source = "Spark DataFrame"
            return data, [str(c) for c in data.columns]
        import pyarrow as pa

        table = None
        if isinstance(data, pa.Table):
            self.source = "Arrow table"
            names = [str(c) for c in data.column_names]
            table = data.rename_columns([_raw_column(j) for j in range(len(names))])
        else:
            try:
                import pandas as pd
            except ImportError:  # pragma: no cover - pandas is a dependency
                pd = None
            if pd is not None and isinstance(data, pd.DataFrame):
                self.source = "DataFrame"
                names = [str(c) for c in data.columns]
                # Positional order is the file order (not the index, not a column).
                frame = data.copy(deep=False)
                frame.columns = [_raw_column(j) for j in range(len(names))]
                try:
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                except (pa.ArrowException, TypeError, ValueError) as err:
                    raise DataError(
                        f"{self.source}: cannot read data: {first_line(str(err))}"
                    ) from None
        if table is None:
            raise InvalidParameter(
                "data must be a CSV or Parquet path, a Spark DataFrame, a pandas DataFrame "
                f"or a pyarrow Table, got {type(data).__name__}"
            )
        # Dictionary (categorical) columns arrive as their values.
        cols = [
            c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
            for c in table.columns
        ]
        table = pa.table(cols, names=[_raw_column(j) for j in range(len(names))])
        return self._run(lambda: self._from_arrow(table)), names

    def _from_arrow(self, table: Any) -> DataFrame:
        try:
            return self.session.createDataFrame(table)
        except (TypeError, ValueError):  # pyspark 3.5 takes pandas, not Arrow
            return self.session.createDataFrame(table.to_pandas())

    def _with_key(self, df: DataFrame, *, from_file: bool) -> DataFrame:
        width = len(df.columns)
        df = df.toDF(*[_raw_column(j) for j in range(width)])
        if from_file:
            f = F.expr("input_file_name()")
            b = F.expr("input_file_block_start()")
        else:
            f, b = F.lit(""), F.lit(0).cast("bigint")
        keyed = df.select(
            "*",
            f.alias("__f"),
            b.alias("__b"),
            F.monotonically_increasing_id().alias("__m"),
        )
        return keyed

    def _read_csv(self, reader: SparkSession, uri: str) -> None:
        opts = self.opts
        options = {
            "sep": opts.separator,
            "quote": '"',
            "escape": '"',
            "header": "false",
            "inferSchema": "false",
            "mode": "FAILFAST",
            "multiLine": "false",
            "ignoreLeadingWhiteSpace": "false",
            "ignoreTrailingWhiteSpace": "false",
            "encoding": "UTF-8",
        }
        if opts.skip == 0:
            df = self._run(lambda: reader.read.options(**options).csv(uri))
            raw = self._with_key(df, from_file=True)
        else:
            # Spark's CSV reader cannot skip lines: drop the first lines of the file's
            # first split (partition 0, which starts at byte 0), then parse the rest.
            def parse() -> DataFrame:
                lines = reader.read.text(uri).select(
                    "value",
                    F.expr("input_file_block_start()").alias("b"),
                    F.monotonically_increasing_id().alias("m"),
                )
                head = (F.col("b") == 0) & (F.col("m") < F.lit(opts.skip))
                kept = lines.where(~head).select("value")
                jvm = reader.sparkContext._jvm
                assert jvm is not None
                jds = getattr(kept._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
                jreader = reader._jsparkSession.read()
                for k, v in options.items():
                    jreader = jreader.option(k, v)
                return DataFrame(jreader.csv(jds), reader)

            df = self._run(parse)
            raw = self._with_key(df, from_file=False)
        width = len(df.columns)
        self.raw = raw
        self.names = self._csv_names(raw, width)

    def _csv_names(self, raw: DataFrame, width: int) -> list[str]:
        """Column names of a CSV file read headerless; sets ``first_data`` and
        ``header_key``. The first row is the first row of the first non-empty partition
        (splits are in file order); only the header row, never a data row, comes to the
        driver: whether the first row is a header is decided on the cluster."""
        opts = self.opts
        cells = [F.coalesce(F.col(_raw_column(j)), F.lit("")) for j in range(width)]
        wanted = list(opts.columns) if opts.columns is not None else list(self.schema.names)
        if opts.header is None:
            # Every wanted name is a field of the row, as written or stripped.
            fields = F.array(*cells, *[F.btrim(c, F.lit(WHITESPACE)) for c in cells])
            names = F.array(*[F.lit(w) for w in wanted])
            flag = F.size(F.array_except(names, fields)) == 0 if wanted else F.lit(True)
        else:
            flag = F.lit(opts.header)
        first = self._run(
            lambda: raw.select(flag.alias("h"), "__f", "__b", "__m").limit(1).collect(),
        )
        if not first:
            raise DataError(f"{self.source}: the file is empty")
        header = bool(first[0]["h"])
        self.first_data = 1 if header else 0
        if header:
            self.header_key = (first[0]["__f"], int(first[0]["__b"]), int(first[0]["__m"]))
            if opts.columns is None:
                got = self._run(lambda: raw.select(F.array(*cells)).limit(1).collect())
                return [str(v) for v in got[0][0]] if width else []
        names = list(opts.columns) if opts.columns is not None else list(self.schema.names)
        msg = column_count_message(self.source, width, names, opts.columns is not None)
        if msg is not None:
            raise DataError(msg)
        return names

    def column(self, name: str, what: str) -> str | None:
        """The raw column holding ``name`` (exact name first, then ignoring surrounding
        whitespace), None if there is none; two candidates are an error."""
        found = matches(self.names, name)
        if len(found) > 1:
            raise DataError(duplicate_column_message(self.source, name, what))
        return _raw_column(found[0]) if found else None

    # -- step 2: codes, validation, privacy unit, final table

    def _integer_value(self, col: Column, dtype: T.DataType) -> Column:
        """The value as DECIMAL(38, 0) if it is an integer (exactly), else NULL."""
        if isinstance(dtype, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
            return col.cast(_DECIMAL)
        if isinstance(dtype, T.DecimalType):
            return F.when(col == F.floor(col), col.cast(_DECIMAL))
        if isinstance(dtype, T.FloatType | T.DoubleType):
            d = col.cast("double")
            # Integral, finite and inside 64 bits (every domain is): exact through BIGINT.
            ok = (
                ~F.isnan(d)
                & (d == F.rint(d))
                & (d >= F.lit(float(INT64[0])))
                & (d < F.lit(-float(INT64[0])))
            )
            return F.when(ok, d.cast("bigint").cast(_DECIMAL))
        s = F.btrim(col.cast("string"), F.lit(WHITESPACE))
        return F.when(s.rlike(r"\A" + INT_PATTERN + r"\z"), s.cast(_DECIMAL))

    def encode(self) -> tuple[DataFrame, LoadReport]:
        opts = self.opts
        schema = self.schema
        raw = self.raw
        assert raw is not None
        types = {f.name: f.dataType for f in raw.schema.fields}
        cols: list[str] = []
        for attr in schema.attributes:
            col = self.column(attr.name, f"attribute {attr.name!r}")
            if col is None:
                raise DataError(no_column_message(self.source, attr.name))
            cols.append(col)
        unit = opts.privacy_unit
        id_col = None
        if unit is not None:
            id_col = self.column(unit[0], "the privacy unit")
            if id_col is None:
                raise DataError(no_unit_column_message(self.source, unit[0]))

        src = raw
        if self.header_key is not None:
            f0, b0, m0 = self.header_key
            src = src.where(
                ~((F.col("__f") == F.lit(f0)) & (F.col("__b") == b0) & (F.col("__m") == m0))
            )
        codes: list[Column] = []
        shown: list[Column] = []
        for i, attr in enumerate(schema.attributes):
            col = F.col(cols[i])
            if attr.type == "categorical":
                text = F.btrim(col.cast("string"), F.lit(WHITESPACE))
                if attr.size <= _MAP_VALUES:
                    # A literal map (folded into one constant) looked up per row.
                    lookup = F.create_map(
                        *[x for p, v in enumerate(attr.values) for x in (F.lit(v), F.lit(p))]
                    )
                    code = F.try_element_at(lookup, text).cast("bigint")
                else:
                    # A large domain: a join with a table of the declared values.
                    dom = self.session.createDataFrame(
                        [(v, p) for p, v in enumerate(attr.values)],
                        T.StructType(
                            [
                                T.StructField(f"__v{i}", T.StringType(), False),
                                T.StructField(f"__p{i}", T.LongType(), False),
                            ]
                        ),
                    )
                    src = src.join(dom, text == F.col(f"__v{i}"), "left")
                    code = F.col(f"__p{i}")
            else:
                v = self._integer_value(col, types[cols[i]])
                lo, hi = F.lit(attr.min).cast(_DECIMAL), F.lit(attr.max).cast(_DECIMAL)
                code = F.when(v.between(lo, hi), (v - lo).cast("bigint"))
            if attr.missing is not None:  # blank, NULL, a missing token: the missing value
                dtype = types[cols[i]]
                trimmed = F.btrim(col.cast("string"), F.lit(WHITESPACE))
                missing = col.isNull() | trimmed.isin(missing_texts(attr, opts.missing))
                if isinstance(dtype, T.FloatType | T.DoubleType):
                    missing = missing | F.isnan(col.cast("double"))
                if attr.type == "integer" and isinstance(attr.missing, int):
                    # an integer marker (-1) is missing in every form it is written
                    missing = missing | (v == F.lit(attr.missing).cast(_DECIMAL))
                code = F.when(code.isNotNull(), code).when(
                    missing, F.lit(attr.missing_position).cast("bigint")
                )
            # Stored narrow: the stage is materialised once, then read by every step.
            codes.append(code.cast(_code_type(attr.size)).alias(f"v{i}"))
            if opts.show_values:
                # The raw text of invalid values only (for the custodian's message).
                dtype = types[cols[i]]
                raw = col if isinstance(dtype, T.FloatType | T.DoubleType) else col.cast("string")
                shown.append(F.when(code.isNull(), raw).alias(f"r{i}"))
        select = [*codes, *shown, "__f", "__b", "__m"]
        if id_col is not None:
            ident = F.col(id_col)
            if isinstance(types[id_col], T.StringType):
                trimmed = F.btrim(ident, F.lit(WHITESPACE))
                ident = F.when(~trimmed.isin(list(opts.missing)), trimmed)
            select.append(ident.alias("__id"))
        stage = src.select(*select)

        # Validation over every row, in ONE pass that also numbers the rows: per run of
        # consecutive rows (a file split within a partition: its ids are consecutive),
        # its rows, its first id and, per attribute, the invalid rows and the first one.
        # Runs sorted by (file, split start, first id) are in file order, so a row's
        # number is the rows of the runs before it plus its place in its run.
        n_attr = len(schema.attributes)
        m = F.col("__m")
        aggs = [F.count(F.lit(1)).alias("n"), F.min(m).alias("m0")]
        checks = [F.col(f"v{i}").isNull() for i in range(n_attr)]
        if unit is not None:
            checks.append(F.col("__id").isNull())
        for c, bad in enumerate(checks):
            aggs.append(F.count(F.when(bad, F.lit(1))).alias(f"b{c}"))
            aggs.append(F.min(F.when(bad, m)).alias(f"f{c}"))
        runs = self._run(
            lambda: (
                stage.groupBy("__f", "__b", F.shiftright(m, 33).alias("__p")).agg(*aggs).collect()
            )
        )
        runs.sort(key=lambda r: (r["__f"], r["__b"], r["m0"]))
        rows_read = sum(int(r["n"]) for r in runs)

        def first_bad(c: int) -> tuple[int, int, tuple[str, int, int] | None]:
            """(invalid rows, 1-based row of the first, its order key) of check c."""
            total, first, before = 0, None, 0
            for r in runs:
                n_bad = int(r[f"b{c}"])
                if n_bad and first is None:
                    first = (before + int(r[f"f{c}"]) - int(r["m0"]) + 1, r)
                total += n_bad
                before += int(r["n"])
            if first is None:
                return total, 0, None
            row, r = first
            return total, row, (r["__f"], int(r["__b"]), int(r[f"f{c}"]))

        bad_attrs: list[tuple[int, int, int, Any]] = []
        replaced: dict[str, int] = {}
        for i, attr in enumerate(schema.attributes):
            n_bad, row, key = first_bad(i)
            if n_bad == 0:
                continue
            if attr.name in opts.replace:
                replaced[attr.name] = n_bad
            else:
                bad_attrs.append((i, n_bad, row, key))
        id_bad = None
        if unit is not None:
            n_bad, row, _ = first_bad(n_attr)
            if n_bad:
                id_bad = (n_bad, row)
        if opts.on_invalid == "error":
            if bad_attrs:
                i, n_bad, row, key = bad_attrs[0]
                raw_value = self._raw(stage, key, f"r{i}") if opts.show_values else NOT_SHOWN
                listed = [(j, n, r) for j, n, r, _ in bad_attrs]
                raise DataError(
                    invalid_message(
                        self.source, schema, listed, raw=raw_value, missing=opts.missing
                    )
                )
            if id_bad is not None:
                assert unit is not None
                raise DataError(missing_id_message(self.source, unit[0], id_bad[0], id_bad[1]))

        # Final table: privacy-unit cap in file order, then the drop rule, then replacements.
        src = stage
        if unit is not None:
            window = Window.partitionBy("__id").orderBy("__f", "__b", "__m")
            src = (
                src.where(F.col("__id").isNotNull())
                .withColumn("__rank", F.row_number().over(window))
                .where(F.col("__rank") <= F.lit(unit[1]))
            )
        final_cols = []
        for i, attr in enumerate(schema.attributes):
            code = F.col(f"v{i}")
            if attr.name in opts.replace:
                code = F.coalesce(code, F.lit(opts.replace[attr.name]).cast("bigint"))
            final_cols.append(code.cast(_code_type(attr.size)).alias(_code_column(i)))
        valid = F.lit(True)
        if opts.on_invalid == "drop":
            valid = functools.reduce(
                operator.and_,
                [
                    F.col(f"v{i}").isNotNull()
                    for i, attr in enumerate(schema.attributes)
                    if attr.name not in opts.replace
                ],
                F.lit(True),
            )
        pre = src.select(*final_cols, valid.alias("__ok"))
        parallel = self.session.sparkContext.defaultParallelism
        if rows_read >= _SPREAD_ROWS and pre.rdd.getNumPartitions() < parallel:
            pre = pre.repartition(parallel)  # e.g. one gzip file: one partition
        pre = self._persist(pre, keep=True)
        got = self._run(
            lambda: pre.agg(F.count(F.lit(1)), F.count(F.when(F.col("__ok"), F.lit(1)))).collect()[
                0
            ]
        )
        kept, n_rows = int(got[0]), int(got[1])
        names = [_code_column(i) for i in range(n_attr)]
        if kept != n_rows:
            final = self._persist(pre.where(F.col("__ok")).select(*names), keep=True)
            self._run(final.count)
            self.kept.remove(pre)
            self._temp.append(pre)
        else:
            final = pre.select(*names)
        dropped_unit = rows_read - kept if unit is not None else 0
        return final, LoadReport(
            rows_read=rows_read,
            rows=n_rows,
            dropped_invalid=kept - n_rows if opts.on_invalid == "drop" else 0,
            dropped_privacy_unit=dropped_unit,
            replaced=replaced,
        )

    def _raw(self, stage: DataFrame, key: Any, shown: str) -> Any:
        """The raw text of the row with order key ``key`` (the stage's column ``shown``),
        for the custodian's message: one value back. Another pass: should Spark have cut
        the file otherwise in between (cores joined the cluster), a key that is no longer
        found leaves the value out of the message rather than show another row's."""
        f0, b0, m0 = key
        same = (F.col("__f") == F.lit(f0)) & (F.col("__b") == b0) & (F.col("__m") == m0)
        got = self._run(
            lambda: stage.where(same).agg(F.count(F.lit(1)), F.max(F.col(shown))).collect()[0]
        )
        if int(got[0]) != 1:
            return NOT_SHOWN
        return _as_text(got[1], stage.schema[shown].dataType)
