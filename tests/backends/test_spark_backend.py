"""SparkBackend gives exactly the DuckDB backend's numbers, reports and refusals.

Every test loads the same data with both backends (``twin``) and compares: load reports,
one-line error messages, counts of random predicates, histograms, marginals and boolean
queries, clipped sums (exact Python ints, also near +-2^62), the privacy unit's k rows
per id chosen by the key (the same rows across many file splits and Parquet part files),
and the dropped / replaced values. Spark starts once per test session (``spark`` fixture).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):  # pragma: no cover
    pytest.skip("Spark needs Java 17", allow_module_level=True)

import itertools

from dpcurator.backends import DuckDBBackend, SparkBackend, spark_backend
from dpcurator.errors import DpCuratorError, InvalidParameter, QueryError
from dpcurator.queries import (
    Attribute,
    BooleanQuery,
    Query,
    Schema,
    parse_query,
)
from dpcurator.queries.predicates import Predicate, normalize

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning"),
    pytest.mark.xdist_group("spark"),
]

I64 = 2**63
#: A unit key for loads with a privacy unit.
KEY = bytes(range(32))


# --------------------------------------------------------------------- twins


def load_both(spark, data, schema, spark_data=None, **options):
    """Load with both backends: (duck, spark) or, if either refuses, the same refusal
    (type and one-line message) from both and (None, None)."""
    errors = []
    loaded = []
    for load, d, extra in (
        (DuckDBBackend.load, data, {}),
        (SparkBackend.load, spark_data if spark_data is not None else data, {"spark": spark}),
    ):
        try:
            loaded.append(load(d, schema, **options, **extra))
            errors.append(None)
        except DpCuratorError as err:
            loaded.append(None)
            errors.append(err)
    if errors[0] is not None or errors[1] is not None:
        for b in loaded:
            if b is not None:
                b.close()
        assert errors[0] is not None and errors[1] is not None, errors
        assert type(errors[0]) is type(errors[1])
        assert str(errors[1]) == str(errors[0])
        assert "\n" not in str(errors[1])
        return None, None
    duck, spk = loaded
    assert dataclasses.asdict(spk.report) == dataclasses.asdict(duck.report)
    return duck, spk


def same_counts(duck, spk, queries) -> np.ndarray:
    want = duck.counts(queries)
    got = spk.counts(queries)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()
    return want


def same_sum(duck, spk, attribute, lower, upper, where=None) -> int:
    want = duck.clipped_sum(attribute, lower, upper, where)
    got = spk.clipped_sum(attribute, lower, upper, where)
    assert type(got) is int and got == want
    return want


def histogram(schema: Schema, name: str) -> list[Query]:
    return [
        Query.from_coverages(schema, {name: ((p, p + 1),)})
        for p in range(schema.attribute(name).size)
    ]


def marginal(schema: Schema, a: str, b: str) -> list[Query]:
    sa, sb = schema.attribute(a).size, schema.attribute(b).size
    return [
        Query.from_coverages(schema, {a: ((i, i + 1),), b: ((j, j + 1),)})
        for i in range(sa)
        for j in range(sb)
    ]


# --------------------------------------------------------------------- random tables

NAMES = ["a", "A", "rowid", "select", "x y", " pad ", "ünï", "c0", "k0", "__id", "v1", "n"]
VALUES = ["x", "y", "z", "?", "NA", "é", "Private", "1", "0", "a b", "-", "Self-emp"]
INVALID = ["", "?", "NA", "3.5", "abc", "  ", "+-1", "1e2"]
IDS = ["u1", "u2", "u3", " u1 ", "u4", "", "NA", "?"]
UNIT = "person"


@st.composite
def schemas(draw) -> Schema:
    n = draw(st.integers(1, 4))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=n, max_size=n, unique=True))
    attrs = []
    for name in names:
        may_miss = draw(st.integers(0, 2)) == 0  # the schema says it may be missing
        if draw(st.booleans()):
            lo = draw(st.sampled_from([0, -3, 17, 2**62 - 4, -I64, I64 - 12]))
            size = draw(st.integers(1, 10))
            hi = lo + size - 1
            marker = draw(st.sampled_from([lo - 1, hi + 1, lo, "NA", ""])) if may_miss else None
            attrs.append(Attribute(name, "integer", min=lo, max=hi, missing=marker))
        else:
            k = draw(st.integers(1, 5))
            vals = draw(st.lists(st.sampled_from(VALUES), min_size=k, max_size=k, unique=True))
            marker = draw(st.sampled_from(["?", "unknown", vals[0]])) if may_miss else None
            attrs.append(
                Attribute(
                    name,
                    "categorical",
                    values=tuple(vals),
                    ordered=draw(st.booleans()),
                    missing=marker,
                )
            )
    return Schema(tuple(attrs))


def render_int(value: int, style: int) -> str:
    """An integer as a CSV field: plain, padded, signed or with leading zeros."""
    if style == 1:
        return f" {value} "
    if style == 2 and value >= 0:
        return f"+{value}"
    if style == 3 and value >= 0:
        return f"00{value}"
    return str(value)


@st.composite
def tables(draw):
    """(schema, rows of text cells incl. a privacy-unit id, load options, format)."""
    schema = draw(schemas())
    n = draw(st.integers(0, 24))
    bad_rate = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    rows = []
    for _ in range(n):
        row = []
        for attr in schema.attributes:
            if draw(st.floats(0, 1)) < bad_rate:
                if attr.type == "integer" and draw(st.booleans()):
                    row.append(str(draw(st.sampled_from([attr.min - 1, attr.max + 1]))))
                else:
                    row.append(draw(st.sampled_from(INVALID)))
                continue
            pos = draw(st.integers(0, attr.size - 1))
            if attr.missing is not None and draw(st.integers(0, 4)) == 0:
                row.append(draw(st.sampled_from(["", " ", "NA", "?", str(attr.missing)])))
            elif pos == attr.value_count:  # the missing value's own cell, as written
                value = attr.value(pos)
                if isinstance(value, int):
                    row.append(render_int(value, draw(st.integers(0, 3))))
                else:
                    row.append(value)
            elif attr.type == "integer":
                row.append(render_int(attr.min + pos, draw(st.integers(0, 3))))
            else:
                row.append(attr.values[pos] if draw(st.integers(0, 5)) else f" {attr.values[pos]} ")
        row.append(draw(st.sampled_from(IDS)) if bad_rate else draw(st.sampled_from(IDS[:5])))
        rows.append(row)
    options: dict = {}
    if draw(st.booleans()):
        options["on_invalid"] = "drop"
    if draw(st.booleans()):
        attr = draw(st.sampled_from(schema.attributes))
        options["replace"] = {attr.name: attr.value(draw(st.integers(0, attr.size - 1)))}
    if draw(st.booleans()):
        options["privacy_unit"] = (UNIT, draw(st.integers(1, 3)))
        options["unit_key"] = bytes([draw(st.integers(0, 255))]) * 32
    fmt = draw(st.sampled_from(["csv", "csv", "csv-headerless", "csv-gzip", "parquet", "pandas"]))
    if fmt.startswith("csv"):
        options["separator"] = draw(st.sampled_from([",", ";", "|", ", ", "\t"]))
        options["skip"] = draw(st.integers(0, 2))
        if fmt == "csv":
            options["header"] = draw(st.sampled_from([None, True]))
        else:
            options["header"] = draw(st.sampled_from([None, False]))
            options["columns"] = [*schema.names, UNIT]
    return schema, rows, options, fmt


def write_table(schema: Schema, rows, options: dict, fmt: str, folder: Path):
    names = [*schema.names, UNIT]
    if fmt == "pandas":
        return pd.DataFrame(rows, columns=names, dtype=object)
    if fmt == "parquet":
        cols = {}
        for j, name in enumerate(names):
            cells = [r[j] for r in rows]
            attr = schema.attribute(name) if name in schema else None
            if attr is not None and attr.type == "integer" and all(c.strip() for c in cells):
                try:  # a typed integer column when every cell is an integer
                    cols[name] = pa.array([int(c) for c in cells], pa.int64())
                    continue
                except (ValueError, OverflowError, pa.ArrowInvalid):
                    pass
            cols[name] = pa.array([c if c else None for c in cells], pa.string())
        path = folder / "d.parquet"
        pq.write_table(pa.table(cols), path)
        return path
    sep = options["separator"]
    lines = ["junk line"] * options["skip"]
    if fmt == "csv":
        lines.append(sep.join(names))
    for r in rows:
        cells = list(r)
        if not sep.join(cells).strip():  # an all-blank line is skipped by both readers
            cells[0] = "?"
        lines.append(sep.join(cells))
    text = "".join(line + "\n" for line in lines)
    if fmt == "csv-gzip":
        path = folder / "d.csv.gz"
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path = folder / "d.csv"
        path.write_text(text, encoding="utf-8")
    return path


@st.composite
def coverage(draw, size: int):
    k = draw(st.integers(0, 3))
    cuts = sorted(draw(st.lists(st.integers(0, size), min_size=2 * k, max_size=2 * k)))
    return normalize(zip(cuts[::2], cuts[1::2], strict=True))


@st.composite
def workloads(draw, schema: Schema):
    queries = [Query(schema, ())]
    for _ in range(draw(st.integers(1, 12))):
        names = draw(st.lists(st.sampled_from(schema.names), unique=True, max_size=3))
        queries.append(
            Query.from_coverages(
                schema, {n: draw(coverage(schema.attribute(n).size)) for n in names}
            )
        )
    for name in schema.names:
        queries.extend(histogram(schema, name))
    if len(schema) >= 2:
        queries.extend(marginal(schema, schema.names[0], schema.names[-1]))
    return queries


BOUNDS = [0, 1, -1, 5, 17, 2**62, -(2**62), I64 - 1, -I64, 10**30, -(10**30)]


@settings(
    max_examples=7,  # each starts two backends on a new file (about 3.5 s)
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(table=tables(), data=st.data())
def test_random_tables_give_duckdbs_numbers(spark, tmp_path_factory, table, data):
    schema, rows, options, fmt = table
    folder = tmp_path_factory.mktemp("t")
    source = write_table(schema, rows, options, fmt, folder)
    # Exercise the merged grouping sets and the per-query aggregates too.
    dense = data.draw(st.sampled_from([spark_backend.DENSE_LIMIT, 1]))
    joint = data.draw(st.sampled_from([spark_backend.JOINT_CELLS, 1]))
    with (
        mock.patch.object(spark_backend, "DENSE_LIMIT", dense),
        mock.patch.object(spark_backend, "JOINT_CELLS", joint),
    ):
        duck, spk = load_both(spark, source, schema, **options)
        if duck is None:
            return
        try:
            queries = data.draw(workloads(schema))
            same_counts(duck, spk, queries)
            boxes = [q for q in queries[1:] if not q.is_empty][:4]
            if len(boxes) >= 2:
                union = BooleanQuery.from_boxes(schema, boxes)
                same_counts(duck, spk, [union, queries[0], union])
            ints = [a for a in schema.attributes if a.type == "integer"]
            for attr in ints[:2]:
                lo, hi = sorted(
                    data.draw(st.lists(st.sampled_from(BOUNDS), min_size=2, max_size=2))
                )
                where = data.draw(st.sampled_from([None, *queries[1:4]]))
                same_sum(duck, spk, attr.name, lo, hi, where)
        finally:
            duck.close()
            spk.close()


# --------------------------------------------------------------------- file order


def people(n: int, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "pid": [f"p{int(i)}" for i in rng.integers(0, n // 4 + 1, n)],
            "age": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
        }
    )


PEOPLE = Schema(
    (
        Attribute("age", "integer", min=0, max=99),
        Attribute("sex", "categorical", values=("F", "M")),
    )
)


@pytest.fixture(scope="module")
def splitting(spark):
    """A session of the same Spark that cuts files into many small splits."""
    s = spark.newSession()
    s.conf.set("spark.sql.files.maxPartitionBytes", "2048")
    s.conf.set("spark.sql.files.openCostInBytes", "0")
    s.conf.set("spark.sql.shuffle.partitions", "2")
    return s


def unit_numbers(duck, spk, k: int) -> None:
    queries = [Query(PEOPLE, ()), *histogram(PEOPLE, "sex"), *marginal(PEOPLE, "age", "sex")]
    same_counts(duck, spk, queries)
    same_sum(duck, spk, "age", 10, 80)


@pytest.mark.parametrize("k", [1, 2])
def test_same_rows_per_id_as_duckdb_across_splits(spark, splitting, tmp_path, k):
    frame = people(3000)
    csv_path = tmp_path / "p.csv"
    frame.to_csv(csv_path, index=False)
    assert splitting.read.csv(str(csv_path)).rdd.getNumPartitions() > 10
    duck, spk = load_both(splitting, csv_path, PEOPLE, privacy_unit=("pid", k), unit_key=KEY)
    assert duck.report.dropped_privacy_unit > 100
    unit_numbers(duck, spk, k)
    duck.close()
    spk.close()
    # Parquet: many row groups, many splits.
    pq_path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), pq_path, row_group_size=50)
    assert splitting.read.parquet(str(pq_path)).rdd.getNumPartitions() > 3
    duck, spk = load_both(splitting, pq_path, PEOPLE, privacy_unit=("pid", k), unit_key=KEY)
    unit_numbers(duck, spk, k)
    duck.close()
    spk.close()


def test_folder_of_part_files_in_name_order(spark, splitting, tmp_path):
    # Part files of different sizes: Spark plans big files first; file order is by name.
    frame = people(2400, seed=5)
    folder = tmp_path / "parts"
    folder.mkdir()
    cuts = [0, 200, 1500, 1700, 2400]
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        part = frame.iloc[a:b]
        pq.write_table(
            pa.Table.from_pandas(part, preserve_index=False),
            folder / f"part-{i:05d}.parquet",
            row_group_size=40,
        )
    (folder / "_SUCCESS").write_text("")
    duck = DuckDBBackend.load(frame, PEOPLE, privacy_unit=("pid", 1), unit_key=KEY)
    spk = SparkBackend.load(folder, PEOPLE, privacy_unit=("pid", 1), unit_key=KEY, spark=splitting)
    assert dataclasses.asdict(spk.report) == dataclasses.asdict(duck.report)
    unit_numbers(duck, spk, 1)
    duck.close()
    spk.close()
    # The first invalid row is numbered in file order across the parts.
    bad = frame.copy()
    bad.loc[1600, "age"] = 200
    bad.loc[2300, "age"] = 300
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        pq.write_table(
            pa.Table.from_pandas(bad.iloc[a:b], preserve_index=False),
            folder / f"part-{i:05d}.parquet",
        )
    with pytest.raises(DpCuratorError) as err:
        SparkBackend.load(folder, PEOPLE, spark=splitting)
    assert (
        "2 rows have values outside the domain [0, 99] or missing (first: row 1601, value '200')"
        in str(err.value)
    )


def test_row_numbers_and_values_in_messages_across_splits(spark, splitting, tmp_path):
    frame = people(2000, seed=9).astype({"age": object})
    frame.loc[1500, "age"] = " 130 "
    frame.loc[1900, "age"] = None
    frame.loc[1950, "sex"] = "X"
    p = tmp_path / "p.csv"
    frame.to_csv(p, index=False)
    load_both(splitting, p, PEOPLE)
    load_both(splitting, p, PEOPLE, show_values=False)
    load_both(splitting, p, PEOPLE, skip=0, header=True)


# --------------------------------------------------------------------- formats and options


ROWS = [(30, "F", "red"), (45, "M", "blue"), (30, "M", "green"), (70, "F", "blue")]
COLORS = Schema(
    (
        Attribute("age", "integer", min=0, max=120),
        Attribute("sex", "categorical", values=("F", "M")),
        Attribute("color", "categorical", values=("red", "green", "blue"), ordered=True),
    )
)


def text_file(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "options"),
    [
        ("color,age,note,sex\nred,30,x,F\nblue,45,y,M\n", {}),
        ("30,F,red\n45,M,blue\n", {}),
        ("30,F,red\n45,M,blue\n", {"header": False}),
        ("age;sex;color\n 30 ;\tF; red\n45;M;blue\n", {"separator": ";"}),
        ("age, sex, color\n30, F, red\n45, M, blue\n", {"separator": ", "}),
        ("|1x3 Cross validator\nage,sex,color\n30,F,red\n", {"skip": 1}),
        ("junk\n\nmore junk\n30,F,red\n\n45,M,blue\n", {"skip": 3}),
        ('age,sex,color\n"30","F","re""d"\n', {}),
        ("age,sex,color\n30,F,red\n,M,blue\n", {}),
        ('age,sex,color\n30,F,red\n"",M,blue\n', {}),
        ("age,sex,color\n30,F,red\n200,M,blue\n31,X,blue\n", {}),
        ("age,sex,color\n30,F,red\n200,M,blue\n31,X,blue\n", {"on_invalid": "drop"}),
        ("age,sex,color\n30,F,red\n?,M,blue\n31,X,blue\n", {"replace": {"age": "40"}}),
        ("age,sex,color\n30,F,red\n", {"columns": ["a", "b"]}),
        ("30,F,red,extra\n", {}),
        ("30,F,red,extra\n", {"columns": ["age", "sex", "color", "x"]}),
        ("age,age,sex,color\n1,2,F,red\n", {}),
        ("age,sex\n1,F\n", {}),
        ("", {}),
        ("age,sex,color\n", {}),
        ("age,sex,color\r\n30,F,red\r\n", {}),
        ("age,sex,color\n30,F,red\n3.5,F,red\n", {"show_values": False}),
    ],
)
def test_csv_cases(spark, tmp_path, text, options):
    p = text_file(tmp_path / "d.csv", text)
    duck, spk = load_both(spark, p, COLORS, **options)
    if duck is not None:
        same_counts(duck, spk, [Query(COLORS, ()), *histogram(COLORS, "color")])
        duck.close()
        spk.close()


def test_ragged_csv_is_a_one_line_data_error(spark, tmp_path):
    p = text_file(tmp_path / "d.csv", "age,sex,color\n30,F,red\n45,M\n")
    with pytest.raises(DpCuratorError) as err:
        SparkBackend.load(p, COLORS, spark=spark)
    assert str(err.value).startswith(f"{p}: cannot read data: ")
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_options(spark, tmp_path):
    load_both(spark, tmp_path / "nope.csv", COLORS)
    load_both(spark, tmp_path / "nope.csv", COLORS, on_invalid="skip")
    load_both(spark, tmp_path / "nope.csv", COLORS, replace={"age": 500})
    load_both(spark, tmp_path / "nope.csv", COLORS, privacy_unit=("id", 0))
    load_both(spark, pd.DataFrame({"age": [1]}), COLORS, columns=["age"])
    with pytest.raises(InvalidParameter, match="data must be"):
        SparkBackend.load(42, COLORS, spark=spark)
    with pytest.raises(InvalidParameter, match="spark must be a SparkSession"):
        SparkBackend.load(pd.DataFrame({"age": [1]}), COLORS, spark=3)
    with pytest.raises(InvalidParameter, match="already running"):
        SparkBackend.load(pd.DataFrame({"age": [1]}), COLORS, spark="local[7]")


def test_gzip_parquet_pandas_arrow_and_spark_dataframe(spark, tmp_path):
    frame = pd.DataFrame(ROWS * 5, columns=["age", "sex", "color"])
    gz = tmp_path / "d.csv.gz"
    gz.write_bytes(gzip.compress(frame.to_csv(index=False).encode()))
    typed = frame.assign(sex=frame["sex"].astype("category"), age=frame["age"].astype(float))
    pqp = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(typed, preserve_index=False), pqp)
    sources = [
        (gz, gz),
        (pqp, pqp),
        (typed, typed),
        (pa.Table.from_pandas(typed, preserve_index=False),) * 2,
        (frame, spark.createDataFrame(frame)),
    ]
    queries = [*marginal(COLORS, "sex", "color"), parse_query("age >= 40", COLORS)]
    for duck_data, spark_data in sources:
        duck, spk = load_both(spark, duck_data, COLORS, spark_data=spark_data)
        same_counts(duck, spk, queries)
        same_sum(duck, spk, "age", 35, 60)
        duck.close()
        spk.close()


def test_typed_values_validated_like_duckdb(spark):
    import decimal

    schema = Schema((Attribute("m", "integer", min=0, max=I64 - 2),))
    for column in (
        pa.array([5.0, 2.5], pa.float64()),
        pa.array([5.0, 1e300], pa.float64()),
        pa.array([5.0, None], pa.float64()),
        pa.array([decimal.Decimal(5), decimal.Decimal("2.50")], pa.decimal128(38, 2)),
        pa.array([5, -1], pa.int64()),
        pa.array(["5", "+-5"], pa.string()),
        pa.array([True, False], pa.bool_()),
        pa.array(["5", "9" * 39], pa.string()),
    ):
        load_both(spark, pa.table({"m": column}), schema)


def test_missing_values_load_like_duckdb(spark, tmp_path):
    """Blank, NULL and missing-token cells of attributes that may be missing: the same
    missing values, counts, histograms and sums as the DuckDB backend, from every format."""
    from test_backend_missing import CSV, SCHEMA

    schema = Schema.from_dict(SCHEMA)
    path = tmp_path / "d.csv"
    path.write_text(CSV)
    frame = pd.DataFrame(
        {
            "income": [5.0, np.nan, -1.0, 3.0],
            "work": ["a", None, "b", "?"],
            "colour": ["x", "y", None, "x"],
            "score": pd.array([1, 2, None, 4], dtype="Int64"),
        }
    )
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(frame), parquet)
    for data in (path, frame, parquet):
        duck, spk = load_both(spark, data, schema)
        try:
            queries = [parse_query(f"{n} IS NULL", schema) for n in schema.names]
            queries += [q for n in schema.names for q in histogram(schema, n)]
            queries += marginal(schema, "colour", "income")
            assert same_counts(duck, spk, queries)[:4].sum() > 0
            same_sum(duck, spk, "income", 0, 100)
            same_sum(duck, spk, "income", 10, 60, parse_query("work IS NULL", schema))
            same_sum(duck, spk, "score", -5, 5, parse_query("NOT income < 50", schema))
        finally:
            duck.close()
            spk.close()


EXTREME = Schema(
    (
        Attribute("v", "integer", min=-I64, max=-I64 + 10),
        Attribute("w", "integer", min=I64 - 10, max=I64 - 1),
        Attribute("m", "integer", min=0, max=2**62 + 5),
    )
)
EXTREME_ROWS = [
    (-I64, I64 - 1, 2**62 + 1),
    (-I64 + 3, I64 - 10, 2**53 + 1),
    (-I64 + 10, I64 - 2, 7),
]


def test_exact_sums_near_the_64_bit_edges(spark, tmp_path):
    p = text_file(
        tmp_path / "x.csv",
        "v,w,m\n" + "".join(f" {a} ,+{b},{'0' * 30}{c}\n" for a, b, c in EXTREME_ROWS * 20),
    )
    duck, spk = load_both(spark, p, EXTREME)
    for name in "vwm":
        for lo, hi in [(-(10**40), 10**40), (-I64 + 2, I64 - 3), (2**53, 2**62 + 3), (0, 0)]:
            got = same_sum(duck, spk, name, lo, hi)
        want = sum(r["vwm".index(name)] for r in EXTREME_ROWS) * 20
        assert spk.clipped_sum(name, -(10**40), 10**40) == want
    exact = Query.from_coverages(EXTREME, {"m": ((2**53 + 1, 2**53 + 2),)})
    assert same_counts(duck, spk, [exact]).tolist() == [20]
    got = spk.clipped_sum("m", 0, 2**62 + 5, where=exact)
    assert got == 20 * (2**53 + 1)
    duck.close()
    spk.close()


HOSTILE = [
    "rowid",
    "ROWID",
    'we"ird',
    "with space",
    " padded ",
    "select",
    "c0",
    "k0",
    "__f",
    "__m",
    "_metadata",
    "it's",
    "new\nline",
    "x); DROP TABLE data; --",
]


@pytest.mark.parametrize("fmt", ["csv", "parquet", "pandas"])
def test_hostile_names(spark, tmp_path, fmt):
    # A quoted line break in a CSV header is read by DuckDB, refused by Spark's
    # line-based reader (see docs/backends.md): CSV names here have none.
    names = [n for n in HOSTILE if fmt != "csv" or "\n" not in n]
    attrs = [
        Attribute(n, "integer", min=0, max=9)
        if i % 2
        else Attribute(n, "categorical", values=("x", "y", "z"))
        for i, n in enumerate(names)
    ]
    schema = Schema(tuple(attrs))
    rng = np.random.default_rng(2)
    cols = {
        a.name: (
            rng.integers(0, 10, 40).tolist()
            if a.type == "integer"
            else [a.values[int(i)] for i in rng.integers(0, 3, 40)]
        )
        for a in attrs
    }
    frame = pd.DataFrame(cols)
    if fmt == "pandas":
        data = frame
    elif fmt == "parquet":
        data = tmp_path / "d.parquet"
        pq.write_table(pa.table({k: pa.array(v) for k, v in cols.items()}), data)
    else:
        import csv

        data = tmp_path / "d.csv"
        with open(data, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
            w.writerow(frame.columns)
            w.writerows(frame.itertuples(index=False))
    duck, spk = load_both(spark, data, schema)
    queries = [*histogram(schema, names[0]), *marginal(schema, names[1], names[2])]
    same_counts(duck, spk, queries)
    same_sum(duck, spk, names[1], 2, 7)
    duck.close()
    spk.close()


def test_case_duplicates_in_parquet(spark, tmp_path):
    schema = Schema(
        (Attribute("a", "integer", min=0, max=9), Attribute("A", "integer", min=0, max=9))
    )
    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3], "A": [7, 8, 9]}), p)
    duck, spk = load_both(spark, p, schema)
    same_sum(duck, spk, "a", 0, 9)
    assert spk.clipped_sum("A", 0, 9) == 24
    duck.close()
    spk.close()


# --------------------------------------------------------------------- counting


@pytest.fixture(scope="module")
def pair(spark):
    schema = Schema(
        (
            Attribute("a", "integer", min=-3, max=6),
            Attribute("b", "categorical", values=("x", "y", "z", "w")),
            Attribute("d", "integer", min=0, max=4_999),
            Attribute("e", "integer", min=1, max=2_000),
        )
    )
    rng = np.random.default_rng(1)
    n = 4000
    frame = pd.DataFrame(
        {
            "a": rng.integers(-3, 7, n),
            "b": rng.choice(["x", "y", "z", "w"], n),
            "d": rng.integers(0, 5000, n),
            "e": rng.integers(1, 2001, n),
        }
    )
    duck, spk = load_both(spark, frame, schema)
    yield schema, duck, spk
    duck.close()
    spk.close()


def range_release(schema: Schema, n: int, seed: int = 4) -> list[Query]:
    rng = np.random.default_rng(seed)
    queries = [*marginal(schema, "a", "b"), *histogram(schema, "a")]
    for _ in range(n):  # d x e has 10^7 cells, cut by the ranges into far fewer segments
        lo, hi = sorted(rng.integers(0, 5000, 2).tolist())
        e = int(rng.integers(1, 2000))
        queries.append(Query.from_coverages(schema, {"d": ((lo, hi + 1),), "e": ((0, e),)}))
    for _ in range(50):
        covs = {"a": ((0, 3), (5, 7)), "b": ((1, 2),), "d": ((10, 4000),)}
        queries.append(Query.from_coverages(schema, covs))
    queries.append(parse_query("a IN () AND b = 'x'", schema))
    return queries


def test_segments_merged_sets_and_fallback_paths(pair):
    schema, duck, spk = pair
    queries = range_release(schema, 200)
    with mock.patch.object(spark_backend.SparkBackend, "_filter_part", side_effect=AssertionError):
        same_counts(duck, spk, queries)  # all dense: segments of d and e
    for dense, joint in ((1, 1), (spark_backend.DENSE_LIMIT, 1)):
        with (
            mock.patch.object(spark_backend, "DENSE_LIMIT", dense),
            mock.patch.object(spark_backend, "JOINT_CELLS", joint),
        ):
            same_counts(duck, spk, queries)
    # Singletons on a domain larger than the look-up: a binary search over segments.
    with mock.patch.object(spark_backend, "_LOOKUP_VALUES", 100):
        same_counts(duck, spk, queries[-60:])
    same_counts(duck, spk, [])
    union = parse_query("a < 0 OR b = 'x'", schema)
    assert isinstance(union, BooleanQuery)
    same_counts(duck, spk, [union, *queries[:5]])
    same_sum(duck, spk, "d", 100, 4000, union)
    same_sum(duck, spk, "d", 7000, 9000, union)


def test_one_spark_query_per_release(spark, pair):
    """The number of Spark jobs of a release does not grow with its queries."""
    schema, _, spk = pair
    tracker = spark.sparkContext.statusTracker()

    def jobs(queries) -> int:
        group = f"dpc-test-{len(queries)}"
        spark.sparkContext.setJobGroup(group, "counting")
        try:
            spk.counts(queries)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    few = histogram(schema, "a")[:3]
    assert jobs(few) == jobs(few[:1])
    # The same attribute sets (tables), 3.5 times the queries: the same Spark jobs.
    many = range_release(schema, 350)  # d x e: 10^7 cells, cut by the ranges
    assert jobs(many) == jobs(range_release(schema, 100, seed=5))
    # Forced onto per-query aggregates (256 to an aggregate): still one Spark query.
    with mock.patch.object(spark_backend, "DENSE_LIMIT", 1):
        assert jobs(many[:400]) <= jobs(few) + 6


def test_hand_built_queries_refused_like_duckdb(pair):
    schema, duck, spk = pair
    other = Schema((Attribute("a", "integer", min=0, max=1),))

    def tampered(coverage) -> Query:
        q = parse_query("a BETWEEN 0 AND 3", schema)
        p = Predicate(schema.attribute("a"), ((0, 4),))
        object.__setattr__(p, "coverage", coverage)
        object.__setattr__(q, "predicates", (p,))
        return q

    bad = [
        tampered(((5, 3),)),
        tampered(((0, 11),)),
        tampered(((0, 4), (2, 6))),
        tampered(((True, 3),)),
        tampered("ab"),
        Query.from_coverages(other, {"a": ((0, 1),)}),
        None,
    ]
    for q in bad:
        calls = [lambda b, q=q: b.counts([Query(schema, ()), q])]
        if q is not None:  # where=None is every row
            calls.append(lambda b, q=q: b.clipped_sum("d", 0, 5, where=q))
        for call in calls:
            with pytest.raises(DpCuratorError) as want:
                call(duck)
            with pytest.raises(type(want.value)) as got:
                call(spk)
            assert str(got.value) == str(want.value)
    for args in (("b", 0, 1), ("zz", 0, 1), ("d", 5, 1), ("d", 1.0, 2), ("d", True, 2)):
        with pytest.raises(InvalidParameter) as want:
            duck.clipped_sum(*args)
        with pytest.raises(InvalidParameter) as got:
            spk.clipped_sum(*args)
        assert str(got.value) == str(want.value)
    for arg in (parse_query("total", schema), "a = 1"):
        with pytest.raises(InvalidParameter, match="sequence of queries"):
            spk.counts(arg)
    accepted = tampered([[np.int64(3), 7], (8, np.int32(9))])
    same_counts(duck, spk, [accepted])
    with pytest.raises(QueryError):
        spk.counts([tampered(((4, 1),))])


def test_concurrent_counts_and_close(pair):
    from concurrent.futures import ThreadPoolExecutor

    schema, duck, spk = pair
    batches = [range_release(schema, 20, seed=s) for s in range(4)]
    want = [duck.counts(b).tolist() for b in batches]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: spk.counts(b).tolist(), batches))
    assert got == want


def test_closed_backend_refuses(spark):
    b = SparkBackend.load(
        pd.DataFrame({"age": [1], "sex": ["F"], "color": ["red"]}), COLORS, spark=spark
    )
    assert "table 'data'" in repr(b)
    b.close()
    b.close()
    assert "closed" in repr(b)
    with pytest.raises(InvalidParameter, match="closed"):
        b.counts([Query(COLORS, ())])
    with pytest.raises(InvalidParameter, match="closed"):
        b.clipped_sum("age", 0, 1)


# --------------------------------------------------------------------- through the curator


def test_curator_and_cli_choose_spark(spark, tmp_path):
    from dpcurator import Curator
    from dpcurator.cli import main
    from dpcurator.mechanisms import SeededRandomSource
    from dpcurator.privacy import PureDP

    root = Path(__file__).resolve().parents[2]
    data = root / "examples" / "data" / "adult-sample.csv"
    schema = root / "examples" / "adult" / "schema.json"
    workload = (root / "examples" / "adult" / "workload.txt").read_text()
    released = {}
    for backend in ("duckdb", "spark"):
        extra = {"backend": backend, "spark": spark} if backend == "spark" else {}
        with Curator.open(
            data=data,
            schema=schema,
            budget=PureDP(1.0),
            rng=SeededRandomSource(11),
            allow_insecure=True,
            **extra,
        ) as cur:
            _plan, answers = cur.release_workload(workload)
            released[backend] = (
                [dataclasses.asdict(a) for a in answers],
                [(h.kind, h.request, h.cost, h.noise, h.answer) for h in cur.history()],
                cur.remaining(),
            )
            be = cur._backends["data"]
            assert type(be).__name__ == ("SparkBackend" if backend == "spark" else "DuckDBBackend")
    assert released["spark"] == released["duckdb"]
    with pytest.raises(InvalidParameter, match="backend"):
        Curator.open(data=data, schema=schema, budget=PureDP(1.0), backend="sqlite")
    with pytest.raises(InvalidParameter, match="spark="):
        Curator.open(data=data, schema=schema, budget=PureDP(1.0), spark="local[2]")
    # The command line: --backend spark uses the running local session.
    out = tmp_path / "a.csv"
    wl = tmp_path / "w.txt"
    wl.write_text(workload)
    args = [
        "answer",
        "--data",
        str(data),
        "--schema",
        str(schema),
        "--workload",
        str(wl),
        "--epsilon",
        "1",
        "--ledger",
        ":memory:",
        "--out",
        str(out),
    ]
    assert main([*args, "--backend", "spark"]) == 0
    assert out.read_text().count("\n") > 10
    assert main([*args, "--spark-master", "local[2]"]) == 2


def test_zero_fraction_fraction_and_max_dropped(spark, tmp_path):
    """As DuckDB: 517.0 (pandas' integer with NA) loads as 517, 3.5 is not an integer,
    and the drop rule refuses to drop more than max_dropped of the rows."""
    schema = {"attributes": [{"name": "t", "type": "integer", "min": 1, "max": 2400}]}
    p = tmp_path / "t.csv"
    p.write_text("t\n517.0\n2400\n")
    b = SparkBackend.load(str(p), schema, spark=spark)
    assert b.report.rows == 2
    b.close()
    p.write_text("t\n517.0\n3.5\n")
    with pytest.raises(DpCuratorError, match=r"row 2, value '3\.5' is not an integer"):
        SparkBackend.load(str(p), schema, spark=spark)
    with pytest.raises(DpCuratorError, match=r"would drop 1 of 2 rows .*'t' \(1 rows\)"):
        SparkBackend.load(str(p), schema, spark=spark, on_invalid="drop")
