"""The kept marginals: exact counts whatever was kept or dropped, a bounded size, the
ski-rental rule for building."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.backends import duckdb_backend, load_table
from dpcurator.backends.marginal_cache import MarginalCache
from dpcurator.queries import Query
from tests.backends.test_backend_counting import SCHEMA, brute, queries, random_frame


def test_tally_builds_after_more_than_after_asks():
    cache = MarginalCache(cells=100, after=3)
    assert [cache.due((0,), 1, 10) for _ in range(4)] == [False, False, False, True]
    assert cache.due((1,), 4, 10)  # one call of many asks
    assert not cache.due((2,), 99, 101)  # never fits: never due


def test_least_recently_used_marginals_are_dropped_within_the_cells():
    cache = MarginalCache(cells=25, after=0)
    for key in ((0,), (1,), (2,)):
        assert cache.keep(key, np.ones(10, np.int64)) is not None
    assert cache.kept == ((1,), (2,))  # 30 cells > 25: the oldest went
    assert cache.get((1,)) is not None
    cache.keep((3,), np.ones(10, np.int64))
    assert cache.kept == ((1,), (3,))  # (2,) was the least recently used
    assert cache.keep((4,), np.ones(26, np.int64)) is None  # larger than the cache
    assert cache.kept == ((1,), (3,))


def test_a_kept_marginal_is_read_only():
    cache = MarginalCache(cells=100, after=0)
    kept = cache.keep((0, 1), np.arange(6, dtype=np.int64).reshape(2, 3))
    assert kept is not None
    with pytest.raises(ValueError):
        kept.dense[0, 0] = 5
    with pytest.raises(ValueError):
        kept.psum[1, 1] = 5


def test_the_tally_is_bounded():
    cache = MarginalCache(cells=100, after=1)
    for i in range(5000):
        cache.due((i,), 1, 1)
    assert len(cache._asked) <= 4096


@pytest.fixture(scope="module")
def frame():
    return random_frame(np.random.default_rng(21), 1_500)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(queries(), min_size=1, max_size=60),
    st.sampled_from([0, 40, 200, 1 << 21]),
    st.integers(0, 3),
)
def test_counts_equal_brute_force_whatever_is_kept(frame, qs, cells, after):
    """Lone counts and batches, with caches so small that marginals are dropped again
    and again, or never kept: every count is the brute-force count."""
    with (
        mock.patch.object(duckdb_backend, "CACHE_CELLS", cells),
        mock.patch.object(duckdb_backend, "FEW_QUERIES", after),
    ):
        backend = load_table(frame, SCHEMA)
        try:
            want = [brute(frame, q) for q in qs]
            assert [int(backend.counts([q])[0]) for q in qs] == want
            assert backend.counts(qs).tolist() == want
            assert backend.counts(qs[::-1]).tolist() == want[::-1]
            kept = backend._marginals
            assert kept._used == sum(m.cells for m in kept._kept.values()) <= cells
        finally:
            backend.close()


def test_threads_building_the_same_marginal_get_exact_counts(frame):
    """Many threads past the tally at once may each build the marginal; one is kept and
    every count is exact."""
    backend = load_table(frame, SCHEMA)
    rng = np.random.default_rng(3)
    qs = [
        Query.from_coverages(
            SCHEMA, {"a": ((int(lo), int(lo) + 3),), "d": ((int(d), int(d) + 700),)}
        )
        for lo, d in zip(rng.integers(0, 7, 200), rng.integers(0, 4000, 200), strict=True)
    ]
    want = [brute(frame, q) for q in qs]
    start = threading.Barrier(4)

    def work(k: int) -> list[int]:
        start.wait(timeout=20)
        return [int(backend.counts([qs[i]])[0]) for i in range(k, len(qs), 4)]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(work, range(4)))
    for k in range(4):
        assert got[k] == want[k::4]
    assert backend._marginals.kept == ((0, 3),)
    backend.close()
