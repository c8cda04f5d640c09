"""``dpcurator demo``: runs offline on the shipped sample with the OS CSPRNG."""

from __future__ import annotations

import json
from pathlib import Path

from dpcurator.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_demo_json(capsys) -> None:
    assert main(["demo", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gamma"] == 28 and d["queries"] == 4354
    # the showcase table is made consistent: its intervals are narrower than the raw ones
    assert d["postprocess"] == ["consistent"] and len(d["showcase"]) == 4
    for r in d["showcase"]:
        assert r["interval"] == "normal approximation, exact variance"
        assert r["interval_high"] - r["interval_low"] < 2 * r["noisy_half_width"]
    e = d["expected_abs_noise"]
    assert e["sequential"] >= 10 * e["uniform"] and e["optimal"] < e["uniform"]
    assert d["guarantee"]["epsilon"] <= 1.0


def test_demo_readable(capsys, tmp_path) -> None:
    out = tmp_path / "demo.parquet"
    png = tmp_path / "demo.png"
    assert main(["demo", "--out", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "saved by parallel composition" in text and "utility gain" in text
    assert "made consistent" in text and "in memory" in text
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 4354
    assert png.stat().st_size > 50_000


def test_demo_uses_the_csprng() -> None:
    src = (ROOT / "src" / "dpcurator" / "cli" / "demo.py").read_text()
    assert "Seeded" not in src and "allow_insecure" not in src and "rng=" not in src


def test_demo_bad_epsilon(capsys) -> None:
    assert main(["demo", "--epsilon", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
