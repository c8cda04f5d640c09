"""How often the curator's exact budget check falls back to a safe upper bound.

    .venv/bin/python benchmarks/fallback.py [--answered 10000] [--probes 200] [--before TREE]

A table of the Adult schema (examples/adult/schema.json) has ``--answered`` random
answered queries, drawn with replacement from the queries of the Adult workloads
(examples/adult/*.txt, macros expanded) with random costs. Each probe is the check the
filter runs when its bounds do not fit (``OverlapFilter.local``: the largest loss over
the points of the next query, within the solver's time limit per request); it *falls
back* when the time limit stops the exact computation and a safe upper bound decides
instead (``Loss.exact`` False). Only probes whose segment grid exceeds the dense
prefix-sum limit count: below it the check is exact by construction. Also reported: the
whole-table worst loss (what other tables are charged at).

``--before TREE`` runs the same measurement, in the same run and with the same draws,
on another source tree (a ``git worktree`` of an older commit) and prints both; the two
trees take turns over ``--rounds`` slices of the probes, so that a change of load on
the machine falls on both (the checks take seconds, close to the time limit, so the
rate depends on the load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("workload", "marginals", "ranges", "mixture")
COSTS = (Fraction(1, 100), Fraction(1, 50), Fraction(1, 20))
SCALE = 100  # a common denominator of the costs: the solver's integer weights


def measure(answered: int, probes: int, seed: int, first: int, count: int) -> dict[str, object]:
    """Probes ``first`` .. ``first + count - 1`` (of ``probes`` drawn) on the source tree
    first on ``sys.path``: whether each exceeded the dense limit, fell back, and took how
    long; with ``first == 0``, also the whole-table worst loss."""
    import numpy as np

    from dpcurator.curator import overlap_filter as of
    from dpcurator.queries import Schema, parse_workload

    dense_max_overlap = _dense()
    schema = Schema.load(ROOT / "examples" / "adult" / "schema.json")
    pool = [
        q
        for name in WORKLOADS
        for q in parse_workload(ROOT / "examples" / "adult" / f"{name}.txt", schema).queries
    ]
    rng = np.random.default_rng(seed)
    filt = of.OverlapFilter(Fraction(10**6), "epsilon")
    for i, k in enumerate(rng.integers(0, len(pool), answered).tolist(), start=1):
        cost = COSTS[int(rng.integers(0, len(COSTS)))]
        filt.add(of.Charge(i, "adult", None, pool[k], cost, Fraction(10**6)))
    index = filt._tables["adult"]
    fallbacks, times = [], []
    for k in rng.integers(0, len(pool), probes).tolist()[first : first + count]:
        q = pool[k]
        near = index.candidates(q)
        weights = np.array([float(c.cost * SCALE) for c in near])
        if (
            len(near) > 1
            and dense_max_overlap([c.query for c in near], weights, within=q) is not None
        ):
            continue  # exact by prefix sums
        fork = filt.fork()
        t0 = time.perf_counter()
        loss = fork.local("adult", q, deadline=time.monotonic() + of.SOLVER_TIME_LIMIT)
        times.append(time.perf_counter() - t0)
        fallbacks.append(not loss.exact)
    out: dict[str, object] = {"fallbacks": fallbacks, "times": times}
    if first == 0:
        t0 = time.perf_counter()
        worst = of.max_loss(filt.charges("adult"), time_limit=of.SOLVER_TIME_LIMIT)
        out["worst_exact"] = worst.exact
        out["worst_seconds"] = time.perf_counter() - t0
    return out


def _dense():  # the dense path moved into the overlap package; older trees have it here
    try:
        from dpcurator.queries.overlap.dense import dense_max_overlap
    except ImportError:
        from dpcurator.queries.dense import dense_max_overlap  # type: ignore[no-redef]
    return dense_max_overlap


def run(tree: Path, args: argparse.Namespace, first: int, count: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(tree / "src"), "--first", str(first)]
    cmd += ["--count", str(count), "--answered", str(args.answered), "--probes", str(args.probes)]
    cmd += ["--seed", str(args.seed)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--answered", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4, help="alternate the trees this often")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--before", type=Path, help="another source tree to measure too")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(args.worker))
        got = measure(args.answered, args.probes, args.seed, args.first, args.count)
        print(json.dumps(got))
        return
    trees = [("after", ROOT)] + ([("before", args.before)] if args.before else [])
    results: dict[str, dict] = {label: {"fallbacks": [], "times": []} for label, _ in trees}
    step = -(-args.probes // args.rounds)
    for first in range(0, args.probes, step):  # alternate: the load changes over a run
        for label, tree in trees:
            got = run(tree, args, first, min(step, args.probes - first))
            for key in ("fallbacks", "times"):
                results[label][key] += got.pop(key)
            results[label].update(got)
    head = f"{'tree':<8}{'answered':>9}{'probes':>8}{'over':>6}{'fallback':>10}{'rate':>7}"
    head += f"{'p50 s':>8}{'p95 s':>8}{'worst':>8}{'worst s':>9}"
    print(head)
    print("-" * len(head))
    for label, r in results.items():
        over, falls, times = len(r["times"]), sum(r["fallbacks"]), sorted(r["times"])
        rate = f"{falls / over:.0%}" if over else "-"
        p50 = statistics.median(times) if times else 0.0
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))] if times else 0.0
        print(
            f"{label:<8}{args.answered:>9}{args.probes:>8}{over:>6}{falls:>10}{rate:>7}"
            f"{p50:8.2f}{p95:8.2f}{'exact' if r['worst_exact'] else 'bound':>8}"
            f"{r['worst_seconds']:9.2f}"
        )


if __name__ == "__main__":
    main()
