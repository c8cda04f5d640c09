"""Any attribute name a schema allows loads, counts and sums, from CSV, Parquet and pandas.

DuckDB resolves identifiers case-insensitively, gives every table a ``rowid`` pseudo-column
that a real column shadows, renames duplicate columns (``a``, ``A`` -> ``a``, ``A_1``) and
lets ``GROUP BY`` see select-list aliases: none of that may change what is counted.
"""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcurator.backends import load_table
from dpcurator.backends.unit_rows import choose_rows
from dpcurator.errors import DataError, InvalidParameter
from dpcurator.queries import Attribute, Query, Schema, parse_query

HOSTILE = [
    "rowid",
    "ROWID",
    'we"ird',
    '"',
    'a "quoted" one"',
    "with space",
    " padded ",
    " ",
    "ünïcødé 名前",
    "select",
    "from",
    "order by",
    "count(*)",
    "__row",
    "__id",
    "__rank",
    "c0",
    "c1",
    "v0",
    "d0",
    "g",
    "n",
    "r",
    "p",
    "v",
    "k0",
    "column0",
    "file_row_number",
    "it's",
    "a,b",
    "tab\there",
    "new\nline",
    "x); DROP TABLE data; --",
]
FORMATS = ["csv", "parquet", "pandas"]
N_ROWS = 60


