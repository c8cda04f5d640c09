"""What the privacy unit's messages say: rows without an id are not rows over the cap,
a ledger made for another unit says which, and ``units`` names its own flag."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.errors import LedgerError
from dpcurator.privacy import PureDP

#: N1 flew 5 times, N2 3 times; two rows have no tail number.
ROWS = [("N1", 5)] * 5 + [("N2", 7)] * 3 + [("", 9), ("NA", 9)]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "flights.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["tailnum", "hour"])
        w.writerows(ROWS)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"attributes": [{"name": "hour", "type": "integer",
                                                  "min": 0, "max": 23}]}))  # fmt: skip
    return data, schema


def units(capsys, files, *extra) -> tuple[int, str, str]:
    data, schema = files
    argv = ["units", data, "--schema", schema, "--on-invalid", "drop", "--max-dropped", "0.5"]
    code = main([str(a) for a in [*argv, *extra]])
    out, err = capsys.readouterr()
    return code, out, err


def test_rows_without_an_id_are_not_over_the_limit(capsys, files) -> None:
    code, out, _ = units(capsys, files, "--unit", "tailnum", "--max-rows", "10",
                         "--unit-name", "aircraft")  # fmt: skip
    first = out.splitlines()[0]
    assert code == 0
    assert first == "10 rows read, 8 used; 2 dropped (no id in the privacy unit's column 'tailnum')"
    code, out, _ = units(capsys, files, "--unit", "tailnum", "--max-rows", "2",
                         "--unit-name", "aircraft")  # fmt: skip
    assert out.splitlines()[0] == (
        "10 rows read, 4 used; 2 dropped (no id in the privacy unit's column 'tailnum'), "
        "4 dropped (over the privacy unit's limit: 2 rows per aircraft)"
    )


def test_units_names_its_own_flag(capsys, files) -> None:
    code, out, err = units(capsys, files, "--unit", "nosuch")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--unit column 'nosuch' is not in the data" in err and "--privacy-unit" not in err


def test_a_ledger_for_another_unit_says_which(tmp_path, files) -> None:
    data, schema = files
    ledger = tmp_path / "u.db"

    def curator(unit):
        return Curator.open(data=str(data), schema=str(schema), budget=PureDP(1.0),
                            ledger=str(ledger), on_invalid="drop", max_dropped=0.5,
                            privacy_unit=unit)  # fmt: skip

    with curator(("tailnum", 2)) as c:
        c.count("hour > 5", epsilon=0.5)
    ours = "the ledger's privacy unit is column 'tailnum' with k = 2"
    for unit, theirs in [
        (("tailnum", 3), "this curator's privacy unit is column 'tailnum' with k = 3"),
        (("hour", 2), "this curator's privacy unit is column 'hour' with k = 2"),
        (None, "this curator has no privacy unit"),
    ]:
        with pytest.raises(LedgerError, match="belongs to another curator") as err:
            curator(unit)
        assert f"({ours}, {theirs}); open it with the same budget, schemas and privacy unit" in str(
            err.value
        )
        assert "budget" not in str(err.value).split(";")[0]
    with curator(("tailnum", 2)) as c:  # nothing was changed by the refusals
        assert len(c.history()) == 1
