"""Can one analyst stall the others? Hard overlap checks next to trivial requests.

An analyst sends counts of random subset predicates over 12 attributes of 20 values
(maximum overlap is NP-hard on such workloads) at epsilon 0.003 on a budget of 1, until
the cheap level bound no longer admits them and every request needs the exact
maximum-overlap computation. Meanwhile a second *process* on the same ledger sends
trivial requests on another table. The table reports the latency of both: the second
analyst must not wait for the first one's solver.

    python benchmarks/stall.py [--charges 340] [--probes 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dpcurator import Curator
from dpcurator.errors import BudgetExceeded
from dpcurator.privacy import PureDP

ATTRS = [f"c{i}" for i in range(12)]
VALUES = [f"v{j}" for j in range(20)]


def hard_query(rng: random.Random) -> str:
    parts = []
    for a in rng.sample(ATTRS, rng.randint(1, 3)):
        vals = [v for v in VALUES if rng.random() < 0.5] or [rng.choice(VALUES)]
        parts.append(f"{a} IN ({', '.join(repr(v) for v in vals)})")
    return " AND ".join(parts)


def open_curator(tmp: Path) -> Curator:
    return Curator.open(
        tables={
            "hard": (tmp / "hard.csv", tmp / "hard.json"),
            "easy": (tmp / "easy.csv", tmp / "easy.json"),
        },
        budget=PureDP(1000.0),
        ledger=tmp / "ledger.db",
    )


def trivial_requests(tmp: str, start: mp.Event, out: mp.Queue, n: int) -> None:
    with open_curator(Path(tmp)) as c:
        start.wait()
        times = []
        for i in range(n):
            t = time.perf_counter()
            c.count(f"x = {i % 10}", epsilon=0.001, table="easy")
            times.append(time.perf_counter() - t)
            time.sleep(0.2)
        out.put(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--charges", type=int, default=340)
    ap.add_argument("--probes", type=int, default=10)
    args = ap.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        g = np.random.default_rng(0)
        pd.DataFrame({a: g.choice(VALUES, 2000) for a in ATTRS}).to_csv(
            tmp / "hard.csv", index=False
        )
        (tmp / "hard.json").write_text(
            json.dumps(
                {"attributes": [{"name": a, "type": "categorical", "values": VALUES} for a in ATTRS]}
            )
        )
        pd.DataFrame({"x": g.integers(0, 10, 2000)}).to_csv(tmp / "easy.csv", index=False)
        (tmp / "easy.json").write_text(
            json.dumps({"attributes": [{"name": "x", "type": "integer", "min": 0, "max": 9}]})
        )
        with open_curator(tmp) as c:
            # The budget is 1000 so that the easy table stays far from it; the hard
            # table's requests cost 3 each (0.003 of the budget, as on a budget of 1).
            t0 = time.perf_counter()
            for _ in range(args.charges):
                with contextlib.suppress(BudgetExceeded):
                    c.count(hard_query(rng), epsilon=3.0, table="hard")
            fill = time.perf_counter() - t0
            ctx = mp.get_context("spawn")
            start, out = ctx.Event(), ctx.Queue()
            other = ctx.Process(target=trivial_requests, args=(d, start, out, args.probes))
            other.start()
            time.sleep(3.0)  # let it load its data
            start.set()
            heavy = []
            refused = 0
            t_end = time.perf_counter() + 0.2 * args.probes + 1
            while time.perf_counter() < t_end or not heavy:
                t = time.perf_counter()
                try:
                    c.count(hard_query(rng), epsilon=3.0, table="hard")
                except BudgetExceeded:
                    refused += 1
                heavy.append(time.perf_counter() - t)
            light = out.get()
            other.join()
        print(f"{args.charges} hard charges answered in {fill:.1f} s")
        print(f"{'requests':>24} | {'n':>4} | {'p50 s':>7} | {'max s':>7}")
        for name, ts in (("hard (analyst A)", heavy), ("trivial (process B)", light)):
            print(f"{name:>24} | {len(ts):>4} | {statistics.median(ts):>7.3f} | {max(ts):>7.3f}")
        print(f"hard requests refused: {refused} of {len(heavy)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
