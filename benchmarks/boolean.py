"""Boolean queries (OR and NOT across columns) at scale.

1. Maximum overlap of 1,000 random OR/NOT queries over the Adult schema: how many
   disjoint boxes they become, the time, and whether gamma is exact or a certified bound
   (beside the colouring bound, as the paper computes it).
2. The curator's check-and-charge latency with 10^4 answered OR queries (budget so large
   nothing is refused: the check itself is timed, with its durable commit).

    python benchmarks/boolean.py [--quick]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpcurator import Curator
from dpcurator.curator.admission import Request
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, colouring_bound, max_overlap, parse_query

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
DATA = ROOT / "examples" / "data" / "adult-sample.csv"


def atom(schema: Schema, rnd: random.Random) -> str:
    a = rnd.choice(schema.attributes)
    if a.type == "integer":
        v = rnd.randint(a.min, a.max)
        return f"{a.name} {rnd.choice(['<', '>=', '='])} {v}"
    vals = rnd.sample(a.values, rnd.randint(1, min(3, len(a.values))))
    return f"{a.name} IN ({', '.join(repr(v).replace(chr(34), chr(39)) for v in vals)})"


def boolean_query(schema: Schema, rnd: random.Random) -> str:
    """A random query: an OR of two or three conjunctions, sometimes negated."""
    parts = [
        " AND ".join(atom(schema, rnd) for _ in range(rnd.randint(1, 2)))
        for _ in range(rnd.randint(2, 3))
    ]
    text = " OR ".join(f"({p})" for p in parts)
    return f"NOT ({text})" if rnd.random() < 0.3 else text


def overlap_case(n: int, seed: int) -> None:
    schema = Schema.load(SCHEMA)
    rnd = random.Random(seed)
    t0 = time.perf_counter()
    qs = [parse_query(boolean_query(schema, rnd), schema) for _ in range(n)]
    parse = time.perf_counter() - t0
    boxes = sum(len(q.boxes) for q in qs)
    t0 = time.perf_counter()
    res = max_overlap(qs, time_limit=60)
    solve = time.perf_counter() - t0
    col = colouring_bound(qs)
    print(
        f"{n:>8} | {boxes:>7} | {parse:>7.2f} | {solve:>7.2f} | {res.value:>6g} | "
        f"{'exact' if res.exact else 'bound':>6} | {col.value:>9g}"
    )


def latency(n_answered: int, tmp: Path) -> tuple[float, float, float]:
    rnd = random.Random(n_answered)
    with Curator.open(
        data=DATA,
        schema=SCHEMA,
        budget=PureDP(1e9),
        ledger=tmp / f"l{n_answered}.db",
    ) as c:
        schema = c.schema()
        pool = [parse_query(boolean_query(schema, rnd), schema) for _ in range(500)]
        for i in range(n_answered):
            q = pool[i % len(pool)]
            c._charge("data", [Request(q, Fraction(1, 100), "count", q.text, "bench")], None)
        times = []
        for _ in range(200):
            q = pool[rnd.randrange(len(pool))]
            t = time.perf_counter()
            c._charge("data", [Request(q, Fraction(1, 100), "count", q.text, "bench")], None)
            times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95)), float(ms.max())


def main() -> None:
    quick = "--quick" in sys.argv
    print("maximum overlap of random OR/NOT queries over the Adult schema (60 s limit)")
    print(
        f"{'queries':>8} | {'boxes':>7} | {'parse s':>7} | {'solve s':>7} | {'gamma':>6} | {'':>6} | colouring"
    )
    for n in (100,) if quick else (100, 1000):
        overlap_case(n, seed=1)
    print()
    print("check-and-charge with answered OR queries (durable commit included)")
    print(f"{'answered':>9} | {'p50 ms':>7} | {'p95 ms':>7} | {'max ms':>7}")
    with tempfile.TemporaryDirectory() as d:
        for n in (1000,) if quick else (1000, 10_000):
            p50, p95, top = latency(n, Path(d))
            print(f"{n:>9} | {p50:>7.2f} | {p95:>7.2f} | {top:>7.1f}")


if __name__ == "__main__":
    main()
