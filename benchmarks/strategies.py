"""Benchmark: what to measure for a workload (strategies) against measuring it directly.

For each workload: every candidate strategy's expected total squared error of the
released answers (exact discrete variances at the costs as charged; ``total`` objective),
the time to plan, and an empirical check on the real data: 20 releases (the strategy's
tables counted exactly once, 20 independent draws of exact noise from the OS CSPRNG,
least-squares answers) against the true counts; the mean squared error over the 20
releases should be within 10% of the planned figure (its standard error is about
sqrt(2/20) of it for a few dominant answers, far less for many). Published figures
(continuous noise) are quoted as constants with their source.

``--before TREE`` plans the same workloads with another source tree (e.g. a worktree of
the commit before strategies) in a subprocess, in the same run: today's figure (direct,
optimal split for ``total``) and its planning time, side by side. ``--cli`` also times
``dpcurator answer`` on examples/adult/ranges.txt and ``dpcurator demo`` (wall and peak
memory) for each tree.

    .venv/bin/python benchmarks/strategies.py [--before TREE] [--cli] [--only NAME]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
ADULT = ["age", "education", "marital-status", "occupation", "race", "sex", "income"]
ADULT3 = ["workclass", "education", "marital-status", "race", "sex", "income"]
CENSUS = [
    "age",
    "class_of_worker",
    "education",
    "marital_status",
    "race",
    "sex",
    "citizenship",
    "income",
]


def _marginals(attrs: list[str], ks: tuple[int, ...]) -> str:
    lines = []
    for k in ks:
        for c in itertools.combinations(attrs, k):
            lines.append(f"histogram({c[0]})" if k == 1 else f"marginal({', '.join(c)})")
    return "\n".join(lines)


def workloads() -> list[dict]:
    ranges = "\n".join(f"age BETWEEN {a} AND {b}" for a in range(17, 91) for b in range(a, 91))
    adult = {
        "data": str(SHARED / "adult" / "adult.data"),
        "schema": str(ROOT / "examples" / "adult" / "schema.json"),
        "columns": str(ROOT / "examples" / "adult" / "columns.txt"),
    }
    census = {
        "data": str(SHARED / "census-income" / "census-income.data.csv.gz"),
        "schema": str(ROOT / "examples" / "census" / "schema.json"),
        "columns": str(ROOT / "examples" / "census" / "columns.txt"),
    }
    return [
        dict(
            adult,
            name="adult 1-2-way, eps=1",
            text=_marginals(ADULT, (1, 2)),
            budget=("epsilon", 1.0),
            published=("HDMM marginals (McKenna et al. VLDB 2018)", 1_249_000),
            target=1_250_000,
        ),
        dict(
            adult,
            name="adult 1-2-way, rho=0.5",
            text=_marginals(ADULT, (1, 2)),
            budget=("rho", 0.5),
            published=("ResidualPlanner (Xiao et al. NeurIPS 2023)", 43_078),
            target=45_000,
        ),
        dict(
            adult,
            name="age ranges (2,775), eps=1",
            text=ranges,
            budget=("epsilon", 1.0),
            published=("HDMM (McKenna et al. VLDB 2018)", 93_088),
            target=100_000,
        ),
        dict(
            adult,
            name="ranges.txt, eps=1",
            text=(ROOT / "examples/adult/ranges.txt").read_text(),
            budget=("epsilon", 1.0),
            published=("HDMM (issue's figure)", 446_647),
            target=184_106,
        ),
        dict(
            adult,
            name="adult 3-way, eps=1",
            text=_marginals(ADULT3, (3,)),
            budget=("epsilon", 1.0),
            published=None,
            target=None,
        ),
        dict(
            census,
            name="census 1-2-way, eps=1",
            text=_marginals(CENSUS, (1, 2)),
            budget=("epsilon", 1.0),
            published=None,
            target=None,
        ),
    ]


def plan_figures(w: dict) -> dict:
    """Plan ``w`` with the tree on sys.path: direct (optimal, total) figure and time, and,
    when this tree has strategies, every candidate's."""
    from dpcurator.planner import make_plan
    from dpcurator.privacy import ZCDP, PureDP
    from dpcurator.queries import Schema, parse_workload_text

    schema = Schema.load(w["schema"])
    wl = parse_workload_text(w["text"], schema)
    g = PureDP(w["budget"][1]) if w["budget"][0] == "epsilon" else ZCDP(w["budget"][1])
    t = time.perf_counter()
    plan = make_plan(wl.queries, wl.weights, g, "optimal", objective="total", compare=False)
    seconds = time.perf_counter() - t
    out = {"queries": len(wl), "seconds": seconds, "direct": plan.expected_sq.get("optimal")}
    cands = getattr(plan, "candidates", ())
    out["candidates"] = [
        {
            "name": c.name,
            "detail": c.detail,
            "total": c.total,
            "objective": c.objective,
            "bound": c.bound,
            "seconds": c.seconds,
            "note": c.note,
        }
        for c in cands
    ]
    out["chosen"] = getattr(plan, "strategy_name", "direct")
    return out


