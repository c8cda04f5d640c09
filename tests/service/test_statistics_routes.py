"""Statistics over HTTP against a real ``dpcurator serve``: the client mirrors the
in-process session (types, public fields, exceptions), 4xx messages name the field,
estimates, history, workload releases and the dashboard show statistics."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.curator import StatisticAnswer
from dpcurator.errors import BudgetExceeded, DpCuratorError, InvalidParameter, QueryError
from dpcurator.privacy import PureDP

from .conftest import assert_error, running, write_people


def script(s) -> tuple[dict[str, object], dict[str, type]]:
    got: dict[str, object] = {
        "mean": s.mean("age", 0, 99, "sex = 'F'", epsilon=0.5),
        "mean by": s.mean("age", 0, 99, by=["sex", "region"], epsilon=0.5),
        "variance": s.variance("score", 0, 9, by="sex", epsilon=0.5),
        "stdev": s.stdev("age", 10, 90, epsilon=0.5),
        "quantile": s.quantile("age", 0.9, by="region", epsilon=0.5),
        "quantiles": s.quantiles("score", [0.25, 0.5, 0.75], epsilon=0.5),
        "median": s.median("age", "score > 3", candidates=[20, 40, 60, 80], epsilon=0.5),
        "workload": s.release_workload(
            "age < 30\nmedian(age, by=sex)\nmean(score, 0, 9)\nhistogram(sex)", epsilon=0.5
        )[1],
        "share": s.share("score > 3", "age < 60", by="region", epsilon=0.5),
        "workload where": s.release_workload(
            "share(score > 3, by=sex)\nhistogram(sex, where=age < 30)", epsilon=0.5
        )[1],
        "estimate share": s.estimate("share", condition="score > 3", by="sex", epsilon=0.5),
        "estimate mean": s.estimate("mean", attribute="age", lower=0, upper=99, epsilon=0.5),
        "estimate median": s.estimate("median", attribute="age", by=["sex"], epsilon=0.5),
        "history": s.history(),
    }
    mistakes = {
        "over the budget": lambda: s.median("age", epsilon=11),
        "categorical mean": lambda: s.mean("sex", 0, 1, epsilon=0.5),
        "equal bounds": lambda: s.mean("age", 5, 5, epsilon=0.5),
        "bound not a number": lambda: s.mean("age", "0", 5, epsilon=0.5),
        "q too large": lambda: s.quantile("age", 1.5, epsilon=0.5),
        "q as text": lambda: s.quantile("age", "0.5", epsilon=0.5),
        "unknown by": lambda: s.median("age", by="nope", epsilon=0.5),
        "by not text": lambda: s.median("age", by=7, epsilon=0.5),
        "by twice": lambda: s.median("age", by=["sex", "sex"], epsilon=0.5),
        "candidate outside": lambda: s.median("age", candidates=[500], epsilon=0.5),
        "candidate float": lambda: s.median("age", candidates=[1.5], epsilon=0.5),
        "no quantiles": lambda: s.quantiles("age", [], epsilon=0.5),
        "unordered": lambda: s.median("region", epsilon=0.5),
        "share of nonsense": lambda: s.share("score >", epsilon=0.5),
        "share by unknown": lambda: s.share("score > 3", by="nope", epsilon=0.5),
        "estimate stray": lambda: s.estimate("median", attribute="age", lower=1, epsilon=0.5),
    }
    raised: dict[str, type] = {}
    for name, call in mistakes.items():
        with pytest.raises(DpCuratorError) as err:
            call()
        raised[name] = type(err.value)
    return got, raised


def public(x: object) -> object:
    if isinstance(x, StatisticAnswer):
        shape = [(r.group, r.q, r.interval is None, r.rank_error) for r in x.results]
        return (x.request, x.statistic, x.mechanism, x.cost, x.currency, x.remaining, shape)
    if isinstance(x, list):
        return [public(a) if isinstance(a, StatisticAnswer) else type(a) for a in x]
    if hasattr(x, "admitted"):  # an estimate
        return vars(x)
    return x


def test_the_client_mirrors_the_in_process_session(tmp_path: Path) -> None:
    data = write_people(tmp_path / "data")
    with Curator.open(
        data=data[0], schema=data[1], budget=PureDP(10.0), ledger=tmp_path / "local.db"
    ) as curator:
        local, local_errors = script(curator.analyst("x"))
    with running(tmp_path / "served", data=data, budget=("--epsilon", "10")) as s:
        s.add("x")
        with s.client("x") as c:
            remote, remote_errors = script(c)
    assert remote_errors == local_errors
    assert local_errors["over the budget"] is BudgetExceeded
    assert local_errors["unknown by"] is QueryError and local_errors["by not text"] is QueryError
    assert local_errors["q as text"] is InvalidParameter
    for key in local:
        if key == "history":
            continue
        assert type(local[key]) is type(remote[key]), key
        assert public(local[key]) == public(remote[key]), key
    assert [(h.kind, h.request, h.cost) for h in local["history"]] == [
        (h.kind, h.request, h.cost) for h in remote["history"]
    ]
    assert remote["history"][0].answer["statistic"] == "mean"
    assert local["estimate mean"].error_scale > 0
    m = remote["mean"]
    assert isinstance(m.value, float) and m.interval[0] <= m.value <= m.interval[1]
    share = remote["share"]
    assert share.statistic == "share" and share.request.startswith("share(score > 3")
    assert all(r.value is None or 0 <= r.value <= 1 for r in share.results)
    assert all(0 <= r.interval[0] <= r.interval[1] <= 1 for r in share.results)
    assert local_errors["share of nonsense"] is QueryError
    assert [type(a).__name__ for a in remote["workload where"]] == ["StatisticAnswer"] + [
        "Answer"
    ] * 2
    assert remote["workload where"][1].query.endswith("AND (age < 30)")
    assert [type(a).__name__ for a in remote["workload"]] == [
        "Answer",
        "StatisticAnswer",
        "StatisticAnswer",
        "Answer",
        "Answer",
    ]


def test_http_errors_name_the_field_and_dashboard_shows_statistics(tmp_path: Path) -> None:
    with running(tmp_path, budget=("--epsilon", "10")) as s:
        s.add("ann")
        s.add("root", "--admin")
        with s.http("ann") as h:
            r = h.post("/v1/mean", json={"attribute": "age", "lower": 0, "epsilon": 0.1})
            body = assert_error(r, 422, "invalid_request")
            assert body["message"].startswith("upper:")
            r = h.post("/v1/median", json={"attribute": "age", "by": 7, "epsilon": 0.1})
            assert assert_error(r, 422, "invalid_query")["message"].startswith("by")
            r = h.post("/v1/quantile", json={"attribute": "age", "q": "0.5", "epsilon": 0.1})
            assert assert_error(r, 422)["message"].startswith("q")
            r = h.post("/v1/quantile", json={"attribute": "age", "q": 2, "epsilon": 0.1})
            assert "q must be a number in [0, 1]" in assert_error(r, 400)["message"]
            assert s.charges() == 0
            ok = h.post(
                "/v1/mean",
                json={"attribute": "age", "lower": 0, "upper": 99, "by": "sex", "epsilon": 1},
            ).json()
            assert (
                ok["statistic"] == "mean" and len(ok["results"]) == 2 and ok["confidence"] == 0.95
            )
            h.post("/v1/median", json={"attribute": "age", "epsilon": 1}).raise_for_status()
            e = h.post(
                "/v1/estimate",
                json={"kind": "quantiles", "attribute": "age", "qs": [0.1, 0.9], "epsilon": 1},
            ).json()
            assert e["kind"] == "quantile" and e["half_width"] > 0 and "rows" in e["error"]
            dash = h.get("/v1/dashboard/answers").json()["answers"]
            med, mean = dash[0], dash[1]
            assert med["kind"] == "quantile" and med["cells"][0]["label"].startswith(
                "all rows, q = 0.5"
            )
            assert mean["cells_total"] == 2 and mean["cells"][0]["label"] == "sex = 'F'"
            c = mean["cells"][0]
            assert c["low"] <= c["value"] <= c["high"]
