"""Interactive speed at any history: one count's latency, the main job, wide schemas.

    .venv/bin/python benchmarks/interactive.py [--before TREE] [--parts hard,rows,parse,jobs]
                                               [--probes 20] [--quick]

Every part runs in a fresh subprocess per source tree (``--before TREE``: another
checkout, e.g. ``git worktree add /tmp/old <commit>``, measured in the same run, with the
same data and the same random queries), so the table compares trees side by side:

* ``hard``: a table of 12 categorical attributes x 20 values (2,000 synthetic rows) and
  counts of random 3-attribute ``IN`` predicates at epsilon 0.0005 on a budget of 1 (the
  maximum overlap of such queries is NP-hard to compute). After 100, 300 and 1,000
  answered queries (charged by batches of ``release``), the p50 and p95 latency of the
  next ``--probes`` counts, each a full answer (check, charge, count, noise, record,
  remaining).
* ``rows``: 10^6 synthetic rows of 5 attributes (ranges and ``IN`` predicates), count p50
  at 0 and 1,000 answered; beside it, in the same process, the anchor: the same count in
  raw DuckDB on the same table plus one durable SQLite commit as the ledger makes it
  (rollback journal, synchronous FULL; a write-ahead log's commit is shown too).
* ``parse``: 3,551 range queries on a 10,000-attribute schema, as a workload.
* ``jobs``: ``dpcurator demo`` and ``dpcurator answer`` on ``examples/adult/ranges.txt``:
  wall time and peak memory (``/usr/bin/time``-style ``ru_maxrss`` of the child).

Nothing asserts a time; the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ATTRS = [f"c{i}" for i in range(12)]
VALUES = [f"v{j}" for j in range(20)]


# --- workers (run inside a subprocess whose dpcurator is the tree measured) -------------


def hard_query(rng: random.Random) -> str:
    parts = []
    for a in rng.sample(ATTRS, 3):
        vals = [v for v in VALUES if rng.random() < 0.5] or [rng.choice(VALUES)]
        parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
    return " AND ".join(parts)


def _quantiles(ts: list[float]) -> dict[str, float]:
    ts = sorted(ts)
    return {
        "p50": statistics.median(ts),
        "p95": ts[min(len(ts) - 1, round(0.95 * (len(ts) - 1)))],
        "max": ts[-1],
        "n": len(ts),
    }


def work_hard(tmp: Path, probes: int, levels: list[int]) -> dict:
    import numpy as np
    import pandas as pd

    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    g = np.random.default_rng(0)
    pd.DataFrame({a: g.choice(VALUES, 2000) for a in ATTRS}).to_csv(tmp / "hard.csv", index=False)
    schema = {"attributes": [{"name": a, "type": "categorical", "values": VALUES} for a in ATTRS]}
    (tmp / "hard.json").write_text(json.dumps(schema))
    rng = random.Random(1)
    out = {}
    with Curator.open(
        tmp / "hard.csv", tmp / "hard.json", budget=PureDP(1.0), ledger=tmp / "hard.db"
    ) as c:
        answered = 0
        for level in levels:
            while answered < level:
                n = min(100, level - answered)
                c.release([hard_query(rng) for _ in range(n)], [0.0005] * n)
                answered += n
            ts = []
            for _ in range(probes):
                t = time.perf_counter()
                c.count(hard_query(rng), epsilon=0.0005)
                ts.append(time.perf_counter() - t)
            answered += probes
            out[str(level)] = _quantiles(ts)
    return out


ROWS_SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": [f"r{i}" for i in range(20)]},
        {"name": "channel", "type": "categorical", "values": [f"c{i}" for i in range(8)]},
        {"name": "week", "type": "integer", "min": 1, "max": 52},
    ]
}


def rows_query(rng: random.Random) -> str:
    a = rng.randrange(100)
    b = rng.randrange(a, 100)
    regions = rng.sample(range(20), rng.randint(1, 5))
    week = rng.randrange(1, 53)
    return (
        f"age BETWEEN {a} AND {b} AND region IN ({', '.join(repr(f'r{r}') for r in regions)}) "
        f"AND week >= {week}"
    )


def rows_sql(q: str) -> str:
    return f"SELECT count(*) FROM t WHERE {q}"


def _make_rows(path: Path, n: int) -> None:
    import numpy as np
    import pandas as pd

    g = np.random.default_rng(2)
    pd.DataFrame(
        {
            "age": g.integers(0, 100, n),
            "sex": g.choice(["F", "M"], n),
            "region": g.choice([f"r{i}" for i in range(20)], n),
            "channel": g.choice([f"c{i}" for i in range(8)], n),
            "week": g.integers(1, 53, n),
        }
    ).to_csv(path, index=False)


def work_rows(tmp: Path, probes: int, rows: int) -> dict:
    import duckdb

    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    data = tmp / "rows.csv"
    if not data.exists():
        _make_rows(data, rows)
    (tmp / "rows.json").write_text(json.dumps(ROWS_SCHEMA))
    rng = random.Random(3)
    out: dict = {}
    # the anchor: raw DuckDB on the same table, and one durable SQLite commit
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv_auto('{data}')")
    # one durable commit as the ledger makes it (rollback journal, see ledger.py), and
    # as a write-ahead log would
    dbs = {}
    for mode in ("TRUNCATE", "WAL"):
        db = dbs[mode] = sqlite3.connect(tmp / f"anchor-{mode}.db", isolation_level=None)
        db.execute(f"PRAGMA journal_mode={mode}")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE x (a INTEGER PRIMARY KEY, b TEXT)")
    raw: list[float] = []
    commit: dict[str, list[float]] = {mode: [] for mode in dbs}
    for _ in range(probes):
        q = rows_query(rng)
        t = time.perf_counter()
        con.execute(rows_sql(q)).fetchone()
        raw.append(time.perf_counter() - t)
        for mode, db in dbs.items():
            t = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO x (b) VALUES (?)", (q,))
            db.execute("COMMIT")
            commit[mode].append(time.perf_counter() - t)
    out["duckdb"] = _quantiles(raw)
    out["commit"] = _quantiles(commit["TRUNCATE"])
    out["commit_wal"] = _quantiles(commit["WAL"])
    with Curator.open(data, tmp / "rows.json", budget=PureDP(1e6), ledger=tmp / "rows.db") as c:
        for level in (0, 1000):
            answered = len(c.history())
            while answered < level:
                n = min(500, level - answered)
                c.release([rows_query(rng) for _ in range(n)], [0.1] * n)
                answered += n
            ts = []
            for _ in range(probes):
                q = rows_query(rng)
                t = time.perf_counter()
                c.count(q, epsilon=0.1)
                ts.append(time.perf_counter() - t)
            out[str(level)] = _quantiles(ts)
    return out


def work_parse(tmp: Path) -> dict:
    from dpcurator.queries import Schema, parse_workload_text

    schema = Schema.from_dict(
        {
            "attributes": [
                {"name": f"a{i}", "type": "integer", "min": 0, "max": 99} for i in range(10_000)
            ]
        }
    )
    rng = random.Random(4)
    lines = []
    for _ in range(3551):
        lo = rng.randrange(100)
        lines.append(f"a{rng.randrange(10_000)} BETWEEN {lo} AND {rng.randrange(lo, 100)}")
    t = time.perf_counter()
    wl = parse_workload_text("\n".join(lines), schema)
    return {"seconds": time.perf_counter() - t, "queries": len(wl)}


JOBS = {
    "demo": ["demo"],
    "answer ranges.txt": [
        "answer",
        "--data",
        "examples/data/adult-sample.csv",
        "--schema",
        "examples/adult/schema.json",
        "--workload",
        "examples/adult/ranges.txt",
        "--epsilon",
        "1",
        "--ledger",
        ":memory:",
    ],
}


def work_job(tmp: Path, tree: Path, name: str) -> dict:
    """One job as this process's only child: its wall time, CPU time and peak memory."""
    cmd = [sys.executable, "-c", "import sys; from dpcurator.cli import main; sys.exit(main())"]
    cmd += JOBS[name] + ([] if name == "demo" else ["--out", str(tmp / "answers.csv")])
    t = time.perf_counter()
    subprocess.run(cmd, cwd=tree, check=True, capture_output=True, env=_env(tree))
    wall = time.perf_counter() - t
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Linux reports ru_maxrss in kB
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


