"""Loading for the Spark backend: reading with a file-order key, coding (the session is
:mod:`dpcurator.backends.spark_session`'s).

The pipeline (:class:`Loader`) reads the source with an order key per row (for row numbers
in messages), codes and validates every value on the cluster with DuckDB's rules and
messages, applies the privacy unit (a keyed, uniformly random choice of each unit's rows,
the same as DuckDB's: :mod:`dpcurator.backends.unit_rows`) and persists the coded table
that :class:`~dpcurator.backends.spark_backend.SparkBackend` counts over.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import operator
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpcurator.backends._validation import (
    INT64,
    INT_TEXT_PATTERN,
    MAPPED_TYPES,
    NOT_SHOWN,
    WHITESPACE,
    ZERO_FRACTION,
    LoadOptions,
    LoadReport,
    check_dropped,
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
from dpcurator.backends.spark_session import (
    SPARK_ERRORS,
    is_local,
    reading_session,
    spark_message,
)
from dpcurator.backends.unit_rows import (
    SEPARATOR,
    UNIT_COLUMN,
    UnitReport,
    key_text,
)
from dpcurator.errors import DataError, InvalidParameter

try:
    from pyspark import StorageLevel
    from pyspark.sql import Column, DataFrame, SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError:  # pragma: no cover - depends on the environment
    raise InvalidParameter(
        "the Spark backend needs pyspark and Java 17: pip install 'dpcurator[spark]'"
    ) from None

from dpcurator.backends.spark_unit_ids import canonical_id_column, id_text_column

#: A coded table of at least this many rows is spread over every core for counting.
_SPREAD_ROWS = 1 << 20
#: A categorical's values, or the distinct texts of a float, timestamp, date or boolean
#: column, up to this many are coded by a literal map, more by a join with a table of
#: (text, code): each literal is a call into the JVM, and a map of thousands takes
#: seconds to build.
_MAP_KEYS = 64
#: At most this many (text, code) pairs are broadcast; more are joined by a shuffle.
_BROADCAST_KEYS = 1 << 20

DECIMAL = T.DecimalType(38, 0)


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


_EPOCH = dt.datetime(1970, 1, 1)
#: A time as Spark writes it for :func:`_duckdb_time` (the session's zone, with its offset).
_TIME_SHOWN = "yyyy-MM-dd HH:mm:ss.SSSSSSxxxxx"
_TIME_SHOWN_PARTS = re.compile(r"(.+ \d\d:\d\d:\d\d)\.(\d{6})([+-]\d\d)(?::(\d\d))?(?::(\d\d))?")


def _duckdb_time(text: str) -> str:
    """A zoned time as DuckDB writes a ``TIMESTAMP WITH TIME ZONE`` (the fraction without
    trailing zeros, the offset as ``+00``, ``+05:30``): ``2013-01-01 10:00:00+00``."""
    m = _TIME_SHOWN_PARTS.fullmatch(text)
    if m is None:
        return text
    main, frac, hours, minutes, seconds = m.groups()
    frac = frac.rstrip("0")
    offset = hours
    if seconds is not None:
        offset += f":{minutes}:{seconds}"
    elif minutes is not None and minutes != "00":
        offset += f":{minutes}"
    return main + ("." + frac if frac else "") + offset


def _key_text(col: Column, dtype: T.DataType) -> tuple[Column, bool]:
    """How a float, timestamp, date or boolean attribute's field is written to be read by
    :func:`value_codes` (collected once per distinct text, then joined back on it), and
    whether it holds binary floats. Text as it is; a binary float as Java writes it
    (re-read through Python's float: the same number as DuckDB's shortest decimal); a
    zoned time as its microseconds since the epoch (exact whatever the session's zone;
    see :func:`_key_reading`); anything else as Spark casts it to text (a date
    ``2013-06-01``, a local time ``2013-01-01 10:00:00.5``, ``true``), as DuckDB does."""
    if isinstance(dtype, T.StringType):
        return col, False
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(col).cast("string"), False
    return col.cast("string"), isinstance(dtype, T.FloatType | T.DoubleType)


def _key_reading(text: str, dtype: T.DataType) -> str | None:
    """The text :func:`value_codes` reads for a key of :func:`_key_text`, as DuckDB
    writes the same value: a 32-bit float by its shortest decimal, a zoned time in ISO
    8601 UTC. None for a time beyond year 9999 (invalid)."""
    if isinstance(dtype, T.FloatType):
        return str(np.float32(float(text)))
    if isinstance(dtype, T.TimestampType):
        try:
            t = _EPOCH + dt.timedelta(microseconds=int(text))
        except OverflowError:
            return None
        return t.isoformat(timespec="microseconds") + "Z"
    return text


def _to_arrow(df: DataFrame) -> Any:
    """Collect a (small) DataFrame as a pyarrow Table."""
    to_arrow = getattr(df, "toArrow", None)
    if callable(to_arrow):
        return to_arrow()
    return pa.Table.from_pandas(df.toPandas(), preserve_index=False)  # pyspark 3.5


def _code_type(size: int) -> T.DataType:
    if size <= 1 << 15:
        return T.ShortType()
    if size <= 1 << 31:
        return T.IntegerType()
    return T.LongType()


def _raw_column(j: int) -> str:
    """Column holding source column ``j`` (source order): no source name is ever used."""
    return f"k{j}"


def code_column(i: int) -> str:
    """Column of the stored table holding the codes of attribute ``i`` (schema order)."""
    return f"c{i}"


class Loader:
    """raw rows with a file-order key -> coded, validated rows -> cached coded table.

    The raw DataFrame's columns are ``k0 ..`` (source columns by position) and the
    order key ``__f`` (file), ``__b`` (start of the file split), ``__m``
    (``monotonically_increasing_id``: partition index and place in the partition, taken
    right after the scan). Inside a file split the rows of a partition are in file order
    and their ids consecutive, and splits are ordered by their start, so ``(__f, __b,
    __m)`` orders the rows exactly as the files do, however Spark cuts them. The key only
    numbers rows for messages (the privacy unit's choice reads rows' content, not their
    order), and keys are compared within one pass over the data (the validation, which
    also numbers the rows), so a different cut in another pass changes nothing; the
    header is the first row of the first split whatever the cut.
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
        #: Shown columns holding zoned times (written as DuckDB writes them).
        self._zoned: set[str] = set()

    def cleanup(self) -> None:
        for d in self._temp:
            with contextlib.suppress(*SPARK_ERRORS):
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
        except SPARK_ERRORS as err:
            raise DataError(f"{self.source}: {what}{spark_message(err)}") from None

    # -- step 1: raw rows with the order key

    def ingest(self, data: Any) -> None:
        if isinstance(data, str | Path):
            text = str(data)
            if is_local(text):
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
            reader = reading_session(self.session)
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
            # A time without a zone stays a local time (TIMESTAMP_NTZ), as DuckDB keeps
            # it: a timestamp attribute reads it in its own time zone, not Spark's.
            from pyspark.sql.pandas.types import from_arrow_schema

            struct = from_arrow_schema(table.schema, prefer_timestamp_ntz=True)
            return self.session.createDataFrame(table, schema=struct)
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
            return col.cast(DECIMAL)
        if isinstance(dtype, T.DecimalType):
            return F.when(col == F.floor(col), col.cast(DECIMAL))
        if isinstance(dtype, T.FloatType | T.DoubleType):
            d = col.cast("double")
            # Integral, finite and inside 64 bits (every domain is): exact through BIGINT.
            ok = (
                ~F.isnan(d)
                & (d == F.rint(d))
                & (d >= F.lit(float(INT64[0])))
                & (d < F.lit(-float(INT64[0])))
            )
            return F.when(ok, d.cast("bigint").cast(DECIMAL))
        s = F.btrim(col.cast("string"), F.lit(WHITESPACE))
        exact = F.regexp_replace(s, ZERO_FRACTION, "")  # 517.0, as pandas writes 517
        return F.when(s.rlike(r"\A" + INT_TEXT_PATTERN + r"\z"), exact.cast(DECIMAL))

    def _mapped_codes(
        self, src: DataFrame, cols: list[str], types: dict[str, T.DataType]
    ) -> dict[int, tuple[Column, list[tuple[str, int]]]]:
        """Per float, timestamp, date or boolean attribute (schema index): the key text of
        its field (:func:`_key_text`) and the (key, code) pairs of its valid values.

        The distinct non-NULL keys of every such column come to the driver in ONE pass
        (deduplicated on the cluster), each is read once by :func:`value_codes`, as
        DuckDB reads the text it writes for the same value, and the codes are joined back
        by the caller."""
        schema, opts = self.schema, self.opts
        keys: dict[int, tuple[Column, bool]] = {}
        for i, attr in enumerate(schema.attributes):
            if attr.type in MAPPED_TYPES:
                keys[i] = _key_text(F.col(cols[i]), types[cols[i]])
        if not keys:
            return {}
        pairs = F.array(
            *[F.struct(F.lit(i).alias("i"), k.alias("k")) for i, (k, _) in keys.items()]
        )
        distinct = (
            src.select(F.explode(pairs).alias("e"))
            .select(F.col("e.i").alias("i"), F.col("e.k").alias("k"))
            .where(F.col("k").isNotNull())
            .distinct()
        )
        found = self._run(lambda: _to_arrow(distinct))
        texts: dict[int, list[str]] = {i: [] for i in keys}
        for i, t in zip(found.column("i").to_pylist(), found.column("k").to_pylist(), strict=True):
            texts[i].append(t)
        out: dict[int, tuple[Column, list[tuple[str, int]]]] = {}
        for i, (key, binary) in keys.items():
            attr, dtype = schema.attributes[i], types[cols[i]]
            got = sorted(texts[i])
            read = [_key_reading(t, dtype) for t in got]
            readable = [r for r in read if r is not None]
            codes = iter(value_codes(attr, readable, opts.missing, binary))
            found_codes = [None if r is None else next(codes) for r in read]
            valid = [(t, c) for t, c in zip(got, found_codes, strict=True) if c is not None]
            out[i] = (key, valid)
        return out

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
        mapped = self._mapped_codes(src, cols, types)
        for i, attr in enumerate(schema.attributes):
            col = F.col(cols[i])
            if attr.type in MAPPED_TYPES:
                # Each distinct text read once on the driver (the reader both backends
                # share), joined back: the code, or NULL where the value is invalid.
                key, pairs = mapped[i]
                if not pairs:
                    code = F.lit(None).cast("bigint")
                elif len(pairs) <= _MAP_KEYS:
                    lookup = F.create_map(
                        *[x for t, c in pairs for x in (F.lit(t), F.lit(c).cast("bigint"))]
                    )
                    code = F.try_element_at(lookup, key)
                else:
                    dom = self._from_arrow(
                        pa.table(
                            {f"__v{i}": [t for t, _ in pairs], f"__p{i}": [c for _, c in pairs]},
                            schema=pa.schema(
                                [
                                    pa.field(f"__v{i}", pa.string(), False),
                                    pa.field(f"__p{i}", pa.int64(), False),
                                ]
                            ),
                        )
                    )
                    if len(pairs) <= _BROADCAST_KEYS:
                        dom = F.broadcast(dom)
                    src = src.join(dom, key == F.col(f"__v{i}"), "left")
                    code = F.col(f"__p{i}")
                if attr.missing is not None:  # a NULL field (blanks and tokens are mapped)
                    code = F.when(code.isNotNull(), code).when(
                        col.isNull(), F.lit(attr.missing_position).cast("bigint")
                    )
            elif attr.type == "categorical":
                text = F.btrim(col.cast("string"), F.lit(WHITESPACE))
                if attr.size <= _MAP_KEYS:
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
                lo, hi = F.lit(attr.min).cast(DECIMAL), F.lit(attr.max).cast(DECIMAL)
                code = F.when(v.between(lo, hi), (v - lo).cast("bigint"))
            if attr.missing is not None and attr.type not in MAPPED_TYPES:
                # blank, NULL, a missing token: the missing value
                dtype = types[cols[i]]
                trimmed = F.btrim(col.cast("string"), F.lit(WHITESPACE))
                missing = col.isNull() | trimmed.isin(missing_texts(attr, opts.missing))
                if isinstance(dtype, T.FloatType | T.DoubleType):
                    missing = missing | F.isnan(col.cast("double"))
                if attr.type == "integer" and isinstance(attr.missing, int):
                    # an integer marker (-1) is missing in every form it is written
                    missing = missing | (v == F.lit(attr.missing).cast(DECIMAL))
                code = F.when(code.isNotNull(), code).when(
                    missing, F.lit(attr.missing_position).cast("bigint")
                )
            # Stored narrow: the stage is materialised once, then read by every step.
            codes.append(code.cast(_code_type(attr.size)).alias(f"v{i}"))
            if opts.show_values:
                # The raw text of invalid values only (for the custodian's message).
                dtype = types[cols[i]]
                if isinstance(dtype, T.FloatType | T.DoubleType):
                    raw = col
                elif isinstance(dtype, T.TimestampType):  # as DuckDB writes it: see _raw
                    raw = F.date_format(col, _TIME_SHOWN)
                    self._zoned.add(f"r{i}")
                else:
                    raw = col.cast("string")
                shown.append(F.when(code.isNull(), raw).alias(f"r{i}"))
        select = [*codes, *shown, "__f", "__b", "__m"]
        if id_col is not None:
            ident = F.col(id_col)
            if isinstance(types[id_col], T.StringType):
                trimmed = F.btrim(ident, F.lit(WHITESPACE))
                ident = F.when(~trimmed.isin(list(opts.missing)), trimmed)
            if opts.unit_rows != 1:  # every id as its canonical text (see unit_rows)
                ident = canonical_id_column(ident, types[id_col])
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

        def check(dropped: int) -> None:
            listed = [(j, n) for j, n, _, _ in bad_attrs]
            check_dropped(self.source, schema, listed, dropped, rows_read, opts.max_dropped)

        # Final table: replacements, the drop rule, then the privacy unit's choice.
        final_cols = []
        for i, attr in enumerate(schema.attributes):
            code = F.col(f"v{i}")
            if attr.name in opts.replace:
                code = F.coalesce(code, F.lit(opts.replace[attr.name]).cast("bigint"))
            final_cols.append(code.cast(_code_type(attr.size)).alias(code_column(i)))
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
        names = [code_column(i) for i in range(n_attr)]
        if unit is not None:
            missing_ids = id_bad[0] if id_bad else 0
            assert id_col is not None
            final, report = self._unit_table(
                stage, final_cols, valid, types[id_col], rows_read, missing_ids
            )
            dropped_unit = missing_ids + report.dropped_by_cap
            drop = opts.on_invalid == "drop"
            if drop:
                check(rows_read - dropped_unit - report.rows)
            return final, LoadReport(
                rows_read=rows_read,
                rows=report.rows,
                dropped_invalid=rows_read - dropped_unit - report.rows if drop else 0,
                dropped_privacy_unit=dropped_unit,
                replaced=replaced,
                unit=report,
            )
        pre = self._spread(stage.select(*final_cols, valid.alias("__ok")), rows_read)
        pre = self._persist(pre, keep=True)
        got = self._run(
            lambda: pre.agg(F.count(F.lit(1)), F.count(F.when(F.col("__ok"), F.lit(1)))).collect()[
                0
            ]
        )
        kept, n_rows = int(got[0]), int(got[1])
        if opts.on_invalid == "drop":
            check(kept - n_rows)
        if kept != n_rows:
            final = self._persist(pre.where(F.col("__ok")).select(*names), keep=True)
            self._run(final.count)
            self.kept.remove(pre)
            self._temp.append(pre)
        else:
            final = pre.select(*names)
        return final, LoadReport(
            rows_read=rows_read,
            rows=n_rows,
            dropped_invalid=kept - n_rows if opts.on_invalid == "drop" else 0,
            replaced=replaced,
        )

    def _spread(self, df: DataFrame, rows: int) -> DataFrame:
        """``df`` spread over every core when a large table sits in few partitions (e.g.
        one gzip file: one partition), so that counting uses the whole cluster."""
        parallel = self.session.sparkContext.defaultParallelism
        if rows >= _SPREAD_ROWS and df.rdd.getNumPartitions() < parallel:
            return df.repartition(parallel)
        return df

    def _unit_table(
        self,
        stage: DataFrame,
        final_cols: list[Column],
        valid: Column,
        id_type: T.DataType,
        rows_read: int,
        missing_ids: int,
    ) -> tuple[DataFrame, UnitReport]:
        """The persisted coded table of each unit's k valid rows of smallest keyed hash,
        as DuckDB chooses them (:mod:`dpcurator.backends.unit_rows`: the choice reads
        only the unit's own valid rows), built in one pass, and the unit report. Each
        unit's first row also carries the unit's size, for the report's one aggregate
        over the cached rows (that column is never counted)."""
        opts = self.opts
        unit, key = opts.privacy_unit, opts.unit_key
        assert unit is not None and key is not None  # check_load_options requires both
        names = [code_column(i) for i in range(len(self.schema.attributes))]
        rows = stage.where(F.col("__id").isNotNull() & valid).select(*final_cols, "__id")
        copy = []
        if opts.unit_rows != 1:  # each row's number among its unit's identical rows
            same = Window.partitionBy("__id", *names).orderBy(*names)
            rows = rows.withColumn("__copy", F.row_number().over(same) - 1)
            copy = [F.col("__copy").cast("string")]
        text = F.concat_ws(
            SEPARATOR,
            F.lit(key_text(key)),
            *[F.col(c).cast("string") for c in names],
            *copy,
            id_text_column(F.col("__id"), id_type, opts.unit_rows),
        )
        ordered = Window.partitionBy("__id").orderBy("__h")
        whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        rank = F.col("__rank")
        ranked = (
            rows.withColumn("__h", F.sha2(text, 256))
            .withColumn("__rank", F.row_number().over(ordered))
            .withColumn("__n", F.count(F.lit(1)).over(whole))
            .where(rank <= F.lit(unit[1]))
            .select(
                *names,
                F.col("__id").alias(UNIT_COLUMN),
                F.when(rank == 1, F.col("__n")).alias("__n"),
            )
        )
        pre = self._persist(self._spread(ranked, rows_read), keep=True)
        sizes = self._run(
            lambda: pre.where(F.col("__n").isNotNull()).groupBy("__n").count().collect()
        )
        report = UnitReport.from_sizes(
            unit[0], unit[1], {int(r[0]): int(r[1]) for r in sizes}, missing_ids
        )
        return pre.select(*names, UNIT_COLUMN), report

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
        if shown in self._zoned and got[1] is not None:
            return _duckdb_time(got[1])
        return _as_text(got[1], stage.schema[shown].dataType)
