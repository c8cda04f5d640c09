"""Benchmark: releasing workloads with the planner.

For Adult and census-income (../shared/data, UCI, CC BY 4.0), workloads of all 1-, 2- and
3-way marginals over chosen attributes, random range counts, and a mixture (a total and
its breakdowns): gamma, expected total |noise| under sequential, uniform and optimal
allocation (exact discrete distributions), the measured total |noise| of one real
release of each (noise from the OS CSPRNG; the truth from a separate exact count), and
the end-to-end time of the optimal release (load, plan, charge, one scan, noise, CSV).

    .venv/bin/python benchmarks/workloads.py [--epsilon 1] [--only adult|census]
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import sys
import time
from pathlib import Path

import numpy as np

from dpcurator import Curator
from dpcurator.backends import load_table
from dpcurator.mechanisms import SystemRandomSource
from dpcurator.planner import make_plan
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_workload

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

DATASETS = {
    "adult": {
        "data": SHARED / "adult" / "adult.data",
        "schema": ROOT / "examples" / "adult" / "schema.json",
        "columns": ROOT / "examples" / "adult" / "columns.txt",
        "attrs": [
            "workclass",
            "education",
            "marital-status",
            "occupation",
            "relationship",
            "race",
            "sex",
            "income",
        ],
        "attrs3": ["workclass", "education", "marital-status", "race", "sex", "income"],
        "ranges": [("age", 17, 90), ("hours-per-week", 1, 99), ("education-num", 1, 16)],
        "mixture": (ROOT / "examples" / "adult" / "mixture.txt").read_text(),
    },
    "census": {
        "data": SHARED / "census-income" / "census-income.data.csv.gz",
        "schema": ROOT / "examples" / "census" / "schema.json",
        "columns": ROOT / "examples" / "census" / "columns.txt",
        "attrs": [
            "class_of_worker",
            "education",
            "marital_status",
            "major_occupation",
            "race",
            "sex",
            "citizenship",
            "income",
        ],
        "attrs3": ["class_of_worker", "education", "marital_status", "race", "sex", "income"],
        "ranges": [("age", 0, 90), ("weeks_worked", 0, 52)],
        "mixture": "total\nhistogram(sex)\nhistogram(income)\nmarginal(sex, income)\n"
        "marginal(sex, race, income)\nmarginal(education, income)\nmarginal(major_occupation, sex)\n"
        "marginal(citizenship, race)\n",
    },
}


def workloads(d: dict) -> dict[str, str]:
    a, a3 = d["attrs"], d["attrs3"]
    rng = np.random.default_rng(1)
    ranges = []
    for _ in range(200):
        k = int(rng.integers(1, len(d["ranges"]) + 1))
        parts = []
        for name, lo, hi in d["ranges"][:k]:
            x, y = sorted(rng.integers(lo, hi + 1, 2).tolist())
            parts.append(f"{name} BETWEEN {x} AND {y}")
        ranges.append(" AND ".join(parts))
    return {
        "1-way marginals": "\n".join(f"histogram({x})" for x in a),
        "2-way marginals": "\n".join(
            f"marginal({x}, {y})" for x, y in itertools.combinations(a, 2)
        ),
        "1-3-way marginals": "\n".join(
            f"marginal({', '.join(c)})" for k in (1, 2, 3) for c in itertools.combinations(a3, k)
        ),
        "200 range counts": "\n".join(ranges),
        "mixture": d["mixture"],
    }


def measured(noises, rng) -> float:
    total = 0.0
    by: dict[int, list] = {}
    for n in noises:
        by.setdefault(id(n), [n, 0])[1] += 1
    for n, k in by.values():
        total += float(np.abs(np.atleast_1d(n.sample(size=k, rng=rng))).sum())
    return total


def run(name: str, d: dict, epsilon: float) -> list[dict]:
    schema = Schema.load(d["schema"])
    cols = [c.strip() for c in d["columns"].read_text().splitlines() if c.strip()]
    opts = {"separator": ", ", "header": False, "columns": cols}
    t = time.perf_counter()
    truth_backend = load_table(d["data"], schema, **opts)
    load_s = time.perf_counter() - t
    rng = SystemRandomSource()
    out = []
    for wname, text in workloads(d).items():
        wl = parse_workload(text, schema)
        truth = truth_backend.counts(list(wl.queries))
        t0 = time.perf_counter()
        with Curator.open(data=d["data"], schema=schema, budget=PureDP(epsilon), **opts) as cur:
            t1 = time.perf_counter()
            plan = make_plan(wl.queries, wl.weights, PureDP(epsilon), "optimal", objective="total")
            t2 = time.perf_counter()
            ans = cur.release(list(plan.queries), list(plan.values))
            buf = io.StringIO()
            w = csv.writer(buf)
            for a in ans:
                w.writerow([a.query, a.value, a.cost, a.noise, a.noise_parameter, *a.interval])
            t3 = time.perf_counter()
        seq = make_plan(wl.queries, wl.weights, PureDP(epsilon), "sequential", compare=False)
        uni = make_plan(wl.queries, wl.weights, PureDP(epsilon), "uniform", compare=False)
        e = plan.expected_abs
        row = {
            "data": name,
            "workload": wname,
            "t": len(wl),
            "gamma": plan.gamma,
            "exp_seq": e["sequential"],
            "exp_uni": e["uniform"],
            "exp_opt": e["optimal"],
            "meas_seq": measured(seq.noises, rng),
            "meas_uni": measured(uni.noises, rng),
            "meas_opt": float(np.abs(np.array([a.value for a in ans]) - truth).sum()),
            "seq/opt": e["sequential"] / e["optimal"],
            "gap": plan.allocation.objective / plan.allocation.lower_bound - 1
            if plan.allocation.lower_bound
            else float("nan"),
            "load_s": t1 - t0,
            "plan_s": t2 - t1,
            "release_s": t3 - t2,
            "total_s": t3 - t0,
        }
        out.append(row)
        print(
            f"{name:<7}{wname:<19}{row['t']:>6}{row['gamma']:>6g}{row['exp_seq']:>13,.0f}{row['exp_uni']:>11,.0f}"
            f"{row['exp_opt']:>11,.0f}{row['meas_seq']:>13,.0f}{row['meas_uni']:>11,.0f}{row['meas_opt']:>11,.0f}"
            f"{row['seq/opt']:>9,.0f}x{row['exp_uni'] / row['exp_opt']:>6.2f}x"
            f"{row['load_s']:>7.2f}{row['plan_s']:>7.2f}{row['release_s']:>7.2f}{row['total_s']:>7.2f}",
            flush=True,
        )
    truth_backend.close()
    print(f"# {name}: truth load {load_s:.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--only", choices=sorted(DATASETS))
    args = ap.parse_args()
    print(
        f"# pure DP, epsilon = {args.epsilon:g}; discrete Laplace; expected (exp) and measured (meas) total |noise|"
    )
    print(
        f"{'data':<7}{'workload':<19}{'t':>6}{'gamma':>6}{'exp seq':>13}{'exp uni':>11}{'exp opt':>11}"
        f"{'meas seq':>13}{'meas uni':>11}{'meas opt':>11}{'seq/opt':>10}{'uni/opt':>7}"
        f"{'load':>7}{'plan':>7}{'rel+out':>7}{'total':>7}"
    )
    for name, d in DATASETS.items():
        if args.only and name != args.only:
            continue
        if not Path(d["data"]).exists():
            print(f"# {name}: {d['data']} not found, skipped", file=sys.stderr)
            continue
        run(name, d, args.epsilon)


if __name__ == "__main__":
    main()
