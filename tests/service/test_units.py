"""``POST /v1/units`` and ``Client.units`` against a real ``dpcurator serve``: the number
of households with a kept row, charged k times its cost; refusals are one-line 4xx JSON
errors that charge nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcurator.errors import BudgetExceeded, InvalidParameter, QueryError

from .conftest import FAST, assert_error, running
from .test_privacy_unit import households


def test_units_over_http_and_the_client(tmp_path: Path) -> None:
    # 20 households (hid = i % 20) of 3 rows, K = 3: every row kept; ages i % 100 < 60
    flags = ("--privacy-unit", "hid:3", "--unit-name", "household", "--epsilon", "1e9")
    with running(tmp_path, *flags, data=households(tmp_path), config=FAST) as s:
        s.add("ann")
        with s.http("ann") as h:
            r = h.post("/v1/units", json={"query": "age < 10", "epsilon": 1e6})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["query"] == "units(age < 10)"
            assert body["value"] == 10  # households 0..9 have a row of age < 10
            assert body["cost"] == {"amount": 3e6, "currency": "epsilon"}
            e = h.post("/v1/estimate", json={"kind": "units", "query": "age < 10", "epsilon": 1})
            assert e.status_code == 200, e.text
            assert e.json()["cost"]["amount"] == 3 and e.json()["noise"]["parameter"] == 1
            before = s.charges()
            for payload, status in (
                ({"query": "colour = 1", "epsilon": 1}, 400),
                ({"query": "age < 10", "epsilon": 1e9}, 409),  # 3e9 > the whole budget
                ({"query": "age < 10", "epsilon": "1"}, 422),
                ({"query": "age < 10", "epsilon": 1, "bins": [1]}, 422),
            ):
                assert_error(h.post("/v1/units", json=payload), status)
            stray = h.post("/v1/estimate", json={"kind": "units", "attribute": "age", "epsilon": 1})
            assert_error(stray, 400)
            assert s.charges() == before
        with s.client("ann") as c:
            a = c.units("age < 10", epsilon=1e6)
            assert a.value == 10 and a.cost == 3e6 and a.half_width == 0
            assert c.units(epsilon=1e6).value == 20
            est = c.estimate("units", condition="sex = 'F'", epsilon=2)
            assert est.kind == "units" and est.cost == 6 and est.request == "units(sex = 'F')"
            with pytest.raises(QueryError):
                c.units("colour = 1", epsilon=1)
            with pytest.raises(BudgetExceeded):
                c.units(epsilon=1e9)
            assert [h.kind for h in c.history()][-2:] == ["units", "units"]


def test_units_without_a_privacy_unit_is_refused(tmp_path: Path) -> None:
    with running(tmp_path, config=FAST) as s:
        s.add("ann")
        with s.http("ann") as h:
            body = assert_error(h.post("/v1/units", json={"epsilon": 1}), 400)
            assert "no privacy unit" in body["message"]
        with s.client("ann") as c, pytest.raises(InvalidParameter, match="no privacy unit"):
            c.units("age < 10", epsilon=1)
        assert s.charges() == 0
