"""``dpcurator schema draft`` / ``schema check`` on files written by pandas, integer
columns written as floats (``517.0``), and ``--max-dropped`` (a mostly-broken load is
refused before anything is charged)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcurator.backends import load_table
from dpcurator.backends.schema_draft import round_out
from dpcurator.cli import main
from dpcurator.errors import DataError, InvalidParameter


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def penguins(n: int = 344) -> pd.DataFrame:
    """A frame as a custodian has it: integers with NA, floats, text, booleans, dates."""
    rng = np.random.default_rng(0)
    mass = [None if i % 40 == 0 else int(x) for i, x in enumerate(rng.integers(2700, 6300, n))]
    sex = [None if i % 30 == 0 else s for i, s in enumerate(rng.choice(["male", "female"], n))]
    return pd.DataFrame(
        {
            "year": pd.array(rng.integers(2007, 2010, n), dtype="Int64"),
            "mass": pd.array(mass, dtype="Int64"),
            "species": rng.choice(["Adelie", "Gentoo", "Chinstrap"], n),
            "male": rng.choice([True, False], n),
            "when": pd.date_range("2020-01-01", periods=n),
            "sex": pd.array(sex, dtype="string"),
            "island": ["Biscoe"] * (n - 1) + ["Torgersen"],
        }
    )


def test_round_out() -> None:
    assert round_out(1, 2359) == (0, 2400)
    assert round_out(2007, 2009) == (2000, 2100)
    assert round_out(-17, 5) == (-17, 5)
    assert round_out(-123, 45) == (-130, 50)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_draft_check_round_trip(tmp_path, capsys, suffix) -> None:
    data = tmp_path / f"p.{suffix}"
    df = penguins()
    df.to_csv(data, index=False) if suffix == "csv" else df.to_parquet(data)
    schema = tmp_path / "schema.json"
    code, out, _ = run(capsys, "schema", "draft", data, "--out", schema)
    assert code == 0
    attrs = {a["name"]: a for a in json.loads(schema.read_text())["attributes"]}
    # a date column (pandas writes a date-only datetime64 as YYYY-MM-DD), bounds widened
    # to whole years, and a boolean
    assert attrs["when"]["type"] in ("date", "timestamp")
    assert attrs["when"]["min"].startswith("2020-01-01") and "when: bounds" in out
    assert attrs["male"] == {"name": "male", "type": "boolean"}
    assert attrs["year"] == {"name": "year", "type": "integer", "min": 2000, "max": 2100}
    assert attrs["mass"]["missing"] == "NA" and (attrs["mass"]["min"], attrs["mass"]["max"]) == (
        2700,
        6300,
    )
    assert attrs["species"]["values"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert attrs["sex"]["missing"] == "NA"
    # what came from the data is named, rare values too
    assert "year: bounds [2000, 2100] read from the data" in out
    assert "'Torgersen'" in out and "fewer than 5 rows" in out
    code, out, _ = run(capsys, "schema", "check", schema, data)
    assert code == 0 and out.strip().endswith("every row loads")
    assert load_table(str(data), schema).report.rows == len(df)


def test_check_names_column_row_and_fix(tmp_path, capsys) -> None:
    data = tmp_path / "d.csv"
    pd.DataFrame({"t": [1.0, 3.5, 2.0], "c": ["a", "b", "z"]}).to_csv(data, index=False)
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "t", "type": "integer", "min": 0, "max": 9},
                    {"name": "c", "type": "categorical", "values": ["a", "b"]},
                ]
            }
        )
    )
    code, out, err = run(capsys, "schema", "check", schema, data)
    assert code == 1 and err == ""
    assert "attribute 't': row 2, value '3.5' is not an integer" in out
    assert "attribute 'c': 1 row has a value outside the domain" in out and "value 'z'" in out
    assert "--on-invalid drop" in out and "2 of 2 attributes" in out


def test_draft_fractional_column_and_bad_input(tmp_path, capsys) -> None:
    data = tmp_path / "f.csv"
    pd.DataFrame({"bill": [38.6, 44.1, 51.0]}).to_csv(data, index=False)
    code, out, err = run(capsys, "schema", "draft", data)
    bill = json.loads(out)["attributes"][0]
    assert code == 0 and bill == {"name": "bill", "type": "float", "min": 38, "max": 51, "step": 0.1}
    assert "bill: bounds [38, 51] read from the data" in err
    code, _, err = run(capsys, "schema", "draft", tmp_path / "none.csv")
    assert code == 2 and err.count("\n") == 1 and "no such file" in err


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_integer_written_as_float_loads(tmp_path, suffix) -> None:
    """pandas writes an Int64 column holding NA as 517.0: it loads as 517; 3.5 does not."""
    schema = {"attributes": [{"name": "t", "type": "integer", "min": 1, "max": 2400, "missing": 0}]}
    df = pd.DataFrame({"t": pd.array([517, None, 2400], dtype="Int64")}).astype({"t": float})
    data = tmp_path / f"t.{suffix}"
    df.to_csv(data, index=False) if suffix == "csv" else df.to_parquet(data)
    b = load_table(str(data), schema)
    assert b.report.rows == 3
    bad = tmp_path / f"b.{suffix}"
    df = pd.DataFrame({"t": [517.0, 3.5]})
    df.to_csv(bad, index=False) if suffix == "csv" else df.to_parquet(bad)
    with pytest.raises(DataError, match=r"attribute 't': row 2, value '3.5' is not an integer"):
        load_table(str(bad), schema)


def test_text_integer_with_zero_fraction(tmp_path) -> None:
    """The text path (a column DuckDB reads as text) takes 517.0 and refuses 3.5."""
    data = tmp_path / "t.csv"
    data.write_text("t\n517.0\nx\n")
    schema = {"attributes": [{"name": "t", "type": "integer", "min": 1, "max": 2400}]}
    b = load_table(str(data), schema, on_invalid="drop", max_dropped=0.5)
    assert b.report.rows == 1 and b.report.dropped_invalid == 1
    data.write_text("t\n517.0\n3.5\nx\n")
    with pytest.raises(DataError, match=r"row 2, value '3\.5' is not an integer"):
        load_table(str(data), schema)


def charges(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as con:
        return con.execute("select count(*) from charges").fetchone()[0]


def test_max_dropped_refuses_before_charging(tmp_path, capsys) -> None:
    data = tmp_path / "d.csv"
    ages = [30, 40] + [999] * 342  # 2 of 344 rows valid
    pd.DataFrame({"age": ages, "c": ["a"] * 344}).to_csv(data, index=False)
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "age", "type": "integer", "min": 0, "max": 120},
                    {"name": "c", "type": "categorical", "values": ["a"]},
                ]
            }
        )
    )
    workload = tmp_path / "w.txt"
    workload.write_text("histogram(c)\n")
    ledger = tmp_path / "l.db"
    base = ["answer", "--data", data, "--schema", schema, "--workload", workload]
    args = [*base, "--epsilon", 1, "--ledger", ledger, "--on-invalid", "drop"]
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "would drop 342 of 344 rows" in err and "'age' (342 rows)" in err
    assert "--max-dropped 0.05" in err and "max_dropped=" not in err
    assert charges(ledger) == 0
    # a small share is dropped and charged; the report is printed before the charge
    ok = tmp_path / "ok.csv"
    pd.DataFrame({"age": [30] * 99 + [999], "c": ["a"] * 100}).to_csv(ok, index=False)
    args[2] = ok
    code, out, err = run(capsys, *args)
    assert code == 0 and "data: 100 rows read, 99 used; 1 dropped" in err
    assert charges(ledger) == 1
    with pytest.raises(InvalidParameter, match="max_dropped"):
        load_table(str(ok), schema, max_dropped=2)
