"""Many client processes, one budget; a server killed with SIGKILL and restarted.

Real server processes and real client processes (tests/service/worker.py): the budget is
enforced across them exactly as it is in process, and every answer a client received
is in the ledger after a crash, charged once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded, ServiceUnavailable
from dpcurator.privacy import PureDP

from .conftest import WORKER, Server, add_analyst, running, start_server, write_people

NORTH = "region = 'north'"


def spawn(*args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_together(procs: list[subprocess.Popen]) -> list[list[dict]]:
    """Wait until every worker is ready, start them at once, and collect their lines."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        outs.append([json.loads(line) for line in out.splitlines()])
    return outs


def test_eight_clients_over_http_get_exactly_the_budget(tmp_path: Path) -> None:
    """8 processes x 20 counts of 0.05 on one region, budget 1: exactly 20 answered, the
    other 140 refused with BudgetExceeded (HTTP 409), 20 charges in the ledger."""
    with running(tmp_path, budget=("--epsilon", "1")) as s:
        tokens = [s.add(f"analyst{i}") for i in range(8)]
        outs = run_together([spawn("http", s.url, t, 20, NORTH, 0.05) for t in tokens])
        answered = [line for out in outs for line in out if "charge_id" in line]
        refused = [line for out in outs for line in out if line.get("error") == "BudgetExceeded"]
        assert len(answered) == 20 and len(refused) == 140
        assert len({a["charge_id"] for a in answered}) == 20
        assert s.charges() == 20
        with s.client("analyst0") as c:
            assert c.remaining(NORTH) == 0.0
            with pytest.raises(BudgetExceeded):
                c.count(NORTH, epsilon=0.05)
        with s.http("analyst1") as h:
            r = h.post("/v1/count", json={"query": NORTH, "epsilon": 0.05})
            assert r.status_code == 409 and r.json()["error"] == "budget_exceeded"


def test_the_same_contest_in_process_gets_the_same_20(tmp_path: Path) -> None:
    """The same contest against one in-process curator (8 analysts' sessions in 8
    threads, as the server runs its requests): the same 20 answers, 140 refusals."""
    data, schema = write_people(tmp_path)
    outcomes: list[str] = []
    with Curator.open(
        data=data, schema=schema, budget=PureDP(1.0), ledger=tmp_path / "ledger.db"
    ) as curator:
        start = threading.Barrier(8)

        def analyst(i: int) -> None:
            session = curator.analyst(f"analyst{i}")
            start.wait()
            for _ in range(20):
                try:
                    session.count(NORTH, epsilon=0.05)
                    outcomes.append("answered")
                except BudgetExceeded:
                    outcomes.append("refused")

        threads = [threading.Thread(target=analyst, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert outcomes.count("answered") == 20 and outcomes.count("refused") == 140
        assert len(curator.history()) == 20


def test_kill_9_then_restart_every_received_answer_is_charged_once(tmp_path: Path) -> None:
    """SIGKILL the server while 8 clients send counts; restart it on the same ledger.
    Every answer a client received is in the ledger (same analyst, request and recorded
    answer, if recorded); a client has at most its one request in flight charged without
    an answer; the restarted server's budget is the ledger's."""
    data = write_people(tmp_path)
    s = start_server(tmp_path, data=data, budget=("--epsilon", "100"))
    try:
        s.add("root", "--admin")
        names = [f"analyst{i}" for i in range(8)]
        tokens = [s.add(n) for n in names]
        procs = [spawn("http", s.url, t, 10_000, NORTH, 0.001) for t in tokens]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        deadline = time.monotonic() + 120
        while s.charges() < 80 and time.monotonic() < deadline:
            time.sleep(0.05)
        s.kill9()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append([json.loads(line) for line in out.splitlines()])
    finally:
        s.stop()
    received = {n: [a for a in out if "charge_id" in a] for n, out in zip(names, outs, strict=True)}
    for n, out in zip(names, outs, strict=True):
        assert out and out[-1]["error"] == "ServiceUnavailable", (n, out[-3:])
        said = out[-1]["message"]
        assert said.startswith("cannot reach the curator") or "may have been charged" in said
        assert len(received[n]) == len(out) - 1  # nothing refused, then the crash
    assert sum(map(len, received.values())) >= 80 - 8

    ids = [a["charge_id"] for got in received.values() for a in got]
    assert len(ids) == len(set(ids))  # no charge id was handed out twice

    with running(tmp_path / "again", data=data, ledger=s.ledger, budget=("--epsilon", "100")) as t:
        t.tokens = s.tokens
        with t.http("root") as h:
            rows = h.get("/v1/admin/ledger").json()
        by_id = {r["charge_id"]: r for r in rows}
        assert sorted(by_id) == list(range(1, len(rows) + 1))
        for n, got in received.items():
            mine = {r["charge_id"] for r in rows if r["analyst"] == n}
            for a in got:
                row = by_id[a["charge_id"]]
                assert row["analyst"] == n and row["request"] == NORTH
                assert row["answer"] in (None, {NORTH: a["value"]})
            # charged, never received: at most the one request in flight at the kill
            assert {a["charge_id"] for a in got} <= mine
            assert len(mine) - len(got) <= 1
        # the restarted server's budget is exactly what the ledger says
        with t.client("analyst0") as c:
            assert c.remaining(NORTH) == pytest.approx(100 - 0.001 * len(rows), abs=1e-9)
            after = c.count(NORTH, epsilon=0.001)
        assert after.charge_id == len(rows) + 1


def test_requests_are_served_concurrently(server: Server) -> None:
    """A request that takes a while (a marginal of 8,000 cells) does not hold up another
    analyst's count: the count is answered while the marginal is still being worked on."""
    done: list[str] = []

    def slow() -> None:
        with server.client("alice") as c:
            t = c.marginal(["age", "region", "sex", "score"], epsilon=0.01)
        assert len(t) == 8000
        done.append("marginal")

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.2)
    with server.client("bob") as c:
        for _ in range(3):
            c.count("age < 30", epsilon=0.001)
    done.append("counts")
    th.join(timeout=120)
    assert done == ["counts", "marginal"]


def test_adding_analysts_while_serving(server: Server) -> None:
    """Tokens added by another process while the server runs work at once."""
    token = add_analyst(server.ledger, "carol")
    server.tokens["carol"] = token
    with server.client("carol") as c:
        assert c.count(epsilon=0.001).charge_id > 0


def test_a_request_without_an_answer_may_be_charged_and_the_client_says_so(
    server: Server,
) -> None:
    """A client that gives up waiting (its timeout) is told that the request may have been
    charged; it was, and her history shows it."""
    with server.client("bob") as c:
        before = {h.charge_id for h in c.history()}
    with server.client("bob", timeout=0.01) as c, pytest.raises(ServiceUnavailable) as err:
        c.marginal(["age", "region", "sex", "score"], epsilon=0.01)
    assert "may have been charged" in str(err.value) and "history()" in str(err.value)
    deadline = time.monotonic() + 120
    with server.client("bob") as c:
        while time.monotonic() < deadline:
            new = [h for h in c.history() if h.charge_id not in before]
            if new:
                break
            time.sleep(0.2)
    assert [h.request for h in new] == ["marginal(age, region, sex, score)"]
