"""Turns: at most ``turns`` request threads run the curator's Python at once, first
come first served; a thread gives its turn up while it counts or waits, and one that
has waited ``patience`` goes on without a turn, so nothing can deadlock on them.

Real threads throughout; a real curator over a real DuckDB table and SQLite ledger for
where the turns are given up.
"""

from __future__ import annotations

import json
import random
import threading
import time

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.backends.duckdb_backend import DuckDBBackend
from dpcurator.curator import turns
from dpcurator.curator.turns import TURNS, Turns, away, holding
from dpcurator.errors import InvalidParameter
from dpcurator.privacy import PureDP


class Census:
    """How many threads hold a turn at once (the most seen), checked under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def free(t: Turns) -> int:
    with t._lock:
        return t._free


def test_at_most_n_threads_hold_a_turn_and_all_come_back():
    t = Turns(2, patience=30.0)  # no one runs out of patience here
    census = Census()
    order_ok = []

    def work() -> None:
        for _ in range(20):
            with t.turn():
                assert holding()
                census.enter()
                time.sleep(0.0005)
                census.leave()
            order_ok.append(not holding())

    threads = [threading.Thread(target=work) for _ in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert census.most == 2
    assert all(order_ok) and len(order_ok) == 240
    assert free(t) == 2 and t.waiting == 0


def test_turns_are_handed_over_first_come_first_served():
    t = Turns(1, patience=30.0)
    got: list[int] = []
    release = threading.Event()

    def first() -> None:
        with t.turn():
            release.wait()

    def later(i: int) -> None:
        with t.turn():
            got.append(i)

    holder = threading.Thread(target=first)
    holder.start()
    while free(t) != 0:
        time.sleep(0.001)
    waiters = []
    for i in range(6):  # queue up one at a time, in a known order
        th = threading.Thread(target=later, args=(i,))
        th.start()
        waiters.append(th)
        while t.waiting != i + 1:
            time.sleep(0.001)
    release.set()
    for th in [holder, *waiters]:
        th.join()
    assert got == list(range(6))
    assert free(t) == 1


def test_a_thread_out_of_patience_goes_on_without_a_turn_and_none_is_lost():
    t = Turns(1, patience=0.02)
    release = threading.Event()
    seen: list[tuple[bool, float]] = []

    def hog() -> None:
        with t.turn():
            release.wait()

    def impatient() -> None:
        start = time.monotonic()
        with t.turn():
            seen.append((holding(), time.monotonic() - start))

    h = threading.Thread(target=hog)
    h.start()
    while free(t) != 0:
        time.sleep(0.001)
    w = threading.Thread(target=impatient)
    w.start()
    w.join(timeout=5)
    assert not w.is_alive()
    ((held, waited),) = seen
    assert not held and 0.02 <= waited < 1.0
    assert t.waiting == 0  # it left the line
    release.set()
    h.join()
    assert free(t) == 1  # the hog's turn came back; the impatient one took none
    with t.turn():
        assert holding()


def test_hand_over_racing_the_patience_never_loses_or_doubles_a_turn():
    """Tiny patience and short holds: handovers land at the moment waiters give up."""
    t = Turns(2, patience=0.0003)
    census = Census()
    rng = random.Random(7)
    holds = [[rng.random() * 0.0006 for _ in range(150)] for _ in range(10)]

    def work(mine: list[float]) -> None:
        for s in mine:
            with t.turn():
                if holding():
                    census.enter()
                    time.sleep(s)
                    census.leave()
                with away():
                    assert not holding()
                if holding():
                    census.enter()
                    census.leave()

    threads = [threading.Thread(target=work, args=(h,)) for h in holds]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert census.most <= 2
    assert free(t) == 2 and t.waiting == 0


def test_away_nesting_and_outside_a_turn():
    t = Turns(1, patience=30.0)
    with away():  # outside any turn: nothing to give up
        assert not holding()
    with t.turn():
        assert holding()
        with t.turn():  # a request inside another keeps the outer one's turn
            assert holding() and free(t) == 0
        assert holding()
        with away():
            assert not holding() and free(t) == 1
            with away():  # already away: still nothing held
                assert not holding() and free(t) == 1
            assert not holding() and free(t) == 1
        assert holding() and free(t) == 0
    assert not holding() and free(t) == 1


def test_a_failing_block_gives_its_turn_back():
    t = Turns(1, patience=30.0)
    with pytest.raises(RuntimeError), t.turn(), away():
        raise RuntimeError("boom")
    assert free(t) == 1 and not holding()


@pytest.mark.parametrize(
    "turns_, patience", [(0, 1.0), (True, 1.0), (1.5, 1.0), (1, 0.0), (2, -1.0), (1, float("nan"))]
)
def test_bad_settings_are_refused(turns_, patience):
    with pytest.raises(InvalidParameter):
        Turns(turns_, patience)


# --- in the curator -----------------------------------------------------------------------


class Watched(DuckDBBackend):
    """The real DuckDB backend, noting whether the counting thread held a turn."""

    held: list[bool]

    def counts(self, queries):  # type: ignore[no-untyped-def]
        self.held.append(holding())
        return super().counts(queries)


@pytest.fixture
def watched(tmp_path):
    g = np.random.default_rng(3)
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": g.integers(0, 10, 500), "b": g.integers(0, 5, 500)}).to_csv(
        data, index=False
    )
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "attributes": [
                    {"name": "a", "type": "integer", "min": 0, "max": 9},
                    {"name": "b", "type": "integer", "min": 0, "max": 4},
                ]
            }
        )
    )
    c = Curator.open(data=data, schema=schema, budget=PureDP(100), ledger=tmp_path / "l.db")
    be = c._backends["data"]
    be.__class__ = Watched  # the same loaded backend, observed
    be.held = []
    yield c, be
    c.close()


def test_requests_count_without_a_turn_and_leave_every_turn_free(watched):
    c, be = watched
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        s = c.analyst(f"x{i}")
        try:
            for j in range(5):
                s.count(f"a >= {(i + j) % 10} AND b < {1 + j % 4}", epsilon=0.1)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(be.held) == 40 and not any(be.held)  # counted away from the turns
    assert free(c._turns) == TURNS and c._turns.waiting == 0
    assert len(c.history()) == 40


def test_the_module_defaults():
    assert turns.TURNS >= 1 and 0 < turns.PATIENCE <= 0.1