# --- the driver -------------------------------------------------------------------------


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    return env


def run_part(tree: Path, part: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", part, "--tree", str(tree)]
    cmd += ["--probes", str(args.probes)]
    if args.quick:
        cmd.append("--quick")
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(tree), check=False)
    if res.returncode != 0:
        raise SystemExit(f"{part} on {tree} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def worker(part: str, tree: Path, probes: int, quick: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if part == "hard":
            got = work_hard(tmp, probes, [100, 300] if quick else [100, 300, 1000])
        elif part == "rows":
            got = work_rows(tmp, probes, 10**5 if quick else 10**6)
        elif part == "parse":
            got = work_parse(tmp)
        elif part == "jobs":
            got = {
                name: run_part(tree, "job:" + name, argparse.Namespace(probes=probes, quick=quick))
                for name in JOBS
            }
        else:
            got = work_job(tmp, tree, part.removeprefix("job:"))
    print(json.dumps(got))


def ms(x: float) -> str:
    return f"{1000 * x:8.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another source tree to measure in the same run")
    ap.add_argument("--parts", default="hard,rows,parse,jobs")
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="smaller data and histories")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.tree, args.probes, args.quick)
        return
    trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    parts = args.parts.split(",")
    results = {p: {name: run_part(tree, p, args) for name, tree in trees} for p in parts}
    names = [n for n, _ in trees]

    def ratio(key: str, get) -> str:
        if len(names) < 2:
            return ""
        a, b = get(results[key]["after"]), get(results[key]["before"])
        return f" | {b / a:6.1f}x" if a > 0 else ""

    head = " | ".join(f"{n:>8}" for n in names) + (" | speed-up" if len(names) > 1 else "")
    if "hard" in parts:
        print(f"\nhard table (12 x 20, 3-attribute IN), count latency in ms, {args.probes} probes")
        print(f"{'answered':>9} {'stat':>4} | {head}")
        for level in results["hard"]["after"]:
            for stat in ("p50", "p95"):
                vals = " | ".join(ms(results["hard"][n][level][stat]) for n in names)
                print(
                    f"{level:>9} {stat:>4} | {vals}"
                    + ratio("hard", lambda r, lv=level, s=stat: r[lv][s])
                )
    if "rows" in parts:
        r = results["rows"]
        print(f"\ncount over {'10^5' if args.quick else '10^6'} rows, p50 in ms")
        print(f"{'':>24} | {head}")
        for key, label in (
            ("duckdb", "raw DuckDB count"),
            ("commit", "SQLite commit (journal)"),
            ("commit_wal", "SQLite commit (WAL)"),
        ):
            print(f"{label:>24} | " + " | ".join(ms(r[n][key]["p50"]) for n in names))
        for level in ("0", "1000"):
            vals = " | ".join(ms(r[n][level]["p50"]) for n in names)
            print(
                f"{'count, ' + level + ' answered':>24} | {vals}"
                + ratio("rows", lambda x, lv=level: x[lv]["p50"])
            )
            # each tree against the anchor measured in its own process, just before
            print(
                f"{'  / (DuckDB + commit)':>24} | "
                + " | ".join(
                    f"{r[n][level]['p50'] / (r[n]['duckdb']['p50'] + r[n]['commit']['p50']):8.2f}"
                    for n in names
                )
            )
    if "parse" in parts:
        r = results["parse"]
        print("\n3,551 range queries on a 10,000-attribute schema, parse seconds")
        print(f"{'':>24} | {head}")
        print(
            f"{'parse':>24} | "
            + " | ".join(f"{r[n]['seconds']:8.3f}" for n in names)
            + ratio("parse", lambda x: x["seconds"])
        )
    if "jobs" in parts:
        r = results["jobs"]
        print("\nthe main jobs: wall s, CPU s, peak MB")
        print(f"{'':>24} | {head}")
        for job in JOBS:
            for key, unit in (("wall", "s"), ("cpu", "s"), ("peak_mb", "MB")):
                vals = " | ".join(f"{r[n][job][key]:8.1f}" for n in names)
                print(
                    f"{job + ' ' + key + ' ' + unit:>24} | {vals}"
                    + ratio("jobs", lambda x, j=job, k=key: x[j][k])
                )


if __name__ == "__main__":
    main()
