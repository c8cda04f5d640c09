"""Crashes, restarts, threads and processes: the ledger never loses a charge or overspends
(on an SQLite file and on a PostgreSQL schema)."""

import signal
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction

import pytest

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded
from dpcurator.privacy import PureDP

WORKER = textwrap.dedent(
    """
    import sys
    from dpcurator import Curator
    from dpcurator.errors import BudgetExceeded
    from dpcurator.privacy import PureDP
    data, schema, ledger, n, cost = sys.argv[1:6]
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=ledger) as c:
        print("ready", flush=True)
        for i in range(int(n)):
            try:
                a = c.count("age < 50", epsilon=float(cost))
                print("answered", a.charge_id, a.value, flush=True)
            except BudgetExceeded:
                print("refused", flush=True)
    """
)


def spawn(people, ledger, n, cost):
    data, schema, _ = people
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(data), str(schema), str(ledger), str(n), str(cost)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_mid_stream_every_returned_answer_is_charged(people, place):
    ledger = place.target
    p = spawn(people, ledger, 100_000, 1e-5)
    returned = []
    assert p.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while len(returned) < 40 and time.monotonic() < deadline:
        line = p.stdout.readline().split()
        if line and line[0] == "answered":
            returned.append(int(line[1]))
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert len(returned) == 40
    data, schema, _ = people
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=ledger) as c:
        charged = {h.charge_id for h in c.history()}
        assert set(returned) <= charged  # every answer that left was charged
        spent = sum(Fraction(h.cost).limit_denominator(10**6) for h in c.history())
        assert c.remaining() == pytest.approx(1.0 - float(spent), abs=1e-9)


def test_processes_hammering_one_ledger_never_overspend(people, place):
    ledger = place.target
    procs = [spawn(people, ledger, 8, 0.1) for _ in range(3)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    answered = sum(o.count("answered") for o in outs)
    assert answered == 10  # 24 attempts of 0.1 against a budget of 1.0
    data, schema, _ = people
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=ledger) as c:
        assert len(c.history()) == 10 and c.remaining() == pytest.approx(0.0, abs=1e-12)


def test_threads_never_overspend(people):
    data, schema, _ = people
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0)) as c:
        results = []

        def worker():
            for _ in range(5):
                try:
                    c.count("sex = 'F'", epsilon=0.1)
                    results.append("ok")
                except BudgetExceeded:
                    results.append("refused")

        threads = [threading.Thread(target=worker) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count("ok") == 10 and results.count("refused") == 20
        assert c.remaining() == 0
