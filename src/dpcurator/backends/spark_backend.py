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
    ClipPlan,
    Coverages,
    LoadReport,
    QueryChecker,
    check_load_options,
    clip_plan,
    summed_rows,
)
from dpcurator.backends.spark_load import DECIMAL, Loader, code_column
from dpcurator.backends.spark_session import SPARK_ERRORS, acquire, release
from dpcurator.backends.unit_rows import SCHEME, UNIT_COLUMN
from dpcurator.errors import InvalidParameter
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.predicates import IntervalSet, Query
from dpcurator.queries.schema import Schema

try:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql import functions as F
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
        self._columns = [code_column(i) for i in range(len(schema))]
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
        unit_key: bytes | None = None,
        unit_rows: int = SCHEME,
        spark: SparkSession | str | None = None,
        name: str = "data",
        show_values: bool = True,
        max_dropped: float = 0.05,
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

        The privacy unit keeps exactly DuckDB's rows for the same ``unit_key`` (a keyed
        hash of each row's content: file order and Spark's partitioning do not matter).
        Row numbers in messages follow file order: lines of a CSV file, rows of a Parquet
        file, part files by name; a DataFrame's order is its partition order.
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
            unit_key=unit_key,
            max_dropped=max_dropped,
            unit_rows=unit_rows,
        )
        if columns is not None and not isinstance(data, str | Path):
            raise InvalidParameter("columns= applies to CSV files only")
        if isinstance(data, DataFrame):
            session, owned = data.sparkSession, False
        else:
            session, owned = acquire(spark)
        loader = Loader(session, opts)
        try:
            loader.ingest(data)
            table, report = loader.encode()
        except BaseException:
            loader.cleanup()
            if owned:
                release(session)
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
        """The coded table (columns ``c0``, ``c1``, ...: codes of the attributes; with a
        privacy unit also ``__unit``, the kept rows' ids, for :meth:`distinct_units`)."""
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
        *,
        unit: object = 1,
    ) -> int:
        """Exact sum (a Python ``int``) over the rows satisfying ``where`` of
        ``min(max(value, lower), upper)``, counted in ``unit`` (as DuckDB's); the bounds
        are integers of any size. A :class:`BooleanQuery` sums over its disjoint boxes,
        in one Spark query."""
        plan = clip_plan(self.schema, attribute, lower, upper, unit)
        if isinstance(where, BooleanQuery):
            parts: tuple[Any, ...] = unions.boxes(where)
            if not parts:
                return 0
        else:
            parts = (where,)
        with self._reader() as df:
            return self._clipped_sum(df, plan, parts)

    def _offset(self, plan: ClipPlan) -> Column:
        """A row's offset ``d`` (see :class:`ClipPlan`) as DECIMAL(38, 0)."""
        col = F.col(self._columns[plan.index]).cast("bigint")
        if plan.scale == 1:  # codes below 2^63: in 64 bits
            return (
                F.least(F.greatest(col, F.lit(plan.low)), F.lit(plan.high)) - F.lit(plan.low)
            ).cast(DECIMAL)
        scaled = col.cast(DECIMAL) * F.lit(plan.scale).cast(DECIMAL) + F.lit(plan.shift).cast(
            DECIMAL
        )
        zero = F.lit(0).cast(DECIMAL)
        return F.least(F.greatest(scaled.cast(DECIMAL), zero), F.lit(plan.span).cast(DECIMAL))

    def _clipped_sum(self, df: DataFrame, plan: ClipPlan, parts: tuple[Any, ...]) -> int:
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
        # Offsets are below 2^63 and there are fewer than 2^63 rows: the DECIMAL(38, 0)
        # sum (up to 10^38 - 1 > 2^126) is exact and cannot overflow.
        got = rows.agg(F.count(F.lit(1)), F.sum(self._offset(plan))).collect()[0]
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

    def distinct_units(self, where: Query | None = None) -> int:
        """The exact number of distinct privacy-unit ids among the (kept) rows satisfying
        ``where`` (all rows if None): one ``countDistinct``. Refused for a table loaded
        without a privacy unit. Thread-safe."""
        if self.report.unit is None:
            raise InvalidParameter("this table was loaded without a privacy unit: no units")
        with self._reader() as df:
            rows = self._covered(df, where)
            if rows is None:
                return 0
            return int(rows.agg(F.countDistinct(F.col(UNIT_COLUMN))).collect()[0][0])

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
        """Per group cell of ``by``: the exact number of rows satisfying ``where``, the
        sum of ``clip(value, lower, upper)`` and (``squares``) the sum of its squares,
        counted in ``unit``, as ``object`` arrays of Python integers; the same as
        DuckDB's, in one Spark query."""
        plan = _grouping.moments_plan(self.schema, attribute, lower, upper, squares, unit)
        g = _grouping.groups(self.schema, by)
        with self._reader() as df:
            rows = self._covered(df, where)
            if rows is None:
                return _grouping.moments(
                    plan, g.cells, np.zeros(0, np.int64), [], [], [] if squares else None
                )
            keys = [self._columns[j] for j in g.indices]
            d = self._offset(plan)
            aggs = [F.count(F.lit(1)).alias("n"), F.sum(d).alias("s1")]
            if squares:  # offsets below 2^32: their squares and sums fit DECIMAL(38, 0)
                aggs.append(F.sum((d * d).cast(DECIMAL)).alias("s2"))
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

    def grouped_counts(
        self,
        where: Query | None,
        by: Sequence[str] = (),
        conditions: Sequence[Query] = (),
        moments: Sequence[tuple[str, int, int, object, bool]] = (),
        attributes: Sequence[str] = (),
    ) -> _grouping.GroupedCounts:
        """The same as DuckDB's: one aggregation over the rows ``where`` covers (rows,
        rows per condition, clipped sums as counts and sums of codes), and one more per
        attribute asked for its rows per code."""
        g = _grouping.groups(self.schema, by)
        names = _grouping.check_grouped(self.schema, attributes, conditions)
        parts = [_grouping.moments_part(self.schema, *m) for m in moments]
        cells = g.cells
        with self._reader() as df:
            rows_df = self._covered(df, where)
            if rows_df is None:
                zero = np.zeros(cells, np.int64)
                empty = np.zeros(0, np.int64)
                return _grouping.GroupedCounts(
                    zero,
                    tuple(zero.copy() for _ in conditions),
                    tuple(
                        _grouping.moments(m.plan, cells, empty, [], [], [] if m.squares else None)
                        for m in parts
                    ),
                    {n: (empty, empty, empty) for n in names},
                )
            keys = [self._columns[j] for j in g.indices]
            one = F.lit(1)
            aggs = [F.count(one)]
            aggs += [F.count(F.when(self._condition(c), one)) for c in conditions]
            for m in parts:
                col = F.col(self._columns[m.plan.index]).cast("bigint")
                present = col != m.missing if m.missing is not None else F.lit(True)
                mid = col.between(max(m.low_code, 0), max(m.high_code, -1))
                code = col.cast(DECIMAL)
                aggs += [
                    F.count(F.when(present, one)),
                    F.count(F.when(present & (col > max(m.high_code, -1)), one)),
                    F.count(F.when(mid, one)),
                    F.sum(F.when(mid, code)),
                ]
                if m.squares:
                    aggs.append(F.sum(F.when(mid, (code * code).cast(DECIMAL))))
            got = (rows_df.groupBy(*keys) if keys else rows_df).agg(*aggs).collect()
            per_code = []
            for n in names:
                cols, at = g.with_column(self.schema.index(n))
                listed = [self._columns[i] for i in cols]
                table = _collect_arrow(rows_df.groupBy(*listed).agg(F.count(one).alias("n")))
                per_code.append(
                    ([*listed, "n"], {c: _column(table, c) for c in [*listed, "n"]}, at)
                )
        k = len(keys)
        cell = (
            g.cell_of([np.array([r[i] for r in got], np.int64) for i in range(k)])
            if k
            else np.zeros(len(got), np.int64)
        )
        values = [list(r)[k:] for r in got]
        return _grouping.grouped_result(g, cells, cell, values, conditions, parts, names, per_code)

    def _condition(self, q: Query) -> Column:
        """A query as one Spark condition (a union's disjoint boxes OR-ed)."""
        parts = unions.boxes(q) if isinstance(q, BooleanQuery) else (q,)
        boxes = [b for b in (self._checker.check(p) for p in parts) if b is not None]
        if not boxes:
            return F.lit(False)
        if not all(boxes):
            return F.lit(True)
        return functools.reduce(operator.or_, (self._box(b) for b in boxes))

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
            at_cols, at = g.with_column(j)
            cols = [self._columns[i] for i in at_cols]
            res = _collect_arrow(rows.groupBy(*cols).agg(F.count(F.lit(1)).alias("n")))
        k = len(g.indices)
        cells = g.cell_of([_column(res, c) for c in cols[:k]])
        if k == 0:
            cells = np.zeros(res.num_rows, np.int64)
        return _grouping.bin_counts(g.cells, e, cells, _column(res, cols[at]), _column(res, "n"))

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
            with contextlib.suppress(*SPARK_ERRORS):
                self.session.catalog.dropTempView(self._view)
            for d in self._cached:
                with contextlib.suppress(*SPARK_ERRORS):
                    d.unpersist()
            self._cached.clear()
            if self._owns:
                release(self.session)

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
