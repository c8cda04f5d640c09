"""Concurrent counting: threads counting at once get exactly the single-threaded answers,
and close() while counts are in flight waits for them and never crashes the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import duckdb
import numpy as np
import pandas as pd
import pytest

from dpcurator.backends import DuckDBBackend, load_table
from dpcurator.errors import InvalidParameter
from dpcurator.queries import Attribute, Query, Schema

SCHEMA = Schema(
    (
        Attribute("a", "integer", min=-3, max=6),
        Attribute("b", "categorical", values=("x", "y", "z", "w")),
        Attribute("c", "categorical", values=("lo", "mid", "hi"), ordered=True),
        Attribute("d", "integer", min=0, max=4_999),
        Attribute("e", "integer", min=1, max=2_000),
    )
)


def random_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    cols = {}
    for attr in SCHEMA.attributes:
        pos = rng.integers(0, attr.size, n)
        if attr.type == "integer":
            cols[attr.name] = pos + attr.min
        else:
            cols[attr.name] = np.asarray(attr.values, dtype=object)[pos]
    return pd.DataFrame(cols)


def random_queries(rng: np.random.Generator, n: int) -> list[Query]:
    """Queries on 0 to 3 attributes with 1 or 2 intervals each; ``d`` with ``e`` (10^7
    cells) goes down the fallback path, everything else the dense one."""
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        names = rng.choice(SCHEMA.names, size=k, replace=False)
        covs = {}
        for name in names:
            size = SCHEMA.attribute(str(name)).size
            cuts = sorted({int(x) for x in rng.integers(0, size + 1, 4)})
            if len(cuts) < 2:
                cuts = [0, size]
            pairs = [(cuts[0], cuts[1])] + ([(cuts[2], cuts[3])] if len(cuts) == 4 else [])
            covs[str(name)] = tuple(pairs)
        out.append(Query.from_coverages(SCHEMA, covs))
    return out


SUMS = [("a", -1, 4, None), ("d", 100, 4_000, 0), ("e", -5, 10**30, 1), ("a", 7, 9, 2)]


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(11)
    frame = random_frame(rng, 20_000)
    qs = random_queries(rng, 100)
    backend = load_table(frame, SCHEMA)
    # The single-threaded answers, one query at a time and as one batch.
    one_by_one = [int(backend.counts([q])[0]) for q in qs]
    assert backend.counts(qs).tolist() == one_by_one
    sums = [backend.clipped_sum(a, lo, hi, None if w is None else qs[w]) for a, lo, hi, w in SUMS]
    yield backend, qs, one_by_one, sums
    backend.close()


def test_threads_counting_different_queries_get_the_single_threaded_answers(table):
    backend, qs, want, sums = table
    n_threads = 6
    barrier = threading.Barrier(n_threads)

    def work(t: int) -> list[tuple[str, int, object]]:
        rng = np.random.default_rng(t)
        order = rng.permutation(len(qs))
        barrier.wait()  # all start at once
        got: list[tuple[str, int, object]] = []
        for step, i in enumerate(order):
            got.append(("count", int(i), int(backend.counts([qs[i]])[0])))
            if step % 10 == 0:  # a batch of several attribute sets (dense and fallback)
                idx = [int(j) for j in rng.choice(len(qs), 12, replace=False)]
                got.append(("batch", -1, (idx, backend.counts([qs[j] for j in idx]).tolist())))
            if step % 25 == 0:
                k = int(rng.integers(len(SUMS)))
                a, lo, hi, w = SUMS[k]
                got.append(("sum", k, backend.clipped_sum(a, lo, hi, None if w is None else qs[w])))
        return got

    with ThreadPoolExecutor(n_threads) as pool:
        results = list(pool.map(work, range(n_threads)))
    checked = 0
    for got in results:
        for kind, i, value in got:
            if kind == "count":
                assert value == want[i]
            elif kind == "sum":
                assert value == sums[i]
            else:
                idx, values = value  # type: ignore[misc]
                assert values == [want[j] for j in idx]
            checked += 1
    assert checked > n_threads * len(qs)


def test_counts_run_at_the_same_time(table):
    """Two counts are inside DuckDB at once: the second starts while the first waits."""
    backend, qs, want, _ = table
    inside = threading.Barrier(2, timeout=20)
    original = DuckDBBackend._dense_arrays

    def meeting(self, con, keys):
        inside.wait()  # returns only when both threads are counting
        return original(self, con, keys)

    dense = [q for q in qs if q.predicates and "d" not in {p.attribute.name for p in q.predicates}]
    with mock.patch.object(DuckDBBackend, "_dense_arrays", meeting), ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda q: int(backend.counts([q])[0]), dense[:2]))
    assert got == [want[qs.index(q)] for q in dense[:2]]


def test_close_waits_for_counts_in_flight():
    frame = random_frame(np.random.default_rng(5), 2_000)
    backend = load_table(frame, SCHEMA)
    q = Query.from_coverages(SCHEMA, {"a": ((0, 4),)})
    want = int(backend.counts([q])[0])
    started, release = threading.Event(), threading.Event()
    original = DuckDBBackend._filter_counts  # a lone count's path

    def slow(self, con, key, covs):
        started.set()
        assert release.wait(20)
        return original(self, con, key, covs)

    with mock.patch.object(DuckDBBackend, "_filter_counts", slow), ThreadPoolExecutor(2) as pool:
        counting = pool.submit(lambda: int(backend.counts([q])[0]))
        assert started.wait(20)
        closing = pool.submit(backend.close)
        # close() waits for the count; new counts are refused meanwhile
        assert not closing.done()
        with pytest.raises(InvalidParameter, match="closed"):
            backend.counts([q])
        with pytest.raises(InvalidParameter, match="closed"):
            backend.clipped_sum("a", 0, 1)
        assert not closing.done()
        release.set()
        assert counting.result(timeout=20) == want
        closing.result(timeout=20)
    assert "closed" in repr(backend)
    backend.close()  # twice is fine
    with pytest.raises(InvalidParameter, match="closed"):
        backend.counts([q])


def test_close_while_counting_does_not_crash_the_process():
    """Threads count in a loop while the main thread closes the backend, many times over:
    every count is right or refused with 'the backend is closed', and the process (a
    child, so that a crash fails the test instead of killing the test run) exits 0."""
    script = textwrap.dedent(
        """
        import threading, sys
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        from test_backend_concurrency import SCHEMA, random_frame, random_queries
        from dpcurator.backends import load_table
        from dpcurator.errors import InvalidParameter

        rng = np.random.default_rng(3)
        frame = random_frame(rng, 10_000)
        qs = random_queries(rng, 40)
        bad = []
        for rnd in range(20):
            backend = load_table(frame, SCHEMA)
            want = backend.counts(qs).tolist()
            go = threading.Barrier(5)

            def work(t):
                go.wait()
                i = t
                while True:
                    try:
                        if i % 7 == 0:
                            got = backend.counts(qs).tolist()
                            if got != want:
                                bad.append(("batch", got))
                        else:
                            got = int(backend.counts([qs[i % len(qs)]])[0])
                            if got != want[i % len(qs)]:
                                bad.append((i, got))
                    except InvalidParameter as err:
                        if "closed" not in str(err):
                            bad.append(str(err))
                        return
                    except Exception as err:  # anything else is a failure
                        bad.append(repr(err))
                        return
                    i += 1

            threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            go.wait()
            threading.Event().wait(0.002 * (rnd % 10))
            backend.close()
            for t in threads:
                t.join(30)
                assert not t.is_alive(), "a counting thread hung after close()"
        assert not bad, bad[:5]
        print("ok")
        """
    )
    here = str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", script, here], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_a_borrowed_connection_is_used_one_count_at_a_time(table):
    """A connection the caller passed in stays theirs (their transaction, their schema):
    counts on it are serialised, and still exact from many threads."""
    _, qs, _, _ = table
    frame = random_frame(np.random.default_rng(11), 20_000)
    con = duckdb.connect()
    try:
        backend = load_table(frame, SCHEMA, connection=con, name="borrowed")
        want = [int(backend.counts([q])[0]) for q in qs[:40]]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda q: int(backend.counts([q])[0]), qs[:40] * 3))
        assert got == want * 3
        backend.close()
        # the caller's connection is open, without the table
        assert con.execute("SELECT 1").fetchall() == [(1,)]
        tables = con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        assert ("borrowed",) not in tables
    finally:
        con.close()
