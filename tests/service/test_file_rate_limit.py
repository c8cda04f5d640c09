"""A rate limit every process on one ledger file shares: one bucket per analyst in the
file ``<ledger>.rate``, taken by one atomic statement, refilled by the host's clock.

The buckets follow the token-bucket arithmetic exactly (hypothesis, a clock of our own);
processes hammering one file take exactly the burst in all; a file that is not theirs
is refused in one line; which scope a ledger gets."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcurator.curator.ledger import Ledger
from dpcurator.curator.stores.sqlite_rate import FileBuckets, rate_file
from dpcurator.errors import InvalidParameter, LedgerError
from dpcurator.service.limits import Limits, RateLimiter, SharedRateLimiter, rate_limiter


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def model(steps: list[tuple[float, str]], rate: float, burst: int) -> list[float]:
    """The token bucket by hand: what each take returns (0: allowed)."""
    buckets: dict[str, tuple[float, float]] = {}
    now, out = 1_000.0, []
    for dt, who in steps:
        now += dt
        if who not in buckets:
            buckets[who] = (burst - 1.0, now)
            out.append(0.0)
            continue
        tokens, at = buckets[who]
        level = min(float(burst), tokens + max(0.0, now - at) * rate)
        allowed = level >= 1
        at = now if now < at - 1.0 else max(at, now)  # a clock set back: a new start
        buckets[who] = (level - (1 if allowed else 0), at)
        out.append(0.0 if allowed else max(0.0, (1.0 - level) / rate))
    return out


@given(
    steps=st.lists(
        st.tuples(
            st.one_of(st.just(0.0), st.floats(0.0, 3.0), st.floats(-5.0, 0.0)),
            st.sampled_from(["ann", "bob", "ann's; DROP TABLE buckets --"]),
        ),
        max_size=40,
    ),
    rate=st.sampled_from([0.5, 2.0, 20.0]),
    burst=st.integers(1, 4),
)
def test_takes_follow_the_token_bucket_exactly(tmp_path_factory, steps, rate, burst):
    """Every answer equals the hand-made bucket's, to the last bit (the same double
    arithmetic); a clock set back (negative steps) refills nothing, and past a second
    back the bucket starts afresh from the new reading."""
    path = tmp_path_factory.mktemp("rate") / "l.db.rate"
    clock = Clock()
    buckets = FileBuckets(str(path), clock=clock)
    try:
        got = []
        for dt, who in steps:
            clock.now += dt
            got.append(buckets.take(who, rate, burst))
        assert got == model(steps, rate, burst)
    finally:
        buckets.close()


HAMMER = r"""
import json, sys
from dpcurator.curator.stores.sqlite_rate import FileBuckets
b = FileBuckets(sys.argv[1])
print(json.dumps([b.take("ann", 0.0001, 20) == 0.0 for _ in range(60)]))
"""


def test_processes_on_one_file_take_exactly_the_burst(tmp_path):
    """Four processes, 60 takes each at once, burst 20 and a refill of one token in
    three hours: 20 are allowed in all, never more."""
    path = str(tmp_path / "l.db.rate")
    FileBuckets(path).close()  # made once; the processes open it together
    procs = [
        subprocess.Popen([sys.executable, "-c", HAMMER, path], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    allowed = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(map(sum, allowed)) == 20


def test_a_file_that_is_not_buckets_is_refused_in_one_line(tmp_path):
    junk = tmp_path / "junk.rate"
    junk.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(LedgerError, match=r"rate limit file .*junk.rate: cannot be used") as e:
        FileBuckets(str(junk))
    assert "\n" not in str(e.value)
    other = tmp_path / "other.rate"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE buckets (who TEXT, n INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="its table buckets has columns"):
        FileBuckets(str(other))
    with pytest.raises(LedgerError, match="cannot be used"):
        FileBuckets(str(tmp_path / "no" / "such" / "dir" / "x.rate"))


def test_which_scope_a_ledger_gets(tmp_path):
    """A file: its own bucket unless asked to share (then beside it, in LEDGER.rate); a
    ledger in memory cannot share; an unknown scope is refused."""
    ledger = Ledger(str(tmp_path / "l.db"), {"test": "rate"}, anchor=False)
    try:
        assert type(rate_limiter(Limits(), ledger)) is RateLimiter
        assert type(rate_limiter(Limits(rate_scope="server"), ledger)) is RateLimiter
        shared = rate_limiter(
            Limits(rate_scope="shared", requests_per_second=0.001, burst=2), ledger
        )
        other = rate_limiter(
            Limits(rate_scope="shared", requests_per_second=0.001, burst=2), ledger
        )
        assert isinstance(shared, SharedRateLimiter)
        assert (tmp_path / rate_file("l.db")).exists()
        assert [shared.allow("ann"), other.allow("ann"), shared.allow("ann")] == [True, True, False]
        shared.close()
        other.close()
        with pytest.raises(InvalidParameter, match="rate_scope"):
            rate_limiter(Limits(rate_scope="everywhere"), ledger)
    finally:
        ledger.close()
    memory = Ledger(":memory:", {"test": "rate"}, anchor=False)
    try:
        with pytest.raises(InvalidParameter, match="shared rate limit needs a ledger"):
            rate_limiter(Limits(rate_scope="shared"), memory)
    finally:
        memory.close()


def test_a_rate_file_naming_a_ledger_is_refused_and_left_alone(tmp_path):
    """A symbolic link or a second name for the ledger, or the ledger itself, as the
    rate file: refused in one line before anything is written to it (SQLite would have
    turned the ledger to write-ahead logging and added a table)."""
    ledger = tmp_path / "l.db"
    Ledger(str(ledger), {"test": "rate"}, anchor=False).close()
    before = ledger.read_bytes()
    (tmp_path / "sym.rate").symlink_to(ledger)
    os.link(ledger, tmp_path / "hard.rate")
    for name, said in (("sym.rate", "not a plain file"), ("hard.rate", "not a plain file")):
        with pytest.raises(LedgerError, match=said) as e:
            FileBuckets(str(tmp_path / name))
        assert "\n" not in str(e.value)
    os.unlink(tmp_path / "hard.rate")
    with pytest.raises(LedgerError, match=r"not a rate limit file .*charges"):
        FileBuckets(str(ledger))
    assert ledger.read_bytes() == before
    assert not (tmp_path / "l.db-wal").exists()
    Ledger(str(ledger), {"test": "rate"}, anchor=False).close()  # still a sound ledger
