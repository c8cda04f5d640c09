"""One analyst cannot slow the others, and a server in trouble answers 4xx/503, never 500.

Real ``dpcurator serve`` processes on 127.0.0.1. A *hard* table (12 categorical
attributes x 20 values) whose points are already near the budget makes every new
request need the exact maximum-overlap computation (NP-hard on such queries): the
flood that used to keep every worker busy for seconds per request.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.curator.ledger import Ledger
from dpcurator.privacy import PureDP

from .conftest import assert_error, charges_in, running

ATTRS = [f"c{i}" for i in range(12)]
VALUES = [f"v{j}" for j in range(20)]


def conjunction(rng: random.Random) -> str:
    parts = []
    for a in rng.sample(ATTRS, 3):
        vals = [v for v in VALUES if rng.random() < 0.5] or [rng.choice(VALUES)]
        parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
    return " AND ".join(parts)


def hard_or(rng: random.Random) -> str:
    return " OR ".join(f"({conjunction(rng)})" for _ in range(rng.randint(2, 4)))


def hard_tables(tmp: Path, *, filled: int) -> tuple[Path, str]:
    """The two tables' files, a ledger whose hard table already holds ``filled`` charges
    of cost 1 on a budget of 100 (its levels then admit nothing new), and the config."""
    g = np.random.default_rng(0)
    pd.DataFrame({a: g.choice(VALUES, 500) for a in ATTRS}).to_csv(tmp / "hard.csv", index=False)
    schema = {"attributes": [{"name": a, "type": "categorical", "values": VALUES} for a in ATTRS]}
    (tmp / "hard.json").write_text(json.dumps(schema))
    pd.DataFrame({"x": g.integers(0, 10, 500)}).to_csv(tmp / "easy.csv", index=False)
    (tmp / "easy.json").write_text(
        json.dumps({"attributes": [{"name": "x", "type": "integer", "min": 0, "max": 9}]})
    )
    ledger = tmp / "ledger.db"
    tables = {
        "hard": (tmp / "hard.csv", tmp / "hard.json"),
        "easy": (tmp / "easy.csv", tmp / "easy.json"),
    }
    rng = random.Random(1)
    with Curator.open(tables=tables, budget=PureDP(100.0), ledger=ledger) as c:
        for start in range(0, filled, 10):  # each batch gets the solver's time of its own
            k = min(10, filled - start)
            c.release([conjunction(rng) for _ in range(k)], [1.0] * k, table="hard")
    config = (
        "[budget]\nepsilon = 100\n"
        "[tables.hard]\ndata = 'hard.csv'\nschema = 'hard.json'\n"
        "[tables.easy]\ndata = 'easy.csv'\nschema = 'easy.json'\n"
    )
    return ledger, config


def post(client: httpx.Client, path: str, body: dict) -> tuple[float, int]:
    t = time.perf_counter()
    r = client.post(path, json=body)
    return time.perf_counter() - t, r.status_code


def test_no_request_outlives_its_deadline_and_a_flood_leaves_others_served(tmp_path):
    ledger, config = hard_tables(tmp_path, filled=110)
    before = charges_in(ledger)
    limit = 1.5
    server_cfg = (
        f"[server]\nrequest_time_limit = {limit}\nsolver_time_limit = 5\n"
        "requests_per_second = 20\nburst = 40\n"
    )
    with running(tmp_path, ledger=ledger, config=config + server_cfg, data=False, budget=()) as s:
        for who in ("a", "b", "c", "victim"):
            s.add(who)
        stop = threading.Event()
        hard: list[tuple[float, int, str]] = []
        light: list[float] = []
        refused: list[str] = []

        def flood(who: str, seed: int) -> None:
            rng = random.Random(seed)
            with s.http(who) as c:
                while not stop.is_set():
                    if rng.random() < 0.2:
                        body = {
                            "queries": [conjunction(rng) for _ in range(300)],
                            "costs": [1.0] * 300,
                            "table": "hard",
                        }
                        hard.append((*post(c, "/v1/release", body), "batch"))
                    else:
                        body = {"query": hard_or(rng), "epsilon": 1.0, "table": "hard"}
                        hard.append((*post(c, "/v1/count", body), "or"))
                    time.sleep(0.2)

        def victim() -> None:
            with s.http("victim") as c:
                i = 0
                while not stop.is_set():
                    t0 = time.perf_counter()
                    r = c.post(
                        "/v1/count",
                        json={"query": f"x = {i % 10}", "epsilon": 0.001, "table": "easy"},
                    )
                    light.append(time.perf_counter() - t0)
                    if r.status_code != 200:
                        refused.append(r.text)
                    i += 1
                    time.sleep(0.2)

        threads = [threading.Thread(target=flood, args=(w, k)) for k, w in enumerate("abcabc")]
        threads.append(threading.Thread(target=victim))
        for t in threads:
            t.start()
        time.sleep(8)
        stop.set()
        for t in threads:
            t.join()
        answered = sum(1 for _, code, _ in hard if code == 200)
        codes = {code for _, code, _ in hard}
    assert codes <= {200, 409, 503}, codes
    assert 503 in codes or 409 in codes  # the flood did need the exact check
    # every request answered within its deadline plus the solver's grace and the wire:
    # well under 1 s on a quiet machine (benchmarks/stall.py); the margin here is for a
    # machine shared with other tests, and still far below the solver's own 5 s
    assert max(t for t, _, _ in hard) <= limit + 2.5, sorted(hard)[-5:]
    # the victim is served throughout (loose bounds: CI machines are shared)
    assert not refused, refused[:3]
    assert len(light) >= 5, light
    assert statistics.median(light) <= 1.5, light
    # nothing but what was answered was charged (a 300-count batch is 300 charges)
    batches = sum(1 for _, code, kind in hard if code == 200 and kind == "batch")
    assert charges_in(ledger) - before >= answered if batches else True
    Ledger(ledger, None, create=False).close()  # verifies the whole chain


def test_what_a_request_sends_never_makes_a_500(tmp_path):
    """Lone surrogates, NUL, right-to-left marks in every text field: a 4xx, with a
    message that can be read, and nothing charged."""
    with running(tmp_path) as s:
        s.add("root", "--admin")
        before = s.charges()
        nasty = ["\ud800", "a\udfffb", "\x00", "age\u202e < 3", "\u200f", "x" * 30_000, "'\ud83d'"]
        with s.http("root") as c:
            for text in nasty:
                for path, body in (
                    ("/v1/count", {"query": text, "epsilon": 0.1}),
                    ("/v1/count", {"query": f"region = '{text}'", "epsilon": 0.1}),
                    ("/v1/count", {"query": "age < 3", "epsilon": 0.1, "table": text}),
                    ("/v1/histogram", {"attribute": text, "epsilon": 0.1}),
                    ("/v1/marginal", {"attributes": ["sex", text], "epsilon": 0.1}),
                    (
                        "/v1/sum",
                        {"attribute": "age", "lower": 0, "upper": 9, "where": text, "epsilon": 0.1},
                    ),
                    ("/v1/release", {"workload": f"histogram({text})", "epsilon": 0.1}),
                    ("/v1/release", {"queries": [text], "costs": [0.1]}),
                    ("/v1/estimate", {"kind": "count", "query": text, "epsilon": 0.1}),
                    ("/v1/admin/analysts", {"name": text}),
                ):
                    raw = json.dumps(body).encode()  # \\ud800 escapes: valid JSON, lone surrogates
                    r = c.post(path, content=raw, headers={"Content-Type": "application/json"})
                    assert 400 <= r.status_code < 500, (path, text, r.status_code, r.text)
                    assert_error(r, r.status_code)
                r = c.get(
                    "/v1/budget",
                    params={"query": text.encode("utf-8", "surrogatepass").decode("latin-1")},
                )
                assert 400 <= r.status_code < 500 or r.status_code == 200, r.text
        assert s.charges() == before


def test_a_ledger_removed_or_replaced_under_the_server_is_a_503_and_charges_nothing(tmp_path):
    with running(tmp_path) as s:
        s.add("alice")
        with s.http("alice") as c:
            assert (
                c.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1}).status_code == 200
            )
            n = charges_in(s.ledger)
            copy = tmp_path / "copy.db"
            shutil.copy(s.ledger, copy)
            # replaced: a charge written now would go to a file no one opens again
            os.replace(copy, s.ledger)
            r = c.post("/v1/count", json={"query": "age < 40", "epsilon": 0.1})
            assert_error(r, 503, "ledger_unavailable")
            assert charges_in(s.ledger) == n
            # removed
            s.ledger.unlink()
            r = c.post("/v1/count", json={"query": "age < 50", "epsilon": 0.1})
            assert_error(r, 503, "ledger_unavailable")
            assert not s.ledger.exists()
            assert "Traceback" not in s.log()


def test_an_immutable_ledger_is_a_503(tmp_path):
    with running(tmp_path) as s:
        s.add("alice")
        if subprocess.run(["chattr", "+i", str(s.ledger)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not permitted here")
        try:
            with s.http("alice") as c:
                r = c.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1})
                assert_error(r, 503, "ledger_unavailable")
        finally:
            subprocess.run(["chattr", "-i", str(s.ledger)], check=False)
    led = Ledger(s.ledger, None, create=False)  # verifies it, and rolls back what failed
    try:
        assert led.head[0] == 0
    finally:
        led.close()


def test_sigterm_mid_batch_stops_the_server_quickly_and_commits_nothing_half_done(tmp_path):
    ledger, config = hard_tables(tmp_path, filled=0)
    with running(
        tmp_path,
        ledger=ledger,
        config=config + "[server]\nmax_queries = 100000\nmax_charges = 100000\n",
        data=False,
        budget=(),
    ) as s:
        s.add("a")
        rng = random.Random(5)
        body = {
            "queries": [conjunction(rng) for _ in range(3000)],
            "costs": [0.01] * 3000,
            "table": "hard",
        }
        got: list[int] = []

        def send() -> None:
            with s.http("a") as c:
                try:
                    got.append(c.post("/v1/release", json=body).status_code)
                except httpx.HTTPError:
                    got.append(-1)

        t = threading.Thread(target=send)
        t.start()
        time.sleep(1.0)
        start = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=30)
        took = time.monotonic() - start
        t.join(timeout=30)
    assert took <= 10, took
    n = charges_in(ledger)
    assert n in (0, 3000), n  # all or nothing
    assert (got == [200]) == (n == 3000)
    Ledger(ledger, None, create=False).close()  # verifies the whole chain
    db = sqlite3.connect(ledger)
    try:
        assert db.execute("SELECT count(*) FROM charges WHERE answer IS NULL").fetchone()[0] == 0
    finally:
        db.close()
