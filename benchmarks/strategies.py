"""Benchmark: what to measure for a workload (strategies) against measuring it directly.

For each workload: every candidate strategy's expected total squared error of the
released answers (exact discrete variances at the costs as charged; ``total`` objective),
the time to plan, and an empirical check on the real data: releases (the strategy's
tables counted exactly once, independent draws of exact noise from the OS CSPRNG,
least-squares answers) against the true counts. The mean over the releases of the total
squared error should be within 10% of the planned figure. One release's total varies: by
about sqrt(2/k) of it when k answers' errors dominate, and for a range hierarchy, whose
2,775 answers are sums of a few dozen independent noises, by 67% of it. So at least 20
releases are drawn, and as many more as it takes (up to 5,000) for the mean's standard
error to be at most 2.5% of the planned figure, so that a 10% deviation is a 4-sigma
event; the standard deviation of one release's total is exact where the map from the
noises to the answers is small enough to build (the variance of a quadratic form in
independent noises, from their second and fourth moments), else estimated from the
releases. Each row prints the standard error and the interval that 95% of such means fall
in. Published figures (continuous noise) are quoted as constants with their source.

``--before TREE`` plans the same workloads with another source tree (e.g. a worktree of
an earlier commit) in a subprocess, in the same run: what that tree releases (its
chosen strategy's figure, the direct optimal split's for a tree without strategies)
and its planning time, side by side. ``--cli`` also times
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


def _boxes(k: int = 1000, seed: int = 2024) -> str:
    """``k`` random boxes of Adult's age x hours-per-week (a range on each; numpy seed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(k):
        a, h = sorted(rng.integers(17, 91, 2)), sorted(rng.integers(1, 100, 2))
        lines.append(f"age BETWEEN {a[0]} AND {a[1]} AND hours-per-week BETWEEN {h[0]} AND {h[1]}")
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
            name="age x hours boxes, eps=1",
            text=_boxes(),
            budget=("epsilon", 1.0),
            published=None,
            target=None,
        ),
        dict(
            adult,
            name="age x hours boxes, rho=0.5",
            text=_boxes(),
            budget=("rho", 0.5),
            published=None,
            target=None,
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
    chosen = [c for c in out["candidates"] if c["name"] == out["chosen"]]
    # what this tree releases: its chosen strategy's figure (the direct split's when it
    # has no strategies, or chose direct)
    out["released"] = (
        chosen[0]["total"] if chosen and chosen[0]["total"] is not None else out["direct"]
    )
    return out


def _moments(noise) -> tuple[float, float]:
    """(variance, fourth moment) of one draw of ``noise``: closed forms for the discrete
    Laplace, P(k) = (1-p)/(1+p) p^|k| (E k^2 = 2p/(1-p)^2, E k^4 = 2p(1+11p+11p^2+p^3) /
    ((1+p)(1-p)^4)), else summed over the support."""
    import numpy as np

    scale = getattr(noise, "scale", None)
    if scale is not None:
        q = np.exp(-1.0 / float(scale))
        return noise.variance(), 2 * q * (1 + 11 * q + 11 * q**2 + q**3) / ((1 + q) * (1 - q) ** 4)
    sigma = float(noise.sigma)
    k = np.arange(-int(40 * sigma) - 10, int(40 * sigma) + 11, dtype=float)
    pk = np.exp(-(k**2) / (2 * sigma**2))
    pk /= pk.sum()
    return float(pk @ k**2), float(pk @ k**4)


def _spread(plan) -> float | None:
    """The exact standard deviation of one release's total squared error T = e^T G e
    (e the independent noise draws, G = L^T L, L their map to the answers):
    Var T = sum_j G_jj^2 (m4_j - 3 s_j^4) + 2 tr((G S)^2), S = diag(s^2). None when the
    release has too many noise terms to build L."""
    import numpy as np

    if plan.strategy is None:
        mom = {}
        for n in plan.noises:
            mom.setdefault(id(n), _moments(n))
        v = np.array([mom[id(n)] for n in plan.noises])
        return float(np.sqrt(np.sum(v[:, 1] - v[:, 0] ** 2)))
    sp = plan.strategy
    sizes = [m.rows for m in sp.measurements]
    if sum(sizes) > 2000:
        return None
    eye = np.eye(sum(sizes))
    lmap = np.array([sp.reconstruct(np.split(e, np.cumsum(sizes)[:-1])) for e in eye]).T
    g = lmap.T @ lmap
    mom = np.array([_moments(m.noise) for m in sp.measurements for _ in range(m.rows)])
    var, m4 = mom[:, 0], mom[:, 1]
    gs = g * var[None, :]
    return float(np.sqrt(np.sum(np.diag(g) ** 2 * (m4 - 3 * var**2)) + 2 * np.sum(gs * gs.T)))


def empirical(w: dict, releases: int = 20, target: float = 0.025, cap: int = 5000) -> dict:
    """Releases on the real data against the true counts: the planned total, the mean over
    the releases of the total squared error, its standard error and the number of
    releases. At least ``releases``; more when one release's total varies so much that
    their mean's standard error would exceed ``target`` of the planned figure (a few
    independent noise terms, as for range hierarchies): enough for that, up to ``cap``.
    The standard deviation of one release's total is exact where it can be computed
    (:func:`_spread`), else estimated from the releases."""
    import math

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
    sp = plan.strategy
    if sp is None:
        planned = float(plan.answer_variances().sum())

        def one() -> float:
            noisy = truth + np.array([float(n.sample(rng=rng)) for n in plan.noises])
            return float(np.sum((noisy - truth) ** 2))
    else:
        planned = float(sp.variances.sum())
        cells = [[Query.from_coverages(schema, c) for c in m.cells] for m in sp.measurements]
        counts = [
            m.measure(np.asarray(be.counts(qs), np.int64))
            for qs, m in zip(cells, sp.measurements, strict=True)
        ]

        def one() -> float:
            noisy = [
                y + np.atleast_1d(m.noise.sample(size=len(y), rng=rng)).astype(np.int64)
                for y, m in zip(counts, sp.measurements, strict=True)
            ]
            return float(np.sum((sp.reconstruct(noisy) - truth) ** 2))

    be.close()
    errs = [one() for _ in range(releases)]
    sd = _spread(plan)
    exact = sd is not None
    spread = sd if exact else float(np.std(errs, ddof=1))
    want = min(cap, max(releases, math.ceil((spread / (target * planned)) ** 2)))
    errs += [one() for _ in range(want - len(errs))]
    if not exact:
        spread = float(np.std(errs, ddof=1))
    return {
        "strategy": plan.strategy_name,
        "planned": planned,
        "mean": float(np.mean(errs)),
        "se": spread / math.sqrt(len(errs)),
        "exact_se": exact,
        "releases": len(errs),
        "seconds": time.perf_counter() - t0,
    }


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
                f"{w['name']:<27}{'BEFORE':<11}{b['released']:>14,.0f}{b['seconds']:>8.2f}  "
                f"{b['chosen']} (the tree given by --before)"
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
        emp = empirical(w, args.releases)
        planned, mse, se = emp["planned"], emp["mean"], emp["se"]
        lo, hi = planned - 1.96 * se, planned + 1.96 * se
        print(
            f"{w['name']:<27}{'EMPIRICAL':<11}{mse:>14,.0f}{emp['seconds']:>8.2f}  "
            f"{emp['strategy']}: mean of {emp['releases']} releases / planned = "
            f"{mse / planned:.3f} +- {se / planned:.3f} (s.e., "
            f"{'exact' if emp['exact_se'] else 'from the releases'}); 95% of such means "
            f"fall in [{lo:,.0f}, {hi:,.0f}]"
        )
        print(
            f"{w['name']:<27}{'TOTAL PLAN':<11}{'':>14}{after['seconds']:>8.2f}  make_plan, all candidates"
        )
        summary.append((w, b, after, planned, mse, se, emp["releases"]))
        print(flush=True)
    print(
        f"{'workload':<27}{'before':>14}{'after':>14}{'ratio':>7}{'target':>12}{'plan s before':>14}"
        f"{'after':>7}{'emp/plan':>9}{'+- s.e.':>8}{'releases':>9}"
    )
    for w, b, after, planned, mse, se, n in summary:
        bf = b["released"] if b else float("nan")
        tgt = f"{w['target']:,}" if w["target"] else "-"
        bs = f"{b['seconds']:.2f}" if b else "-"
        print(
            f"{w['name']:<27}{bf:>14,.0f}{planned:>14,.0f}{bf / planned:>7.2f}{tgt:>12}{bs:>14}"
            f"{after['seconds']:>7.2f}{mse / planned:>9.3f}{se / planned:>8.3f}{n:>9}"
        )
    if args.cli:
        print("\n# command line, wall seconds and peak MB (children's peak so far)")
        trees = [("after", ROOT)] + ([("before", args.before)] if args.before else [])
        for label, tree in trees:
            for name, (wall, peak) in _cli(tree).items():
                print(f"{label:<8}{name:<20}{wall:>8.2f} s{peak:>8.0f} MB")


if __name__ == "__main__":
    main()
