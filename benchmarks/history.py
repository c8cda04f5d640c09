"""Speed at a long history: a batch, a count, a reopen and ``remaining()`` after many charges.

    .venv/bin/python benchmarks/history.py [--charges 30000] [--before TREE]

10^5 rows of two integer attributes (0..99), random 2-D boxes (``a BETWEEN .. AND b
BETWEEN ..``), a budget of 10^9 (every query admitted: what is measured is the cost of
checking, charging and reporting, not of refusing). The ledger is built by batches of
10,000 queries (``release``); at no history and at ``--charges`` charges the table
shows: the time of a 10,000-query batch (the one that reaches the history, and one after
a reopen), the p50 of 20 counts, the reopen (``Curator.open``: the ledger verified and
the filter rebuilt) and ``remaining()``. ``--before TREE`` (another checkout, e.g. ``git
worktree add /tmp/old <commit>``) runs the same in the same run for a before/after.
Nothing asserts a time; the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 10_000


def work(charges: int) -> dict:
    import numpy as np
    import pandas as pd

    from dpcurator import Curator
    from dpcurator.privacy import PureDP

    tmp = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.integers(0, 100, 10**5), "b": rng.integers(0, 100, 10**5)}).to_csv(
        tmp / "d.csv", index=False
    )
    attrs = [{"name": n, "type": "integer", "min": 0, "max": 99} for n in "ab"]
    (tmp / "s.json").write_text(json.dumps({"attributes": attrs}))
    r = random.Random(1)

    def box() -> str:
        a0, b0 = r.randrange(100), r.randrange(100)
        a1, b1 = r.randrange(a0, 100), r.randrange(b0, 100)
        return f"a BETWEEN {a0} AND {a1} AND b BETWEEN {b0} AND {b1}"

    def batch(c: Curator) -> float:
        qs = [box() for _ in range(BATCH)]
        t0 = time.perf_counter()
        c.release(qs, [1e-3] * BATCH)
        return time.perf_counter() - t0

    def counts(c: Curator) -> float:
        ts = []
        for _ in range(20):
            q = box()
            t0 = time.perf_counter()
            c.count(q, epsilon=1e-3)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    kw = {"data": tmp / "d.csv", "schema": tmp / "s.json", "budget": PureDP(10**9)}
    out: dict = {}
    with Curator.open(**kw, ledger=tmp / "l.db") as c:
        out["count0"] = counts(c)
        times = [batch(c) for _ in range(max(1, charges // BATCH))]
        out["batch0"], out["batch_last"] = times[0], times[-1]
    t0 = time.perf_counter()
    c = Curator.open(**kw, ledger=tmp / "l.db")
    out["reopen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    c.remaining()
    out["remaining"] = time.perf_counter() - t0
    out["count"] = counts(c)
    out["batch_reopened"] = batch(c)
    c.close()
    out["bytes"] = (tmp / "l.db").stat().st_size / max(1, charges)
    out["charges"] = len(times) * BATCH
    return out


def run(tree: Path, charges: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    p = subprocess.run(
        [sys.executable, __file__, "--worker", str(charges)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    if "--worker" in sys.argv:
        print(json.dumps(work(int(sys.argv[sys.argv.index("--worker") + 1]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=30_000)
    ap.add_argument("--before", type=Path)
    args = ap.parse_args()
    trees = [("this tree", ROOT)] + ([("before", args.before)] if args.before else [])
    got = {name: run(tree, args.charges) for name, tree in trees}
    n = got["this tree"]["charges"]
    rows = [
        ("count p50, no history", "count0", 1000, "ms"),
        (f"count p50 at {n:,} charges", "count", 1000, "ms"),
        ("10,000-query batch, the first", "batch0", 1, "s"),
        (f"10,000-query batch reaching {n:,}", "batch_last", 1, "s"),
        ("10,000-query batch after a reopen", "batch_reopened", 1, "s"),
        (f"reopen at {n:,} charges", "reopen", 1, "s"),
        ("remaining()", "remaining", 1, "s"),
        ("ledger bytes per charge", "bytes", 1, ""),
    ]
    names = [name for name, _ in trees]
    print(f"\n{'':38}" + "".join(f"{name:>14}" for name in names) + ("   ratio" if args.before else ""))
    for label, key, scale, unit in rows:
        vals = [got[name][key] * scale for name in names]
        line = f"{label:38}" + "".join(f"{v:>11.2f} {unit:2}" for v in vals)
        if args.before and vals[1]:
            line += f"  {vals[0] / vals[1]:6.2f}x"
        print(line)


if __name__ == "__main__":
    main()
