"""The privacy unit's rows: a keyed, uniformly random choice of k rows per unit.

Against the pure-Python reference (:mod:`dpcurator.backends.unit_rows`): the kept rows do
not depend on file order or format, do depend on the key, are uniform over the positions
of a unit's rows, are the same in DuckDB and Spark; the report's unit statistics against
a brute-force pandas computation; rows with a missing id refused or dropped alike.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcurator.backends import DuckDBBackend
from dpcurator.backends._validation import check_load_options
from dpcurator.backends.unit_rows import (
    UnitReport,
    candidate_ks,
    canonical_id,
    choose_rows,
    kept_by_unit,
    row_hash,
    row_text,
)
from dpcurator.errors import DataError, DpCuratorError, InvalidParameter
from dpcurator.queries import Attribute, Schema, parse_query

KEY = hashlib.sha256(b"dpcurator unit rows test key").digest()
OTHER_KEY = hashlib.sha256(b"another key").digest()

SCHEMA = Schema(
    (
        Attribute("age", "integer", min=0, max=99),
        Attribute("sex", "categorical", values=("F", "M")),
    )
)


def frame(n: int, units: int, seed: int) -> pd.DataFrame:
    """Rows of skewed units (some with many rows, some duplicates within a unit)."""
    rng = np.random.default_rng(seed)
    weights = rng.pareto(1.5, units) + 1
    uid = rng.choice(units, size=n, p=weights / weights.sum())
    return pd.DataFrame(
        {
            "uid": [f"u{int(u)}" for u in uid],
            "age": rng.integers(0, 30, n),  # few values: identical rows within a unit
            "sex": rng.choice(["F", "M"], n),
        }
    )


def codes(df: pd.DataFrame) -> list[tuple[str, tuple[int, int]]]:
    """(id text, codes) of every row of a frame of valid rows (``SCHEMA``)."""
    sex = {"F": 0, "M": 1}
    return [
        (str(u).strip(), (int(a), sex[s]))
        for u, a, s in zip(df["uid"], df["age"], df["sex"], strict=True)
    ]


def kept(backend: DuckDBBackend) -> list[tuple[int, ...]]:
    rows = backend.connection.execute(f'SELECT c0, c1 FROM "{backend.table}"').fetchall()
    return sorted(tuple(int(v) for v in r) for r in rows)


def load(data, k: int, key: bytes = KEY, **options) -> DuckDBBackend:
    return DuckDBBackend.load(data, SCHEMA, privacy_unit=("uid", k), unit_key=key, **options)


# --------------------------------------------------------------------- the reference


def test_row_text_is_unambiguous_and_hashes_as_sha256():
    key = bytes(range(32))
    text = row_text(key, [3, 0, 12], "a|b c")
    assert text == key.hex() + "|3|0|12|a|b c"
    assert row_hash(key, [3, 0, 12], "a|b c") == hashlib.sha256(text.encode()).hexdigest()
    # A fixed number of codes, then the id (which may hold "|"): distinct rows, distinct texts.
    assert row_text(key, [1, 2], "3") != row_text(key, [1, 23], "")
    assert candidate_ks(1) == (1,)
    assert candidate_ks(50) == (1, 2, 5, 10, 20, 50)
    assert candidate_ks(51) == (1, 2, 5, 10, 20, 50, 51)
    assert candidate_ks(4300) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 4300)
    assert candidate_ks(0) == ()


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("7", "7"), ("7.0", "7"), ("+7", "7"), ("007", "7"), ("7e0", "7"), ("7.", "7"),
        ("70e-1", "7"), ("-0", "0"), ("-0.0", "0"), ("-12.000", "-12"),
        ("1714.0", "1714"), ("9007199254740991.0", "9007199254740991"),
        # not an integer below 2^53, or not a decimal number: as it is
        ("7.5", "7.5"), (".5", ".5"), ("9007199254740992", "9007199254740992"),
        ("9007199254740993", "9007199254740993"), ("1e400", "1e400"), ("-1e400", "-1e400"),
        ("nan", "nan"), ("inf", "inf"), ("0x10", "0x10"), ("1_000", "1_000"), ("", ""),
        ("u7", "u7"), ("7 ", "7 "), ("٧", "٧"), ("1e15", "1000000000000000"),
        ("1e16", "1e16"),
    ],
)  # fmt: skip
def test_canonical_id(text, unit):
    assert canonical_id(text) == unit


def test_copies_of_a_row_are_kept_as_often_as_any_row():
    """A unit of 100 copies of one row and 3 of another keeps, at k = 5, each row with
    probability 5/103: on average 15/103 = 0.146 of the rare ones (hypergeometric). Over
    2,000 keys (fixed: deterministic) the mean is within 0.05 of it; scheme 1 ranked the
    copies alike and kept all 3 rare rows whenever they hashed first (mean ~1.5)."""
    rows = [("a", (1,))] * 100 + [("a", (0,))] * 3
    keys = [hashlib.sha256(b"copies %d" % i).digest() for i in range(2000)]

    def mean(scheme: int) -> float:
        return float(np.mean([choose_rows(rows, 5, key, scheme).count((0,)) for key in keys]))

    assert abs(mean(2) - 15 / 103) < 0.05
    assert mean(1) > 1.0


def test_report_from_sizes():
    # 10 units: sizes 1 (x5), 2 (x3), 10, 40.
    r = UnitReport.from_sizes("uid", 2, {1: 5, 2: 3, 10: 1, 40: 1}, dropped_missing_id=4)
    assert (r.units, r.rows, r.dropped_by_cap, r.dropped_missing_id) == (10, 15, 46, 4)
    assert (r.p50, r.p90, r.p99, r.max) == (1, 10, 40, 40)
    assert r.kept_by_k == ((1, 10), (2, 15), (5, 21), (10, 31), (20, 41), (40, 61))
    empty = UnitReport.from_sizes("uid", 3, {}, dropped_missing_id=2)
    assert (empty.units, empty.rows, empty.max, empty.kept_by_k) == (0, 0, 0, ())


# --------------------------------------------------------------------- DuckDB


def test_kept_rows_do_not_depend_on_file_order_or_format(tmp_path):
    df = frame(3000, 120, seed=1)
    want = choose_rows(codes(df), 4, KEY)
    assert len(want) < len(df) // 2  # the cap bites
    shuffled = df.sample(frac=1.0, random_state=7)
    descending = df.sort_values(["uid", "age", "sex"], ascending=False)
    sources = []
    for i, d in enumerate((df, shuffled, descending)):
        path = tmp_path / f"d{i}.csv"
        d.to_csv(path, index=False)
        sources.append(path)
    pq.write_table(pa.Table.from_pandas(shuffled, preserve_index=False), tmp_path / "d.parquet")
    sources += [tmp_path / "d.parquet", descending, pa.Table.from_pandas(df)]
    for src in sources:
        with load(src, 4) as b:
            assert kept(b) == want, src
            assert b.report.rows == len(want)
    # Another key: another choice (of the same size).
    with load(df, 4, key=OTHER_KEY) as b:
        other = kept(b)
    assert other != want and len(other) == len(want)
    assert other == choose_rows(codes(df), 4, OTHER_KEY)


def test_uniform_over_the_positions_of_a_units_rows():
    # 2000 units of 20 rows; "pos" is a row's place in its unit in file order. Keeping
    # k = 5 by hash keeps each position with probability 1/4 (the first-k rule: 1 or 0).
    units, size, k = 2000, 20, 5
    schema = Schema(
        (
            Attribute("pos", "integer", min=0, max=size - 1),
            Attribute("sex", "categorical", values=("F", "M")),
        )
    )
    rng = np.random.default_rng(11)
    df = pd.DataFrame(
        {
            "uid": np.repeat([f"a{u}" for u in range(units)], size),
            "pos": np.tile(np.arange(size), units),
            "sex": rng.choice(["F", "M"], units * size),
        }
    ).sample(frac=1.0, random_state=3)  # interleave the units
    df["pos"] = df.groupby("uid").cumcount()  # positions in file order
    with DuckDBBackend.load(df, schema, privacy_unit=("uid", k), unit_key=KEY) as b:
        per_pos = b.connection.execute(
            f'SELECT c0, count(*) FROM "{b.table}" GROUP BY c0 ORDER BY c0'
        ).fetchall()
        assert b.report.rows == units * k
    observed = np.array([n for _, n in per_pos])
    expected = units * k / size  # 500 per position, standard deviation ~19.4
    assert len(observed) == size
    assert np.all(np.abs(observed - expected) < 100), observed
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 60, chi2  # 19 degrees of freedom: 99.99% quantile ~ 48


def test_report_matches_a_brute_force_count(tmp_path):
    df = frame(4000, 300, seed=2)
    rng = np.random.default_rng(5)
    ids = df["uid"].astype(object)
    gone = rng.random(len(df)) < 0.05
    ids[gone] = rng.choice(["", "  ", "NA", "?"], int(gone.sum()))
    df["uid"] = ids
    df.loc[rng.random(len(df)) < 0.05, "age"] = 500  # invalid: dropped before the cap
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    k = 7
    with load(path, k, on_invalid="drop") as b:
        report = b.report
        got = kept(b)
    missing = df["uid"].str.strip().isin(["", "NA", "?"])
    valid = df[~missing & (df["age"] <= 99)]
    sizes = valid.groupby("uid").size().to_numpy()
    assert got == choose_rows(codes(valid), k, KEY)
    unit = report.unit
    assert unit is not None
    assert (unit.column, unit.k) == ("uid", k)
    assert unit.units == len(sizes)
    assert unit.rows == report.rows == int(np.minimum(sizes, k).sum()) == len(got)
    assert unit.dropped_by_cap == int(np.maximum(sizes - k, 0).sum())
    assert unit.dropped_missing_id == int(missing.sum())
    for pct, value in ((50, unit.p50), (90, unit.p90), (99, unit.p99), (100, unit.max)):
        assert value == int(np.quantile(sizes, pct / 100, method="inverted_cdf"))
    ks = [c for c, _ in unit.kept_by_k]
    assert ks == [c for c in (1, 2, 5, 10, 20, 50, 100) if c < sizes.max()] + [sizes.max()]
    assert [n for _, n in unit.kept_by_k] == [int(np.minimum(sizes, c).sum()) for c in ks]
    assert report.rows_read == len(df)
    assert report.dropped_privacy_unit == unit.dropped_missing_id + unit.dropped_by_cap
    assert report.dropped_invalid == int((~missing & (df["age"] > 99)).sum())
    assert report.rows_read == (report.rows + report.dropped_invalid + report.dropped_privacy_unit)
    # Replaced values are chosen by their replacement's code.
    replaced = df[~missing].assign(age=df["age"].where(df["age"] <= 99, 0))
    with load(path, k, on_invalid="drop", replace={"age": 0}) as b:
        assert kept(b) == choose_rows(codes(replaced), k, KEY)
        assert b.report.dropped_invalid == 0
    with DuckDBBackend.load(path, SCHEMA, on_invalid="drop") as b:
        assert b.report.unit is None  # no unit, no unit statistics


def test_missing_ids_are_refused_or_dropped(tmp_path):
    text = "uid,age,sex\na,1,F\n ,2,F\nNA,3,M\nb,4,M\n,5,F\n?,6,M\n"
    path = tmp_path / "d.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"'uid': 4 rows have a missing id \(first: row 2\); on_invalid='drop' leaves them out$",
    ):
        load(path, 1)
    with load(path, 1, on_invalid="drop") as b:
        assert kept(b) == [(1, 0), (4, 1)]
        assert b.report.unit.dropped_missing_id == 4
        assert b.report.dropped_privacy_unit == 4
        assert b.report.dropped_invalid == 0
    # A typed id column: NULL is missing (and nothing else is).
    table = pa.table({"uid": pa.array([7, None, 7, 8], pa.int64()), "age": [1, 2, 3, 4],
                      "sex": ["F", "F", "M", "M"]})  # fmt: skip
    with pytest.raises(DataError, match=r"1 rows have a missing id \(first: row 2\)"):
        load(table, 1)
    with load(table, 2, on_invalid="drop") as b:
        assert kept(b) == [(1, 0), (3, 1), (4, 1)]
        assert b.report.unit.dropped_missing_id == 1


def test_integer_ids_hash_alike_in_every_type(tmp_path):
    # The same ids as CSV text, as int64 and as float64 with NaN (pandas' integers with a
    # missing value): the same rows are kept.
    df = frame(1500, 60, seed=4)
    df["uid"] = df["uid"].str[1:].astype(np.int64) + 10_000_000  # past Spark's 1e7 notation
    want = choose_rows(codes(df), 3, KEY)
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    floats = pd.concat([df, pd.DataFrame({"uid": [np.nan], "age": [5], "sex": ["F"]})])
    assert floats["uid"].dtype == np.float64
    for src in (path, df, floats):
        with load(src, 3, on_invalid="drop") as b:
            assert kept(b) == want


def test_copies_are_kept_uniformly_by_duckdb(tmp_path):
    """2,000 units, each of 100 copies of one row and 3 of another, kept at k = 5: the
    rare rows kept are the reference's exactly, and about 2,000 x 15/103 = 291 of them
    (standard deviation about 16)."""
    rows = [(f"u{u}", (20, 1)) for u in range(2000) for _ in range(100)]
    rows += [(f"u{u}", (30, 0)) for u in range(2000) for _ in range(3)]
    df = pd.DataFrame(
        {"uid": [u for u, _ in rows], "age": [a for _, (a, _) in rows],
         "sex": ["FM"[s] for _, (_, s) in rows]}
    ).sample(frac=1.0, random_state=2)  # fmt: skip
    with load(df, 5) as b:
        got = kept(b)
    assert got == choose_rows(rows, 5, KEY)
    assert abs(got.count((30, 0)) - 2000 * 15 / 103) < 100


def test_ids_that_read_as_one_number_are_one_unit_in_every_format(tmp_path):
    """pandas writes a float id column as ``1714.0`` in a CSV file; the same ids in a
    Parquet file or a DataFrame are floats (with a missing value) or integers. Every
    format keeps the same rows (the unit ids 1714.0 and 1714 are one), and in one CSV
    file ``7``, ``7.0``, ``+7``, ``007`` and ``7e0`` are one unit."""
    df = frame(2000, 80, seed=12)
    df["uid"] = df["uid"].str[1:].astype(np.float64)
    with_missing = pd.concat([df, pd.DataFrame({"uid": [np.nan], "age": [5], "sex": ["F"]})])
    path = tmp_path / "d.csv"
    with_missing.to_csv(path, index=False)
    assert "1.0," in path.read_text() or ".0," in path.read_text()  # as pandas writes floats
    with_missing.to_parquet(tmp_path / "d.parquet")
    as_int = df.astype({"uid": np.int64})
    want = choose_rows(codes(as_int), 3, KEY)
    for src in (path, tmp_path / "d.parquet", with_missing, as_int, df.astype({"uid": str})):
        with load(src, 3, on_invalid="drop") as b:
            assert kept(b) == want, src
            assert b.report.unit.units == df["uid"].nunique()
    forms = pd.DataFrame(
        {"uid": ["7", "7.0", " +7", "007", "7e0", "8"] * 4, "age": range(24), "sex": "F"}
    )
    forms.to_csv(tmp_path / "forms.csv", index=False)
    with load(tmp_path / "forms.csv", 100) as b:
        assert b.report.unit.units == 2
        assert b.distinct_units(parse_query("age >= 0", SCHEMA)) == 2


def test_the_unit_key_is_required_checked_and_never_shown(tmp_path):
    df = frame(50, 5, seed=6)
    with pytest.raises(InvalidParameter, match=r"^privacy_unit needs unit_key: 32 secret"):
        DuckDBBackend.load(df, SCHEMA, privacy_unit=("uid", 2))
    for bad, what in ((KEY.hex(), "got str"), (KEY[:16], "got 16 bytes"), (1, "got int")):
        with pytest.raises(InvalidParameter, match=what) as err:
            load(df, 2, key=bad)
        assert KEY.hex() not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InvalidParameter, match="privacy_unit must be"):  # k checked first
        load(df, 0, key=None)
    with DuckDBBackend.load(df, SCHEMA, unit_key=KEY) as b:  # checked, unused
        assert b.report.rows == 50 and b.report.unit is None
    opts = check_load_options(SCHEMA, privacy_unit=("uid", 2), unit_key=KEY)
    assert KEY.hex() not in repr(opts) and repr(KEY) not in repr(opts)


# --------------------------------------------------------------------- Spark


def spark_kept(backend) -> list[tuple[int, ...]]:
    return sorted(tuple(int(v) for v in r) for r in backend.dataframe.drop("__unit").collect())


def spark_test(test):
    """A Spark test: in the one worker that holds the session (the ``spark`` fixture skips
    it without pyspark or Java), pyspark's warnings about pandas versions ignored."""
    quiet = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
    return pytest.mark.xdist_group("spark")(quiet(test))


