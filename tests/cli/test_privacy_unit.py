"""The privacy unit on the command line: ``--privacy-unit COLUMN:K`` and ``--unit-name``
on ``answer``, ``demo`` and ``serve``, serve's config forms, the texts that state a
guarantee ("per aircraft (tailnum), up to 2 rows each") and the load report; bad values
are one line, exit status 2, nothing charged."""

from __future__ import annotations

import csv
import json
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcurator.cli import main

SCHEMA = {
    "attributes": [
        {"name": "carrier", "type": "categorical", "values": ["AA", "UA"]},
        {"name": "hour", "type": "integer", "min": 0, "max": 23},
    ]
}
#: Aircraft N1 flew 5 times, N2 3 times, N3 once: with K = 2, 4 of the 9 rows go.
FLIGHTS = [("N1", "AA", 5)] * 5 + [("N2", "UA", 7)] * 3 + [("N3", "AA", 9)]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "flights.csv"
    with open(data, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["tailnum", "carrier", "hour"])
        w.writerows(FLIGHTS)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    workload = tmp_path / "w.txt"
    workload.write_text("carrier = 'AA'\n")
    return {
        "data": data,
        "schema": schema,
        "workload": workload,
        "ledger": tmp_path / "ledger.db",
        "dir": tmp_path,
    }


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def answer(f: dict[str, Path], *extra: object) -> list[object]:
    return [
        "answer",
        "--data",
        f["data"],
        "--schema",
        f["schema"],
        "--workload",
        f["workload"],
        "--epsilon",
        1,
        "--ledger",
        f["ledger"],
        "--out",
        f["dir"] / "a.csv",
        *extra,
    ]


