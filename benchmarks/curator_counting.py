"""Counting throughput: 10,000 queries in one batch, DuckDB backend vs per-query pandas.

Generated data (uniform random codes; the data is synthetic, nothing private) over a
schema with three categorical and two integer attributes; a mixed workload of marginal
cells, histograms and range counts. The DuckDB backend answers the whole batch with
``counts``; the baseline filters a pandas DataFrame once per query (boolean masks,
``isin`` / ``between``), timed on a random sample of the queries and extrapolated to the
whole workload when running all of them would take too long (the table says so).

What it shows: how long 10,000 counts over 1,000,000 rows take in one batch, and how
much faster that is than per-query pandas filtering. A second table times *lone* counts
(one ``counts`` call each, as analysts send them: random boxes on age x spend, region x
tier and channel alone) with the kept marginals (:mod:`dpcurator.backends.marginal_cache`)
and without them (every count a filtered scan, as before they existed), alternating, in
the same run.

    .venv/bin/python benchmarks/curator_counting.py [--rows 1000000 10000000] [--sample 200]
"""

from __future__ import annotations

import argparse
import itertools
import time

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from dpcurator.backends import load_table
from dpcurator.queries import Attribute, Query, Schema

SCHEMA = Schema(
    (
        Attribute("region", "categorical", values=tuple(f"r{i:02d}" for i in range(10))),
        Attribute("channel", "categorical", values=tuple(f"ch-{i:02d}" for i in range(50))),
        Attribute(
            "tier", "categorical", values=("bronze", "silver", "gold", "platinum"), ordered=True
        ),
        Attribute("age", "integer", min=0, max=99),
        Attribute("spend", "integer", min=0, max=9_999),
    )
)


