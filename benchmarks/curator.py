"""Curator benchmark: check-and-charge latency, and batch counting throughput.

    .venv/bin/python benchmarks/curator.py [--quick]

1. Latency of the check-and-charge step (overlap-aware filter + durable SQLite commit)
   when 100, 1,000 and 10,000 queries of a mixed workload have already been answered:
   p50 and p95 over the next 200 requests. Measured inside a real Curator on a real
   ledger file; counting and noise are excluded (they are measured in part 2).
2. Counting throughput: ``benchmarks/curator_counting.py`` (DuckDB vs per-query pandas).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from dpcurator import Curator
from dpcurator.curator.admission import Request
from dpcurator.privacy import PureDP
from dpcurator.queries import Query

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "region", "type": "categorical", "values": [f"r{i}" for i in range(20)]},
        {"name": "channel", "type": "categorical", "values": [f"c{i}" for i in range(8)]},
        {"name": "week", "type": "integer", "min": 1, "max": 52},
    ]
}


def mixed_request(schema, rnd: random.Random) -> Query:
    """A marginal cell, a range count, or a whole-histogram coverage, at random."""
    kind = rnd.random()
    if kind < 0.5:  # a cell of a 2-way marginal
        a, b = rnd.sample(["sex", "region", "channel", "week"], 2)
        covs = {}
        for name in (a, b):
            size = schema.attribute(name).size
            i = rnd.randrange(size)
            covs[name] = ((i, i + 1),)
        return Query.from_coverages(schema, covs)
    if kind < 0.9:  # a range count on age and maybe week
        lo = rnd.randrange(100)
        hi = rnd.randrange(lo, 100) + 1
        covs = {"age": ((lo, hi),)}
        if rnd.random() < 0.5:
            w = rnd.randrange(52)
            covs["week"] = ((w, min(52, w + rnd.randrange(1, 8))),)
        return Query.from_coverages(schema, covs)
    # a histogram over some attribute restricted to one region: covers that region
    i = rnd.randrange(20)
    return Query.from_coverages(schema, {"region": ((i, i + 1),)})


def latency(n_answered: int, tmp: Path, data: Path, schema_path: Path) -> tuple[float, ...]:
    rnd = random.Random(n_answered)
    ledger = tmp / f"ledger-{n_answered}.db"
    big = PureDP(1e9)  # large enough that nothing is refused: we time the check itself
    with Curator.open(data=data, schema=schema_path, budget=big, ledger=ledger) as c:
        schema = c._backends["data"].schema
        for _ in range(n_answered):
            q = mixed_request(schema, rnd)
            c._charge("data", [Request(q, Fraction(1, 100), "count", q.text, "bench")], None)
        times, exact = [], []
        for _ in range(200):
            q = mixed_request(schema, rnd)
            t = time.perf_counter()
            c._filter.fork().spent_on("data", q)  # the exact path, taken only near the budget
            exact.append(time.perf_counter() - t)
            t = time.perf_counter()
            c._charge("data", [Request(q, Fraction(1, 100), "count", q.text, "bench")], None)
            times.append(time.perf_counter() - t)
    ms, ex = np.array(times) * 1e3, np.array(exact) * 1e3
    return tuple(float(np.percentile(a, p)) for a in (ms, ex) for p in (50, 95))


def main() -> None:
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        schema_path = tmp / "schema.json"
        schema_path.write_text(json.dumps(SCHEMA))
        rng = np.random.default_rng(0)
        n = 10_000
        pd.DataFrame(
            {
                "age": rng.integers(0, 100, n),
                "sex": rng.choice(["F", "M"], n),
                "region": rng.choice([f"r{i}" for i in range(20)], n),
                "channel": rng.choice([f"c{i}" for i in range(8)], n),
                "week": rng.integers(1, 53, n),
            }
        ).to_csv(tmp / "data.csv", index=False)
        print(
            "check-and-charge latency (overlap-aware filter + durable SQLite commit, synchronous=FULL)"
        )
        print("(exact: the maximum-overlap computation the filter runs only when the fast bound")
        print(" would refuse, i.e. close to the budget)")
        print(
            f"{'answered':>10} | {'p50 ms':>8} | {'p95 ms':>8} | {'exact p50':>9} | {'exact p95':>9}"
        )
        for n_answered in (100, 1000) if quick else (100, 1000, 10_000):
            p50, p95, e50, e95 = latency(n_answered, tmp, tmp / "data.csv", schema_path)
            print(f"{n_answered:>10} | {p50:>8.2f} | {p95:>8.2f} | {e50:>9.1f} | {e95:>9.1f}")
    counting = Path(__file__).with_name("curator_counting.py")
    if counting.exists() and not quick:
        print()
        subprocess.run([sys.executable, str(counting)], check=True)


if __name__ == "__main__":
    main()
