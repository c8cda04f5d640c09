"""Group commit: requests written together are re-validated against each other, each
answer follows the commit that holds its charge, and a failed commit fails the whole
group with nothing written.

Real curators, real SQLite ledgers and real threads; the only harness is a ``sync``
that holds the first group's transaction open until the others have queued, so that
the grouping is deterministic.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
import time
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.curator.admission import Request, coverage_json, revalidate
from dpcurator.curator.group_commit import Entry, GroupCommit
from dpcurator.errors import BudgetExceeded, LedgerError, QueryError
from dpcurator.privacy import PureDP


@pytest.fixture
def files(tmp_path):
    g = np.random.default_rng(1)
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": g.integers(0, 8, 200), "b": g.integers(0, 4, 200)}).to_csv(data, index=False)
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "a", "type": "integer", "min": 0, "max": 7},
                    {"name": "b", "type": "integer", "min": 0, "max": 3},
                ]
            }
        )
    )
    return data, schema


@pytest.fixture
def curator(files, tmp_path):
    data, schema = files
    c = Curator.open(data=data, schema=schema, budget=PureDP(1), ledger=tmp_path / "l.db")
    yield c
    c.close()


def entry(c: Curator, text: str, cost: Fraction) -> Entry:
    """A request decided on a fork of the curator's filter, ready to be written."""
    from dpcurator.curator.requests import canonical_query

    q = canonical_query(text, c._schema("data"))
    r = Request(q, cost, "count", text, "discrete_laplace")
    with c._ledger.lock:
        fork = c._filter.fork()
    d = fork.decide("data", q, cost)
    assert d is not None and d.admitted
    return Entry("data", [r], [d], None, fork.version, fork, None, [c._ledger.coverage(coverage_json(q))])


def held_commits(c: Curator) -> tuple[GroupCommit, threading.Event, threading.Event]:
    """The curator's writer, whose first transaction waits (inside, holding the ledger's
    lock) until ``go`` is set; ``inside`` says it got there."""
    inside, go = threading.Event(), threading.Event()
    first = [True]

    def sync() -> None:
        if first[0]:
            first[0] = False
            inside.set()
            assert go.wait(10)
        c._sync()

    return GroupCommit(c._ledger, c._filter, sync, c._quota, revalidate), inside, go


def run(commits: GroupCommit, entries: list[Entry]) -> list[object]:
    out: list[object] = [None] * len(entries)

    def one(i: int) -> None:
        try:
            out[i] = commits.submit(entries[i])
        except BaseException as err:  # the assertion is on what it raised
            out[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(entries))]
    threads[0].start()
    return out, threads  # type: ignore[return-value]


def test_requests_queued_behind_a_write_go_in_one_transaction_checked_against_each_other(curator):
    c = curator
    commits, inside, go = held_commits(c)
    third = Fraction(3, 10)
    # five requests on one point, each decided alone on its fork (each fits alone)
    entries = [entry(c, "a = 3 AND b = 1", third) for _ in range(5)]
    out, threads = run(commits, entries)
    assert inside.wait(10)  # the first one's transaction is open
    for t in threads[1:]:
        t.start()
    for _ in range(500):  # the four others queue behind it
        with commits._lock:
            if len(commits._queue) == 4:
                break
        time.sleep(0.01)
    assert len(commits._queue) == 4
    before = c._ledger.head[0]
    go.set()
    for t in threads:
        t.join(10)
    # the first alone, then the four in one group: two of them fit with the first
    # (0.3 x 3 <= 1), the last two were overtaken by the group's own charges
    got = [o is not None for o in out]
    assert got == [True, True, True, False, False], out
    assert c._ledger.head[0] == before + 3
    ids = [o[0][0] for o in out[:3]]  # type: ignore[index]
    assert ids == list(range(before + 1, before + 4))
    assert c._filter.worst("data").value == Fraction(9, 10)


