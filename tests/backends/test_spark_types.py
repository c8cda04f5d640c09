"""SparkBackend loads float, timestamp, date and boolean attributes exactly as DuckDB does.

Each test loads the same data with both backends and compares the load reports, the
one-line refusals, and the codes through queries: the full histogram of every attribute
(``binned_counts`` over every position), counts of parsed queries, clipped sums and
moments in a float's step, grouped by parts of times. Spark starts once per test session
(the ``spark`` fixture of conftest.py); every test here is in the ``spark`` xdist group.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import os
import shutil
from unittest import mock

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):  # pragma: no cover
    pytest.skip("Spark needs Java 17", allow_module_level=True)

from dpcurator.backends import DuckDBBackend, SparkBackend, spark_load
from dpcurator.errors import DataError, DpCuratorError
from dpcurator.queries import Query, Schema, parse_query

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning"),
    pytest.mark.xdist_group("spark"),
]

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "bill", "type": "float", "min": 30, "max": 60, "step": 0.1, "missing": "NA"},
            {
                "name": "t",
                "type": "timestamp",
                "min": "2013-01-01T00:00:00Z",
                "max": "2013-12-31T23:00:00Z",
                "unit": "hour",
                "missing": "NA",
            },
            {"name": "day", "type": "date", "min": "2013-01-01", "max": "2013-12-31"},
            {"name": "ok", "type": "boolean", "missing": "NA"},
        ]
    }
)
QUERIES = [
    "bill > 39.15",
    "bill BETWEEN 40 AND 50.5",
    "bill IS NULL",
    "t >= '2013-01-01T10:00:00Z'",
    "t < '2013-06-01T06:00:00+00:00' AND ok",
    "month(t) = 6 OR hour(t) = 10",
    "day BETWEEN '2013-01-01' AND '2013-06-30'",
    "weekday(day) = 1 AND NOT ok",
    "ok IS NULL",
    "ok = FALSE OR bill < 35",
]


# --------------------------------------------------------------------- twins


def twin(spark, data, schema, **options):
    """(duck, spark) backends over the same data, their load reports equal."""
    duck = DuckDBBackend.load(data, schema, **options)
    spk = SparkBackend.load(data, schema, spark=spark, **options)
    assert dataclasses.asdict(spk.report) == dataclasses.asdict(duck.report)
    return duck, spk


def same_refusal(spark, data, schema, **options) -> str:
    """Both backends refuse ``data`` with the same one-line message (returned)."""
    errors = []
    for load, extra in ((DuckDBBackend.load, {}), (SparkBackend.load, {"spark": spark})):
        with pytest.raises(DpCuratorError) as info:
            load(data, schema, **options, **extra).close()
        errors.append(info.value)
    assert type(errors[1]) is type(errors[0])
    assert str(errors[1]) == str(errors[0])
    assert "\n" not in str(errors[1])
    return str(errors[0])


def same_numbers(duck, spk, schema, queries=(), full=False) -> dict[str, list[int]]:
    """The same codes (rows per position of every attribute, the missing cell too) and
    counts of ``queries`` from both, in one batch each; with ``full`` also clipped sums
    and moments of every float in its step grouped by month and flag, and binned counts
    of every time grouped by weekday. Closes the Spark backend; returns the histograms."""
    try:
        qs = [
            Query.from_coverages(schema, {a.name: ((p, p + 1),)})
            for a in schema.attributes
            for p in range(a.size)
        ]
        qs += [parse_query(q, schema) for q in queries]
        want = duck.counts(qs).tolist()
        assert spk.counts(qs).tolist() == want
        hist, at = {}, 0
        for a in schema.attributes:
            hist[a.name] = want[at : at + a.size]
            at += a.size
        if full:
            times = [b.name for b in schema.attributes if b.type in ("timestamp", "date")]
            flags = [b.name for b in schema.attributes if b.type == "boolean"]
            for a in schema.attributes:
                if a.type == "float":
                    lo, hi = int(a.min / a.step), int(a.max / a.step)
                    got = spk.clipped_sum(a.name, lo + 3, hi - 7, unit=a.step)
                    assert got == duck.clipped_sum(a.name, lo + 3, hi - 7, unit=a.step)
                    by = [f"month({t})" for t in times[:1]] + flags[:1]
                    w = spk.clipped_moments(a.name, lo, hi, by=by, unit=a.step)
                    v = duck.clipped_moments(a.name, lo, hi, by=by, unit=a.step)
                    assert [x.tolist() for x in w] == [x.tolist() for x in v]
                if a.type in ("timestamp", "date"):
                    edges = sorted({0, a.size // 3, a.size // 2, a.size})
                    by = [f"weekday({a.name})", *flags[:1]]
                    w = spk.binned_counts(a.name, edges, by=by)
                    assert w.tolist() == duck.binned_counts(a.name, edges, by=by).tolist()
        return hist
    finally:
        spk.close()


def codes(hist: list[int]) -> dict[int, int]:
    """Rows per code, the codes that occur only."""
    return {p: n for p, n in enumerate(hist) if n}


# --------------------------------------------------------------------- CSV


def test_csv_as_pandas_writes_it(spark, tmp_path):
    rng = np.random.default_rng(7)
    n = 40
    frame = pd.DataFrame(
        {
            "bill": np.round(rng.uniform(30, 60, n), 2),
            # pandas writes an aware time as 2013-01-01 10:00:00+00:00
            "t": pd.Timestamp("2013-01-01T00:00:00Z")
            + pd.to_timedelta(rng.integers(0, 365 * 86400, n), unit="s"),
            "day": [
                dt.date(2013, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 365, n)
            ],
            "ok": rng.integers(0, 2, n).astype(bool).astype(object),
        }
    )
    frame.loc[[3, 11], "bill"] = np.nan
    frame.loc[5, "ok"] = None
    frame.loc[[7, 19], "t"] = pd.NaT
    path = tmp_path / "penguins.csv"
    frame.to_csv(path, index=False, na_rep="NA")
    # values written by hand: an ISO time with Z, ties of the step, blanks, a token
    extra = [
        "39.1,2013-01-01T10:00:00Z,2013-06-01,True",
        "39.15,2013-01-01T10:59:59.999999Z,2013-06-02,False",
        "39.25, 2013-06-01T05:00:00-05:00 ,2013-12-31,NA",
        ",2013-06-01 10:00,2013-01-01,",
        "?,NA,2013-02-28,false",
        "60.04,2013-12-31T23:59:59Z,2013-03-01,TRUE",
    ]
    with path.open("a") as f:
        f.write("\n".join(extra) + "\n")
    duck, spk = twin(spark, path, SCHEMA)
    hist = same_numbers(duck, spk, SCHEMA, QUERIES, full=True)
    assert duck.report.rows == n + len(extra)
    bill = codes(hist["bill"])
    # 39.1 -> 91; 39.15 and 39.25 tie: to even (39.2 -> 92); 60.04 -> 60.0 (300)
    assert bill[91] >= 1 and bill[92] >= 2 and bill[300] >= 1
    assert bill[301] == 2 + 2  # NA twice from pandas, a blank and '?'
    t = codes(hist["t"])
    assert t[10] >= 2  # 10:00:00Z and 10:59:59.999999Z, truncated to the hour
    assert t[8760] == 2 + 1  # NaT written as NA, and NA
    june1 = (dt.date(2013, 6, 1) - dt.date(2013, 1, 1)).days * 24
    assert t[june1 + 10] >= 2  # 05:00-05:00 and a naive 10:00 (in UTC)
    assert codes(hist["ok"])[2] == 1 + 2  # pandas' NA, NA, a blank


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("60.1,2013-01-01T10:00:00Z,2013-06-01,True", "(first: row 2, value '60.1')"),
        (" 39.1x,2013-01-01T10:00:00Z,2013-06-01,True", "value ' 39.1x' is not a number"),
        ("39.1,2013-01-01T10:00:00+25:00,2013-06-01,True", "is not an ISO 8601 time"),
        ("39.1,2014-01-01T00:00:00Z,2013-02-30,True", "value '2014-01-01T00:00:00Z')"),
        ("39.1,2013-01-01T10:00:00Z,2013-02-30,maybe", "value '2013-02-30' is not a date"),
    ],
)
def test_invalid_text_refused_alike(spark, tmp_path, line, expected):
    path = tmp_path / "bad.csv"
    text = "bill,t,day,ok\n39.1,2013-01-01T10:00:00Z,2013-06-01,True\n"
    path.write_text(text + line + "\n" + line + "\n")
    message = same_refusal(spark, path, SCHEMA)
    assert expected in message, message
    assert "2 rows" in message


def test_missing_flag_refused_alike(spark, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x,y,on\n0.5,0.5,true\n0.5,0.5, \n0.5,0.5,\n")
    message = same_refusal(spark, path, TIES)
    assert "2 rows have values outside the domain {false, true} or missing" in message
    assert "(first: row 2, missing value ' '); if 'on' may be missing" in message


def test_missing_date_refused_alike(spark, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("bill,t,day,ok\n39.1,2013-01-01T10:00:00Z,,True\n")
    message = same_refusal(spark, path, SCHEMA)
    assert "(first: row 1, missing); if 'day' may be missing" in message


def test_drop_and_replace_the_same_rows(spark, tmp_path):
    lines = ["bill,t,day,ok,id"]
    for k in range(60):
        bill = f"{30 + k * 0.55:.2f}" if k % 7 else "61.5"
        t = f"2013-0{1 + k % 9}-1{k % 10}T0{k % 10}:30:00Z" if k % 11 else "soon"
        day = f"2013-1{k % 3}-0{1 + k % 9}" if k % 13 else "2012-12-31"
        ok = ["yes", "no", "NA", "1", "0", "t"][k % 6] if k % 17 else "perhaps"
        lines.append(f"{bill},{t},{day},{ok},{k % 9}")
    path = tmp_path / "drop.csv"
    path.write_text("\n".join(lines) + "\n")
    duck, spk = twin(spark, path, SCHEMA, on_invalid="drop", max_dropped=1.0)
    assert 0 < duck.report.dropped_invalid < 60
    same_numbers(duck, spk, SCHEMA, QUERIES)
    # replacements, and the privacy unit's rows chosen by their codes: the same rows
    replace = {"bill": "NA", "ok": True, "day": "2013-01-01"}
    duck, spk = twin(
        spark,
        path,
        SCHEMA,
        on_invalid="drop",
        max_dropped=1.0,
        replace=replace,
        privacy_unit=("id", 3),
        unit_key=bytes(range(32)),
    )
    assert set(duck.report.replaced) == {"bill", "ok", "day"}
    assert 0 < duck.report.dropped_invalid < 60  # the times
    assert duck.report.dropped_privacy_unit > 0
    same_numbers(duck, spk, SCHEMA, QUERIES)


TIES = Schema.from_dict(
    {
        "attributes": [
            {"name": "x", "type": "float", "min": -1, "max": 1, "step": 0.5, "missing": -9},
            {"name": "y", "type": "float", "min": -1, "max": 1, "step": 0.5, "missing": "NA"},
            {"name": "on", "type": "boolean"},
        ]
    }
)


def test_rounding_ties_to_even_and_number_markers(spark, tmp_path):
    x = TIES.attribute("x")
    # the reader both engines share: to the nearest multiple of the step, ties to even
    assert [x.read(t) for t in ("0.25", "0.75", "-0.25", "1.25", "-1.25")] == [2, 4, 2, 4, 0]
    texts = ["0.25", "0.75", "-0.25", "1.25", "-1.25", "0.5", "1e-1", " 2.5E-1 ", "-9", "-9.0"]
    texts += ["-09", "", "NA", "0.2500000000000001"]
    path = tmp_path / "ties.csv"
    path.write_text("x,y,on\n" + "".join(f"{t},{t},{'ft'[k % 2]}\n" for k, t in enumerate(texts)))
    # y has no number marker: -9 is out of its domain, NA and a blank are missing
    duck, spk = twin(spark, path, TIES, replace={"y": 0})
    hist = same_numbers(duck, spk, TIES, ["x > 0", "x = 0 AND on", "x IS NULL"])
    # -0.25, 0.1 and ' 2.5E-1 ' are 0 (code 2); -9 in every form, a blank, NA: missing
    assert codes(hist["x"]) == {0: 1, 2: 4, 3: 2, 4: 2, 5: 5}
    assert duck.report.replaced == {"y": 3}
    # typed: a double (NaN is missing) and a 32-bit float, by their shortest decimals
    values = [0.25, 0.75, -0.25, 1.25, -1.25, 0.5, 0.1, float("nan"), -9.0, None, 0.3]
    table = pa.table(
        {
            "x": pa.array(values, pa.float64(), from_pandas=False),
            "y": pa.array(values, pa.float32(), from_pandas=False),
            "on": pa.array([k % 2 == 0 for k in range(len(values))]),
        }
    )
    pq.write_table(table, tmp_path / "ties.parquet")
    duck, spk = twin(spark, tmp_path / "ties.parquet", TIES, replace={"y": 0})
    hist = same_numbers(duck, spk, TIES, ["x > 0", "y < 0"])
    assert codes(hist["x"]) == {0: 1, 2: 3, 3: 2, 4: 2, 5: 3}
    assert codes(hist["y"]) == {0: 1, 2: 4, 3: 2, 4: 2, 5: 2}


# --------------------------------------------------------------------- typed columns


def typed_table(n: int = 30) -> pa.Table:
    """A Parquet-like table of DOUBLE (with NaN and NULL), TIMESTAMP (UTC), DATE and
    BOOLEAN columns."""
    rng = np.random.default_rng(3)
    bill: list[float | None] = rng.uniform(30, 60, n).round(3).tolist()
    bill[2] = bill[n - 1] = float("nan")  # NaN in a typed double: missing
    bill[1] = None
    start = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)
    times: list[dt.datetime | None] = [
        start + dt.timedelta(seconds=int(s), microseconds=int(u))
        for s, u in zip(rng.integers(0, 365 * 86400, n), rng.integers(0, 10**6, n), strict=True)
    ]
    times[3] = None
    days = [dt.date(2013, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 365, n)]
    ok: list[bool | None] = [bool(b) for b in rng.integers(0, 2, n)]
    ok[4] = None
    return pa.table(
        {
            "bill": pa.array(bill, pa.float64(), from_pandas=False),
            "t": pa.array(times, pa.timestamp("us", "UTC")),
            "day": pa.array(days, pa.date32()),
            "ok": pa.array(ok, pa.bool_()),
        }
    )


def test_typed_parquet_columns(spark, tmp_path):
    table = typed_table()
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    duck, spk = twin(spark, path, SCHEMA)
    hist = same_numbers(duck, spk, SCHEMA, QUERIES, full=True)
    assert hist["bill"][301] == 3  # two NaN and a NULL
    assert sum(hist["t"]) == 30 and hist["t"][-1] == 1
    assert hist["ok"][2] == 1
    # the same table as a pyarrow Table (a Spark DataFrame made from Arrow)
    duck, spk = twin(spark, table, SCHEMA)
    assert same_numbers(duck, spk, SCHEMA) == hist


def typed_refusal(spark, path, zone: str) -> str:
    """The refusals of both backends, DuckDB's and Spark's sessions in time zone
    ``zone`` (where they show a zoned time)."""
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    errors = []
    try:
        for load, extra in (
            (DuckDBBackend.load, {"connection": con}),
            (SparkBackend.load, {"spark": spark}),
        ):
            with pytest.raises(DataError) as info:
                load(path, SCHEMA, **extra)
            errors.append(str(info.value))
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
        con.close()
    assert errors[1] == errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("name", "values", "zone", "expected"),
    [
        ("bill", [1e300], "UTC", "value '1e+300'"),
        ("bill", [float("inf")], "UTC", "value 'inf' is not a number"),
        ("t", [dt.datetime(2014, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)], "UTC",
         "value '2014-01-01 00:00:00.5+00'"),
        ("t", [dt.datetime(2012, 12, 31, 23, 0, 0, tzinfo=dt.UTC)], "Asia/Kolkata",
         "value '2013-01-01 04:30:00+05:30'"),
        ("t", [dt.datetime(2014, 1, 1, 0, 0, 0, 250000)], "Asia/Kolkata",
         "value '2014-01-01 00:00:00.25'"),
        ("day", [dt.date(2012, 12, 31)], "UTC", "value '2012-12-31'"),
    ],
)  # fmt: skip
def test_typed_values_refused_alike(spark, tmp_path, name, values, zone, expected):
    """Typed values out of the domain are shown as DuckDB writes them: a double by its
    shortest decimal, a zoned time in the session's time zone with its offset, a local
    time (a TIMESTAMP without a zone) as it is."""
    table = typed_table(6)
    j = table.schema.get_field_index(name)
    given = table.schema.field(j).type
    if isinstance(values[0], dt.datetime) and values[0].tzinfo is None:
        given = pa.timestamp("us")
    column = pa.array(values * 6, given)
    pq.write_table(table.set_column(j, name, column), tmp_path / "bad.parquet")
    message = typed_refusal(spark, tmp_path / "bad.parquet", zone)
    assert expected in message, message
    assert "(6 rows not" in message or "6 rows have" in message


# --------------------------------------------------------------------- time zones

LOCAL = Schema.from_dict(
    {
        "attributes": [
            {
                "name": "t",
                "type": "timestamp",
                "min": "2013-01-01T00:00:00",
                "max": "2013-12-31T23:00:00",
                "unit": "hour",
                "timezone": "America/New_York",
            },
            {"name": "n", "type": "float", "min": 0, "max": 10, "step": 1},
        ]
    }
)


def test_local_times_read_in_the_schemas_time_zone(spark, tmp_path):
    local = [
        "2013-01-01 00:00:00",  # 05:00Z, the first hour of the domain
        "2013-03-10 02:30:00",  # a local time skipped by the change of clocks
        "2013-11-03 01:30:00",  # a local time that occurs twice: the earlier
        "2013-07-04 12:59:59.999",
        "2013-07-04T16:00:00Z",  # with an offset: as written (the same hour)
        "2013-12-31 23:59:30",
    ]
    t = LOCAL.attribute("t")
    assert t.read(local[0]) == 0 and t.read(local[3]) == t.read(local[4])
    path = tmp_path / "local.csv"
    path.write_text("t,n\n" + "".join(f"{x},{k}\n" for k, x in enumerate(local)))
    duck, spk = twin(spark, path, LOCAL)
    hist = same_numbers(duck, spk, LOCAL, ["hour(t) = 12", "day(t) = 3 OR n > 3"], full=True)
    assert codes(hist["t"]) == dict(collections.Counter(t.read(x) for x in local))
    # naive times typed: a Parquet TIMESTAMP without a zone, a pandas frame
    naive = [dt.datetime.fromisoformat(x) for x in local if "T" not in x]
    table = pa.table(
        {"t": pa.array(naive, pa.timestamp("us")), "n": pa.array(range(5), pa.float64())}
    )
    pq.write_table(table, tmp_path / "local.parquet")
    want = dict(collections.Counter(t.read(x) for x in local if "T" not in x))
    for data in (tmp_path / "local.parquet", table.to_pandas()):
        duck, spk = twin(spark, data, LOCAL)
        assert codes(same_numbers(duck, spk, LOCAL, ["hour(t) = 12"])["t"]) == want


# --------------------------------------------------------------------- join paths


def test_join_paths_give_the_same_codes(spark, tmp_path):
    """Columns with more distinct texts than a literal map holds are joined with a
    broadcast table (or, past that, a shuffled one): the same codes."""
    table = typed_table(40)
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    csv = tmp_path / "typed.csv"
    table.to_pandas().to_csv(csv, index=False)
    for data, broadcast in ((path, 1 << 20), (csv, 0)):
        with (
            mock.patch.object(spark_load, "_MAP_KEYS", 3),
            mock.patch.object(spark_load, "_BROADCAST_KEYS", broadcast),
        ):
            duck, spk = twin(spark, data, SCHEMA)
        same_numbers(duck, spk, SCHEMA, QUERIES)


def test_duckdb_time_text():
    f = spark_load._duckdb_time
    assert f("2013-01-01 10:00:00.000000+00:00") == "2013-01-01 10:00:00+00"
    assert f("2013-01-01 10:00:00.500000+05:30") == "2013-01-01 10:00:00.5+05:30"
    assert f("1800-01-01 05:03:58.000120-04:56:02") == "1800-01-01 05:03:58.00012-04:56:02"
    assert f("2013-01-01 10:00:00.000000-05:00") == "2013-01-01 10:00:00-05"


def test_grouped_counts_and_sql_answers_are_duckdbs(spark, tmp_path):
    """One pass of grouped counts (rows, conditions, clipped sums, rows per code) gives
    the same numbers on both engines; so does a joined table's, and so a SELECT's exact
    aggregates are the same whichever engine counts them."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame(
        {
            "id": rng.integers(0, 60, n),
            "bill": np.where(rng.random(n) < 0.1, np.nan, np.round(rng.uniform(30, 60, n), 1)),
            "t": pd.Timestamp("2013-01-01T00:00:00Z")
            + pd.to_timedelta(rng.integers(0, 8760, n), unit="h"),
            "day": [str(dt.date(2013, 1, 1) + dt.timedelta(days=int(d))) for d in rng.integers(0, 365, n)],
            "ok": rng.choice([True, False], n),
        }
    )
    frame["t"] = frame["t"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    path = tmp_path / "g.csv"
    frame.to_csv(path, index=False)
    key = bytes(range(32))
    engines = [
        cls.load(str(path), SCHEMA, privacy_unit=("id", 5), unit_key=key, **extra)
        for cls, extra in ((DuckDBBackend, {}), (SparkBackend, {"spark": spark}))
    ]
    try:
        where = parse_query("day >= '2013-03-01'", SCHEMA)
        got = [
            e.grouped_counts(
                where,
                ["month(t)", "ok"],
                [parse_query("bill > 45", SCHEMA)],
                [("bill", 305, 555, Fraction(1, 10), True), ("bill", 400, 500, Fraction(1, 10), False)],
                ["bill"],
            )
            for e in engines
        ]
        a, b = got
        assert a.rows.tolist() == b.rows.tolist() and a.rows.sum() > 0
        assert [h.tolist() for h in a.held] == [h.tolist() for h in b.held]
        for (n1, s1, q1), (n2, s2, q2) in zip(a.moments, b.moments, strict=True):
            assert list(n1) == list(n2) and list(s1) == list(s2)
            assert (q1 is None and q2 is None) or list(q1) == list(q2)
        ca, cb = a.codes["bill"], b.codes["bill"]
        assert sorted(zip(*(x.tolist() for x in ca), strict=False)) == sorted(zip(*(x.tolist() for x in cb), strict=False))
        # the clipped sums agree with clipped_moments, the one-column way
        one = engines[0].clipped_moments(
            "bill", 305, 555, parse_query("day >= '2013-03-01' AND bill IS NOT NULL", SCHEMA),
            ["month(t)", "ok"], squares=True, unit=Fraction(1, 10),
        )  # fmt: skip
        assert [list(x) for x in one] == [list(x) for x in a.moments[0]]
    finally:
        for e in engines:
            e.close()


def test_a_join_on_the_unit_keeps_the_same_rows_on_both_engines(spark, tmp_path):
    from dpcurator.backends.joins import join_tables
    from dpcurator.queries.joins import joined_schema

    rng = np.random.default_rng(5)
    left = pd.DataFrame({"id": rng.integers(0, 30, 300), "a": rng.integers(0, 10, 300)})
    right = pd.DataFrame({"id": rng.integers(0, 30, 60), "a": rng.integers(0, 5, 60)})
    left.to_csv(tmp_path / "l.csv", index=False)
    right.to_csv(tmp_path / "r.csv", index=False)
    sl = Schema.from_dict({"attributes": [{"name": "a", "type": "integer", "min": 0, "max": 9}]})
    sr = Schema.from_dict({"attributes": [{"name": "a", "type": "integer", "min": 0, "max": 4}]})
    joined = joined_schema("l", sl, "r", sr, "id")
    key = bytes(range(32))
    built = []
    for cls, extra in ((DuckDBBackend, {}), (SparkBackend, {"spark": spark})):
        lb = cls.load(str(tmp_path / "l.csv"), sl, privacy_unit=("id", 4), unit_key=key, name="l", **extra)
        rb = cls.load(str(tmp_path / "r.csv"), sr, privacy_unit=("id", 4), unit_key=key, name="r", **extra)
        built.append((lb, rb, join_tables(lb, rb, joined, 4, key)))
    try:
        (_, _, dj), (_, _, sj) = built
        assert joined.schema.names == ("l.a", "r.a")
        assert dj.report.rows == sj.report.rows and dj.report.rows_read == sj.report.rows_read
        cells = dj.binned_counts("l.a", list(range(11)), None, ["r.a"])
        assert cells.tolist() == sj.binned_counts("l.a", list(range(11)), None, ["r.a"]).tolist()
        assert dj.distinct_units(None) == sj.distinct_units(None) > 0
    finally:
        for trio in built:
            for b in trio:
                b.close()