def generate(n: int, seed: int = 1) -> tuple[pa.Table, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    arrays = {}
    frame = {}
    for attr in SCHEMA.attributes:
        codes = rng.integers(0, attr.size, n, dtype=np.int32)
        if attr.type == "categorical":
            arrays[attr.name] = pa.DictionaryArray.from_arrays(
                pa.array(codes), pa.array(attr.values)
            )
            frame[attr.name] = pd.Categorical.from_codes(codes, categories=list(attr.values))
        else:
            arrays[attr.name] = pa.array(codes + attr.min, pa.int32())
            frame[attr.name] = codes + attr.min
    return pa.table(arrays), pd.DataFrame(frame)


def workload(n_queries: int = 10_000, seed: int = 2) -> list[Query]:
    rng = np.random.default_rng(seed)
    s = SCHEMA
    qs: list[Query] = []
    size = {a.name: a.size for a in s.attributes}
    # Marginal cells: region x channel (500), tier x age (400), region x tier (40).
    for a, b in (("region", "channel"), ("tier", "age"), ("region", "tier")):
        for i, j in itertools.product(range(size[a]), range(size[b])):
            qs.append(Query.from_coverages(s, {a: ((i, i + 1),), b: ((j, j + 1),)}))
    # Histograms: age (100 bins), channel (50), spend in 100 bins of 100.
    qs += [Query.from_coverages(s, {"age": ((i, i + 1),)}) for i in range(100)]
    qs += [Query.from_coverages(s, {"channel": ((i, i + 1),)}) for i in range(50)]
    qs += [Query.from_coverages(s, {"spend": ((i, i + 100),)}) for i in range(0, 10_000, 100)]
    # Range counts fill the rest: spend ranges, with an age range and/or a tier range
    # and/or a set of regions.
    while len(qs) < n_queries:
        lo = int(rng.integers(0, 9_000))
        covs = {"spend": ((lo, lo + int(rng.integers(1, 1_000))),)}
        kind = len(qs) % 3
        if kind == 0:
            a = int(rng.integers(0, 90))
            covs["age"] = ((a, a + int(rng.integers(1, 10))),)
        elif kind == 1:
            covs["tier"] = ((int(rng.integers(0, 3)), 4),)
        else:
            regions = sorted(int(r) for r in rng.choice(10, 3, replace=False))
            covs["region"] = tuple((r, r + 1) for r in regions)
        qs.append(Query.from_coverages(s, covs))
    return qs[:n_queries]


def pandas_count(df: pd.DataFrame, q: Query) -> int:
    mask = np.ones(len(df), dtype=bool)
    for p in q.predicates:
        attr = p.attribute
        col = df[attr.name]
        if attr.type == "categorical":
            values = [attr.values[i] for s, e in p.coverage for i in range(s, e)]
            mask &= col.isin(values).to_numpy()
        else:
            inside = np.zeros(len(df), dtype=bool)
            for s, e in p.coverage:
                inside |= col.between(s + attr.min, e - 1 + attr.min).to_numpy()
            mask &= inside
    return int(mask.sum())


def run(rows: int, sample: int, queries: list[Query]) -> dict[str, float]:
    t0 = time.perf_counter()
    table, df = generate(rows)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    backend = load_table(table, SCHEMA)
    t_load = time.perf_counter() - t0
    del table
    t0 = time.perf_counter()
    got = backend.counts(queries)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = backend.counts(queries)
    t_second = time.perf_counter() - t0
    assert (got == again).all()
    backend.close()
    rng = np.random.default_rng(3)
    n = len(queries)
    idx = np.arange(n) if sample >= n else rng.choice(n, sample, replace=False)
    t0 = time.perf_counter()
    ref = [pandas_count(df, queries[i]) for i in idx]
    t_pandas = (time.perf_counter() - t0) * n / len(idx)
    if ref != got[idx].tolist():
        raise SystemExit("MISMATCH between DuckDB and pandas counts")
    return {
        "rows": rows,
        "gen": t_gen,
        "load": t_load,
        "duckdb": t_first,
        "duckdb_warm": t_second,
        "pandas": t_pandas,
        "sampled": len(idx),
    }


def lone_queries(n: int, seed: int = 4) -> list[Query]:
    """Random boxes, one call each: age x spend, region x tier, channel ranges in turn."""
    rng = np.random.default_rng(seed)
    s = SCHEMA
    qs: list[Query] = []
    for i in range(n):
        if i % 3 == 0:
            a, c = int(rng.integers(0, 100)), int(rng.integers(0, 10_000))
            b, d = int(rng.integers(a + 1, 101)), int(rng.integers(c + 1, 10_001))
            covs = {"age": ((a, b),), "spend": ((c, d),)}
        elif i % 3 == 1:
            r = int(rng.integers(0, 10))
            covs = {"region": ((r, r + 1),), "tier": ((int(rng.integers(0, 4)), 4),)}
        else:
            lo = int(rng.integers(0, 49))
            covs = {"channel": ((lo, lo + int(rng.integers(1, 50 - lo + 1))),)}
        qs.append(Query.from_coverages(s, covs))
    return qs


def lone(rows: int, n: int, rounds: int = 3) -> tuple[float, float, float]:
    """Seconds per count: (kept marginals, filtered scans), best of ``rounds`` alternating
    passes over the same ``n`` lone counts; and the first pass with marginals (their
    builds included). Both backends must give the same counts."""
    table, _ = generate(rows)
    kept = load_table(table, SCHEMA)
    own = duckdb.connect()  # a connection we pass in: the backend keeps no marginals
    scans = load_table(table, SCHEMA, connection=own)
    del table
    qs = lone_queries(n)
    best = {"kept": float("inf"), "scans": float("inf")}
    first = 0.0
    answers: dict[str, list[int]] = {}
    for r in range(rounds):
        for name, backend in (("kept", kept), ("scans", scans)):
            t0 = time.perf_counter()
            got = [int(backend.counts([q])[0]) for q in qs]
            took = (time.perf_counter() - t0) / n
            if name == "kept" and r == 0:
                first = took
            best[name] = min(best[name], took)
            answers.setdefault(name, got)
    kept.close()
    scans.close()
    own.close()
    if answers["kept"] != answers["scans"]:
        raise SystemExit("MISMATCH between kept marginals and filtered scans")
    return best["kept"], best["scans"], first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=200, help="pandas queries actually run")
    ap.add_argument("--lone", type=int, default=600, help="lone counts per pass (0: none)")
    args = ap.parse_args()
    queries = workload(args.queries)
    print(f"workload: {len(queries)} queries (marginal cells, histograms, range counts)")
    results = [
        run(r, args.sample if r <= 1_000_000 else max(20, args.sample // 4), queries)
        for r in args.rows
    ]
    print()
    print(
        f"| {'rows':>10} | {'load s':>7} | {'DuckDB batch s':>14} | {'(warm) s':>8} | "
        f"{'pandas per-query s':>18} | {'speed-up':>8} | {'pandas timed on':>16} |"
    )
    print(f"|{'-' * 12}|{'-' * 9}|{'-' * 16}|{'-' * 10}|{'-' * 20}|{'-' * 10}|{'-' * 18}|")
    for r in results:
        how = "all queries" if r["sampled"] >= len(queries) else f"{r['sampled']}, extrapolated"
        print(
            f"| {r['rows']:>10,} | {r['load']:>7.2f} | {r['duckdb']:>14.3f} | "
            f"{r['duckdb_warm']:>8.3f} | {r['pandas']:>18.1f} | "
            f"{r['pandas'] / r['duckdb']:>7.0f}x | {how:>16} |"
        )
    if args.lone:
        print()
        print(f"lone counts (one call each, {args.lone} per pass, best of 3 alternating passes):")
        print()
        print(
            f"| {'rows':>10} | {'kept marginals ms':>17} | {'first pass ms':>13} | "
            f"{'filtered scans ms':>17} | {'ratio':>6} |"
        )
        print(f"|{'-' * 12}|{'-' * 19}|{'-' * 15}|{'-' * 19}|{'-' * 8}|")
        for rows in args.rows:
            k, sc, first = lone(rows, args.lone)
            print(
                f"| {rows:>10,} | {k * 1e3:>17.3f} | {first * 1e3:>13.3f} | "
                f"{sc * 1e3:>17.3f} | {sc / k:>5.1f}x |"
            )
    print()
    for r in results:
        if r["rows"] == 1_000_000:
            ok_time = r["duckdb"] < 5.0
            ok_ratio = r["pandas"] / r["duckdb"] >= 10
            print(
                f"target 10,000 counts / 1,000,000 rows < 5 s: {'met' if ok_time else 'MISSED'} "
                f"({r['duckdb']:.3f} s); >= 10x per-query pandas: "
                f"{'met' if ok_ratio else 'MISSED'} ({r['pandas'] / r['duckdb']:.0f}x)"
            )


if __name__ == "__main__":
    main()
