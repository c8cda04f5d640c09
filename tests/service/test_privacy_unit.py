"""A real ``dpcurator serve`` with a privacy unit: its start names the unit and what
loading kept, ``/v1/schema``, the client and the dashboard's overview show it, and every
answer is calibrated to the unit's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpcurator.curator import PrivacyUnit

from .conftest import SCHEMA, running


def households(directory: Path) -> tuple[Path, Path]:
    """60 people in 20 households of 3 (the column ``hid``): with K = 2, 20 rows go."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "people.csv"
    rows = [f"{i % 20},{i % 100},{'FM'[i % 2]},north,{i % 10}" for i in range(60)]
    data.write_text("hid,age,sex,region,score\n" + "\n".join(rows) + "\n")
    schema = directory / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def test_the_unit_is_shown_everywhere(tmp_path: Path) -> None:
    flags = ("--privacy-unit", "hid:2", "--unit-name", "household")
    with running(tmp_path, *flags, data=households(tmp_path)) as s:
        assert "privacy unit: every cost is per household (hid), up to 2 rows each" in s.stdout
        assert (
            "data: 60 rows read, 40 used; 20 dropped (over the privacy unit's limit: "
            "2 rows per household)"
        ) in s.stdout
        assert s.stdout[-1].startswith("listening on ")
        s.add("ann")
        shown = {"column": "hid", "max_rows": 2, "name": "household"}
        with s.http("ann") as h:
            assert h.get("/v1/schema").json()["privacy_unit"] == shown
            overview = h.get("/v1/dashboard/overview").json()
            assert overview["privacy_unit"] == shown
            assert overview["unit_text"] == "per household (hid), up to 2 rows each"
        with s.client("ann") as c:
            unit = c.privacy_unit()
            assert unit == PrivacyUnit("hid", 2, "household")
            assert unit.describe() == "per household (hid), up to 2 rows each"
            assert c.schema()["privacy_unit"] == shown
            a = c.count("age < 50", epsilon=0.5)
        # a cost per household: the noise is calibrated to its 2 rows
        assert a.noise_parameter == pytest.approx(2 / 0.5, rel=1e-5)
