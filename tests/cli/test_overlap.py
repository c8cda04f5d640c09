"""``dpcurator overlap``: JSON contract, readable output, one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcurator.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["overlap", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = tmp_path / "w.txt"
    w.write_text("marginal(sex, race)\nhistogram(age, bins=[17, 40, 91])\nage = 37 @ 2\n")
    code, out, err = run(capsys, "--schema", SCHEMA, "--workload", w, "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    assert set(d) == {
        "queries",
        "gamma",
        "exact",
        "upper_bound",
        "method",
        "witness",
        "witness_queries",
        "colouring_bound",
        "sequential",
        "saving",
    }
    assert d["queries"] == 10 + 2 + 1  # sex (2 values) x race (5), 2 bins, 1
    assert d["colouring_bound"] >= d["gamma"]
    assert d["gamma"] == 4 and d["exact"] is True and d["upper_bound"] == 4
    assert d["method"] == "dense"  # a few segments on three attributes
    assert d["witness"]["age"] == 37 and len(d["witness"]) == 12
    assert d["witness_queries"][-1] == 12 and len(d["witness_queries"]) == 3
    assert d["sequential"] == 14
    assert d["saving"] == pytest.approx(1 - 4 / 14)


def test_readable_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--schema", SCHEMA, "--workload", ROOT / "examples" / "adult" / "workload.txt"
    )
    assert code == 0
    assert "gamma:" in out and "(exact)" in out
    assert "method:   eliminate" in out
    assert "witness:" in out and "sequential composition would charge" in out
    # what the README says it shows: gamma against the paper's colouring bound
    assert "colouring bound: 7.0 (Smith et al. 2022: an upper bound on gamma)" in out


def test_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    workload = ROOT / "examples" / "adult" / "workload.txt"
    code, out, _ = run(
        capsys, "--schema", SCHEMA, "--workload", workload, "--json", "--time-limit", "30"
    )
    assert code == 0
    assert json.loads(out)["exact"] is True


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("total\nage = 5\n", "w.txt:2: column 7: value 5 is outside the domain of 'age'"),
        ("total\n\n\nsex < 'Male'\n", "w.txt:4: column 5: range < on unordered categorical 'sex'"),
        ("age = 30 OR sex = 'Mael'\n", "w.txt:1: column 19: value 'Mael' is not in the domain"),
        ("nope = 1\n", "w.txt:1: column 1: unknown attribute 'nope'"),
        ("age = 30 @ 0\n", "w.txt:1: weight must be a positive number"),
    ],
)
def test_bad_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    w = tmp_path / "w.txt"
    w.write_text(content)
    code, out, err = run(capsys, "--schema", SCHEMA, "--workload", w)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("dpcurator overlap: error: ") and message in err


def test_bad_schema_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = tmp_path / "s.json"
    s.write_text('{"attributes": [{"name": "a", "type": "integer", "min": 3, "max": 1}]}')
    w = tmp_path / "w.txt"
    w.write_text("total\n")
    code, _, err = run(capsys, "--schema", s, "--workload", w)
    assert code == 2 and err.count("\n") == 1 and "s.json" in err and "greater than" in err
    code, _, err = run(capsys, "--schema", tmp_path / "none.json", "--workload", w)
    assert code == 2 and "cannot read schema" in err
    code, _, err = run(capsys, "--schema", SCHEMA, "--workload", tmp_path / "none.txt")
    assert code == 2 and "cannot read workload" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--schema", SCHEMA, "--workload", w, "--time-limit", "-1")
    assert code == 2 and "--time-limit" in err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["overlap", "--help"])
    assert exc.value.code == 0
    assert "--time-limit" in capsys.readouterr().out