def load_twins(spark, data, k, spark_data=None, **options):
    """Both backends on the same data, or the same one-line refusal from both."""
    from dpcurator.backends.spark_backend import SparkBackend

    out, errors = [], []
    for cls, d, extra in (
        (DuckDBBackend, data, {}),
        (SparkBackend, data if spark_data is None else spark_data, {"spark": spark}),
    ):
        try:
            out.append(
                cls.load(d, SCHEMA, privacy_unit=("uid", k), unit_key=KEY, **options, **extra)
            )
            errors.append(None)
        except DpCuratorError as err:
            out.append(None)
            errors.append(str(err))
    if any(errors):
        assert errors[0] == errors[1] and errors[0] is not None, errors
        return None, None, errors[0]
    duck, spk = out
    assert dataclasses.asdict(spk.report) == dataclasses.asdict(duck.report)
    return duck, spk, None


@spark_test
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_spark_keeps_duckdbs_rows(spark, tmp_path, fmt):
    df = frame(3000, 150, seed=8)
    want = choose_rows(codes(df), 3, KEY)
    splitting = spark.newSession()
    splitting.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    splitting.conf.set("spark.sql.files.openCostInBytes", "0")
    shuffled = df.sample(frac=1.0, random_state=9)
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        shuffled.to_csv(path, index=False)
    else:
        pq.write_table(pa.Table.from_pandas(shuffled, preserve_index=False), path,
                       row_group_size=100)  # fmt: skip
    assert splitting.read.text(str(path)).rdd.getNumPartitions() > 3
    duck, spk, _ = load_twins(splitting, df, 3, spark_data=path)
    assert kept(duck) == spark_kept(spk) == want
    assert spk.report.unit.units == df["uid"].nunique()
    duck.close()
    spk.close()


