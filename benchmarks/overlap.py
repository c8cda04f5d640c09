"""Benchmark of exact maximum overlap against the paper's colouring bound.

Cases:
  (a) Adult (Becker & Kohavi 1996, UCI, CC BY 4.0; schema examples/adult/schema.json,
      written from adult.names): all 1-, 2- and 3-way marginals of its 9 categorical
      attributes (129 tables, 111,303 cells);
  (b) 10,000 random boxes over 3 integer attributes of size 1,000;
  (c) 10,000 attributes of 100 values (domain 10^20000), ~10,000 queries: histograms
      and 2-way marginals with random bins over random attributes, random range counts;
  (d) 300 queries each constraining 1-3 of 12 attributes to random subsets of 20 values;
  (e) the same with 600 queries (exact, or a certified upper bound at the time limit:
      a second line then gives the best point's weight and the gap).

Run: ``.venv/bin/python benchmarks/overlap.py [--seed N] [--cases abcde]``. The colouring
time includes building the pairwise-overlap graph; when t is too large for a t x t
matrix, the graph time is extrapolated from a 10,000-query sample (marked ``~``).
``parse s`` is the time to parse and expand the workload text (case a: 129 macros).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dpcurator.queries import (  # noqa: E402
    Attribute,
    Query,
    Schema,
    colouring_bound,
    max_overlap,
    overlap_graph,
    parse_workload,
)

ADULT_CATEGORICAL = (
    "workclass",
    "education",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "native-country",
    "income",
)


def case_a(rng: random.Random) -> tuple[list[Query], float]:
    schema = Schema.load(ROOT / "examples" / "adult" / "schema.json")
    lines = [
        f"marginal({', '.join(c)})"
        for k in (1, 2, 3)
        for c in itertools.combinations(ADULT_CATEGORICAL, k)
    ]
    t0 = time.perf_counter()
    wl = parse_workload("\n".join(lines) + "\n", schema)
    return list(wl.queries), time.perf_counter() - t0


def case_b(rng: random.Random) -> list[Query]:
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=999) for i in range(3)))
    out = []
    for _ in range(10_000):
        cov = {}
        for a in schema.attributes:
            lo, hi = sorted(rng.randint(0, 999) for _ in range(2))
            cov[a.name] = ((lo, hi + 1),)
        out.append(Query.from_coverages(schema, cov))
    return out


def _bins(rng: random.Random, n: int, k: int) -> list[tuple[int, int]]:
    edges = [0, *sorted(rng.sample(range(1, n), k - 1)), n]
    return list(itertools.pairwise(edges))


def case_c(rng: random.Random) -> list[Query]:
    m = 10_000
    schema = Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=99) for i in range(m)))
    names = schema.names
    out: list[Query] = []
    for _ in range(150):  # histograms with random bins
        a = rng.choice(names)
        for b in _bins(rng, 100, rng.randint(2, 12)):
            out.append(Query.from_coverages(schema, {a: (b,)}))
    for _ in range(150):  # 2-way marginals with random bins
        a, c = rng.sample(names, 2)
        for b1, b2 in itertools.product(
            _bins(rng, 100, rng.randint(2, 6)), _bins(rng, 100, rng.randint(2, 6))
        ):
            out.append(Query.from_coverages(schema, {a: (b1,), c: (b2,)}))
    while len(out) < 10_000:  # random range counts
        cov = {}
        for a in rng.sample(names, rng.randint(1, 3)):
            lo, hi = sorted(rng.randint(0, 99) for _ in range(2))
            cov[a] = ((lo, hi + 1),)
        out.append(Query.from_coverages(schema, cov))
    return out


def case_d(rng: random.Random, n: int = 300) -> list[Query]:
    schema = Schema(
        tuple(
            Attribute(f"c{i}", "categorical", values=tuple(f"v{j}" for j in range(20)))
            for i in range(12)
        )
    )
    out = []
    for _ in range(n):
        cov = {}
        for a in rng.sample(schema.names, rng.randint(1, 3)):
            vals = [p for p in range(20) if rng.random() < 0.5] or [rng.randrange(20)]
            cov[a] = tuple((p, p + 1) for p in vals)
        out.append(Query.from_coverages(schema, cov))
    return out


def case_e(rng: random.Random) -> list[Query]:
    return case_d(rng, 600)


def graph_time(queries: list[Query], rng: random.Random) -> tuple[float, bool]:
    """Seconds to build the pairwise-overlap graph (extrapolated when t > 20,000)."""
    t = len(queries)
    if t <= 20_000:
        t0 = time.perf_counter()
        overlap_graph(queries)
        return time.perf_counter() - t0, False
    sample = rng.sample(queries, 10_000)
    t0 = time.perf_counter()
    overlap_graph(sample)
    return (time.perf_counter() - t0) * (t / 10_000) ** 2, True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", default="abcde")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()
    makers = {"a": case_a, "b": case_b, "c": case_c, "d": case_d, "e": case_e}
    head = (
        f"{'case':<5}{'t':>8}{'gamma':>8}{'exact':>7}{'time s':>9}"
        f"{'colour':>8}{'colour s':>10}{'graph s':>10}{'speed-up':>10}{'parse s':>9}"
    )
    print(head)
    print("-" * len(head))
    for name in args.cases:
        rng = random.Random(args.seed)
        made = makers[name](rng)
        queries = made[0] if isinstance(made, tuple) else made
        parse = f"{made[1]:9.2f}" if isinstance(made, tuple) else f"{'-':>9}"
        t0 = time.perf_counter()
        res = max_overlap(queries, time_limit=args.time_limit)
        solve = time.perf_counter() - t0
        gt, est = graph_time(queries, rng)
        if len(queries) <= 20_000:
            t0 = time.perf_counter()
            col = colouring_bound(queries)
            ct = f"{time.perf_counter() - t0:10.2f}"
            cv = f"{col.value:8}"
            assert res.value <= col.value
        else:
            ct, cv = f"{'n/a':>10}", f"{'n/a':>8}"
        g = f"~{gt:.0f}" if est else f"{gt:.2f}"
        ratio = gt / solve
        speed = f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"
        print(
            f"({name})  {len(queries):>7}{res.value!s:>8}{'yes' if res.exact else 'NO':>7}"
            f"{solve:9.2f}{cv}{ct}{g:>10}{speed:>10}{parse}",
            flush=True,
        )
        if not res.exact:
            gap = res.upper_bound / res.lower_bound - 1 if res.lower_bound else math.inf
            print(f"      bound {res.upper_bound}, best point {res.lower_bound} (+{gap:.1%})")


if __name__ == "__main__":
    main()