def test_a_failed_group_commit_fails_every_request_and_writes_nothing(curator, tmp_path):
    c = curator
    commits, inside, go = held_commits(c)
    entries = [entry(c, f"a = {i}", Fraction(1, 10)) for i in range(4)]
    out, threads = run(commits, entries)
    assert inside.wait(10)
    for t in threads[1:]:
        t.start()
    for _ in range(500):
        with commits._lock:
            if len(commits._queue) == 3:
                break
        time.sleep(0.01)
    before = c._ledger.head[0]
    # the file is made read-only under the writer: its commit fails
    (tmp_path / "l.db").chmod(0o444)
    import os

    if os.geteuid() == 0:  # root writes read-only files: replace the file instead
        (tmp_path / "l.db").chmod(0o644)
        (tmp_path / "l.db").rename(tmp_path / "moved.db")
    go.set()
    for t in threads:
        t.join(10)
    assert all(isinstance(o, LedgerError) for o in out[:1]), out
    for o in out[1:]:  # the next group: the ledger is gone, refused the same way
        assert isinstance(o, LedgerError), out
    moved = tmp_path / "moved.db"
    if moved.exists():
        moved.rename(tmp_path / "l.db")
    assert c._ledger.head[0] == before and c._filter.version == before


def test_sixteen_threads_of_counts_never_overspend(curator):
    """Counts from 16 threads on an 8 x 4 domain, budget 1: however they were grouped,
    every point's loss (by brute force over the charges) is within the budget."""
    c = curator
    rng = random.Random(3)
    texts = [
        f"a BETWEEN {a0} AND {a0 + rng.randrange(3)} AND b <= {rng.randrange(4)}"
        for a0 in (rng.randrange(6) for _ in range(200))
    ]
    answered = []

    def worker(k: int) -> None:
        for t in texts[k::16]:
            with contextlib.suppress(BudgetExceeded):
                c.count(t, epsilon=0.2)
                answered.append(t)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    charges = c._ledger.charges_after(0)
    assert len(charges) == len(answered) > 5
    for a, b in itertools.product(range(8), range(4)):
        spent = sum(
            (r.cost for r in charges if c._charge_of(r).query.covers({"a": a, "b": b})),
            Fraction(0),
        )
        assert spent <= 1


