"""Attributes that may be missing: the schema says so with ``"missing"``, and blank, NULL
and missing-token cells load as that attribute's missing value, for integer and
categorical attributes alike, with no load option; ``IS NULL`` counts them, histograms
show them as a cell, clipped sums skip them. (The Spark backend's twin test checks it
gives the same numbers.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.errors import DataError, QueryError, SchemaError
from dpcurator.mechanisms import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Attribute, Schema, parse_query, parse_workload_text

SCHEMA = {
    "attributes": [
        {"name": "income", "type": "integer", "min": 0, "max": 100, "missing": -1},
        {"name": "work", "type": "categorical", "values": ["a", "b", "?"], "missing": "?"},
        {"name": "colour", "type": "categorical", "values": ["x", "y"], "missing": "unknown"},
        {"name": "score", "type": "integer", "min": 0, "max": 9, "missing": "NA"},
    ]
}
#: Every way a cell says "missing": blank, spaces, the load's tokens (?, NA), the marker
#: itself (-1 also as -01 and padded), and quoted blanks.
CSV = (
    "income,work,colour,score\n"
    "5,a,x,1\n"
    ",b,,2\n"
    "-1,,y,\n"
    "  -01 ,?,unknown,NA\n"
    '7, NA ,?,""\n'
    '100,"  ",x,9\n'
)
#: Rows whose value of each attribute is missing (1-based data rows of CSV).
MISSING = {"income": {2, 3, 4}, "work": {3, 4, 5, 6}, "colour": {2, 4, 5}, "score": {3, 4, 5}}


def count(b, text: str) -> int:
    return int(b.counts([parse_query(text, b.schema)])[0])


def test_blank_null_and_tokens_load_as_the_missing_value(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(CSV)
    with load_table(path, SCHEMA) as b:
        assert count(b, "total") == 6
        for name, rows in MISSING.items():
            assert count(b, f"{name} IS NULL") == len(rows), name
            assert count(b, f"{name} IS NOT NULL") == 6 - len(rows), name
        assert b.report.dropped_invalid == 0 and b.report.replaced == {}
        # the missing value is its own cell, outside every range; NOT includes it
        assert count(b, "income < 50") == 2 and count(b, "income >= 0") == 3
        assert count(b, "NOT income < 50") == 4
        assert count(b, "work = 'a' OR work IS NULL") == 5
        # a clipped sum adds the values it has (5 + 7 + 100), as SQL's SUM skips NULLs
        assert b.clipped_sum("income", 0, 100) == 112
        assert b.clipped_sum("income", 10, 100, where=parse_query("work IS NULL", b.schema)) == 110


def test_every_format_has_its_nulls_loaded_as_missing(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "income": [5.0, np.nan, -1.0, 3.0],  # pandas' missing integer: a NaN float
            "work": ["a", None, "b", "?"],
            "colour": ["x", "y", None, "x"],
            "score": pd.array([1, 2, None, 4], dtype="Int64"),
        }
    )
    table = pa.Table.from_pandas(frame)
    parquet = tmp_path / "d.parquet"
    pq.write_table(table, parquet)
    for data in (frame, table, parquet):
        with load_table(data, SCHEMA) as b:
            got = [count(b, f"{n} IS NULL") for n in ("income", "work", "colour", "score")]
            assert got == [2, 2, 1, 1], type(data)


def test_the_first_days_integer_column_with_blanks(tmp_path: Path) -> None:
    """Blank incomes: "missing": -1 below min 0 (or "" or "NA") loads them, with no
    flag; a histogram with bins from 0 shows them as their own cell, and charges it."""
    path = tmp_path / "people.csv"
    path.write_text("age,income\n30,1200\n41,\n52,800\n23,\n")
    for marker in (-1, "", "NA"):
        schema = {
            "attributes": [
                {"name": "age", "type": "integer", "min": 0, "max": 120},
                {"name": "income", "type": "integer", "min": 0, "max": 10_000, "missing": marker},
            ]
        }
        with Curator.open(
            data=path,
            schema=schema,
            budget=PureDP(1e6),
            rng=SeededRandomSource(1),
            allow_insecure=True,
        ) as c:
            h = c.histogram("income", bins=[0, 1000, 10_001], epsilon=1e5)
            assert [a.query for a in h.cells] == [
                "income <= 999",
                "income >= 1000",
                "income IS NULL",
            ]
            assert h.values() == [1, 1, 2], marker
            assert c.count("income IS NULL", epsilon=1e5).value == 2
            plain = c.histogram("age", epsilon=1e5)  # no missing value: no extra cell
            assert len(plain.cells) == 121
    # and a schema whose integer may be missing at a value inside its range
    schema = {
        "attributes": [{"name": "income", "type": "integer", "min": -1, "max": 9, "missing": -1}]
    }
    path.write_text("income\n3\n\n-1\n")
    with load_table(path, schema) as b:
        assert count(b, "income IS NULL") == 2 and count(b, "income = -1") == 2


def test_a_schema_without_missing_refuses_blanks_and_says_how(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("income\n3\n\n")
    schema = {"attributes": [{"name": "income", "type": "integer", "min": 0, "max": 9}]}
    with pytest.raises(DataError) as err:
        load_table(path, schema)
    msg = str(err.value)
    assert "(first: row 2, missing)" in msg
    assert '"missing": -1' in msg and "blank and NULL cells then load as that value" in msg
    assert "\n" not in msg


def test_declared_values_are_never_missing(tmp_path: Path) -> None:
    schema = {
        "attributes": [
            {"name": "country", "type": "categorical", "values": ["NA", "FR"], "missing": "?"}
        ]
    }
    path = tmp_path / "d.csv"
    path.write_text("country\nNA\nFR\n?\n\n")
    with load_table(path, schema) as b:  # Namibia is "NA": a value, not a missing token
        assert [count(b, q) for q in ("country = 'NA'", "country IS NULL")] == [1, 2]


def test_histograms_and_marginals_show_the_missing_cell(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(CSV)
    schema = Schema.from_dict(SCHEMA)
    wl = parse_workload_text(
        "histogram(colour)\nhistogram(income, bins=[0, 50, 101])\nmarginal(colour, work)\n",
        schema,
    )
    texts = [q.text for q in wl.queries]
    assert texts[:3] == ["colour = 'x'", "colour = 'y'", "colour IS NULL"]
    assert texts[3:6] == ["income <= 49", "income >= 50", "income IS NULL"]
    assert len(texts) == 6 + 3 * 3  # colour (x, y, missing) x work (a, b, ?)
    with load_table(path, schema) as b:
        got = b.counts(list(wl.queries)).tolist()
        assert got[:3] == [2, 1, 3] and got[3:6] == [2, 1, 3]
        assert sum(got[6:]) == 6  # the marginal's cells partition the rows


def test_schema_missing_values_are_checked() -> None:
    a = Attribute("income", "integer", min=0, max=9, missing=-1)
    assert (a.size, a.value_count, a.missing_position, a.missing_cell) == (11, 10, 10, True)
    b = Attribute("w", "categorical", values=("a", "?"), missing="?")
    assert (b.size, b.missing_position, b.missing_cell) == (2, 1, False)
    # the derived cell cannot be forced by hand
    c = Attribute("w", "categorical", values=("a",), _extra=True)
    assert c.size == 1 and c.missing_position is None
    for bad, words in [
        ({"type": "integer", "min": 0, "max": 9, "missing": True}, "must be an integer"),
        ({"type": "integer", "min": 0, "max": 9, "missing": 1.5}, "must be an integer"),
        ({"type": "categorical", "values": ["a"], "missing": -1}, "must be text"),
        ({"type": "categorical", "values": ["a"], "missing": None}, None),
    ]:
        d = {"attributes": [{"name": "v", **bad}]}
        if words is None:
            assert Schema.from_dict(d).attributes[0].missing is None
            continue
        with pytest.raises(SchemaError, match=words):
            Schema.from_dict(d)
    round_trip = Schema.from_dict(json.loads(json.dumps(Schema.from_dict(SCHEMA).to_dict())))
    assert round_trip == Schema.from_dict(SCHEMA)


def test_the_missing_marker_is_written_is_null() -> None:
    schema = Schema.from_dict(SCHEMA)
    for text, fix in [
        ("income = -1", "write income IS NULL"),
        ("colour IN ('x', 'unknown')", "write colour IS NULL"),
    ]:
        with pytest.raises(QueryError, match=fix):
            parse_query(text, schema)
    assert parse_query("work = '?'", schema) == parse_query("work IS NULL", schema)
