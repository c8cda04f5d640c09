"""DuckDB vs Spark: one release counted by DuckDB, by Spark ``local[2]`` and by a standalone
Spark cluster (a master and two one-core workers on 127.0.0.1), in one run.

Generated data (uniform random codes, nothing private) in one Parquet file per size, over
the schema of ``curator_counting.py`` (three categorical and two integer attributes); a
release is a random sample of that benchmark's 10,000-query workload (marginal cells,
histograms and range counts), counted by the backend's ``counts`` (the part of a release
that touches the data; planning, the ledger and the noise are the same on every engine).

Measured, for each engine:

* load: reading, validating and coding the Parquet file (paid once per table);
* one release of 1,000 queries at every size: the first (cold) count and the best of
  the next ones (warm), in seconds, and rows per second (warm);
* how one release grows with the number of queries (10 .. 10,000) at one size.

Every engine's counts are checked equal to DuckDB's. The Spark sessions are small (shuffle
partitions = cores, no UI); the cluster is started and stopped by the script.

    .venv/bin/python benchmarks/spark.py [--quick] [--rows 1000000 10000000 100000000]
        [--sweep-rows 10000000] [--queries 10 100 1000 10000] [--repeat 2] [--out r.json]

``--quick``: 10^5 and 10^6 rows, 10 .. 1,000 queries (a few minutes). Needs the ``spark``
extra (pyspark) and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the standalone cluster launcher the cluster test uses
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends"))
from curator_counting import SCHEMA, workload
from spark_cluster import standalone_cluster

from dpcurator.backends import DuckDBBackend, SparkBackend

CHUNK = 2_000_000


def generate(path: Path, rows: int, seed: int = 1) -> None:
    """One Parquet file of ``rows`` rows, written in chunks (row groups of 1M rows)."""
    rng = np.random.default_rng(seed)
    schema = pa.schema(
        [
            (
                a.name,
                pa.dictionary(pa.int32(), pa.string()) if a.type == "categorical" else pa.int32(),
            )
            for a in SCHEMA.attributes
        ]
    )
    with pq.ParquetWriter(path, schema) as w:
        done = 0
        while done < rows:
            n = min(CHUNK, rows - done)
            cols = []
            for a in SCHEMA.attributes:
                codes = rng.integers(0, a.size, n, dtype=np.int32)
                if a.type == "categorical":
                    cols.append(pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(a.values)))
                else:
                    cols.append(pa.array(codes + a.min, pa.int32()))
            w.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=1_000_000)
            done += n


def release(n: int, seed: int = 7):
    """``n`` queries drawn from the 10,000-query workload (its mix of kinds kept)."""
    pool = workload(10_000)
    if n >= len(pool):
        return pool
    idx = np.random.default_rng(seed).choice(len(pool), n, replace=False)
    return [pool[i] for i in sorted(idx)]


# ---------------------------------------------------------------------- sessions


def spark_session(master: str, memory: str, cores: int):
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName("dpcurator-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.host", "127.0.0.1")
    )
    if master.startswith("local"):
        b = b.config("spark.driver.memory", memory)
    else:
        b = b.config("spark.executor.memory", memory).config("spark.driver.memory", "2g")
    session = b.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# ---------------------------------------------------------------------- measuring


def measure(name: str, load, files: dict[int, Path], sizes, sweep_rows, sweep, repeat, reference):
    """Load each size, time one 1,000-query release (and the query sweep at sweep_rows)."""
    out = {"engine": name, "sizes": {}, "sweep": {}}
    main = release(1000)
    for rows in sizes:
        t0 = time.perf_counter()
        backend = load(files[rows])
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = backend.counts(main)
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            again = backend.counts(main)
            warm.append(time.perf_counter() - t0)
            assert (again == got).all()
        key = (rows, len(main))
        if key in reference:
            if not (reference[key] == got).all():
                raise SystemExit(f"MISMATCH: {name} differs from DuckDB at {rows:,} rows")
        else:
            reference[key] = got
        best = min(warm) if warm else cold
        out["sizes"][rows] = {"load": t_load, "cold": cold, "warm": best}
        print(
            f"  {name}: {rows:>12,} rows  load {t_load:8.2f} s  release {cold:7.2f} s cold, "
            f"{best:7.2f} s warm",
            flush=True,
        )
        if rows == sweep_rows:
            for n in sweep:
                qs = release(n)
                backend.counts(qs)  # warm-up
                times = []
                for _ in range(max(1, repeat)):
                    t0 = time.perf_counter()
                    c = backend.counts(qs)
                    times.append(time.perf_counter() - t0)
                k = (rows, n)
                if k in reference and not (reference[k] == c).all():
                    raise SystemExit(f"MISMATCH: {name} differs from DuckDB ({n} queries)")
                reference.setdefault(k, c)
                out["sweep"][n] = min(times)
                print(f"  {name}: {n:>6} queries at {rows:,} rows: {min(times):7.3f} s", flush=True)
        backend.close()
    return out


def table(results, sizes) -> str:
    lines = [
        "| engine | rows | load s | release s (cold) | release s (warm) | rows/s (warm) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for rows in sizes:
            m = r["sizes"][rows]
            lines.append(
                f"| {r['engine']} | {rows:,} | {m['load']:.1f} | {m['cold']:.2f} | "
                f"{m['warm']:.2f} | {rows / m['warm']:,.0f} |"
            )
    return "\n".join(lines)


def sweep_table(results, sweep, rows) -> str:
    head = " | ".join(f"{n:,} q" for n in sweep)
    lines = [f"| engine ({rows:,} rows) | {head} |", "|---|" + "---:|" * len(sweep)]
    for r in results:
        cells = " | ".join(f"{r['sweep'][n]:.3f}" for n in sweep)
        lines.append(f"| {r['engine']} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^5 and 10^6 rows, up to 1,000 queries")
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000, 100_000_000])
    ap.add_argument("--sweep-rows", type=int, default=10_000_000)
    ap.add_argument("--queries", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    ap.add_argument("--repeat", type=int, default=2, help="warm releases timed (best kept)")
    ap.add_argument("--local-memory", default="8g", help="driver memory of local[2]")
    ap.add_argument("--executor-memory", default="4g", help="memory of each cluster executor")
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--data", help="folder for the generated Parquet files (kept)")
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.sweep_rows, args.queries = [100_000, 1_000_000], 1_000_000, [10, 100, 1000]
        args.local_memory, args.executor_memory = "2g", "1g"
    sizes = sorted(set(args.rows) | {args.sweep_rows})
    tmp = Path(tempfile.mkdtemp(prefix="dpc-spark-bench-"))
    folder = Path(args.data) if args.data else tmp
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for rows in sizes:
        files[rows] = folder / f"data-{rows}.parquet"
        if not files[rows].exists():
            t0 = time.perf_counter()
            generate(files[rows], rows)
            print(
                f"generated {rows:,} rows in {time.perf_counter() - t0:.1f} s "
                f"({files[rows].stat().st_size / 1e6:.0f} MB)",
                flush=True,
            )
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    reference: dict = {}
    results = []

    results.append(
        measure(
            "DuckDB",
            lambda p: DuckDBBackend.load(p, SCHEMA),
            files,
            sizes,
            args.sweep_rows,
            args.queries,
            args.repeat,
            reference,
        )
    )
    local = spark_session("local[2]", args.local_memory, 2)
    results.append(
        measure(
            "Spark local[2]",
            lambda p: SparkBackend.load(p, SCHEMA, spark=local),
            files,
            sizes,
            args.sweep_rows,
            args.queries,
            args.repeat,
            reference,
        )
    )
    local.stop()
    if not args.no_cluster:
        with standalone_cluster(2, args.executor_memory, tmp) as url:
            remote = spark_session(url, args.executor_memory, 2)
            results.append(
                measure(
                    "Spark cluster (2 workers x 1 core)",
                    lambda p: SparkBackend.load(p, SCHEMA, spark=remote),
                    files,
                    sizes,
                    args.sweep_rows,
                    args.queries,
                    args.repeat,
                    reference,
                )
            )
            remote.stop()
    print()
    print("One release of 1,000 queries (counting; every engine's counts equal DuckDB's):")
    print(table(results, sizes))
    print()
    print("One release, by number of queries (warm, seconds):")
    print(sweep_table(results, args.queries, args.sweep_rows))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
