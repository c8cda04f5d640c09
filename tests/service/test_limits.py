"""Bounded work per request and per token: rate (429), body (413), cells (413)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from dpcurator.errors import RateLimited, TooLarge

from .conftest import assert_error, running, start_server

WIDE = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "income", "type": "integer", "min": 0, "max": 9999},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": ["n", "s", "e", "w"]},
    ]
}


def wide_people(directory: Path) -> tuple[Path, Path]:
    """People with a wide attribute: age x income x sex has 2,000,000 cells."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    rows = [
        f"{rng.integers(0, 100)},{rng.integers(0, 10_000)},{rng.choice(['F', 'M'])},"
        f"{rng.choice(['n', 's', 'e', 'w'])}"
        for _ in range(300)
    ]
    data = directory / "wide.csv"
    data.write_text("age,income,sex,region\n" + "\n".join(rows) + "\n")
    schema = directory / "wide.json"
    schema.write_text(json.dumps(WIDE))
    return data, schema


def test_a_token_over_its_rate_gets_429(tmp_path: Path) -> None:
    # a token every 5 s: the four requests below fit in that, even on a busy machine
    config = "[server]\nrequests_per_second = 0.2\nburst = 3\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        s.add("ben")
        with s.http("ann") as h:
            for _ in range(3):
                assert h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1}).is_success
            before = s.charges()
            r = h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1})
            e = assert_error(r, 429, "rate_limited")
            wait = int(r.headers["retry-after"])
            assert 1 <= wait <= 5 and f"retry in {wait} s" in e["message"]  # 0.2 a second
            assert s.charges() == before  # refused before the curator saw it
            assert_error(h.get("/v1/budget"), 429, "rate_limited")
        with s.client("ann", retry=False) as c, pytest.raises(RateLimited):
            c.remaining()
        with s.client("ben") as c:  # another token has its own bucket
            assert c.count("age < 30", epsilon=0.1).charge_id == 4
        with httpx.Client(base_url=s.url) as h:  # unauthenticated requests: 401 still
            assert_error(h.get("/v1/budget"), 401, "unauthorized")
            assert h.get("/v1/health").status_code == 200
        with s.http("ann") as h:  # after Retry-After seconds, the token is let through
            r = h.get("/v1/budget")
            assert r.status_code == 429
            time.sleep(int(r.headers["retry-after"]))
            assert h.get("/v1/budget").status_code == 200


def test_the_client_waits_the_retry_after_it_is_sent(tmp_path: Path) -> None:
    """A loop of counts past the token's burst is not an error: the client waits the
    server's Retry-After and asks again (a 429 is refused before the curator sees the
    request, so each count is charged once). Bounded by max_wait; off with retry=False."""
    config = "[server]\nrequests_per_second = 2\nburst = 3\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        s.add("ben")
        s.add("cid")
        with s.client("ann") as c:
            start = time.monotonic()
            answers = [c.count("age < 30", epsilon=0.01) for _ in range(6)]
            took = time.monotonic() - start
        assert [a.charge_id for a in answers] == [1, 2, 3, 4, 5, 6]
        assert s.charges() == 6
        assert took >= 1.0  # three over the burst of 3 at 2 a second: it waited
        with s.client("ben", retry=False) as c:
            for _ in range(3):
                c.count("age < 30", epsilon=0.01)
            with pytest.raises(RateLimited, match="retry in 1 s"):
                c.count("age < 30", epsilon=0.01)
        with s.client("cid", max_wait=0.5) as c:  # Retry-After: 1 is more than it may wait
            for _ in range(3):
                c.count("age < 30", epsilon=0.01)
            start = time.monotonic()
            with pytest.raises(RateLimited):
                c.count("age < 30", epsilon=0.01)
            assert time.monotonic() - start < 0.5
        assert s.charges() == 12


@pytest.mark.parametrize(
    "kw",
    [
        {"retry": "yes"},
        {"retry": 1},
        {"max_wait": -1},
        {"max_wait": float("nan")},
        {"max_wait": float("inf")},
        {"max_wait": "10"},
        {"max_wait": True},
    ],
)
def test_bad_retry_settings_are_one_line_errors(kw: dict) -> None:
    from dpcurator.client import Client
    from dpcurator.errors import InvalidParameter

    with pytest.raises(InvalidParameter) as err:
        Client("http://127.0.0.1:9", "dpc_x", **kw)
    assert "\n" not in str(err.value) and (
        "retry" in str(err.value) or "max_wait" in str(err.value)
    )


