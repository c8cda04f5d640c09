"""Speed at a long history: a batch, a count, a reopen and ``remaining()`` after many charges.

    .venv/bin/python benchmarks/history.py [--charges 30000] [--before TREE]

10^5 rows of two integer attributes (0..99), random 2-D boxes (``a BETWEEN .. AND b
BETWEEN ..``), a budget of 10^9 (every query admitted: what is measured is the cost of
checking, charging and reporting, not of refusing). The ledger is built by batches of
10,000 queries (``release``); at no history and at ``--charges`` charges the table
shows: the time of a 10,000-query batch (the one that reaches the history, and one after
a reopen), the p50 of 100 counts (after 10), the reopen (``Curator.open``: the ledger verified and
the filter rebuilt) and ``remaining()``, and the peak resident memory of a process that
only reopens the ledger and serves those requests (what a restarted server holds).
``--before TREE`` (another checkout, e.g. ``git worktree add /tmp/old <commit>``) runs
the same in the same run for a before/after; ``--only before`` runs that tree alone.
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


def setup(tmp: Path) -> dict:
    import numpy as np
    import pandas as pd

    from dpcurator.privacy import PureDP

    if not (tmp / "d.csv").exists():
        rng = np.random.default_rng(0)
        df = pd.DataFrame({"a": rng.integers(0, 100, 10**5), "b": rng.integers(0, 100, 10**5)})
        df.to_csv(tmp / "d.csv", index=False)
        attrs = [{"name": n, "type": "integer", "min": 0, "max": 99} for n in "ab"]
        (tmp / "s.json").write_text(json.dumps({"attributes": attrs}))
    return {"data": tmp / "d.csv", "schema": tmp / "s.json", "budget": PureDP(10**9)}


def box(r: random.Random) -> str:
    a0, b0 = r.randrange(100), r.randrange(100)
    a1, b1 = r.randrange(a0, 100), r.randrange(b0, 100)
    return f"a BETWEEN {a0} AND {a1} AND b BETWEEN {b0} AND {b1}"


def batch(c, r: random.Random) -> float:
    qs = [box(r) for _ in range(BATCH)]
    t0 = time.perf_counter()
    c.release(qs, [1e-3] * BATCH)
    return time.perf_counter() - t0


def counts(c, r: random.Random) -> float:
    """The p50 of 100 counts, after 10 not timed (the first ones warm caches up)."""
    for _ in range(10):
        c.count(box(r), epsilon=1e-3)
    ts = []
    for _ in range(100):
        q = box(r)
        t0 = time.perf_counter()
        c.count(q, epsilon=1e-3)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def build(tmp: Path, charges: int) -> dict:
    """The ledger, built by batches (the count at no history first)."""
    from dpcurator import Curator

    kw = setup(tmp)
    r = random.Random(1)
    out: dict = {}
    with Curator.open(**kw, ledger=tmp / "l.db") as c:
        out["count0"] = counts(c, r)
        times = [batch(c, r) for _ in range(max(1, charges // BATCH))]
    out["batch0"], out["batch_last"] = times[0], times[-1]
    out["charges"] = len(times) * BATCH
    out["bytes"] = (tmp / "l.db").stat().st_size / max(1, charges)
    return out


def reopen(tmp: Path) -> dict:
    """A fresh process: reopen, remaining(), counts and a batch, and its peak memory."""
    import resource

    from dpcurator import Curator

    kw = setup(tmp)
    r = random.Random(2)
    out: dict = {}
    t0 = time.perf_counter()
    c = Curator.open(**kw, ledger=tmp / "l.db")
    out["reopen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    c.remaining()
    out["remaining"] = time.perf_counter() - t0
    out["count"] = counts(c, r)
    out["batch_reopened"] = batch(c, r)
    c.close()
    out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB (Linux: KiB)
    return out


def run(tree: Path, charges: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for step in (["--build", tmp, str(charges)], ["--reopen", tmp]):
            p = subprocess.run(
                [sys.executable, __file__, *step], env=env, capture_output=True, text=True
            )
            if p.returncode:
                raise SystemExit(f"{tree}: {' '.join(step[:1])} failed:\n{p.stderr}")
            out.update(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    if "--build" in sys.argv:
        i = sys.argv.index("--build")
        print(json.dumps(build(Path(sys.argv[i + 1]), int(sys.argv[i + 2]))))
        return
    if "--reopen" in sys.argv:
        print(json.dumps(reopen(Path(sys.argv[sys.argv.index("--reopen") + 1]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=30_000)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--only", choices=["before"])
    args = ap.parse_args()
    trees = [("this tree", ROOT)] + ([("before", args.before)] if args.before else [])
    if args.only:
        trees = [t for t in trees if t[0] == args.only]
    got = {name: run(tree, args.charges) for name, tree in trees}
    n = next(iter(got.values()))["charges"]
    rows = [
        ("count p50, no history", "count0", 1000, "ms"),
        (f"count p50 at {n:,} charges", "count", 1000, "ms"),
        ("10,000-query batch, the first", "batch0", 1, "s"),
        (f"10,000-query batch reaching {n:,}", "batch_last", 1, "s"),
        ("10,000-query batch after a reopen", "batch_reopened", 1, "s"),
        (f"reopen at {n:,} charges", "reopen", 1, "s"),
        ("remaining()", "remaining", 1, "s"),
        ("ledger bytes per charge", "bytes", 1, ""),
        ("peak RSS of the reopened process", "rss", 1, "MB"),
    ]
    names = [name for name, _ in trees]
    print(f"\n{'':38}" + "".join(f"{name:>14}" for name in names) + ("   ratio" if len(names) == 2 else ""))
    for label, key, scale, unit in rows:
        vals = [got[name][key] * scale for name in names]
        line = f"{label:38}" + "".join(f"{v:>11.2f} {unit:2}" for v in vals)
        if len(vals) == 2 and vals[1]:
            line += f"  {vals[0] / vals[1]:6.2f}x"
        print(line)


if __name__ == "__main__":
    main()