def empirical(w: dict, releases: int = 20) -> tuple[str, float, float, float, float]:
    """(strategy, planned total, mean over releases of the total squared error, its
    standard error from the releases, seconds)."""
    import numpy as np

    from dpcurator.backends import load_table
    from dpcurator.mechanisms import SystemRandomSource
    from dpcurator.planner import make_plan
    from dpcurator.privacy import ZCDP, PureDP
    from dpcurator.queries import Query, Schema, parse_workload_text

    schema = Schema.load(w["schema"])
    wl = parse_workload_text(w["text"], schema)
    g = PureDP(w["budget"][1]) if w["budget"][0] == "epsilon" else ZCDP(w["budget"][1])
    plan = make_plan(wl.queries, wl.weights, g, "optimal", objective="total", compare=False)
    cols = [c.strip() for c in Path(w["columns"]).read_text().splitlines() if c.strip()]
    t0 = time.perf_counter()
    be = load_table(w["data"], schema, separator=", ", header=False, columns=cols)
    truth = np.asarray(be.counts(list(wl.queries)), float)
    rng = SystemRandomSource()
    errs = []
    if plan.strategy is None:
        planned = float(plan.answer_variances().sum())
        for _ in range(releases):
            noisy = truth + np.array([float(n.sample(rng=rng)) for n in plan.noises])
            errs.append(float(np.sum((noisy - truth) ** 2)))
    else:
        sp = plan.strategy
        planned = float(sp.variances.sum())
        cells = [[Query.from_coverages(schema, c) for c in m.cells] for m in sp.measurements]
        counts = [np.asarray(be.counts(qs), np.int64) for qs in cells]
        for _ in range(releases):
            noisy = [
                y + np.atleast_1d(m.noise.sample(size=len(y), rng=rng)).astype(np.int64)
                for y, m in zip(counts, sp.measurements, strict=True)
            ]
            errs.append(float(np.sum((sp.reconstruct(noisy) - truth) ** 2)))
    be.close()
    se = float(np.std(errs, ddof=1) / np.sqrt(len(errs)))
    return plan.strategy_name, planned, float(np.mean(errs)), se, time.perf_counter() - t0


