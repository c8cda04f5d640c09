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
    e = d["expected_abs_noise"]
    assert e["sequential"] >= 10 * e["uniform"] and e["optimal"] < e["uniform"]
    assert d["guarantee"]["epsilon"] <= 1.0


def test_demo_readable(capsys, tmp_path) -> None:
    out = tmp_path / "demo.csv"
    assert main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "saved by parallel composition" in text and "utility gain" in text
    assert len(out.read_text().splitlines()) == 4355


def test_demo_uses_the_csprng() -> None:
    src = (ROOT / "src" / "dpcurator" / "cli" / "demo.py").read_text()
    assert "Seeded" not in src and "allow_insecure" not in src and "rng=" not in src


def test_demo_bad_epsilon(capsys) -> None:
    assert main(["demo", "--epsilon", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