@spark_test
def test_spark_missing_and_float_ids_as_duckdb(spark, tmp_path):
    df = frame(600, 40, seed=10)
    df["uid"] = df["uid"].str[1:].astype(np.float64) + 2.0**40
    df.loc[[3, 50, 51], "uid"] = np.nan
    df.loc[[4, 60], "age"] = 300
    _, _, refusal = load_twins(spark, df, 2)
    assert (
        refusal
        == "DataFrame: attribute 'age': 2 rows have values outside the domain [0, 99] or missing (first: row 5, value '300'); fix the data, or pass on_invalid='drop' or replace={attribute: value}"
    )
    _, _, refusal = load_twins(spark, df, 2, replace={"age": 0})
    assert (
        refusal == "DataFrame: privacy unit column 'uid': 3 rows have a missing id (first: row 4); "
        "on_invalid='drop' leaves them out"
    )
    duck, spk, _ = load_twins(spark, df, 2, on_invalid="drop")
    valid = df[df["uid"].notna() & (df["age"] <= 99)].copy()
    valid["uid"] = valid["uid"].astype(np.int64).astype(str)
    assert kept(duck) == spark_kept(spk) == choose_rows(codes(valid), 2, KEY)
    assert duck.report.unit.dropped_missing_id == 3
    assert duck.report.dropped_invalid == 2
    duck.close()
    spk.close()