def _worker(tree: Path, ws: list[dict]) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    res = subprocess.run(
        [sys.executable, __file__, "--worker", str(tree)],
        input=json.dumps(ws),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def _cli(tree: Path) -> dict[str, tuple[float, float]]:
    """Wall seconds and peak MB of ``answer`` on ranges.txt and ``demo``, run from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    ex = tree / "examples"
    cmds = {
        "answer ranges.txt": [
            sys.executable,
            "-m",
            "dpcurator.cli",
            "answer",
            "--data",
            str(ex / "data/adult-sample.csv"),
            "--schema",
            str(ex / "adult/schema.json"),
            "--workload",
            str(ex / "adult/ranges.txt"),
            "--epsilon",
            "1",
            "--ledger",
            ":memory:",
            "--out",
            os.devnull + ".csv",
        ],
        "demo": [sys.executable, "-m", "dpcurator.cli", "demo"],
    }
    out = {}
    for name, cmd in cmds.items():
        cmd = [c if c != os.devnull + ".csv" else "/tmp/strategies-bench-out.csv" for c in cmd]
        t = time.perf_counter()
        res = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *cmd],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
        )
        wall = time.perf_counter() - t
        peak = int(res.stderr.strip().splitlines()[-1]) / 1024
        out[name] = (wall, peak)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="another source tree to plan with too")
    ap.add_argument("--cli", action="store_true", help="also time answer and demo")
    ap.add_argument("--only", help="workloads whose name contains this")
    ap.add_argument("--releases", type=int, default=20)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        ws = json.loads(sys.stdin.read())
        print(json.dumps([plan_figures(w) for w in ws]))
        return
    ws = [w for w in workloads() if not args.only or args.only in w["name"]]
    before = _worker(args.before, ws) if args.before else [None] * len(ws)
    print("# expected total squared error of the released answers (objective: total)")
    print(f"{'workload':<27}{'strategy':<11}{'expected':>14}{'plan s':>8}  detail")
    summary = []
    for w, b in zip(ws, before, strict=True):
        after = plan_figures(w)
        if b is not None:
            print(
                f"{w['name']:<27}{'BEFORE':<11}{b['direct']:>14,.0f}{b['seconds']:>8.2f}  "
                "direct, optimal split (the tree given by --before)"
            )
        for c in after["candidates"]:
            mark = "*" if c["name"] == after["chosen"] else " "
            if c["objective"] is None:
                print(
                    f"{w['name']:<27}{mark}{c['name']:<10}{'-':>14}{c['seconds']:>8.2f}  {c['note'][:60]}"
                )
            else:
                fig = c["objective"] if c["total"] is None else c["total"]
                tag = ">= " if c["bound"] else ""
                print(
                    f"{w['name']:<27}{mark}{c['name']:<10}{tag + format(fig, ',.0f'):>14}"
                    f"{c['seconds']:>8.2f}  {c['detail'][:60]}"
                )
        if w["published"]:
            src, fig = w["published"]
            print(f"{w['name']:<27}{'published':<11}{fig:>14,.0f}{'':>8}  {src}")
        chosen, planned, mse, se, secs = empirical(w, args.releases)
        ratio = mse / planned
        print(
            f"{w['name']:<27}{'EMPIRICAL':<11}{mse:>14,.0f}{secs:>8.2f}  {chosen}: mean of "
            f"{args.releases} releases / planned = {ratio:.3f} +- {se / planned:.3f} (s.e.)"
        )
        print(
            f"{w['name']:<27}{'TOTAL PLAN':<11}{'':>14}{after['seconds']:>8.2f}  make_plan, all candidates"
        )
        summary.append((w, b, after, planned, mse))
        print(flush=True)
    print(
        f"{'workload':<27}{'before':>14}{'after':>14}{'ratio':>7}{'target':>12}{'plan s before':>14}"
        f"{'after':>7}{'emp/plan':>9}"
    )
    for w, b, after, planned, mse in summary:
        bf = b["direct"] if b else float("nan")
        tgt = f"{w['target']:,}" if w["target"] else "-"
        bs = f"{b['seconds']:.2f}" if b else "-"
        print(
            f"{w['name']:<27}{bf:>14,.0f}{planned:>14,.0f}{bf / planned:>7.2f}{tgt:>12}{bs:>14}"
            f"{after['seconds']:>7.2f}{mse / planned:>9.3f}"
        )
    if args.cli:
        print("\n# command line, wall seconds and peak MB (children's peak so far)")
        trees = [("after", ROOT)] + ([("before", args.before)] if args.before else [])
        for label, tree in trees:
            for name, (wall, peak) in _cli(tree).items():
                print(f"{label:<8}{name:<20}{wall:>8.2f} s{peak:>8.0f} MB")


if __name__ == "__main__":
    main()