def test_a_small_body_limit_from_the_config(tmp_path: Path) -> None:
    with running(tmp_path, config="[server]\nmax_body_bytes = 200\n") as s:
        s.add("ann")
        with s.http("ann") as h:
            ok = h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1})
            assert ok.status_code == 200
            r = h.post(
                "/v1/count", json={"query": "age < 30 AND " * 20 + "age < 3", "epsilon": 0.1}
            )
            assert "200 bytes" in assert_error(r, 413, "too_large")["message"]
        with s.client("ann") as c, pytest.raises(TooLarge):
            c.release(["age < 30"] * 30, [0.01] * 30)
        assert s.charges() == 1


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("wide")
    with running(d, data=wide_people(d)) as s:
        s.add("ann")
        yield s


def test_a_marginal_of_too_many_cells_is_413(wide) -> None:
    with wide.http("ann") as h:
        t0 = time.monotonic()
        r = h.post("/v1/marginal", json={"attributes": ["age", "income", "sex"], "epsilon": 1})
        e = assert_error(r, 413, "too_large")
        assert "2000000 cells" in e["message"]
        r = h.post(
            "/v1/estimate",
            json={"kind": "marginal", "attributes": ["income", "age", "sex"], "epsilon": 1},
        )
        assert_error(r, 413, "too_large")
        assert time.monotonic() - t0 < 60  # refused from the schema, not worked through
    with wide.client("ann") as c, pytest.raises(TooLarge):
        c.marginal(["sex", "age", "income"], epsilon=1)
    assert wide.charges() == 0


def test_a_workload_beyond_the_query_limit_is_refused_at_once(wide) -> None:
    with wide.http("ann") as h:
        r = h.post(
            "/v1/release", json={"workload": "age < 3\nmarginal(age, income, region)", "epsilon": 1}
        )
    assert 400 <= r.status_code < 500
    assert "4000000" in r.json()["message"]
    assert_error(r, r.status_code)
    assert wide.charges() == 0


def test_a_short_request_is_refused_or_answered_quickly(tmp_path: Path) -> None:
    """A request of a few bytes must not keep the server busy for minutes: with these
    limits, a marginal of 1,000,000 cells or a workload of 201 histograms of 10,000 bins
    is answered or refused within 10 seconds."""
    s = start_server(tmp_path, data=wide_people(tmp_path))
    try:
        s.add("ann")
        with s.http("ann") as h:
            for path, body in (
                ("/v1/release", {"workload": "histogram(income)\n" * 201, "epsilon": 1}),
                ("/v1/marginal", {"attributes": ["age", "income"], "epsilon": 1}),
            ):
                try:
                    h.post(path, json=body, timeout=10)
                except httpx.TimeoutException:
                    pytest.fail(f"{path} {str(body)[:40]} took more than 10 seconds")
    finally:
        s.kill9()  # not a graceful stop: it would wait for the request in progress


def test_work_limits_from_the_config(tmp_path: Path) -> None:
    """[server] max_cells and max_queries bound what one request may ask, as 413s that
    charge nothing; requests within them are answered."""
    config = "[server]\nmax_cells = 50\nmax_queries = 10\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        with s.http("ann") as h:
            ok = h.post("/v1/marginal", json={"attributes": ["sex", "region"], "epsilon": 0.1})
            assert ok.status_code == 200 and len(ok.json()["cells"]) == 8
            for path, body in (
                ("/v1/histogram", {"attribute": "age", "epsilon": 0.1}),
                ("/v1/marginal", {"attributes": ["score", "region", "sex"], "epsilon": 0.1}),
                ("/v1/estimate", {"kind": "histogram", "attribute": "age", "epsilon": 0.1}),
                ("/v1/release", {"queries": ["age < 3"] * 11, "costs": [0.01] * 11}),
            ):
                e = assert_error(h.post(path, json=body), 413, "too_large")
                assert "50" in e["message"] or "10" in e["message"], e
            r = h.post("/v1/release", json={"queries": ["age < 3"] * 10, "costs": [0.01] * 10})
            assert r.status_code == 200
        with s.client("ann") as c, pytest.raises(TooLarge):
            c.histogram("age", epsilon=0.1)
        assert s.charges() == 11


