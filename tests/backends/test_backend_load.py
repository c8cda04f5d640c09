"""Loading: formats, header detection, validation messages, drop/replace rules, privacy unit."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcurator.backends import Backend, DuckDBBackend, load_table
from dpcurator.backends.unit_rows import row_hash
from dpcurator.errors import DataError, InvalidParameter
from dpcurator.queries import Attribute, Query, Schema, parse_query

SCHEMA = Schema(
    (
        Attribute("age", "integer", min=0, max=120),
        Attribute("sex", "categorical", values=("F", "M")),
        Attribute("color", "categorical", values=("red", "green", "blue"), ordered=True),
    )
)
#: A unit key for loads with a privacy unit.
KEY = bytes(32)
ROWS = [(30, "F", "red"), (45, "M", "blue"), (30, "M", "green"), (70, "F", "blue")]
QUERIES = ["total", "age = 30", "sex = 'M'", "color >= 'green' AND sex = 'F'", "age > 40"]
EXPECTED = [4, 2, 2, 1, 2]


def counts(backend: DuckDBBackend, texts=QUERIES) -> list[int]:
    return backend.counts([parse_query(t, backend.schema) for t in texts]).tolist()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def csv_text(rows, sep=",", header=None) -> str:
    lines = [sep.join(header)] if header else []
    lines += [sep.join(str(v) for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def invalid_message(err: pytest.ExceptionInfo, source: object) -> str:
    """The part of a load error after its ``source: `` prefix (the path may contain anything)."""
    msg = str(err.value)
    prefix = f"{source}: "
    assert msg.startswith(prefix), msg
    return msg[len(prefix) :]


# --------------------------------------------------------------------- formats


def test_csv_with_header_other_order_and_extra_column(tmp_path):
    rows = [(c, a, "x", s) for a, s, c in ROWS]
    p = write(tmp_path / "d.csv", csv_text(rows, header=["color", "age", "note", "sex"]))
    with load_table(p, SCHEMA) as b:
        assert isinstance(b, Backend)
        assert counts(b) == EXPECTED
        assert b.report.rows == 4


def test_csv_headerless_detected(tmp_path):
    p = write(tmp_path / "d.csv", csv_text(ROWS))
    with load_table(p, SCHEMA) as b:  # header=None: first row is not the attribute names
        assert counts(b) == EXPECTED
    with load_table(p, SCHEMA, header=False) as b:
        assert counts(b) == EXPECTED


def test_explicit_header_true(tmp_path):
    p = write(tmp_path / "d.csv", csv_text(ROWS, header=["age", "sex", "color"]))
    with load_table(p, SCHEMA, header=True) as b:
        assert counts(b) == EXPECTED


@pytest.mark.parametrize("sep", [";", "|", "\t", ", "])
def test_custom_separator_and_whitespace(tmp_path, sep):
    rows = [(f" {a}", f"{s} ", c) for a, s, c in ROWS]
    p = write(tmp_path / "d.txt", csv_text(rows, sep=sep, header=["age", "sex", "color"]))
    with load_table(p, SCHEMA, separator=sep) as b:
        assert counts(b) == EXPECTED


def test_adult_style_extra_columns(tmp_path):
    cols = ["age", "weight", "sex", "color", "label"]
    rows = [(a, 12345, s, c, "<=50K") for a, s, c in ROWS]
    p = write(tmp_path / "adult.data", csv_text(rows, sep=", "))
    with load_table(p, SCHEMA, separator=", ", columns=cols) as b:
        assert counts(b) == EXPECTED
    with pytest.raises(DataError, match=r"5 columns but the schema names 3; pass columns="):
        load_table(p, SCHEMA, separator=", ")
    with pytest.raises(DataError, match=r"5 columns but columns= names 2"):
        load_table(p, SCHEMA, separator=", ", columns=["a", "b"])


def test_skip_leading_line(tmp_path):
    p = write(tmp_path / "d.test", "|1x3 Cross validator\n" + csv_text(ROWS))
    with load_table(p, SCHEMA, skip=1) as b:
        assert counts(b) == EXPECTED


def test_parquet(tmp_path):
    table = pa.table(
        {
            "age": pa.array([r[0] for r in ROWS], pa.int16()),
            "sex": [r[1] for r in ROWS],
            "color": [r[2] for r in ROWS],
            "other": [1.5] * 4,
        }
    )
    p = tmp_path / "d.parquet"
    pq.write_table(table, p)
    with load_table(p, SCHEMA) as b:
        assert counts(b) == EXPECTED


def test_pandas_with_categorical_and_float_columns():
    df = pd.DataFrame(
        {
            "age": [float(r[0]) for r in ROWS],
            "sex": pd.Categorical([r[1] for r in ROWS]),
            "color": [r[2] for r in ROWS],
        }
    )
    with load_table(df, SCHEMA) as b:
        assert counts(b) == EXPECTED


def test_arrow_table():
    table = pa.table({k: [r[i] for r in ROWS] for i, k in enumerate(SCHEMA.names)})
    with load_table(table, SCHEMA) as b:
        assert counts(b) == EXPECTED


def test_schema_from_path(tmp_path):
    import json

    sp = write(tmp_path / "s.json", json.dumps(SCHEMA.to_dict()))
    with load_table(
        pa.table({k: [r[i] for r in ROWS] for i, k in enumerate(SCHEMA.names)}), sp
    ) as b:
        assert counts(b) == EXPECTED


def test_unsupported_data_type():
    with pytest.raises(InvalidParameter, match="data must be"):
        load_table([1, 2, 3], SCHEMA)


def test_missing_file_and_missing_column(tmp_path):
    with pytest.raises(DataError, match="no such data file"):
        load_table(tmp_path / "nope.csv", SCHEMA)
    p = write(tmp_path / "d.csv", csv_text([(1, "F")], header=["age", "sex"]))
    with pytest.raises(DataError, match="no column 'color'"):
        load_table(p, SCHEMA, header=True)


def test_ragged_csv_is_one_line_data_error(tmp_path):
    p = write(tmp_path / "d.csv", "age,sex,color\n30,F,red\n40,M\n")
    with pytest.raises(DataError) as err:
        load_table(p, SCHEMA)
    rest = invalid_message(err, p)  # the message after the path, which is the caller's
    assert rest.startswith("cannot read data: ") and "\n" not in rest


def test_real_adult_file():
    path = Path("/work/shared/data/adult/adult.data")
    schema_path = Path(__file__).parents[2] / "examples" / "adult" / "schema.json"
    if not path.is_file() or not schema_path.is_file():
        pytest.skip("Adult data not available")
    cols = [
        "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
        "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
        "hours-per-week", "native-country", "income",
    ]  # fmt: skip
    df = pd.read_csv(path, sep=", ", header=None, names=cols, engine="python")
    with load_table(path, schema_path, separator=", ", columns=cols) as b:
        got = counts(b, ["total", "age BETWEEN 30 AND 39 AND sex = 'Female'", "workclass = '?'"])
        assert got == [
            len(df),
            int(((df.age >= 30) & (df.age <= 39) & (df.sex == "Female")).sum()),
            int((df.workclass == "?").sum()),
        ]
        assert b.clipped_sum("hours-per-week", 0, 60) == int(df["hours-per-week"].clip(0, 60).sum())


# --------------------------------------------------------------------- validation

BAD_AGES = [
    (30, "F", "red"),
    (200, "M", "red"),
    (-1, "F", "red"),
    (40, "F", "red"),
    ("", "M", "red"),
]


def test_out_of_domain_integer_message(tmp_path):
    p = write(tmp_path / "d.csv", csv_text(BAD_AGES, header=["age", "sex", "color"]))
    with pytest.raises(DataError) as err:
        load_table(p, SCHEMA)
    msg = invalid_message(err, p)
    assert msg.startswith(
        "attribute 'age': 3 rows have values outside the domain [0, 120] or missing "
        "(first: row 2, value '200'); "
    )
    assert "\n" not in msg


def test_row_numbers_headerless_and_show_values_off(tmp_path):
    # The directory name contains "-1", which the value hidden here also is: the message
    # is parsed, not searched, so the path cannot fake or hide anything.
    folder = tmp_path / "run-1 (copy -1)"
    folder.mkdir()
    p = write(folder / "d-1.csv", csv_text(BAD_AGES[2:]))
    with pytest.raises(DataError) as err:
        load_table(p, SCHEMA, show_values=False)
    assert invalid_message(err, p) == (
        "attribute 'age': 2 rows have values outside the domain [0, 120] or missing "
        "(first: row 1); fix the data, or pass on_invalid='drop' or replace={attribute: value}"
    )
    with pytest.raises(DataError) as err:
        load_table(p, SCHEMA)  # values shown: the first invalid one is -1
    assert invalid_message(err, p).startswith(
        "attribute 'age': 2 rows have values outside the domain [0, 120] or missing "
        "(first: row 1, value '-1'); "
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1e2", "value '1e2'"),
        ("abc", "value 'abc'"),
        ("?", "missing value '?'"),
        ("NA", "missing value 'NA'"),
    ],
)
def test_non_integer_values(tmp_path, value, shown):
    p = write(tmp_path / "d.csv", csv_text([(5, "F", "red"), (6, "F", "red"), (value, "F", "red")]))
    with pytest.raises(
        DataError, match=rf"'age': 1 row has a value outside .*\(first: row 3, {re.escape(shown)}\)"
    ):
        load_table(p, SCHEMA)


def test_fraction_is_not_an_integer(tmp_path):
    p = write(tmp_path / "d.csv", csv_text([(5, "F", "red"), ("3.5", "F", "red")]))
    with pytest.raises(DataError, match=r"'age': row 2, value '3\.5' is not an integer \(1 row"):
        load_table(p, SCHEMA)


def test_empty_field_is_missing(tmp_path):
    p = write(tmp_path / "d.csv", "age,sex,color\n5,F,red\n,F,red\n")
    with pytest.raises(DataError, match=r"\(first: row 2, missing\)"):
        load_table(p, SCHEMA)


def test_categorical_not_in_domain(tmp_path):
    p = write(tmp_path / "d.csv", csv_text([(5, "F", "red"), (5, "X", "red"), (5, "f", "red")]))
    with pytest.raises(
        DataError,
        match=r"attribute 'sex': 2 rows have values outside the domain of 2 declared values "
        r"or missing \(first: row 2, value 'X'\)",
    ):
        load_table(p, SCHEMA)


def test_several_invalid_attributes_named(tmp_path):
    p = write(tmp_path / "d.csv", csv_text([(500, "X", "pink"), (5, "F", "pink")]))
    with pytest.raises(
        DataError, match=r"'age': 1 row .*also invalid: 'sex' \(1 rows\), 'color' \(2 rows\)"
    ):
        load_table(p, SCHEMA)


def test_pandas_invalid_float_and_nan():
    df = pd.DataFrame({"age": [1.0, 2.5, np.nan], "sex": ["F", "M", "F"], "color": ["red"] * 3})
    with pytest.raises(DataError, match=r"'age': row 2, value '2\.5' is not an integer \(2 rows"):
        load_table(df, SCHEMA)


def test_drop_rule(tmp_path):
    p = write(tmp_path / "d.csv", csv_text([*BAD_AGES, (50, "Q", "red")]))
    with load_table(p, SCHEMA, on_invalid="drop", max_dropped=1) as b:
        assert counts(b, ["total", "sex = 'F'"]) == [2, 2]
        assert b.report.rows_read == 6
        assert b.report.dropped_invalid == 4
    with pytest.raises(InvalidParameter, match="on_invalid"):
        load_table(p, SCHEMA, on_invalid="ignore")


def test_replace_rule(tmp_path):
    schema = Schema(
        (
            Attribute("age", "integer", min=0, max=120),
            Attribute("work", "categorical", values=("?", "Private", "Gov")),
        )
    )
    p = write(tmp_path / "d.csv", "age,work\n30,Private\n40,\n50,Unknown\n60,Gov\n,Gov\n")
    with pytest.raises(DataError, match=r"'age': 1 row .*also invalid: 'work' \(2 rows\)"):
        load_table(p, schema)
    with load_table(p, schema, replace={"work": "?", "age": 0}) as b:
        assert counts(b, ["work = '?'", "work = 'Gov'", "age = 0", "total"]) == [2, 2, 1, 5]
        assert b.report.replaced == {"work": 2, "age": 1}
    # replacement for one attribute, drop for the rest
    with load_table(p, schema, replace={"work": "?"}, on_invalid="drop", max_dropped=1) as b:
        assert counts(b, ["total", "work = '?'"]) == [4, 2]
    with pytest.raises(InvalidParameter, match=r"replace: 'Other' is not in the domain of 'work'"):
        load_table(p, schema, replace={"work": "Other"})
    with pytest.raises(
        InvalidParameter, match=r"replace: 500 is not in the domain of 'age' \[0, 120\]"
    ):
        load_table(p, schema, replace={"age": 500})
    with pytest.raises(InvalidParameter, match="unknown attribute 'nope'"):
        load_table(p, schema, replace={"nope": 1})


def test_declared_value_wins_over_missing_token(tmp_path):
    schema = Schema((Attribute("work", "categorical", values=("?", "Private")),))
    p = write(tmp_path / "d.csv", "work\n?\nPrivate\n?\n")
    with load_table(p, schema) as b:
        assert counts(b, ["work = '?'"]) == [2]


# --------------------------------------------------------------------- privacy unit


def test_privacy_unit_keeps_k_rows_per_id_chosen_by_key(tmp_path):
    text = "user_id,age,sex,color\n" + "".join(
        f"{uid},{age},F,red\n"
        for uid, age in [
            ("u1", 1),
            ("u2", 2),
            ("u1", 3),
            ("u1", 4),
            ("u2", 5),
            ("u3", 6),
            ("u1", 7),
        ]
    )
    p = write(tmp_path / "d.csv", text)
    key = bytes(range(32))

    # u1 keeps the 2 of its rows with the smallest keyed hash; u2 and u3 keep every row.
    def best(uid: str, ages: list[int]) -> list[int]:  # ages by keyed hash
        return sorted(ages, key=lambda age: row_hash(key, [age, 0, 0], uid, copy=0))

    u1 = best("u1", [1, 3, 4, 7])[:2]
    with load_table(p, SCHEMA, privacy_unit=("user_id", 2), unit_key=key) as b:
        got = counts(b, ["total", f"age IN ({u1[0]}, {u1[1]})", "age IN (2, 5, 6)"])
        assert got == [5, 2, 3]
        assert b.report.dropped_privacy_unit == 2
        cols = [r[0] for r in b.connection.execute(f'DESCRIBE "{b.table}"').fetchall()]
        # one code column per attribute, and the kept rows' ids (for distinct units only)
        assert cols == ["c0", "c1", "c2", "__unit"]
    with load_table(p, SCHEMA, privacy_unit=("user_id", 1), unit_key=key) as b:
        u2 = best("u2", [2, 5])[0]
        assert counts(b, ["total", f"age IN ({u1[0]}, {u2}, 6)"]) == [3, 3]


def test_privacy_unit_errors(tmp_path):
    p = write(tmp_path / "d.csv", csv_text(ROWS, header=["age", "sex", "color"]))
    with pytest.raises(DataError, match="privacy unit column 'user_id' is not in the data"):
        load_table(p, SCHEMA, privacy_unit=("user_id", 2), unit_key=KEY)
    for bad in [("user_id", 0), ("user_id", 1.5), "user_id", ("user_id", True)]:
        with pytest.raises(InvalidParameter, match="privacy_unit"):
            load_table(p, SCHEMA, privacy_unit=bad, unit_key=KEY)
    q = write(tmp_path / "e.csv", "uid,age,sex,color\na,1,F,red\n,2,F,red\n")
    with pytest.raises(DataError, match=r"'uid': 1 rows have a missing id \(first: row 2\)"):
        load_table(q, SCHEMA, privacy_unit=("uid", 1), unit_key=KEY)
    with load_table(q, SCHEMA, privacy_unit=("uid", 1), on_invalid="drop", unit_key=KEY) as b:
        assert counts(b, ["total"]) == [1]


# --------------------------------------------------------------------- safety and lifecycle


def test_injection_values_and_odd_names_are_just_data(tmp_path):
    evil = "x'); DROP TABLE data; --"
    schema = Schema(
        (
            Attribute('we"ird name', "categorical", values=(evil, 'a "quoted" one', "plain")),
            Attribute("n-um", "integer", min=1, max=3),
        )
    )
    rows = [[evil, 1], ['a "quoted" one', 2], [evil, 3], ["plain", 3]]
    df = pd.DataFrame(rows, columns=['we"ird name', "n-um"])
    with load_table(df, schema) as b:
        q = Query.from_coverages(schema, {'we"ird name': ((0, 1),)})
        q2 = Query.from_coverages(schema, {'we"ird name': ((0, 2),), "n-um": ((1, 3),)})
        assert b.counts([q, q2]).tolist() == [2, 2]
        assert b.clipped_sum("n-um", 0, 10, where=q) == 4.0
        assert b.connection.execute('SELECT count(*) FROM "data"').fetchall() == [(4,)]
    # The same value through a CSV file (quoted because it has no separator problem).
    p = write(tmp_path / "d.csv", "v,n\n" + f"{evil},1\nplain,2\n")
    s2 = Schema(
        (
            Attribute("v", "categorical", values=(evil, "plain")),
            Attribute("n", "integer", min=1, max=2),
        )
    )
    with load_table(p, s2, header=True) as b:
        assert counts(b, ["v = 'x''); DROP TABLE data; --'", "total"]) == [1, 2]


def test_close_and_shared_connection(tmp_path):
    con = duckdb.connect()
    a = load_table(
        pa.table({k: [r[i] for r in ROWS] for i, k in enumerate(SCHEMA.names)}),
        SCHEMA,
        connection=con,
        name="t1",
    )
    with pytest.raises(InvalidParameter, match="table 't1' already exists"):
        load_table(
            pa.table({k: [r[i] for r in ROWS] for i, k in enumerate(SCHEMA.names)}),
            SCHEMA,
            connection=con,
            name="t1",
        )
    assert counts(a) == EXPECTED
    temp = con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall()
    assert temp == [(0,)]  # staging tables are gone
    a.close()
    a.close()
    with pytest.raises(InvalidParameter, match="closed"):
        a.counts([])
    assert con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 't1'"
    ).fetchall() == [(0,)]
    con.close()


def test_gzip_csv(tmp_path):
    import gzip

    p = tmp_path / "d.csv.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write(csv_text(ROWS, sep=", ", header=["age", "sex", "color"]))
    with load_table(p, SCHEMA, separator=", ") as b:
        assert counts(b) == EXPECTED
