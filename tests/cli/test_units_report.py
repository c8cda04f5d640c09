"""``dpcurator units DATA --schema S --unit COLUMN``: the custodian's report to choose k,
against pandas, and its refusals; it writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpcurator.cli import main

SCHEMA = {"attributes": [{"name": "x", "type": "integer", "min": 0, "max": 9}]}


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 40, 120)
    ids = np.repeat(np.arange(120), sizes)
    df = pd.DataFrame({"x": rng.integers(0, 10, len(ids)), "uid": rng.permutation(ids)})
    df.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    return tmp_path, df


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_report_matches_pandas(data, capsys):
    d, df = data
    before = sorted(p.name for p in d.iterdir())
    code, out, err = run(capsys, "units", d / "d.csv", "--schema", d / "s.json", "--unit", "uid",
                         "--max-rows", 7, "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    sizes = df.groupby("uid").size()
    kept = int(np.minimum(sizes, 7).sum())
    assert got["rows_read"] == len(df) and got["rows"] == kept
    u = got["unit"]
    assert u["units"] == len(sizes) and u["k"] == 7 and u["rows"] == kept
    assert u["max"] == sizes.max()
    for pct in (50, 90, 99):  # nearest rank
        assert u[f"p{pct}"] == int(np.sort(sizes)[-(-len(sizes) * pct // 100) - 1])
    for k, n in u["kept_by_k"]:
        assert n == int(np.minimum(sizes, k).sum())
    code, out, _ = run(capsys, "units", d / "d.csv", "--schema", d / "s.json", "--unit", "uid",
                       "--unit-name", "patient")  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith(f"units: {len(sizes):,} (uid); rows per patient: p50 ")
    assert lines[2].startswith("rows kept by k: 1: 120, 2: ")
    assert sorted(p.name for p in d.iterdir()) == before  # no ledger, nothing written


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--unit", "nope"], "'nope' is not in the data"),
        (["--unit", "uid", "--max-rows", "0"], "--max-rows must be an integer from 1"),
        (["--unit", " "], "--unit: give the id column"),
    ],
)
def test_refusals_are_one_line(data, capsys, flags, words):
    d, _ = data
    code, out, err = run(capsys, "units", d / "d.csv", "--schema", d / "s.json", *flags)
    assert code == 2 and out == ""
    assert words in err and err.count("\n") == 1
