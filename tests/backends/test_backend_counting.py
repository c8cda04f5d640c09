"""Counting and clipped sums against brute force (pandas / numpy), dense and fallback paths."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.backends import DuckDBBackend, duckdb_backend, load_table
from dpcurator.backends._contract import box_counts, contract, indicator_counts, prefix_sums
from dpcurator.errors import InvalidParameter
from dpcurator.queries import Attribute, Query, Schema, parse_query
from dpcurator.queries.predicates import normalize

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


@pytest.fixture(scope="module")
def loaded():
    frame = random_frame(np.random.default_rng(7), 3_000)
    backend = load_table(frame, SCHEMA)
    yield backend, frame
    backend.close()


def brute(frame: pd.DataFrame, q: Query) -> int:
    mask = np.ones(len(frame), dtype=bool)
    for p in q.predicates:
        attr = p.attribute
        col = frame[attr.name]
        pos = (
            col.to_numpy() - attr.min
            if attr.type == "integer"
            else col.map(attr.position).to_numpy()
        )
        inside = np.zeros(len(frame), dtype=bool)
        for s, e in p.coverage:
            inside |= (pos >= s) & (pos < e)
        mask &= inside
    return int(mask.sum())


@st.composite
def coverages(draw, size: int):
    k = draw(st.integers(0, 4))
    cuts = sorted(draw(st.lists(st.integers(0, size), min_size=2 * k, max_size=2 * k)))
    return normalize(zip(cuts[::2], cuts[1::2], strict=True))


@st.composite
def queries(draw):
    names = draw(st.lists(st.sampled_from(SCHEMA.names), unique=True, max_size=3))
    covs = {n: draw(coverages(SCHEMA.attribute(n).size)) for n in names}
    return Query.from_coverages(SCHEMA, covs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(queries(), min_size=1, max_size=30))
def test_counts_match_brute_force(loaded, qs):
    backend, frame = loaded
    want = [brute(frame, q) for q in qs]
    assert backend.counts(qs).tolist() == want
    # Same queries with every attribute set forced onto the FILTER fallback path.
    with mock.patch.object(duckdb_backend, "DENSE_LIMIT", 0):
        assert backend.counts(qs).tolist() == want


def test_dense_and_fallback_paths_are_both_used(loaded):
    backend, frame = loaded
    texts = [
        "a BETWEEN 0 AND 3",  # dense (10 cells)
        "b IN ('x', 'w') AND c >= 'mid'",  # dense
        "d < 2500 AND e > 1000",  # 5000 * 2000 = 1e7 cells > DENSE_LIMIT: fallback
        "d BETWEEN 10 AND 20 AND e = 7 AND a = 1",  # fallback
        "total",
        "a IN ()",
    ]
    qs = [parse_query(t, SCHEMA) for t in texts]
    want = [brute(frame, q) for q in qs]
    with (
        mock.patch.object(duckdb_backend, "FEW_QUERIES", 0),
        mock.patch.object(
            DuckDBBackend, "_dense_arrays", autospec=True, side_effect=DuckDBBackend._dense_arrays
        ) as dense,
        mock.patch.object(
            DuckDBBackend,
            "_filter_counts",
            autospec=True,
            side_effect=DuckDBBackend._filter_counts,
        ) as fallback,
    ):
        assert backend.counts(qs).tolist() == want
    assert dense.call_count == 1  # every dense attribute set from one statement
    assert fallback.call_count == 2
    assert want[4] == len(frame) and want[5] == 0


def test_few_queries_of_an_attribute_set_skip_the_dense_scan():
    """A lone count is one filtered scan, not a GROUP BY of its attributes' grid; a set
    asked by many queries is counted densely, and its array kept for later counts.
    Same numbers either way."""
    frame = random_frame(np.random.default_rng(8), 2_000)
    backend = load_table(frame, SCHEMA)
    few = [parse_query("a BETWEEN 0 AND 3 AND b IN ('x', 'w')", SCHEMA)]
    many = [parse_query(f"c >= 'mid' AND a = {i}", SCHEMA) for i in range(-3, 7)]
    # few: scanned; many: one GROUP BY, kept; both: `many` from the kept array, `few`
    # (asked twice so far) scanned again.
    for qs, dense_calls in ((few, 0), (many, 1), (few + many, 0)):
        with mock.patch.object(
            DuckDBBackend, "_dense_arrays", autospec=True, side_effect=DuckDBBackend._dense_arrays
        ) as dense:
            assert backend.counts(qs).tolist() == [brute(frame, q) for q in qs]
        assert dense.call_count == dense_calls
    backend.close()


def _statements(backend: DuckDBBackend, qs: list[Query]) -> tuple[list[int], int, int]:
    """Counts of ``qs`` one call each, with the GROUP BY and FILTER statements run."""
    with (
        mock.patch.object(
            DuckDBBackend, "_dense_arrays", autospec=True, side_effect=DuckDBBackend._dense_arrays
        ) as dense,
        mock.patch.object(
            DuckDBBackend, "_filter_counts", autospec=True, side_effect=DuckDBBackend._filter_counts
        ) as scans,
    ):
        got = [int(backend.counts([q])[0]) for q in qs]
    return got, dense.call_count, scans.call_count


def test_an_often_asked_attribute_set_is_counted_from_its_kept_marginal():
    """Ski rental: the first FEW_QUERIES lone counts of a set are scans, the next builds
    its marginal (one GROUP BY) and every later count needs no statement at all."""
    frame = random_frame(np.random.default_rng(9), 2_000)
    backend = load_table(frame, SCHEMA)
    rng = np.random.default_rng(10)
    qs = []
    for _ in range(40):
        lo, hi = sorted(int(v) for v in rng.integers(-3, 7, 2))
        qs.append(parse_query(f"a BETWEEN {lo} AND {hi} AND b != 'y' AND c <= 'mid'", SCHEMA))
    first = duckdb_backend.FEW_QUERIES
    got, dense, scans = _statements(backend, qs[:first])
    assert (dense, scans) == (0, first)
    got2, dense, scans = _statements(backend, qs[first:])
    assert (dense, scans) == (1, 0)
    assert got + got2 == [brute(frame, q) for q in qs]
    assert backend._marginals.kept == ((0, 1, 2),)
    backend.close()


def test_a_borrowed_connections_table_is_never_cached(tmp_path):
    """On a connection the caller owns, the table may change between counts: every
    count scans it as it is now."""
    import duckdb

    con = duckdb.connect()
    frame = random_frame(np.random.default_rng(11), 500)
    backend = load_table(frame, SCHEMA, connection=con)
    q = parse_query("a BETWEEN 0 AND 3", SCHEMA)
    for _ in range(2 * duckdb_backend.FEW_QUERIES):
        assert int(backend.counts([q])[0]) == brute(frame, q)
    con.execute(f"DELETE FROM {backend.table} WHERE rowid % 2 = 0")
    left = int(
        con.execute(f"SELECT count(*) FROM {backend.table} WHERE c0 BETWEEN 3 AND 6").fetchone()[0]
    )
    assert int(backend.counts([q])[0]) == left < brute(frame, q)
    assert backend._marginals.kept == ()
    backend.close()
    con.close()


def test_fallback_chunks(loaded):
    backend, frame = loaded
    rng = np.random.default_rng(3)
    qs = []
    for _ in range(600):
        lo = int(rng.integers(0, 4700))
        qs.append(Query.from_coverages(SCHEMA, {"d": ((lo, lo + 300),), "e": ((0, 1000),)}))
    with mock.patch.object(duckdb_backend, "FILTER_CHUNK", 250):
        got = backend.counts(qs)
    assert got.tolist() == [brute(frame, q) for q in qs]


def test_marginal_and_histogram_workload(loaded):
    backend, frame = loaded
    qs = [
        Query.from_coverages(SCHEMA, {"a": ((i, i + 1),), "b": ((j, j + 1),), "c": ((k, k + 1),)})
        for i, j, k in itertools.product(range(10), range(4), range(3))
    ]
    qs += [Query.from_coverages(SCHEMA, {"e": ((i, i + 1),)}) for i in range(2000)]
    got = backend.counts(qs)
    grouped = frame.groupby(["a", "b", "c"]).size()
    want = [
        int(
            grouped.get(
                (i - 3, SCHEMA.attribute("b").values[j], SCHEMA.attribute("c").values[k]), 0
            )
        )
        for i, j, k in itertools.product(range(10), range(4), range(3))
    ]
    assert got[:120].tolist() == want
    assert got[:120].sum() == len(frame)
    assert got[120:].sum() == len(frame)
    assert got[120:].tolist() == np.bincount(frame["e"] - 1, minlength=2000).tolist()


def test_empty_batch_and_foreign_schema(loaded):
    backend, _ = loaded
    assert backend.counts([]).dtype == np.int64
    assert backend.counts([]).shape == (0,)
    other = Schema((Attribute("a", "integer", min=0, max=1),))
    with pytest.raises(InvalidParameter, match="different schema"):
        backend.counts([parse_query("a = 1", other)])
    with pytest.raises(InvalidParameter, match="expected a Query"):
        backend.counts(["a = 1"])
    # An equal schema built separately is accepted.
    same = Schema.from_dict(SCHEMA.to_dict())
    assert backend.counts([parse_query("total", same)]).tolist() == [3000]


# --------------------------------------------------------------------- clipped sums


@pytest.mark.parametrize(
    ("attribute", "lower", "upper", "where"),
    [
        ("a", -1, 4, None),
        ("a", -10, 10, "b = 'y'"),
        ("d", 100, 1000, "c <= 'mid' AND e > 1500"),
        ("e", 0, 999, None),
        ("e", -(2**70), 2**70, "a > 0"),
        ("d", 7, 7, "a = 0"),
        ("e", 1, 5, "b IN ()"),
    ],
)
def test_clipped_sum_matches_pandas(loaded, attribute, lower, upper, where):
    backend, frame = loaded
    q = parse_query(where, SCHEMA) if where else None
    rows = frame if q is None else frame[[q.covers(dict(r)) for r in frame.to_dict("records")]]
    want = sum(min(max(int(v), lower), upper) for v in rows[attribute])
    got = backend.clipped_sum(attribute, lower, upper, where=q)
    assert type(got) is int and got == want


def test_clipped_sum_rejects_bad_parameters(loaded):
    backend, _ = loaded
    with pytest.raises(InvalidParameter, match="not an integer or float attribute"):
        backend.clipped_sum("b", 0, 1)
    with pytest.raises(InvalidParameter, match="unknown attribute"):
        backend.clipped_sum("zz", 0, 1)
    with pytest.raises(InvalidParameter, match="greater than upper"):
        backend.clipped_sum("a", 2, 1)
    for bad in (math.nan, math.inf, -math.inf, "1", None, True):
        with pytest.raises(InvalidParameter, match="clipping bound"):
            backend.clipped_sum("a", bad, 10)
        with pytest.raises(InvalidParameter, match="clipping bound"):
            backend.clipped_sum("a", 0, bad)


# --------------------------------------------------------------------- contraction kernels


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3).flatmap(
        lambda shape: st.tuples(
            st.just(tuple(shape)),
            st.lists(st.tuples(*(coverages(s) for s in shape)), min_size=0, max_size=12),
            st.integers(0, 2**32 - 1),
        )
    )
)
def test_kernels_agree_with_brute_force(case):
    shape, covs, seed = case
    dense = np.random.default_rng(seed).integers(0, 50, shape)
    want = []
    for qc in covs:
        masks = [np.zeros(s, dtype=bool) for s in shape]
        for m, cov in zip(masks, qc, strict=True):
            for s, e in cov:
                m[s:e] = True
        want.append(int(dense[np.ix_(*masks)].sum()))
    assert box_counts(prefix_sums(dense), covs).tolist() == want
    assert indicator_counts(dense, covs).tolist() == want
    assert contract(dense, covs).tolist() == want


def test_indicator_path_for_scattered_values():
    rng = np.random.default_rng(0)
    dense = rng.integers(0, 100, (40, 50))
    covs = []
    for _ in range(200):
        a = normalize((int(v), int(v) + 1) for v in rng.choice(40, 15, replace=False))
        b = normalize((int(v), int(v) + 1) for v in rng.choice(50, 20, replace=False))
        covs.append((a, b))
    with mock.patch("dpcurator.backends._contract.indicator_counts", wraps=indicator_counts) as spy:
        got = contract(dense, covs)
    assert spy.call_count == 1  # 15 * 20 boxes * 4 corners > cells / 4: one batched product

    def positions(cov):
        return [p for s, e in cov for p in range(s, e)]

    want = [int(dense[np.ix_(positions(a), positions(b))].sum()) for a, b in covs]
    assert got.tolist() == want


def test_concurrent_threads(loaded):
    from concurrent.futures import ThreadPoolExecutor

    backend, frame = loaded
    qs = [parse_query(f"a = {v}", SCHEMA) for v in range(-3, 7)]
    want = [brute(frame, q) for q in qs]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: backend.counts(qs).tolist(), range(16)))
        sums = list(pool.map(lambda _: backend.clipped_sum("a", 0, 3), range(16)))
    assert all(r == want for r in results)
    assert len(set(sums)) == 1
