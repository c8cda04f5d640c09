"""Several servers, one budget: four ``dpcurator serve`` replicas on one PostgreSQL ledger.

Sixteen client processes (four analysts, four processes each, every one starting at
another replica) send overlapping counts on one budget and one quota per analyst. Mid-run
a replica is killed with SIGKILL and later restarted on its port, and every replica's
database connection is terminated (``pg_terminate_backend``); clients move to the next
replica when theirs fails. Afterwards an audit that shares no code with dpcurator reads
the ledger's tables with psycopg and checks, from the rows alone: the hash chains and
answer seals (recomputed from the documented formulas), every point of the domain's
loss (brute force over the 8,000 points of the schema: the sum of the costs of the
charges covering it) within the budget, every analyst's within her quota, and every
answer a client received charged once, with exactly that answer recorded. And a replica
cut off from its database answers 503, and nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from fractions import Fraction
from math import lcm
from pathlib import Path

import numpy as np
import pytest
from ledger_places import Place, with_schema
from tcp_proxy import Proxy

from .conftest import (
    FAST,
    SCHEMA,
    Server,
    add_analyst,
    assert_error,
    running,
    start_server,
    write_people,
)

CLIENT = Path(__file__).with_name("replica_client.py")
BUDGET = Fraction(1)
QUOTA = Fraction(3, 10)
ANALYSTS = [f"analyst{i}" for i in range(4)]

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = pytest.mark.usefixtures("postgres_url")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def replica(directory: Path, data, ledger: str, port: int) -> Server:
    return start_server(
        directory, data=data, ledger=ledger, budget=("--epsilon", "1"), config=FAST, port=port
    )


def test_four_replicas_sixteen_clients_kills_and_an_independent_audit(tmp_path, postgres_stores):
    place = postgres_stores.new()
    data = write_people(tmp_path)
    ports = [free_port() for _ in range(4)]
    servers: list[Server] = [replica(tmp_path / "r0", data, place.target, ports[0])]
    started: dict[int, Server] = {}

    def start(i: int) -> None:
        started[i] = replica(tmp_path / f"r{i}", data, place.target, ports[i])

    threads = [threading.Thread(target=start, args=(i,)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    servers += [started[i] for i in (1, 2, 3)]
    clients: list[tuple[str, subprocess.Popen]] = []
    try:
        tokens = {a: add_analyst(place.target, a, "--quota", str(float(QUOTA))) for a in ANALYSTS}
        servers[1].tokens = tokens
        urls = [s.url for s in servers]
        for i in range(16):
            name = ANALYSTS[i % 4]
            order = urls[i % 4 :] + urls[: i % 4]
            p = subprocess.Popen(
                [sys.executable, str(CLIENT), tokens[name], "60", "150", *order],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            clients.append((name, p))
        for _, p in clients:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for _, p in clients:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()

        def reach(n: int) -> None:
            deadline = time.monotonic() + 120
            while servers[0].charges() < n and time.monotonic() < deadline:
                time.sleep(0.02)

        reach(25)
        os.kill(servers[1].proc.pid, signal.SIGKILL)  # a replica dies mid-request
        servers[1].proc.wait(timeout=20)
        reach(45)
        killed = place.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'dpcurator'"
        )
        assert len(killed) >= 6  # the three live replicas' two connections each
        servers[1] = replica(tmp_path / "r1-again", data, place.target, ports[1])
        servers[1].tokens = tokens
        outs = {}
        for k, (name, p) in enumerate(clients):
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
            outs[k] = (name, [json.loads(line) for line in out.splitlines()])
        # The restarted replica sees the budget spent, and refuses more.
        with servers[1].client(ANALYSTS[0]) as c:
            assert c.remaining("region = 'north' AND age < 50 AND sex = 'F' AND score >= 5") == 0
        with servers[1].http(ANALYSTS[3]) as h:
            r = h.post("/v1/count", json={"query": "age < 50", "epsilon": 0.01})
            assert r.status_code == 409
    finally:
        for _, p in clients:
            if p.poll() is None:
                p.kill()
        for s in servers:
            s.stop()
    failed = sum(1 for _, lines in outs.values() for x in lines if "failed" in x)
    assert failed >= 1  # the kill was felt by someone
    audit(place, outs)


def test_an_unreachable_database_is_503_and_nothing_is_answered(tmp_path, postgres_stores):
    """The network between a replica and the database is cut: every request that needs
    the ledger is a 503 ``ledger_unavailable`` (authentication too: a revocation could
    not be seen), nothing is answered or charged; mended, the replica serves again."""
    place = postgres_stores.new()
    info = psycopg.conninfo.conninfo_to_dict(place.server)
    proxy = Proxy(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
    far = with_schema(
        f"postgresql://{info['user']}@127.0.0.1:{proxy.port}/{info['dbname']}", place.schema
    )
    try:
        with running(tmp_path, ledger=far, budget=("--epsilon", "1"), config=FAST) as s:
            s.add("alice")
            with s.http("alice") as h:
                assert h.post("/v1/count", json={"query": "age < 50", "epsilon": 0.1}).is_success
                proxy.cut()
                for _ in range(3):
                    r = h.post("/v1/count", json={"query": "age < 30", "epsilon": 0.1})
                    assert_error(r, 503, "ledger_unavailable")
                assert h.get("/v1/health").status_code == 200
                proxy.mend()
                r = h.post("/v1/count", json={"query": "age < 20", "epsilon": 0.1})
                assert r.status_code == 200 and r.json()["charge_id"] == 2
            assert "ledger error" in s.log()
    finally:
        proxy.close()
    rows = place.query("SELECT id, request FROM charges ORDER BY id")
    assert rows == [(1, "age < 50"), (2, "age < 20")]


# --- the audit: dpcurator's tables read with psycopg, nothing of dpcurator's code --------


def _sha(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def _json(fields: list) -> bytes:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def audit(place: Place, outs: dict[int, tuple[str, list[dict]]]) -> None:
    with psycopg.connect(place.server, autocommit=True) as con:
        con.execute(f'SET search_path TO "{place.schema}"')
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        analysts = con.execute(
            "SELECT seq, created, name, quota, admin, token_key, token_hash, hash "
            "FROM analysts ORDER BY seq"
        ).fetchall()
        charges = con.execute(
            "SELECT id, created, analyst, table_name, kind, request, coverage, cost, level, "
            "noise, hash, answer, answer_hash FROM charges ORDER BY id"
        ).fetchall()

    # 1. the chains, as docs/curator.md states them
    genesis = _sha(
        b"dpcurator ledger\x00", meta["format"].encode(), b"\x00", meta["identity"].encode()
    )
    assert meta["genesis"] == genesis.hex()
    prev = genesis
    for i, row in enumerate(charges, start=1):
        assert row[0] == i
        h = _sha(prev, _json(list(row[:10])))
        assert row[10] == h.hex(), f"charge {i}"
        assert row[11] is not None, f"charge {i} has no answer"  # recorded with its charge
        assert row[12] == _sha(b"answer\x00", h, row[11].encode()).hex()
        prev = h
    assert meta["charges_head"] == f"{len(charges)} {prev.hex()}"
    prev = _sha(b"dpcurator analysts\x00", genesis)
    quotas: dict[str, Fraction | None] = {}
    for row in analysts:
        prev = _sha(prev, _json(list(row[:7])))
        assert row[7] == prev.hex()
        quotas[row[2]] = None if row[3] is None else Fraction(row[3])
    assert meta["analysts_head"] == f"{len(analysts)} {prev.hex()}"
    assert {a: quotas[a] for a in ANALYSTS} == dict.fromkeys(ANALYSTS, QUOTA)

    # 2. every point of the domain, by brute force: within the budget and the quotas
    identity = json.loads(meta["identity"])
    assert Fraction(identity["amount"]) == BUDGET
    attrs = SCHEMA["attributes"]
    shape = tuple(
        a["max"] - a["min"] + 1 if a["type"] == "integer" else len(a["values"]) for a in attrs
    )
    names = [a["name"] for a in attrs]
    costs = [Fraction(r[7]) for r in charges]
    den = lcm(*(c.denominator for c in costs), BUDGET.denominator, QUOTA.denominator)

    def mask(coverage: dict) -> np.ndarray:
        if list(coverage) == ["|"]:
            return np.logical_or.reduce([mask(b) for b in coverage["|"]])
        m = np.ones(shape, dtype=bool)
        for axis, name in enumerate(names):
            if name in coverage:
                keep = np.zeros(shape[axis], dtype=bool)
                for start, end in coverage[name]:
                    keep[start:end] = True
                m &= keep.reshape([-1 if k == axis else 1 for k in range(len(shape))])
        return m

    loss = {who: np.zeros(shape, dtype=np.int64) for who in [None, *ANALYSTS]}
    for row, cost in zip(charges, costs, strict=True):
        units = int(cost * den)
        m = mask(json.loads(row[6]))
        loss[None] += m * units
        loss[row[2]] += m * units
    assert loss[None].max() <= BUDGET * den
    assert loss[None].max() == BUDGET * den  # the run spent the whole budget somewhere
    for a in ANALYSTS:
        assert loss[a].max() <= QUOTA * den, a

    # 3. every received answer is charged once, with that answer; nothing else is charged
    # but what was sent and never answered
    by_id = {r[0]: r for r in charges}
    seen: set[int] = set()
    for name, lines in outs.values():
        for x in lines:
            if "ok" not in x:
                continue
            cid = x["ok"]
            assert cid not in seen and cid in by_id
            seen.add(cid)
            row = by_id[cid]
            assert (row[2], row[5]) == (name, x["query"])
            assert json.loads(row[11]) == {x["query"]: x["value"]}
    for name in ANALYSTS:
        lines = [x for n, ls in outs.values() if n == name for x in ls]
        mine = [r for r in charges if r[2] == name]
        received = sum(1 for x in lines if "ok" in x)
        failed = sum(1 for x in lines if "failed" in x)
        assert received <= len(mine) <= received + failed, name