@spark_test
@pytest.mark.parametrize("scheme", [1, 2])
def test_spark_reads_ids_and_numbers_copies_as_duckdb(spark, tmp_path, scheme):
    """Ids written many ways (numbers, padded, signed, exponents, words, beyond 2^53) and
    units of many copies of few rows: Spark keeps DuckDB's rows, in either scheme."""
    rng = np.random.default_rng(13)
    forms = ["7", "7.0", "+7", "007", "7e0", "7.", "-0", "0.0", "8.5", ".5", "1e400",
             "9007199254740993", "abc", "a|b", "12", "012.000"]  # fmt: skip
    df = pd.DataFrame(
        {"uid": rng.choice(forms, 1500), "age": rng.integers(0, 3, 1500),
         "sex": rng.choice(["F", "M"], 1500)}
    )  # fmt: skip
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    duck, spk, _ = load_twins(spark, path, 4, unit_rows=scheme)
    assert kept(duck) == spark_kept(spk) == choose_rows(codes(df), 4, KEY, scheme)
    assert duck.report.unit.units == (9 if scheme == 2 else len(forms))
    everything = parse_query("age >= 0", SCHEMA)
    assert duck.distinct_units(everything) == spk.distinct_units(everything)
    duck.close()
    spk.close()


def typed_ids(tmp_path, values, arrow_type) -> tuple[pd.DataFrame, object]:
    """A Parquet file whose ``uid`` column has ``arrow_type``, units of several rows;
    the frame of its rows with each id as the reference reads it (its exact value)."""
    rng = np.random.default_rng(14)
    uid = [values[i % len(values)] for i in range(600)]
    df = pd.DataFrame(
        {"uid": uid, "age": rng.integers(0, 3, 600), "sex": rng.choice(["F", "M"], 600)}
    )
    table = pa.table({"uid": pa.array(uid, type=arrow_type), "age": df["age"], "sex": df["sex"]})
    path = tmp_path / "ids.parquet"
    pq.write_table(table, path)
    return df, path


