"""A rate limit that replicas share (a PostgreSQL ledger): one bucket per analyst in the
database, taken atomically, refilled by the database's clock.

Two servers on one ledger, an analyst allowed a burst of 6 at a slow refill: whichever
replicas her requests reach, 6 are served and the next ones are 429 with Retry-After;
another analyst's bucket is her own. In process, 8 threads over two limiters (two
"replicas") take exactly the burst; refill follows the rate. (Buckets shared beside a
ledger file: test_file_rate_limit.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from dpcurator.curator.ledger import Ledger
from dpcurator.service.limits import Limits, RateLimiter, SharedRateLimiter, rate_limiter

from .conftest import running, start_server, write_people

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


def _open(target: str) -> Ledger:
    return Ledger(target, {"test": "shared rate limit"}, anchor=False)


def test_two_limiters_on_one_ledger_take_exactly_the_burst(tmp_path, postgres_stores):
    place = postgres_stores.new()
    ledger = _open(place.target)
    try:
        limits = Limits(requests_per_second=0.001, burst=6)
        a, b = rate_limiter(limits, ledger), rate_limiter(limits, ledger)
        assert isinstance(a, SharedRateLimiter) and isinstance(b, SharedRateLimiter)
        allowed: list[bool] = []
        lock = threading.Lock()

        def hammer(limiter: RateLimiter) -> None:
            for _ in range(5):
                ok = limiter.allow("ann")
                with lock:
                    allowed.append(ok)

        threads = [threading.Thread(target=hammer, args=(x,)) for x in (a, b) * 4]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(allowed) == 40 and sum(allowed) == 6
        wait = a.wait("ann")
        assert wait > 100  # about (1 - tokens) / 0.001 seconds
        assert b.allow("bob")  # another analyst's bucket is her own
        # refill by the rate: a fast bucket refills within a fraction of a second
        fast = rate_limiter(Limits(requests_per_second=50.0, burst=1), ledger)
        assert fast.allow("cat") and not fast.allow("cat")
        time.sleep(0.1)
        assert fast.allow("cat")
        a.close()
        b.close()
        fast.close()
    finally:
        ledger.close()


def test_two_replicas_share_an_analysts_bucket(tmp_path, postgres_stores):
    """Two `dpcurator serve` on one PostgreSQL ledger, burst 4 and a slow refill: ann's
    requests, spread over both, are served 4 times in all; then each replica answers 429
    with Retry-After; bob's bucket is untouched; a server said so when it started."""
    place = postgres_stores.new()
    data = write_people(tmp_path)
    config = "[server]\nrequests_per_second = 0.001\nburst = 4\n"
    with running(tmp_path / "r0", data=data, ledger=place.target, config=config) as r0:
        r1 = start_server(tmp_path / "r1", data=data, ledger=place.target, config=config)
        try:
            assert "is shared by every server on this ledger" in r0.log()
            r0.add("ann")
            r0.add("bob")
            r1.tokens.update(r0.tokens)
            codes = []
            with r0.http("ann") as h0, r1.http("ann") as h1:
                for h in (h0, h1, h0, h1, h0, h1):
                    r = h.get("/v1/schema")
                    codes.append(r.status_code)
                    if r.status_code == 429:
                        assert int(r.headers["Retry-After"]) >= 1
                        assert r.json()["error"] == "rate_limited"
            assert codes == [200, 200, 200, 200, 429, 429]
            with r1.http("bob") as h:
                assert h.get("/v1/schema").status_code == 200
        finally:
            r1.stop()


def test_replicas_starting_together_create_the_buckets_once(postgres_stores):
    """Eight limiters on a fresh ledger take their first token at once: the schema and
    its table are created under a lock, so none finds the schema without its table
    (it did: 42P01, answered 503, when two replicas started together)."""
    place = postgres_stores.new()
    ledger = _open(place.target)
    try:
        limiters = [rate_limiter(Limits(), ledger) for _ in range(8)]
        start = threading.Barrier(len(limiters))
        errors: list[BaseException] = []

        def first(limiter: RateLimiter, who: str) -> None:
            start.wait()
            try:
                assert limiter.allow(who)
            except BaseException as err:
                errors.append(err)

        threads = [
            threading.Thread(target=first, args=(x, f"a{i}")) for i, x in enumerate(limiters)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for x in limiters:
            x.close()
    finally:
        ledger.close()