def charges(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as con:
        return con.execute("select count(*) from charges").fetchone()[0]


def one_error_line(err: str, command: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith(f"dpcurator {command}: error: "), err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("flag", ["tailnum:2", " tailnum : 2 ", "\ttailnum:2"])
def test_answer_names_the_unit_and_reports_the_load(files, capsys, flag) -> None:
    code, out, err = run(capsys, *answer(files, "--privacy-unit", flag, "--unit-name", "aircraft"))
    assert code == 0, err
    guarantee = next(ln for ln in out.splitlines() if ln.startswith("guarantee:"))
    assert "-DP per aircraft (tailnum), up to 2 rows each  [" in guarantee
    data = next(ln for ln in out.splitlines() if ln.startswith("data:"))
    assert data == (
        "data:         9 rows read, 5 used; 4 dropped (over the privacy unit's limit: "
        "2 rows per aircraft)"
    )
    # every cost is per aircraft: the noise is calibrated to its 2 rows
    with open(files["dir"] / "a.csv") as f:
        (row,) = list(csv.DictReader(f))
    # (a scale a hair above k / epsilon: the cost is rounded down to the ledger's grid)
    assert float(row["noise_parameter"]) == pytest.approx(2.0, rel=1e-5)


def test_answer_without_a_unit_is_per_row_and_reports_every_row_used(files, capsys) -> None:
    code, out, err = run(capsys, *answer(files))
    assert code == 0, err
    assert "-DP per row  [" in next(ln for ln in out.splitlines() if ln.startswith("guarantee:"))
    assert "data:         9 rows read, all used" in out.splitlines()
    with open(files["dir"] / "a.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["noise_parameter"]) == pytest.approx(1.0, rel=1e-5)


def test_answer_json_has_the_unit_and_the_load_report(files, capsys) -> None:
    files["ledger"] = Path(":memory:")
    code, out, err = run(capsys, *answer(files, "--json", "--privacy-unit", "tailnum:2"))
    assert code == 0, err
    d = json.loads(out)
    assert d["privacy_unit"] == {"column": "tailnum", "max_rows": 2, "name": "person"}
    report = d["load_report"]["data"]
    unit = report.pop("unit")
    assert report == {
        "rows_read": 9,
        "rows": 5,
        "dropped_invalid": 0,
        "dropped_privacy_unit": 4,
        "replaced": {},
    }
    assert unit["column"] == "tailnum" and unit["k"] == 2 and unit["rows"] == 5
    assert d["data"].startswith("9 rows read, 5 used; 4 dropped")
    code, out, err = run(capsys, *answer(files, "--json"))
    assert code == 0 and json.loads(out)["privacy_unit"] is None


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--privacy-unit", "tailnum"], ["--privacy-unit: give COLUMN:K", "'tailnum'"]),
        (["--privacy-unit", ":2"], ["--privacy-unit: give the id column before the colon"]),
        (["--privacy-unit", "tailnum:"], ["--privacy-unit: K must be an integer from 1"]),
        (["--privacy-unit", "tailnum:0"], ["K must be an integer from 1 to 1,000,000", "'0'"]),
        (["--privacy-unit", "tailnum:-3"], ["K must be an integer", "'-3'"]),
        (["--privacy-unit", "tailnum:2.5"], ["K must be an integer", "'2.5'"]),
        (["--privacy-unit", "tailnum:1_0"], ["K must be an integer", "'1_0'"]),
        (["--privacy-unit", "tailnum:1000001"], ["K must be an integer"]),
        (["--privacy-unit", "flight:2"], ["--privacy-unit column 'flight' is not in the data"]),
        (["--unit-name", "aircraft"], ["--unit-name names the privacy unit", "--privacy-unit"]),
        (["--privacy-unit", "tailnum:2", "--unit-name", "  "], ["--unit-name must be"]),
        (["--privacy-unit", "tailnum:2", "--unit-name", "a" * 41], ["--unit-name must be"]),
        (["--privacy-unit", "tailnum:2", "--unit-name", "air\ncraft"], ["--unit-name must be"]),
    ],
)
def test_bad_units_are_one_line_and_charge_nothing(files, capsys, flags, words) -> None:
    code, out, err = run(capsys, *answer(files, *flags))
    assert code == 2 and out == ""
    one_error_line(err, "answer", *words)
    assert charges(files["ledger"]) == 0 and not (files["dir"] / "a.csv").exists()


def test_a_missing_id_speaks_the_flag(files, capsys) -> None:
    with open(files["data"], "a") as f:
        f.write(",UA,3\n")
    code, _, err = run(capsys, *answer(files, "--privacy-unit", "tailnum:2"))
    assert code == 2
    one_error_line(err, "answer", "--privacy-unit column 'tailnum'", "missing id")
    assert charges(files["ledger"]) == 0


def test_a_column_holding_a_colon(files, capsys) -> None:
    text = files["data"].read_text().replace("tailnum", "plane:tail", 1)
    files["data"].write_text(text)
    code, out, err = run(capsys, *answer(files, "--privacy-unit", "plane:tail:2"))
    assert code == 0, err
    assert "per person (plane:tail), up to 2 rows each" in out


def test_demo_names_the_unit(capsys) -> None:
    code, out, err = run(capsys, "demo", "--privacy-unit", "education:50", "--unit-name", "cohort")
    assert code == 0, err
    lines = out.splitlines()
    (unit,) = [ln for ln in lines if ln.startswith("  unit:")]
    assert unit.startswith(
        "  unit:      every cost is per cohort (education), up to 50 rows each; 3,257 rows read, "
    )
    (g,) = [ln for ln in lines if ln.startswith("Guarantee: ")]
    assert "-DP per cohort (education), up to 50 rows each (" in g
    code, _, err = run(capsys, "demo", "--privacy-unit", "education")
    assert code == 2
    one_error_line(err, "demo", "--privacy-unit: give COLUMN:K")


# --- serve: the flags and the config, refused before listening ----------------------------


@pytest.fixture
def busy() -> Iterator[int]:
    """A port in use: a serve that wrongly accepted its input fails to listen there
    instead of serving for ever."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def serve(f: dict[str, Path], port: int, config: str | None, *flags: object) -> list[object]:
    argv: list[object] = ["serve", "--data", f["data"], "--schema", f["schema"]]
    argv += ["--ledger", f["ledger"], "--epsilon", 1, "--port", port, *flags]
    if config is not None:
        (f["dir"] / "c.toml").write_text(config)
        argv += ["--config", f["dir"] / "c.toml"]
    return argv


@pytest.mark.parametrize(
    ("config", "flags", "words"),
    [
        (
            '[data]\nprivacy_unit = "tailnum"\n',
            [],
            ["--config: [data] privacy_unit: give COLUMN:K"],
        ),
        ('[data]\nprivacy_unit = "tailnum:0"\n', [], ["[data] privacy_unit: K must be"]),
        ("[data]\nprivacy_unit = 2\n", [], ["[data] privacy_unit must be non-empty text"]),
        (
            '[data]\nunit_name = "aircraft"\n',
            [],
            ["[data] unit_name goes with [data] privacy_unit"],
        ),
        ('[data]\nprivacy_unit = "tailnum:2"\nunit_name = ""\n', [], ["[data] unit_name must be"]),
        ("[data]\nunit = 3\n", [], ["unknown key [data] unit"]),
        ('[privacy_unit]\ncolumn = "tailnum"\n', [], ["[privacy_unit] needs column and max_rows"]),
        (
            '[privacy_unit]\ncolumn = "tailnum"\nmax_rows = 0\n',
            [],
            ["[privacy_unit] max_rows must be an integer from 1"],
        ),
        (
            '[privacy_unit]\ncolumn = "tailnum"\nmax_rows = true\n',
            [],
            ["[privacy_unit] max_rows must be an integer"],
        ),
        (
            '[data]\nprivacy_unit = "tailnum:2"\n[privacy_unit]\ncolumn = "tailnum"\nmax_rows = 3\n',
            [],
            ["[data] privacy_unit and [privacy_unit] name different units; give one"],
        ),
        (
            '[data]\nprivacy_unit = "tailnum:2"\nunit_name = "aircraft"\n'
            '[privacy_unit]\ncolumn = "tailnum"\nmax_rows = 2\n',
            [],
            ["name different units"],
        ),
        # the flag replaces the config's unit, but a bad config is refused all the same
        ('[data]\nprivacy_unit = "tailnum"\n', ["--privacy-unit", "tailnum:2"], ["give COLUMN:K"]),
        (None, ["--privacy-unit", "tailnum:x"], ["--privacy-unit: K must be"]),
        (None, ["--unit-name", "aircraft"], ["--unit-name names the privacy unit"]),
        (None, ["--privacy-unit", "flight:2"], ["--privacy-unit column 'flight' is not in"]),
    ],
)
def test_serve_refuses_bad_units(files, capsys, busy, config, flags, words) -> None:
    code, out, err = run(capsys, *serve(files, busy, config, *flags))
    assert code == 2 and out == ""
    one_error_line(err, "serve", *words)


@pytest.mark.parametrize(
    "config",
    [
        '[data]\nprivacy_unit = "tailnum:2"\n',
        '[privacy_unit]\ncolumn = "tailnum"\nmax_rows = 2\n',
        '[data]\nprivacy_unit = "tailnum:2"\n[privacy_unit]\ncolumn = "tailnum"\nmax_rows = 2\n',
    ],
)
def test_serve_accepts_each_config_form(files, capsys, busy, config) -> None:
    """Accepted up to listening (the port is taken): the data loaded with the unit."""
    code, _, err = run(capsys, *serve(files, busy, config))
    assert code == 2
    one_error_line(err, "serve", "cannot listen on 127.0.0.1")
    # the ledger now belongs to the unit tailnum:2 (the name is no part of it) ...
    code, _, err = run(capsys, *serve(files, busy, config, "--unit-name", "aircraft"))
    one_error_line(err, "serve", "cannot listen on 127.0.0.1")
    # ... and --privacy-unit, which wins over the config, names another one
    code, _, err = run(capsys, *serve(files, busy, config, "--privacy-unit", "tailnum:3"))
    assert code == 2
    one_error_line(err, "serve", "belongs to another curator")


def test_answer_writes_a_row_for_a_units_line(files, capsys) -> None:
    files["workload"].write_text("carrier = 'AA'\nunits(carrier = 'AA')\nunits()\n")
    code, _, err = run(capsys, *answer(files, "--privacy-unit", "tailnum:5", "--epsilon", 1e7))
    assert code == 0, err
    with open(files["dir"] / "a.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["query"] for r in rows] == ["carrier = 'AA'", "units(carrier = 'AA')", "units()"]
    # at this cost the noise is nil: N1 and N3 fly AA; three aircraft in all
    assert [round(float(r["answer"])) for r in rows] == [6, 2, 3]
    count, units = rows[0], rows[1]
    # a units() line is charged its planned cost, its noise a k-th of it: a count's noise
    assert float(units["noise_parameter"]) == pytest.approx(float(count["noise_parameter"]))
    assert units["line"] == "2" and units["noise"] == "discrete_laplace"
    assert charges(files["ledger"]) == 3
    with sqlite3.connect(files["ledger"]) as con:
        kinds = [k for (k,) in con.execute("select kind from charges order by id")]
    assert kinds == ["workload", "units", "units"]


def test_a_units_line_without_a_unit_is_refused(files, capsys) -> None:
    files["workload"].write_text("units(carrier = 'AA')\n")
    code, _, err = run(capsys, *answer(files))
    assert code != 0
    one_error_line(err, "answer", "no privacy unit")
    assert charges(files["ledger"]) == 0


def test_answer_under_a_unit_reports_the_errors_of_the_noise_it_added(files, capsys) -> None:
    """Every ``expected_abs_noise`` is the discrete Laplace's E|Y| = 2q / (1 - q^2), q =
    e^(-1/scale), at the scale the row reports (about k / epsilon), and a consistent
    interval is z times the standard deviation of the least-squares combination of the
    noises added: the total's from its own noise and its two cells'. Both were k times
    too small (the per-row noise's)."""
    import math
    from statistics import NormalDist

    files["workload"].write_text("total\nhistogram(carrier)\n")
    code, out, err = run(
        capsys, *answer(files, "--privacy-unit", "tailnum:2", "--postprocess", "consistent")
    )
    assert code == 0, err
    with open(files["dir"] / "a.csv") as f:
        rows = list(csv.DictReader(f))
    var = []
    for row in rows:
        scale = float(row["noise_parameter"])
        assert scale == pytest.approx(2 / float(row["cost"]), rel=1e-5)  # k / epsilon
        q = math.exp(-1 / scale)
        assert float(row["expected_abs_noise"]) == pytest.approx(2 * q / (1 - q * q), rel=1e-9)
        var.append(2 * q / (1 - q) ** 2)
    total = next(r for r in rows if r["query"] == "total")
    sd = math.sqrt(1 / (1 / var[0] + 1 / (var[1] + var[2])))
    z = NormalDist().inv_cdf(0.975)
    width = float(total["interval_high"]) - float(total["interval_low"])
    assert width == pytest.approx(2 * z * sd, rel=1e-6)
    # the summary's total |noise| is the rows' sum
    line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("* optimal"))
    shown = float(line.split()[2].replace(",", ""))
    assert shown == pytest.approx(sum(float(r["expected_abs_noise"]) for r in rows), abs=0.06)