def test_a_workload_over_the_query_limit_is_413(tmp_path: Path) -> None:
    with running(tmp_path, config="[server]\nmax_queries = 10\n") as s:
        s.add("ann")
        with s.http("ann") as h:
            body = {"workload": "histogram(score)\nhistogram(sex)", "epsilon": 0.1}
            r = h.post("/v1/release", json=body)
        assert s.charges() == 0
        assert_error(r, 413, "too_large")


def test_the_solver_time_limit_from_the_config(tmp_path: Path) -> None:
    """[server] solver_time_limit bounds the exact maximum-overlap checks of a request:
    at 0 seconds the server answers at once with safe figures (remaining at most what
    truly remains, marked not exact) instead of computing them exactly."""
    import json
    import random

    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    names, values = [f"c{i}" for i in range(12)], [f"v{j}" for j in range(20)]
    rng = np.random.default_rng(0)
    rows = [",".join(rng.choice(values, len(names))) for _ in range(200)]
    data = tmp_path / "h.csv"
    data.write_text(",".join(names) + "\n" + "\n".join(rows) + "\n")
    schema = tmp_path / "h.json"
    attributes = [{"name": a, "type": "categorical", "values": values} for a in names]
    schema.write_text(json.dumps({"attributes": attributes}))
    pick = random.Random(2)

    def hard() -> str:  # overlapping boxes over many columns: a hard overlap problem
        parts = []
        for a in pick.sample(names, pick.randint(1, 3)):
            vals = [v for v in values if pick.random() < 0.5] or [values[0]]
            parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
        return " AND ".join(parts)

    ledger = tmp_path / "ledger.db"
    opened = {"data": data, "schema": schema, "budget": PureDP(1000.0), "ledger": ledger}
    with Curator.open(**opened, solver_time_limit=0.01) as c:
        for _ in range(40):
            c.count(hard(), epsilon=3.0)
    with Curator.open(**opened, solver_time_limit=60) as c:
        truth = c.remaining_detail()
    assert truth.exact
    config = "[server]\nsolver_time_limit = 0\n"
    budget = ("--epsilon", "1000")
    with running(
        tmp_path / "s", data=(data, schema), ledger=ledger, budget=budget, config=config
    ) as s:
        s.add("ann")
        with s.client("ann") as c:
            safe = c.remaining_detail()
            # safe bounds: never above the truth; exact only if it is the truth (the
            # solver may settle a small problem before its first look at the clock,
            # depending on the levels recorded under the 0.01 s limit above)
            assert safe.value <= truth.value
            assert safe.exact is False or safe.value == truth.value
            e = c.estimate("count", query=hard(), epsilon=3.0)
            assert e.cost == 3.0
        assert s.charges() == 40


