"""``schema draft`` on the files that used to break its round trip: pandas' default
``to_csv`` (an unnamed index column), duplicate column names, numbers beyond what a
grid type holds, floats far below 10^-6 or with too many digits. Every draft must be
taken by its own ``schema check`` and loader on the file it was read from; what it had
to give up is a warning on stderr."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.cli import main
from dpcurator.errors import DataError, InvalidParameter, SchemaError
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema
from dpcurator.queries.values import instant_text


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def round_trip(capsys, tmp_path, data) -> tuple[dict, str, str]:
    """Draft ``data``, then check and load it with the draft: both must take it."""
    schema = tmp_path / "s.json"
    code, out, err = run(capsys, "schema", "draft", data, "--out", schema)
    assert code == 0, err
    code, checked, _ = run(capsys, "schema", "check", schema, data)
    assert code == 0 and checked.strip().endswith("every row loads"), checked
    attrs = {a["name"]: a for a in json.loads(schema.read_text())["attributes"]}
    assert load_table(str(data), schema).report.rows == len(pd.read_csv(data))
    return attrs, out, err


def test_pandas_default_index_is_left_out(tmp_path, capsys) -> None:
    data = tmp_path / "p.csv"
    pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}).to_csv(data)  # index=True
    attrs, out, _ = round_trip(capsys, tmp_path, data)
    assert set(attrs) == {"a", "b"}
    assert "column 1: no name in the header (pandas writes its index so" in out


def test_check_says_which_names_the_header_lacks(tmp_path, capsys) -> None:
    """A schema naming the unnamed index (as earlier drafts did): check says why."""
    data = tmp_path / "p.csv"
    pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6]}).to_csv(data)
    schema = tmp_path / "s.json"
    int_attr = {"type": "integer", "min": 0, "max": 9}
    names = ["column0", "a", "b"]
    schema.write_text(json.dumps({"attributes": [{"name": n, **int_attr} for n in names]}))
    code, out, err = run(capsys, "schema", "check", schema, data)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no header row found: the first row has 2 of the schema's 3 attribute names" in err
    assert "lacks 'column0'" in err


def test_duplicate_names_are_left_out_with_a_warning(tmp_path, capsys) -> None:
    data = tmp_path / "d.csv"
    pd.DataFrame([[1, 2, 3], [3, 4, 5]], columns=["x", "x", "y"]).to_csv(data, index=False)
    attrs, _, err = round_trip(capsys, tmp_path, data)
    assert set(attrs) == {"y"}
    assert "warning: x: columns 1, 2 are all named 'x': left out" in err
    # nothing else to draft: one line naming why
    only = tmp_path / "o.csv"
    pd.DataFrame([[1, 2]], columns=["x", "x"]).to_csv(only, index=False)
    code, _, err = run(capsys, "schema", "draft", only, "--out", tmp_path / "o.json")
    assert code == 2 and err.count("\n") == 1 and "all named 'x'" in err
    assert not (tmp_path / "o.json").exists()


def test_numbers_no_grid_holds_become_categorical(tmp_path, capsys) -> None:
    """1.5e20 (beyond a float's 10^15) and a 20-digit integer (beyond 64 bits)."""
    data = tmp_path / "big.csv"
    pd.DataFrame(
        {"big": [1.5e20, 2.5e19, 3.25e18], "id": ["12345678901234567890", "1", "2"]}
    ).to_csv(data, index=False)
    attrs, _, err = round_trip(capsys, tmp_path, data)
    assert attrs["big"]["type"] == attrs["id"]["type"] == "categorical"
    assert "warning: big: values up to 150000000000000000000: a float holds magnitudes " in err
    assert "warning: id: integers from 1 to 12345678901234567890: an integer attribute " in err


@pytest.mark.parametrize(
    ("values", "bounds"),
    [
        # rounded outward past 2^63 - 1: clamped to it
        ([10**17, 9_220_000_000_000_000_000], (10**17, 2**63 - 1)),
        # rounded (even clamped), more than 2^63 - 1 values: the exact bounds
        ([-(2**62), 0, 2**62 - 2], (-(2**62), 2**62 - 2)),
        # no 64-bit range holds them: a categorical
        ([-(2**62), 2**62], ("categorical",)),
    ],
)
def test_integer_bounds_stay_within_64_bits(tmp_path, capsys, values, bounds) -> None:
    data = tmp_path / "i.csv"
    pd.DataFrame({"n": values}).to_csv(data, index=False)
    attrs, _, err = round_trip(capsys, tmp_path, data)
    n = attrs["n"]
    if n["type"] == "categorical":
        assert bounds == ("categorical",) and "an integer attribute holds 64 bits" in err
    else:
        assert (n["type"], n["min"], n["max"]) == ("integer", *bounds)


def test_tiny_floats_keep_their_values(tmp_path, capsys) -> None:
    data = tmp_path / "t.csv"
    pd.DataFrame({"tiny": [1.5e-9, 2.5e-9, 3.5e-9]}).to_csv(data, index=False)
    attrs, _, err = round_trip(capsys, tmp_path, data)
    assert attrs["tiny"]["step"] == 1e-10 and "warning" not in err
    with Curator.open(data=str(data), schema=str(tmp_path / "s.json"), budget=PureDP(1e9)) as c:
        assert c.count("tiny > 0.000000002", epsilon=1e7).value == 2


def test_fine_decimals_get_a_grid_a_median_takes(tmp_path, capsys) -> None:
    """distance * 1.609344 has many decimals: the step keeps the grid within 10^6."""
    data = tmp_path / "d.csv"
    km = [round(m * 1.609344, 9) for m in range(17, 4984, 7)]
    pd.DataFrame({"km": km}).to_csv(data, index=False)
    attrs, out, _ = round_trip(capsys, tmp_path, data)
    assert attrs["km"]["step"] == 0.01
    assert "km: step 0.01, not 0.000001: at most 1,000,000 positions" in out
    assert Schema.load(tmp_path / "s.json").attribute("km").size <= 10**6
    with Curator.open(data=str(data), schema=str(tmp_path / "s.json"), budget=PureDP(1e9)) as c:
        # no candidates= needed; any point between the two middle values is a median
        mid = len(km) // 2
        assert km[mid - 1] - 0.01 <= c.median("km", epsilon=1e7).value <= km[mid] + 0.01


def test_a_step_that_merges_most_values_is_a_warning(tmp_path, capsys) -> None:
    data = tmp_path / "m.csv"
    pd.DataFrame({"mix": [0.1, 123456789.123, 1e-07]}).to_csv(data, index=False)
    attrs, _, err = round_trip(capsys, tmp_path, data)
    assert attrs["mix"]["step"] == 1000
    assert "warning: mix: rounding to the step 1000 merges 2 of its 3 distinct values" in err


def test_integers_with_one_fraction_draft_a_float(tmp_path, capsys) -> None:
    """99% integers and one 3.5: an integer attribute would refuse the 3.5."""
    data = tmp_path / "f.csv"
    pd.DataFrame({"v": [*range(1, 300), 3.5]}).to_csv(data, index=False)
    attrs, out, _ = round_trip(capsys, tmp_path, data)
    assert attrs["v"] == {"name": "v", "type": "float", "min": 0, "max": 300, "step": 1}
    assert "v: 1 values are finer than the step 1: they are rounded to it on load" in out


def test_limits_are_named_in_the_messages() -> None:
    with pytest.raises(SchemaError, match=r"max must be below 10\^15 in magnitude .* got 1e\+16"):
        Schema.from_dict({"attributes": [{"name": "x", "type": "float", "min": 0,
                                          "max": 1e16, "step": 1}]})  # fmt: skip
    wide = {"name": "n", "type": "integer", "min": -(2**63), "max": 2**63 - 1}
    with pytest.raises(InvalidParameter, match=r"exceeds 64-bit integers \(min and max from"):
        load_table("unread.csv", {"attributes": [wide]})


def test_year_one_is_written_with_four_digits(tmp_path, capsys) -> None:
    assert instant_text(-62135596800) == "0001-01-01T00:00:00Z"
    data = tmp_path / "y.csv"
    data.write_text("t\n0001-03-01T05:00:00Z\n0001-06-01T07:00:00Z\n")
    attrs, _, _ = round_trip(capsys, tmp_path, data)
    assert (attrs["t"]["min"], attrs["t"]["max"]) == (
        "0001-01-01T00:00:00Z",
        "0001-12-31T23:00:00Z",
    )


@pytest.mark.parametrize(
    ("attr", "text"),
    [
        ({"type": "float", "min": 0, "max": 100, "step": 1}, "١٢"),
        ({"type": "date", "min": "2013-01-01", "max": "2013-12-31"}, "２０１３-06-01"),
        ({"type": "timestamp", "min": "2013-01-01", "max": "2014-01-01"}, "２０１３-06-01 10:00"),
        ({"type": "integer", "min": 0, "max": 100}, "١٢"),
    ],
)
def test_only_ascii_digits_load(tmp_path, attr, text) -> None:
    """Every type reads digits as integers do, [0-9]: not Arabic-Indic or fullwidth ones."""
    data = tmp_path / "u.csv"
    data.write_text(f"v\n{text}\n", encoding="utf-8")
    with pytest.raises(DataError, match="row 1"):
        load_table(str(data), {"attributes": [{"name": "v", **attr}]})