def frame_for(schema: Schema, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols = {}
    for attr in schema.attributes:
        pos = rng.integers(0, attr.size, N_ROWS)
        if attr.type == "integer":
            cols[attr.name] = (pos + attr.min).tolist()
        else:
            cols[attr.name] = [attr.values[int(i)] for i in pos]
    return pd.DataFrame(cols)  # names may differ only in case or whitespace


def write_data(df: pd.DataFrame, fmt: str, folder: Path):
    if fmt == "pandas":
        return df
    if fmt == "parquet":
        path = folder / "d.parquet"
        table = pa.Table.from_arrays(
            [pa.array(df.iloc[:, j].tolist()) for j in range(df.shape[1])],
            names=[str(c) for c in df.columns],
        )
        pq.write_table(table, path)
        return path
    path = folder / "d.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        # LF rows: DuckDB's sniffer rejects a quoted LF in the first row of a CRLF file.
        w = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerow(df.columns)
        w.writerows(df.itertuples(index=False))
    return path


def covered(df: pd.DataFrame, schema: Schema, q: Query) -> np.ndarray:
    mask = np.ones(len(df), dtype=bool)
    for p in q.predicates:
        j = schema.index(p.attribute.name)
        col = df.iloc[:, j].tolist()
        pos = np.asarray([p.attribute.position(v) for v in col])
        inside = np.zeros(len(df), dtype=bool)
        for s, e in p.coverage:
            inside |= (pos >= s) & (pos < e)
        mask &= inside
    return mask


def check_table(data, df: pd.DataFrame, schema: Schema, **options) -> None:
    ints = [a for a in schema.attributes if a.type == "integer"]
    cats = [a for a in schema.attributes if a.type == "categorical"]
    queries = [Query(schema, ())]
    for attr in schema.attributes:
        queries.append(Query.from_coverages(schema, {attr.name: ((1, attr.size - 1),)}))
        queries.append(Query.from_coverages(schema, {attr.name: ((0, 1), (2, 3))}))
    for a, b in zip(schema.attributes, schema.attributes[1:], strict=False):
        queries.append(Query.from_coverages(schema, {a.name: ((0, 2),), b.name: ((1, 3),)}))
    with load_table(data, schema, **options) as b:
        assert b.report.rows == len(df)
        want = [int(covered(df, schema, q).sum()) for q in queries]
        assert b.counts(queries).tolist() == want
        for attr in ints:
            j = schema.index(attr.name)
            values = df.iloc[:, j].tolist()
            assert b.clipped_sum(attr.name, 2, 7) == sum(min(max(v, 2), 7) for v in values)
            if cats:
                where = Query.from_coverages(schema, {cats[0].name: ((0, 1),)})
                mask = covered(df, schema, where)
                got = b.clipped_sum(attr.name, -5, 4, where=where)
                assert got == sum(
                    min(max(v, -5), 4) for v, m in zip(values, mask, strict=True) if m
                )


def one_name_schema(name: str) -> Schema:
    partner = "kind" if name != "kind" else "other"
    return Schema(
        (
            Attribute(name, "integer", min=0, max=9),
            Attribute(partner, "categorical", values=("x", "y", "z")),
        )
    )


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", HOSTILE)
def test_each_hostile_name(tmp_path, name, fmt):
    schema = one_name_schema(name)
    df = frame_for(schema, seed=len(name))
    check_table(write_data(df, fmt, tmp_path), df, schema)


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_hostile_names_in_one_schema(tmp_path, fmt):
    attrs = []
    for i, name in enumerate(HOSTILE):
        if i % 3 == 2:
            attrs.append(Attribute(name, "categorical", values=("x", "y", "z", name)))
        else:
            attrs.append(Attribute(name, "integer", min=-4 + i, max=5 + 2 * i))
    # Names equal up to case or surrounding whitespace are distinct attributes.
    attrs.append(Attribute("a", "integer", min=0, max=3))
    attrs.append(Attribute("A", "categorical", values=("p", "q", "r")))
    attrs.append(Attribute(" a", "integer", min=10, max=12))
    schema = Schema(tuple(attrs))
    df = frame_for(schema, seed=11)
    check_table(write_data(df, fmt, tmp_path), df, schema)


def test_parser_reaches_quoted_names_without_double_quotes(tmp_path):
    schema = Schema(
        (
            Attribute("with space", "integer", min=0, max=9),
            Attribute("select", "categorical", values=("x", "y")),
            Attribute("ünï", "integer", min=0, max=9),
            Attribute("rowid", "integer", min=0, max=9),
        )
    )
    df = pd.DataFrame(
        {"with space": [1, 5, 7], "select": ["x", "y", "y"], "ünï": [0, 0, 9], "rowid": [9, 8, 7]}
    )
    with load_table(df, schema) as b:
        texts = ['"with space" >= 5', '"select" = \'y\' AND "ünï" = 9', "rowid < 9"]
        assert b.counts([parse_query(t, schema) for t in texts]).tolist() == [2, 1, 2]


# --------------------------------------------------------------------- file order


def order_frame() -> pd.DataFrame:
    # A column called rowid whose values run against the row order.
    return pd.DataFrame(
        {
            "rowid": [5, 4, 3, 2, 1],
            "uid": ["u1", "u2", "u1", "u1", "u2"],
            "age": [1, 2, 3, 4, 5],
        }
    )


AGE = Schema((Attribute("age", "integer", min=0, max=120),))


@pytest.mark.parametrize("fmt", ["csv", "parquet", "pandas", "arrow"])
def test_privacy_unit_ignores_a_rowid_column(tmp_path, fmt):
    df = order_frame()
    data = pa.Table.from_pandas(df, preserve_index=False) if fmt == "arrow" else None
    if data is None:
        data = write_data(df, fmt, tmp_path)
    key = bytes(range(32))
    # Each id keeps its row of smallest keyed hash, whatever a column called rowid holds.
    want = choose_rows([(u, [a]) for u, a in zip(df["uid"], df["age"], strict=True)], 1, key)
    with load_table(data, AGE, privacy_unit=("uid", 1), unit_key=key) as b:
        q = [parse_query(t, AGE) for t in ("total", f"age IN ({want[0][0]}, {want[1][0]})")]
        assert b.counts(q).tolist() == [2, 2]


def test_dataframe_row_order_not_its_index():
    df = order_frame()
    df["age"] = [1, 2, 300, 4, 5]
    df.index = [40, 30, 20, 10, 0]  # the row order is positional, whatever the labels
    with pytest.raises(DataError, match=r"\(first: row 3, value '300'\)"):
        load_table(df, AGE)


@pytest.mark.parametrize("fmt", FORMATS)
def test_invalid_row_reported_by_file_order_with_rowid_column(tmp_path, fmt):
    df = pd.DataFrame({"rowid": [3, 0, 1, 2], "age": [7, 8, 500, 9]})
    with pytest.raises(DataError) as err:
        load_table(write_data(df, fmt, tmp_path), AGE)
    assert (
        "1 row has a value outside the domain [0, 120] or missing (first: row 3, value '500')"
        in (str(err.value))
    )


def test_duplicate_column_only_an_error_when_needed(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("age,x,x\n3,a,b\n4,c,d\n", encoding="utf-8")
    with load_table(p, AGE) as b:  # the duplicated column is not an attribute
        assert b.counts([parse_query("age = 4", AGE)]).tolist() == [1]
    q = tmp_path / "e.csv"
    q.write_text("age,x,age\n3,a,3\n4,c,4\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"duplicate column 'age'"):
        load_table(q, AGE)
    with pytest.raises(DataError, match=r"duplicate column 'age'"):
        load_table(pd.DataFrame([[1, 2]], columns=["age", "age"]), AGE)


def test_file_order_kept_on_a_connection_that_does_not_preserve_it():
    # With preserve_insertion_order off, DuckDB may store a large scan in any order (a
    # million-row frame comes back reordered): the loader turns it on for the load, so
    # that messages number rows in file order.
    n = 1_000_000
    age = np.ones(n, dtype=np.int64)
    age[n - 2 :] = 500  # the last two rows are invalid
    df = pd.DataFrame({"age": age})
    con = duckdb.connect()
    con.execute("SET threads = 4")
    con.execute("SET preserve_insertion_order = false")
    with pytest.raises(
        DataError, match=rf"2 rows have values .*\(first: row {n - 1}, value '500'\)"
    ):
        load_table(df, AGE, connection=con)
    setting = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()
    assert setting == [(False,)]  # the owner's setting is back
    con.close()


def test_table_name_clash_in_any_letter_case():
    con = duckdb.connect()
    frame = pd.DataFrame({"age": [1, 2]})
    with load_table(frame, AGE, connection=con, name="data") as b:
        for clash in ("data", "DATA", "Data"):
            with pytest.raises(InvalidParameter, match=f"table '{clash}' already exists"):
                load_table(frame, AGE, connection=con, name=clash)
        con.execute('CREATE VIEW "My View" AS SELECT 1')
        with pytest.raises(InvalidParameter, match="already exists"):
            load_table(frame, AGE, connection=con, name="my view")
        assert b.counts([parse_query("total", AGE)]).tolist() == [2]
    con.close()