def test_a_32_bit_float_id_is_the_integer_it_holds(tmp_path):
    """123456792 as a 32-bit float is the unit 123456792 (DuckDB writes that float as
    1.2345679e+08, which reads back as 123456790: another unit than the same id in a CSV
    file or an int64 column, and than Spark's)."""
    df, path = typed_ids(tmp_path, [123456792.0, 7.0, 16777216.0], pa.float32())
    with load(path, 2) as b:
        assert kept(b) == choose_rows(codes(df.assign(uid=[str(int(v)) for v in df.uid])), 2, KEY)
        ids = {
            r[0]
            for r in b.connection.execute(f'SELECT DISTINCT __unit FROM "{b.table}"').fetchall()
        }
    assert ids == {"123456792", "7", "16777216"}


@spark_test
@pytest.mark.parametrize(
    ("values", "arrow_type"),
    [
        ([123456792.0, 7.0, 0.5, 16777216.0], pa.float32()),
        ([2.5e15, 7.0, -0.0, 0.1, float("nan")], pa.float64()),
        (["7\u2028", "8", "7\u0085", "9\u2029", " 7 ", "1e400"], pa.string()),
    ],
    ids=["float32", "float64", "line-terminators"],
)
def test_spark_reads_typed_ids_as_duckdb(spark, tmp_path, values, arrow_type):
    """Ids whose text the engines could read apart: 32-bit floats (DuckDB writes them
    shortest, Spark as doubles), NaN (a missing id in both), and strings ending in a line
    terminator Java's ``$`` matches before (Spark refused the file). (Not 1e20: the
    engines write it apart, ``1e+20`` and ``1.0E20``, as the docs say.)"""
    _, path = typed_ids(tmp_path, values, arrow_type)
    duck, spk, refusal = load_twins(spark, path, 2, on_invalid="drop")  # (NaN: no id)
    assert refusal is None
    assert kept(duck) == spark_kept(spk)
    units = {
        r[0]
        for r in duck.connection.execute(f'SELECT DISTINCT __unit FROM "{duck.table}"').fetchall()
    }
    assert units == {r[0] for r in spk.dataframe.select("__unit").distinct().collect()}
    duck.close()
    spk.close()


