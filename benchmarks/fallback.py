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

The curator does not need the exact maximum, only its admission decision, so each probe
is also *decided* (``OverlapFilter.decide``, one time limit per decision) at budgets
that leave the covered points a room T near the probe's true maximum M (from the exact
check, or from a run with a long time limit when that fell back): ``fits`` (T = M, just
admitted), ``fails`` (T = M - 1/100, the next loss below: just refused), ``-10%`` and
``+10%``. A decision *rests on a bound* when it refuses without a point exceeding T
(``Decision.exact`` False); admissions always rest on a safe upper bound and are
certain. ``wrong`` counts decisions that differ from the one M gives: an admission
there would overspend the budget, a refusal is only conservative.

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
#: The rooms T (what the budget leaves for the covered points) each probe is decided at.
ROOMS = {
    "fits": lambda m: m,
    "fails": lambda m: m - Fraction(1, SCALE),
    "-10%": lambda m: Fraction(round(m * Fraction(9, 10) * SCALE), SCALE),
    "+10%": lambda m: Fraction(round(m * Fraction(11, 10) * SCALE), SCALE),
}
#: Seconds for the true maximum of a probe whose exact check fell back.
REFERENCE_LIMIT = 60.0


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
    decided: dict[str, list[tuple[bool, bool, bool, float]]] = {r: [] for r in ROOMS}
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
        m = loss.value if loss.exact else None
        if m is None:
            ref = of.max_loss(near, within=q, time_limit=REFERENCE_LIMIT)
            m = ref.value if ref.exact else None
        for name, room in ROOMS.items():
            if m is None:
                continue  # the true maximum is unknown: no decision to check
            t, cost = room(m), Fraction(1, 20)
            fork = filt.fork()
            fork.budget = t + cost
            t0 = time.perf_counter()
            d = fork.decide("adult", q, cost, deadline=time.monotonic() + of.SOLVER_TIME_LIMIT)
            took = time.perf_counter() - t0
            assert d is not None
            on_bound = not d.admitted and not d.exact
            decided[name].append((d.admitted, on_bound, d.admitted != (m <= t), took))
    out: dict[str, object] = {"fallbacks": fallbacks, "times": times, "decided": decided}
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
    results: dict[str, dict] = {
        label: {"fallbacks": [], "times": [], "decided": {r: [] for r in ROOMS}}
        for label, _ in trees
    }
    step = -(-args.probes // args.rounds)
    for first in range(0, args.probes, step):  # alternate: the load changes over a run
        for label, tree in trees:
            got = run(tree, args, first, min(step, args.probes - first))
            for key in ("fallbacks", "times"):
                results[label][key] += got.pop(key)
            for room, rows in got.pop("decided").items():
                results[label]["decided"][room] += rows
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
    print()
    head = f"{'tree':<8}{'room':<7}{'decided':>8}{'admitted':>9}{'on bound':>9}{'rate':>7}"
    head += f"{'wrong':>7}{'p50 s':>8}{'p95 s':>8}"
    print(head)
    print("-" * len(head))
    for label, r in results.items():
        for room, rows in r["decided"].items():
            n = len(rows)
            admitted = sum(a for a, _, _, _ in rows)
            bound = sum(b for _, b, _, _ in rows)
            wrong = sum(w for _, _, w, _ in rows)
            took = sorted(t for _, _, _, t in rows)
            rate = f"{bound / n:.0%}" if n else "-"
            p50 = statistics.median(took) if took else 0.0
            p95 = took[min(len(took) - 1, int(0.95 * len(took)))] if took else 0.0
            print(
                f"{label:<8}{room:<7}{n:>8}{admitted:>9}{bound:>9}{rate:>7}{wrong:>7}"
                f"{p50:8.2f}{p95:8.2f}"
            )


if __name__ == "__main__":
    main()