def grid_table(directory: Path) -> tuple[Path, Path]:
    """Two attributes of 120 x 148 values (a statistic by both has 17,760 groups). The
    first groups (a = 0, b < 5) hold 400 rows each, so that whatever noise is drawn the
    first groups a reader is shown have values; the rest are scattered thinly."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    rows = [
        f"{rng.integers(0, 120)},{rng.integers(0, 148)},{rng.integers(0, 100)}" for _ in range(2000)
    ] + [f"0,{b},{rng.integers(0, 100)}" for b in range(5) for _ in range(400)]
    data = directory / "grid.csv"
    data.write_text("a,b,v\n" + "\n".join(rows) + "\n")
    schema = directory / "grid.json"
    attributes = [
        {"name": "a", "type": "integer", "min": 0, "max": 119},
        {"name": "b", "type": "integer", "min": 0, "max": 147},
        {"name": "v", "type": "integer", "min": 0, "max": 99},
    ]
    schema.write_text(json.dumps({"attributes": attributes}))
    return data, schema


def test_many_lines_of_grouped_means_are_413_quickly(tmp_path: Path) -> None:
    """20 lines of a mean by 17,760 groups (355,200 groups; each line within max_cells):
    answered in 80 s and 2 GB before the whole-request limit; now a 413 naming it, at
    once, charging nothing. One such line is answered, within 10 s, and its ledger row
    holds its results without their groups' conditions."""
    import json
    import sqlite3

    mean = "mean(v, 0, 99, by=[a, b])"
    with running(tmp_path, data=grid_table(tmp_path)) as s:
        s.add("ann")
        with s.http("ann") as h:
            t0 = time.monotonic()
            r = h.post("/v1/release", json={"workload": f"{mean}\n" * 20, "epsilon": 1}, timeout=10)
            assert time.monotonic() - t0 < 10
            e = assert_error(r, 413, "too_large")
            assert e["message"] == (
                "this workload asks for 355200 cells in all, over the limit "
                "max_request_cells = 50000; split it"
            )
            assert s.charges() == 0
            t0 = time.monotonic()
            r = h.post("/v1/release", json={"workload": mean, "epsilon": 1}, timeout=10)
            assert r.status_code == 200 and time.monotonic() - t0 < 10
            (st,) = r.json()["statistics"]
            assert len(st["results"]) == 120 * 148
        with s.client("ann") as c, pytest.raises(TooLarge, match="max_request_cells = 50000"):
            c.release_workload(f"{mean}\n" * 3, epsilon=1)
        assert s.charges() == 1
        with sqlite3.connect(s.ledger) as con:
            (answer,) = con.execute("SELECT answer FROM charges").fetchone()
        stored = json.loads(answer)
        assert stored["groups"] == 120 * 148 and "results" not in stored
        assert len(answer) < 100 * 120 * 148
        with s.client("ann") as c:
            (h,) = c.history()  # labelled as before
        assert h.answer["results"][-1]["group"] == "a = 119 AND b = 147"
        with s.http("ann") as h:  # the dashboard labels the groups it shows
            (shown,) = h.get("/v1/dashboard/answers").json()["answers"]
        assert shown["cells_total"] == 120 * 148
        # labelled in the groups' order (small groups, with no value to show, left out)
        labels = [c["label"] for c in shown["cells"]]
        pairs = [tuple(int(x) for x in re.fullmatch(r"a = (\d+) AND b = (\d+)", t).groups())
                 for t in labels]  # fmt: skip
        assert pairs[:5] == [(0, b) for b in range(5)] and pairs == sorted(set(pairs))


def test_the_whole_request_limit_from_the_config(tmp_path: Path) -> None:
    """[server] max_request_cells sums every line and every batch query: histograms,
    counts and grouped statistics together; a bad value is a one-line error."""
    config = "[server]\nmax_request_cells = 110\n"
    with running(tmp_path, config=config) as s:
        s.add("ann")
        with s.http("ann") as h:
            stats = "histogram(age)\nmean(age, 0, 99, by=[sex, region])\nmean(score, 0, 9, by=age)"
            for path, body in (
                ("/v1/release", {"workload": "histogram(age)\nhistogram(score)\nage < 3"}),
                ("/v1/release", {"workload": stats}),  # 100 + 8 + 100 cells
                ("/v1/release", {"queries": ["age < 3"] * 111, "costs": [0.01] * 111}),
                ("/v1/marginal", {"attributes": ["age", "sex"]}),
            ):
                if "costs" not in body:
                    body = {**body, "epsilon": 0.1}
                e = assert_error(h.post(path, json=body), 413, "too_large")
                assert "max_request_cells = 110" in e["message"], e
            assert s.charges() == 0
            ok = h.post(
                "/v1/release", json={"workload": "histogram(age)\nhistogram(score)", "epsilon": 0.1}
            )
            assert ok.status_code == 200
        assert s.charges() >= 1  # as the planner measured them
    from .conftest import cli, write_people

    cfg = tmp_path / "bad.toml"
    cfg.write_text("[server]\nmax_request_cells = 0\n")
    data, schema = write_people(tmp_path / "bad")
    ledger = tmp_path / "bad" / "ledger.db"
    code, _, err = cli(
        "serve", "--config", cfg, "--epsilon", 1, "--port", 0, "--ledger", ledger,
        "--data", data, "--schema", schema,
    )  # fmt: skip
    assert code == 2 and "max_request_cells" in err and err.count("\n") == 1