THREADED_WORKER = """
import sys, threading
from dpcurator import Curator
from dpcurator.errors import BudgetExceeded
from dpcurator.privacy import PureDP
data, schema, ledger = sys.argv[1:4]
lock = threading.Lock()
with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=ledger) as c:
    print("ready", flush=True)

    def one(k):
        for i in range(100_000):
            try:
                a = c.count(f"a <= {(k + i) % 8}", epsilon=1e-5)
                with lock:
                    print("answered", a.charge_id, flush=True)
            except BudgetExceeded:
                pass

    threads = [threading.Thread(target=one, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""


def points_within_budget(c: Curator) -> int:
    """Every point's loss by brute force over the ledger's charges is within the budget
    of 1; returns how many charges there are."""
    charges = c._ledger.charges_after(0)
    for a, b in itertools.product(range(8), range(4)):
        spent = sum(
            (r.cost for r in charges if c._charge_of(r).query.covers({"a": a, "b": b})),
            Fraction(0),
        )
        assert spent <= 1
    return len(charges)


def test_a_request_decides_while_a_commit_holds_the_lock_and_waits_only_to_write(curator):
    """While the ledger's lock is held (a commit being written), a request forks the
    filter as it is and decides; it waits only for its own write."""
    c = curator
    forked = threading.Event()
    real_fork = c._filter.fork

    def fork() -> object:
        forked.set()
        return real_fork()

    c._filter.fork = fork  # type: ignore[method-assign]
    got: list[object] = []
    with c._ledger.lock:  # as a group's transaction holds it
        t = threading.Thread(target=lambda: got.append(c.count("a < 4", epsilon=0.5)))
        t.start()
        assert forked.wait(10)  # decided without the lock
        time.sleep(0.2)
        assert not got  # but not answered before it could write
    t.join(10)
    assert len(got) == 1 and points_within_budget(c) == 1


def test_forks_older_than_the_ledger_never_overspend(files, tmp_path):
    """Curator A decides on forks taken while its lock is held, so they miss what
    curator B (another process's view of the same file) committed meanwhile; A's write
    re-validates against those charges, and every point stays within the budget."""
    data, schema = files
    ledger = tmp_path / "shared.db"
    a = Curator.open(data=data, schema=schema, budget=PureDP(1), ledger=ledger)
    b = Curator.open(data=data, schema=schema, budget=PureDP(1), ledger=ledger)
    try:
        a.count("a < 8", epsilon=0.1)  # both know the table
        hold, go = threading.Event(), threading.Event()

        def holder() -> None:
            with a._ledger.lock:
                hold.set()
                go.wait(30)

        h = threading.Thread(target=holder)
        h.start()
        assert hold.wait(10)
        answers: list[object] = []
        refused: list[object] = []

        def ask(text: str) -> None:
            try:
                answers.append(a.count(text, epsilon=0.5))
            except BudgetExceeded as err:
                refused.append(err)

        asking = [threading.Thread(target=ask, args=(f"a < {k}",)) for k in (3, 5, 7)]
        for t in asking:
            t.start()
        time.sleep(0.3)  # A's requests forked without B's charges
        b.count("a < 8", epsilon=0.5)  # B fills the whole domain to 0.6 ...
        b.count("a < 8", epsilon=0.3)  # ... then 0.9: none of A's 0.5 fits any more
        go.set()
        h.join(10)
        for t in asking:
            t.join(30)
        assert not answers and len(refused) == 3
        assert points_within_budget(a) == 3
    finally:
        a.close()
        b.close()



def test_kill_9_under_grouped_commits_every_returned_answer_is_charged(files, place):
    """Eight threads of one process charging in groups, killed with SIGKILL: every
    answer that left the process has its charge, on both stores."""
    import signal
    import subprocess
    import sys

    data, schema = files
    p = subprocess.Popen(
        [sys.executable, "-c", THREADED_WORKER, str(data), str(schema), place.target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    returned = []
    deadline = time.monotonic() + 60
    while len(returned) < 200 and time.monotonic() < deadline:
        line = p.stdout.readline().split()
        if line and line[0] == "answered":
            returned.append(int(line[1]))
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert len(returned) == 200
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=place.target) as c:
        charged = {h.charge_id for h in c.history()}
        assert set(returned) <= charged  # every answer that left was charged
        assert len(charged) == c._ledger.head[0]


def test_a_request_the_ledger_cannot_record_fails_alone_before_any_group(curator):
    """Text holding half of a surrogate pair (a JSON body can send ``"\\ud800"`` alone)
    cannot be hashed as UTF-8. It is refused before its request joins a group; before,
    its charge failed inside the group's transaction and took every request committed
    with it (500s for other analysts). The ledger's lock is held so that the requests
    queue into one group behind a first one."""
    from dpcurator.curator.requests import canonical_query

    c = curator
    q = canonical_query("a = 3", c._schema("data"))
    bad = Request(q, Fraction(1, 1000), "count", "a = 3 \ud800", "discrete_laplace")
    out: dict[str, object] = {}

    def send(name: str, work) -> None:
        try:
            out[name] = work()
        except BaseException as err:  # the assertion is on what it raised
            out[name] = err

    def thread(name: str, work) -> threading.Thread:
        t = threading.Thread(target=send, args=(name, work))
        t.start()
        return t

    def count() -> object:
        return c.count("a = 3", epsilon=0.001)

    def wait(condition) -> None:
        for _ in range(1000):
            if condition():
                return
            time.sleep(0.01)
        raise AssertionError("timed out")

    with c._ledger.lock:
        first = thread("first", count)
        wait(lambda: c._commits._writing)  # its writer waits for the lock
        second = thread("second", count)
        wait(lambda: len(c._commits._queue) == 1)  # queued behind it
        third = thread("bad", lambda: c._charge("data", [bad], None, None))
        wait(lambda: "bad" in out or len(c._commits._queue) == 2)
    for t in (first, second, third):
        t.join(30)
    assert isinstance(out["bad"], QueryError), out["bad"]
    assert "U+D800, half of a surrogate pair" in str(out["bad"])
    assert not isinstance(out["first"], BaseException), out["first"]
    assert not isinstance(out["second"], BaseException), out["second"]
    assert len(c.ledger.charges_after(0)) == 2  # the good ones, and nothing else
