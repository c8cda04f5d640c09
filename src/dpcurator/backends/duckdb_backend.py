"""The embedded default backend: DuckDB, with the table stored as integer codes.

Loading validates every row against the public schema and stores one integer *code*
column per attribute (the value's position in its domain). Counting pushes predicates
down to SQL with ``?`` parameters; a batch of queries is answered from one scan that
builds dense contingency arrays with ``GROUP BY GROUPING SETS``, contracted with the
queries in numpy (see :mod:`dpcurator.backends._contract`). Queries on attribute sets
too large for a dense array fall back to batched ``count(*) FILTER (WHERE ...)``. The
arrays of attribute sets asked often are kept (:mod:`dpcurator.backends.marginal_cache`),
so that later counts on them need no scan.

The backend never adds noise, never sees a budget and never returns rows.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpcurator.backends import _grouping, unions
from dpcurator.backends._contract import contract
from dpcurator.backends._sql import coverage_sql, ident
from dpcurator.backends._validation import (
    ClipPlan,
    Coverages,
    LoadReport,
    QueryChecker,
    check_load_options,
    clip_plan,
    first_line,
    summed_rows,
)
from dpcurator.backends.duckdb_grouped import grouped_sql
from dpcurator.backends.duckdb_load import Loader, code_column
from dpcurator.backends.marginal_cache import CACHE_CELLS, MarginalCache
from dpcurator.backends.unit_rows import SCHEME, UNIT_COLUMN
from dpcurator.errors import (
    DpCuratorError,
    InvalidParameter,
)
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.predicates import IntervalSet, Query
from dpcurator.queries.schema import Schema

#: Largest attribute set (product of domain sizes) counted through a dense array.
DENSE_LIMIT = 2_000_000
#: Most result rows fetched by one ``GROUPING SETS`` statement.
_RESULT_ROWS = 30_000_000
#: Most grouping sets in one statement.
_MAX_SETS = 64
#: Queries per ``count(*) FILTER`` statement. DuckDB's cost per FILTER aggregate grows
#: with their number in one statement (10^6 rows: 256 queries take 5.9 s in one
#: statement, 0.6 s in chunks of 8), so statements stay small.
FILTER_CHUNK = 8
#: An attribute set asked by at most this many queries is counted by FILTER aggregates
#: rather than a dense GROUP BY (a GROUP BY over 10^6 rows costs ~10 FILTER counts).
FEW_QUERIES = 8

#: Exclusive bound of DuckDB's HUGEINT (signed 128-bit).
_HUGEINT = 2**127


class DuckDBBackend:
    """Exact counts over a validated, integer-coded table held by DuckDB."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        schema: Schema,
        table: str,
        *,
        owns_connection: bool,
        report: LoadReport,
    ) -> None:
        self.schema = schema
        self.table = table
        self.report = report
        self._con: duckdb.DuckDBPyConnection | None = connection
        self._owns = owns_connection
        self._rows = report.rows
        # A DuckDB connection runs one statement at a time. Counting (read-only) runs on
        # cursors of our own connection instead, one per call in flight, reused: DuckDB
        # runs statements of different cursors concurrently. Loading, writes and close()
        # hold this lock; a connection the caller passed in is theirs (their transaction,
        # their current schema), so counts on it are serialised under the lock too.
        self._lock = threading.RLock()
        self._concurrent = owns_connection
        #: Guards the cursor pool and the number of counts in flight; close() waits on it.
        self._readers = threading.Condition(threading.Lock())
        self._in_flight = 0
        self._closing = False
        self._idle: list[duckdb.DuckDBPyConnection] = []
        self._columns = [code_column(i) for i in range(len(schema))]
        self._checker = QueryChecker(schema)
        # Marginals of often-asked attribute sets; only on our own connection, whose
        # table nobody else writes (a borrowed connection's table may change under us).
        self._marginals = MarginalCache(
            cells=CACHE_CELLS if owns_connection else 0, after=FEW_QUERIES
        )

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
        connection: duckdb.DuckDBPyConnection | None = None,
        name: str = "data",
        show_values: bool = True,
        max_dropped: float = 0.05,
    ) -> DuckDBBackend:
        """Load, validate and encode a table.

        ``data``: a CSV path (optionally gzip-compressed), a ``.parquet`` path, a pandas
        DataFrame or a pyarrow Table. CSV options: ``separator`` (may be several
        characters, e.g. ``", "``), ``header`` (``None`` detects it: the first row is a
        header iff it contains every schema attribute name), ``columns`` (names of all
        the file's columns for a headerless file with more columns than the schema, or
        to rename a header's columns), ``skip`` (lines to skip before the data).

        Validation: a value is valid if, after stripping surrounding whitespace, it is a
        declared value of a categorical attribute, or an integer in ``[min, max]`` of an
        integer attribute. Anything else (including the ``missing`` tokens unless they are
        declared values, and empty/NULL fields) is invalid and raises :class:`DataError`
        naming the attribute, the number of rows and the first offending row, unless
        ``replace={attr: declared_value}`` maps that attribute's invalid values to a
        declared value, or ``on_invalid="drop"`` drops every row still invalid.
        ``show_values=False`` keeps the raw value out of the message. Under the drop rule,
        a load that would drop more than ``max_dropped`` (a share, default 5%) of the rows
        for invalid values is refused, naming the attributes responsible.

        ``privacy_unit=("id_column", k)`` with ``unit_key`` (32 secret random bytes,
        required with it) keeps a uniformly random choice of ``k`` valid rows of each id,
        decided by a keyed hash of each row's content: the same rows for the same key
        whatever the file order, in any process and in the Spark backend (see
        :mod:`dpcurator.backends.unit_rows`; ``unit_rows``: the scheme of that choice, a
        ledger's for its life). Rows with a missing id are refused, or
        dropped under ``on_invalid="drop"``. The kept rows' ids stay in the table only
        for :meth:`distinct_units`; ``report.unit`` describes the units.
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
        schema = opts.schema
        own = connection is None
        con = duckdb.connect() if own else connection
        assert con is not None
        loader = Loader(con, schema, show_values=opts.show_values, missing=opts.missing)
        try:
            loader.ingest(
                data,
                separator=opts.separator,
                header=opts.header,
                columns=opts.columns,
                skip=opts.skip,
            )
            report = loader.encode(
                opts.name,
                on_invalid=opts.on_invalid,
                replace=opts.replace,
                privacy_unit=opts.privacy_unit,
                unit_key=opts.unit_key,
                max_dropped=opts.max_dropped,
                unit_rows=opts.unit_rows,
            )
        except BaseException:
            loader.cleanup()
            if own:
                con.close()
            raise
        loader.cleanup()
        return cls(con, schema, opts.name, owns_connection=own, report=report)

    # ------------------------------------------------------------------ queries

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the table (counts use cursors of it). Read the
        table through it, never write it: counts kept from its marginals would not see
        the change (a table you own goes on a connection you pass to :meth:`load`)."""
        if self._con is None:
            raise InvalidParameter("the backend is closed")
        return self._con

    @contextlib.contextmanager
    def _reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to count on: an idle cursor of ours (or a new one), for this call
        only; or, on a borrowed connection, that connection under the lock. Refused once
        close() has begun; close() waits until every reader has left."""
        if not self._concurrent:
            with self._lock:
                yield self.connection
            return
        with self._readers:
            if self._con is None or self._closing:
                raise InvalidParameter("the backend is closed")
            cur = self._idle.pop() if self._idle else None
            self._in_flight += 1
        try:
            if cur is None:
                try:
                    with self._readers:  # cursor() itself is made one at a time
                        cur = self._con.cursor()
                except duckdb.Error as err:
                    raise InvalidParameter(f"cannot count: {first_line(str(err))}") from None
            yield cur
        except DpCuratorError:
            raise  # a refused query: the cursor ran nothing wrong, keep it
        except BaseException:
            # A failed or interrupted statement: do not reuse that cursor.
            bad, cur = cur, None
            if bad is not None:
                with contextlib.suppress(duckdb.Error):
                    bad.close()
            raise
        finally:
            with self._readers:
                if cur is not None:
                    self._idle.append(cur)
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._readers.notify_all()

    def counts(self, queries: Sequence[Query]) -> np.ndarray:
        """Exact counts (int64), one per query, in order, from as few scans as possible.

        Thread-safe: calls from several threads count concurrently (each on its own
        cursor) and get exactly what they would get one at a time."""
        given = self._checker.query_list(queries)
        flat, owner = unions.expand(given)
        with self._reader() as con:
            return unions.fold(self._counts(con, flat), owner, len(given))

    def _counts(self, con: duckdb.DuckDBPyConnection, queries: list[Any]) -> np.ndarray:
        n = len(queries)
        out = np.zeros(n, dtype=np.int64)
        attrs = self.schema.attributes
        groups: dict[tuple[int, ...], tuple[list[int], list[tuple[IntervalSet, ...]]]] = {}
        for i, q in enumerate(queries):
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
        dense_keys = []
        sparse_keys = []
        for key, (members, covs) in groups.items():
            cells = math.prod(attrs[j].size for j in key)
            kept = None if cells > DENSE_LIMIT else self._marginals.get(key)
            if kept is not None:
                out[members] = kept.counts(covs)
            elif cells > DENSE_LIMIT:
                sparse_keys.append(key)
            elif len(members) > FEW_QUERIES or self._marginals.due(key, len(members), cells):
                dense_keys.append(key)
            else:
                sparse_keys.append(key)
        for batch in self._batches(dense_keys):
            for key, dense in self._dense_arrays(con, batch):
                idx, covs = groups[key]
                kept = self._marginals.keep(key, dense)
                out[idx] = contract(dense, covs) if kept is None else kept.counts(covs)
        for key in sparse_keys:
            idx, covs = groups[key]
            out[idx] = self._filter_counts(con, key, covs)
        return out

    def _batches(self, keys: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
        attrs = self.schema.attributes
        batches: list[list[tuple[int, ...]]] = []
        rows = 0
        for key in keys:
            size = min(math.prod(attrs[j].size for j in key), max(self._rows, 1))
            if not batches or len(batches[-1]) >= _MAX_SETS or rows + size > _RESULT_ROWS:
                batches.append([])
                rows = 0
            batches[-1].append(key)
            rows += size
        return batches

    def _dense_arrays(
        self, con: duckdb.DuckDBPyConnection, keys: list[tuple[int, ...]]
    ) -> list[tuple[tuple[int, ...], np.ndarray]]:
        """Dense contingency arrays of several attribute sets from ONE scan."""
        attrs = self.schema.attributes
        cols = sorted({j for key in keys for j in key})
        pos = {j: p for p, j in enumerate(cols)}
        names = [self._columns[j] for j in cols]
        sets = ", ".join("(" + ", ".join(self._columns[j] for j in key) + ")" for key in keys)
        # Aliases (g, x<p>, n) are never column names of the table (c<i>).
        select = ", ".join(f"coalesce({c}, 0) AS x{p}" for p, c in enumerate(names))
        sql = (
            f"SELECT GROUPING({', '.join(names)}) AS g, {select}, count(*) AS n "
            f"FROM {ident(self.table)} GROUP BY GROUPING SETS ({sets})"
        )
        res = con.execute(sql).fetchnumpy()
        g = np.asarray(res["g"])
        cnt = np.asarray(res["n"], dtype=np.int64)
        width = len(cols)
        out = []
        for key in keys:
            gid = sum(1 << (width - 1 - pos[j]) for j in cols if j not in key)
            mask = g == gid
            shape = tuple(attrs[j].size for j in key)
            dense = np.zeros(math.prod(shape), dtype=np.int64)
            if mask.any():
                codes = tuple(np.asarray(res[f"x{pos[j]}"])[mask].astype(np.int64) for j in key)
                dense[np.ravel_multi_index(codes, shape)] = cnt[mask]
            out.append((key, dense.reshape(shape)))
        return out

    def _where(self, preds: Coverages) -> tuple[str, list[int]]:
        parts: list[str] = []
        params: list[int] = []
        for j, cov in preds:
            text, ps = coverage_sql(self._columns[j], cov, self.schema.attributes[j].size)
            parts.append(text)
            params.extend(ps)
        return (" AND ".join(parts) if parts else "TRUE"), params

    def _filter_counts(
        self,
        con: duckdb.DuckDBPyConnection,
        key: tuple[int, ...],
        covs: list[tuple[IntervalSet, ...]],
    ) -> np.ndarray:
        """Fallback: batched ``count(*) FILTER (WHERE ...)`` aggregates, one scan per chunk."""
        attrs = self.schema.attributes
        out = np.zeros(len(covs), dtype=np.int64)
        for start in range(0, len(covs), FILTER_CHUNK):
            chunk = covs[start : start + FILTER_CHUNK]
            aggs: list[str] = []
            params: list[int] = []
            for qcovs in chunk:
                conds = []
                for j, cov in zip(key, qcovs, strict=True):
                    text, ps = coverage_sql(self._columns[j], cov, attrs[j].size)
                    conds.append(text)
                    params.extend(ps)
                aggs.append(f"count(*) FILTER (WHERE {' AND '.join(conds)})")
            row = con.execute(f"SELECT {', '.join(aggs)} FROM {ident(self.table)}", params)
            out[start : start + len(chunk)] = np.asarray(row.fetchall()[0], dtype=np.int64)
        return out

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
        ``min(max(value, lower), upper)``, counted in ``unit`` (1; a float attribute's
        step or a tenth of it: then the bounds are in that unit too); the bounds are
        integers of any size. Thread-safe, like :meth:`counts`."""
        plan = clip_plan(self.schema, attribute, lower, upper, unit)
        if isinstance(where, BooleanQuery):  # disjoint boxes: their sums add up
            parts = unions.boxes(where)
            with self._reader() as con:
                return sum(self._clipped_sum(con, plan, b) for b in parts)
        with self._reader() as con:
            return self._clipped_sum(con, plan, where)

    def _offset_sql(self, plan: ClipPlan) -> str:
        """SQL of a row's offset ``d`` (see :class:`ClipPlan`), a HUGEINT."""
        col = self._columns[plan.index]
        if plan.scale == 1:
            return (
                f"(least(greatest(CAST({col} AS HUGEINT), CAST({plan.low} AS HUGEINT)), "
                f"CAST({plan.high} AS HUGEINT)) - CAST({plan.low} AS HUGEINT))"
            )
        return (
            f"least(greatest(CAST({col} AS HUGEINT) * CAST({plan.scale} AS HUGEINT) + "
            f"CAST({plan.shift} AS HUGEINT), CAST(0 AS HUGEINT)), CAST({plan.span} AS HUGEINT))"
        )

    def _clipped_sum(
        self,
        con: duckdb.DuckDBPyConnection,
        plan: ClipPlan,
        where: Query | None,
    ) -> int:
        preds: Coverages | None = () if where is None else self._checker.check(where)
        if preds is not None:
            preds = summed_rows(preds, self.schema, plan.index)
        if preds is None:
            return 0
        cond, params = self._where(preds)
        table = ident(self.table)
        if plan.constant is not None:  # every value clipped to one bound
            if not preds:
                return plan.total(self._rows, None)
            row = con.execute(f"SELECT count(*) FROM {table} WHERE {cond}", params)
            return plan.total(int(row.fetchall()[0][0]), None)
        # count * span < 2^64 * 2^63: the HUGEINT sum cannot overflow (checked anyway).
        if self._rows * plan.span >= _HUGEINT:
            name = self.schema.attributes[plan.index].name
            raise InvalidParameter(
                f"clipped sum of {name!r} could overflow 128-bit integers "
                f"(clipped offsets up to {plan.span})"  # no row count: it is the data's
            )
        sql = f"SELECT count(*), sum({self._offset_sql(plan)}) FROM {table} WHERE {cond}"
        n, offsets = con.execute(sql, params).fetchall()[0]
        return plan.total(int(n), None if offsets is None else int(offsets))

    def _cover(self, where: Query | None) -> tuple[str, list[int]] | None:
        """The SQL condition of ``where`` (a union's disjoint boxes OR-ed), or None when
        it covers nothing."""
        parts = unions.boxes(where) if isinstance(where, BooleanQuery) else (where,)
        conds: list[str] = []
        params: list[int] = []
        for q in parts:
            preds: Coverages | None = () if q is None else self._checker.check(q)
            if preds is None:
                continue
            text, ps = self._where(preds)
            conds.append(f"({text})")
            params.extend(ps)
        return (" OR ".join(conds), params) if conds else None

    def distinct_units(self, where: Query | None = None) -> int:
        """The exact number of distinct privacy-unit ids among the (kept) rows satisfying
        ``where`` (all rows if None): one ``count(DISTINCT ...)``. Refused for a table
        loaded without a privacy unit. Thread-safe, like :meth:`counts`."""
        if self.report.unit is None:
            raise InvalidParameter("this table was loaded without a privacy unit: no units")
        cond = self._cover(where)
        if cond is None:
            return 0
        sql = f"SELECT count(DISTINCT {UNIT_COLUMN}) FROM {ident(self.table)} WHERE {cond[0]}"
        with self._reader() as con:
            return int(con.execute(sql, cond[1]).fetchall()[0][0])

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
        """Per group cell of ``by`` (see :mod:`dpcurator.backends._grouping`): the exact
        number of rows satisfying ``where``, the sum of ``clip(value, lower, upper)`` and
        (``squares``) the sum of its squares, counted in ``unit`` (see
        :meth:`clipped_sum`), as ``object`` arrays of Python integers. One scan.
        Thread-safe, like :meth:`counts`."""
        plan = _grouping.moments_plan(self.schema, attribute, lower, upper, squares, unit)
        g = _grouping.groups(self.schema, by)
        cond = self._cover(where)
        if cond is None:
            return _grouping.moments(
                plan, g.cells, np.zeros(0, np.int64), [], [], [] if squares else None
            )
        keys = [self._columns[j] for j in g.indices]
        if self.schema.attributes[plan.index].size <= _grouping.HISTOGRAM_VALUES:
            cols, at = g.with_column(plan.index)
            listed = ", ".join(self._columns[j] for j in cols)
            sql = (
                f"SELECT {listed}, count(*) AS n FROM {ident(self.table)} WHERE {cond[0]} "
                f"GROUP BY {listed}"
            )
            with self._reader() as con:
                res = con.execute(sql, cond[1]).fetchnumpy()
            names = list(res)
            k = len(keys)
            cells = g.cell_of([np.asarray(res[names[i]], np.int64) for i in range(k)])
            if not keys:
                cells = np.zeros(len(res[names[-1]]), np.int64)
            return _grouping.moments_from_counts(
                plan, g.cells, cells, res[names[at]], res[names[-1]], squares
            )
        d = self._offset_sql(plan)
        aggs = ["count(*) AS n", f"sum({d}) AS s1"]
        if squares:
            aggs.append(f"sum({d} * {d}) AS s2")
        sql = f"SELECT {', '.join([*keys, *aggs])} FROM {ident(self.table)} WHERE {cond[0]}" + (
            f" GROUP BY {', '.join(keys)}" if keys else ""
        )
        with self._reader() as con:
            rows = con.execute(sql, cond[1]).fetchall()
        k = len(keys)
        cells = g.cell_of([np.array([r[i] for r in rows], np.int64) for i in range(k)])
        if not keys:
            cells = np.zeros(len(rows), np.int64)
        return _grouping.moments(
            plan,
            g.cells,
            cells,
            [r[k] for r in rows],
            [r[k + 1] for r in rows],
            [r[k + 2] for r in rows] if squares else None,
        )

    def grouped_counts(
        self,
        where: Query | None,
        by: Sequence[str] = (),
        conditions: Sequence[Query] = (),
        moments: Sequence[tuple[str, int, int, object, bool]] = (),
        attributes: Sequence[str] = (),
    ) -> _grouping.GroupedCounts:
        """Per group cell of ``by``, from ONE ``GROUP BY`` over the rows ``where``
        covers (counts and sums of codes, no per-row arithmetic; see
        :mod:`~dpcurator.backends.duckdb_grouped`): the rows,
        the rows each of ``conditions`` holds for, and for each ``(attribute, lower,
        upper, unit, squares)`` of ``moments`` the rows with a value, the sum of their
        values clipped to [lower, upper] and of its squares, in ``unit`` (as
        :meth:`clipped_moments`). Each of ``attributes`` (of at most
        :data:`~dpcurator.backends._grouping.HISTOGRAM_VALUES` values) adds its rows per
        code, one more ``GROUP BY``. Thread-safe, like :meth:`counts`."""
        g = _grouping.groups(self.schema, by)
        names = _grouping.check_grouped(self.schema, attributes, conditions)
        parts = [_grouping.moments_part(self.schema, *m) for m in moments]
        cells = g.cells
        cond = self._cover(where)
        if cond is None:
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
        covers = [self._cover(c) for c in conditions]
        stmt = grouped_sql(self.schema, self._columns, self.table, keys, covers, parts, cells)
        per_code = []
        with self._reader() as con:
            res = stmt.unfold(con.execute(stmt.sql(cond[0]), [*stmt.params, *cond[1]]).fetchall())
            for n in names:
                cols, at = g.with_column(self.schema.index(n))
                listed = ", ".join(self._columns[i] for i in cols)
                got = con.execute(
                    f"SELECT {listed}, count(*) AS n FROM {ident(self.table)} WHERE {cond[0]} "
                    f"GROUP BY {listed}",
                    cond[1],
                ).fetchnumpy()
                per_code.append((list(got), got, at))
        k = len(keys)
        cell = (
            g.cell_of([np.array([r[i] for r in res], np.int64) for i in range(k)])
            if k
            else np.zeros(len(res), np.int64)
        )
        values = [r[k:] for r in res]
        return _grouping.grouped_result(g, cells, cell, values, conditions, parts, names, per_code)

    def binned_counts(
        self,
        attribute: str,
        edges: Sequence[int],
        where: Query | None = None,
        by: Sequence[str] = (),
    ) -> np.ndarray:
        """Rows satisfying ``where`` per group cell of ``by`` and per half-open bin
        ``[edges[j], edges[j + 1])`` of the attribute's value positions: an ``int64``
        array (cells, bins). One scan. Thread-safe, like :meth:`counts`."""
        j, e = _grouping.check_edges(self.schema, attribute, edges)
        g = _grouping.groups(self.schema, by)
        cond = self._cover(where)
        if cond is None:
            return np.zeros((g.cells, len(e) - 1), np.int64)
        cols, at = g.with_column(j)
        listed = ", ".join(self._columns[i] for i in cols)
        sql = (
            f"SELECT {listed}, count(*) AS n FROM {ident(self.table)} WHERE {cond[0]} "
            f"GROUP BY {listed}"
        )
        with self._reader() as con:
            res = con.execute(sql, cond[1]).fetchnumpy()
        names = list(res)
        k = len(g.indices)
        cells = g.cell_of([np.asarray(res[names[i]], np.int64) for i in range(k)])
        if not k:
            cells = np.zeros(len(res[names[-1]]), np.int64)
        return _grouping.bin_counts(g.cells, e, cells, res[names[at]], res[names[-1]])

    def close(self) -> None:
        """Close the connection if the backend opened it, else drop its table.

        Safe while other threads are counting: new counts are refused at once ("the
        backend is closed"), and close() waits for the counts in flight to finish."""
        with self._lock:
            with self._readers:
                if self._con is None:
                    return
                self._closing = True
                while self._in_flight:
                    self._readers.wait()
                con, self._con = self._con, None
                idle, self._idle = self._idle, []
            for cur in idle:
                with contextlib.suppress(duckdb.Error):
                    cur.close()
            if self._owns:
                con.close()
            else:
                con.execute(f"DROP TABLE IF EXISTS {ident(self.table)}")

    def __enter__(self) -> DuckDBBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._con is None else f"table {self.table!r}"
        return f"DuckDBBackend({len(self.schema)} attributes, {state})"


def load_table(
    data: str | Path | Any,
    schema: Schema | str | Path | Mapping[str, Any],
    **options: Any,
) -> DuckDBBackend:
    """Load a table into a new :class:`DuckDBBackend` (see :meth:`DuckDBBackend.load`)."""
    return DuckDBBackend.load(data, schema, **options)