# --------------------------------------------------------------------- distinct units


def kept_ids(df: pd.DataFrame, k: int, where) -> int:
    """Reference: units with a kept row (their k rows of smallest keyed hash) in ``where``."""
    return sum(any(where(c) for c in mine) for mine in kept_by_unit(codes(df), k, KEY).values())


def test_distinct_units_counts_the_units_of_the_kept_rows():
    df = frame(400, 60, seed=4)
    with load(df, 3) as b:
        young = parse_query("age < 15", SCHEMA)
        assert b.distinct_units(young) == kept_ids(df, 3, lambda c: c[0] < 15)
        assert b.distinct_units(None) == kept_ids(df, 3, lambda c: True)
        none = parse_query("age < 0", SCHEMA)
        assert b.distinct_units(none) == 0
        either = parse_query("age < 10 OR sex = 'M'", SCHEMA)  # a union of boxes
        assert b.distinct_units(either) == kept_ids(df, 3, lambda c: c[0] < 10 or c[1] == 1)
    with DuckDBBackend.load(df, SCHEMA) as b, pytest.raises(InvalidParameter, match="no units"):
        b.distinct_units(None)


@spark_test
def test_spark_counts_the_same_distinct_units(spark, tmp_path):
    df = frame(200, 30, seed=6)
    duck, spk, _ = load_twins(spark, df, 2)
    with duck, spk:
        for text in ("age < 10", "sex = 'F' OR age > 25", "age > 90"):
            q = parse_query(text, SCHEMA)
            assert spk.distinct_units(q) == duck.distinct_units(q)
        assert spk.distinct_units(None) == duck.distinct_units(None) == df.uid.nunique()


@pytest.mark.parametrize(
    "bad", [True, False, 0, 3, -1, 2.0, "2", None, 10**400, float("nan"), b"2"]
)
def test_the_scheme_is_checked_before_anything_is_read(tmp_path, bad):
    """``unit_rows=`` takes 1 or 2, as an int: anything else is refused in one line,
    before the data is read (the file here does not even exist)."""
    with pytest.raises(InvalidParameter) as err:
        load(tmp_path / "nowhere.csv", 2, unit_rows=bad)
    assert str(err.value) == f"unit_rows must be one of [1, 2], got {bad!r}"
