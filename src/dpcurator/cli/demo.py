"""``dpcurator demo``: the main job on a small shipped copy of the Adult data.

Releases all 1- and 2-way marginals of seven attributes of a 3,257-row sample of Adult
(Becker & Kohavi 1996, UCI, CC BY 4.0; examples/data/README.md) under one budget, with
noise from the operating system's CSPRNG, and shows what parallel composition (maximum
overlap) and the optimal allocation saved against sequential composition. No network.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from dpcurator.errors import InvalidParameter

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "examples" / "data" / "adult-sample.csv"
SCHEMA = ROOT / "examples" / "adult" / "schema.json"
WORKLOAD = ROOT / "examples" / "adult" / "marginals.txt"


#: The released table the demo shows, with its intervals.
SHOWCASE = "marginal(sex, income)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="release marginal tables of a shipped Adult sample and show the savings",
        description="Release all 1- and 2-way marginals of seven attributes of a small "
        "shipped sample of the Adult data (CC BY 4.0) under one privacy budget, make them "
        "consistent (least squares, free post-processing), and show what parallel "
        "composition and the optimal allocation saved against sequential composition. "
        "Noise comes from the operating system's CSPRNG; the ledger is in memory (a demo "
        "keeps nothing); no network.",
    )
    p.add_argument("--epsilon", type=float, default=1.0, help="pure-DP budget (default 1)")
    p.add_argument("--out", metavar="FILE", help="also write every answer (.csv, .json, .parquet)")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the showcase table with its intervals, the expected error of each answer "
        "under the three allocations, and the budget spent per query",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--progress", action="store_true", help="show a progress bar (default: on a terminal)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dpcurator import Curator
    from dpcurator.cli import output
    from dpcurator.cli.answer import summary
    from dpcurator.cli.release import release_intervals, rows_of
    from dpcurator.planner import make_plan
    from dpcurator.planner.consistency import consistency_system
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_workload

    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidParameter(f"--epsilon must be a finite number > 0, got {args.epsilon}")
    fmt = output.out_format(args.out) if args.out else None
    if args.out:
        output.check_writable(args.out, "--out")
    if args.plot:
        output.check_writable(args.plot, "--plot")
    for f in (DATA, SCHEMA, WORKLOAD):
        if not f.is_file():
            raise InvalidParameter(
                f"demo file {f} not found (the demo runs from a source checkout)"
            )
    t0 = time.monotonic()
    with output.progress(5, True if args.progress else None) as bar:
        bar.step("reading the workload")
        schema = Schema.load(SCHEMA)
        wl = parse_workload(WORKLOAD, schema)
        budget = PureDP(args.epsilon)
        bar.step("loading the data, planning")
        with Curator.open(
            data=DATA, schema=schema, budget=budget, separator=",", header=True
        ) as cur:
            plan = make_plan(wl.queries, wl.weights, budget, "optimal")
            bar.step("charging, counting, noise")
            answers = cur.release(list(plan.queries), list(plan.values), kind="demo")
        bar.step("consistent answers (least squares)")
        line = _line_of(SHOWCASE)
        show = [i for i, q in enumerate(plan.queries) if q.line == line]
        system = consistency_system(plan.queries)
        rel = release_intervals(plan, answers, ["consistent"], 0.95, system, exact_rows=show)
        rows = rows_of(plan, answers, rel, 0.95)
        bar.step("writing")
        if args.out:
            assert fmt is not None
            output.write_rows(rows, args.out, fmt)
        if args.plot:
            from dpcurator.cli.plots import plot_release

            text = WORKLOAD.read_text().splitlines()
            plot_release(
                plan,
                rows,
                args.plot,
                table_line=line,
                line_text={q.line: text[q.line - 1].strip() for q in plan.queries},
                title=f"dpcurator demo: {len(plan.queries):,} cells of the Adult sample, "
                f"epsilon = {args.epsilon:g}",
            )
    seconds = time.monotonic() - t0
    d = summary(plan, args.out, seconds)
    d["postprocess"] = ["consistent"]
    d["ledger"] = {"path": ":memory:", "durable": False}
    d["showcase"] = [rows[i] for i in show]
    if args.plot:
        d["plot"] = args.plot
    if args.json:
        print(json.dumps(d))
        return 0
    tables = len({q.line for q in plan.queries})
    e = plan.expected_abs
    t = len(plan.queries)
    print("dpcurator demo: the main job, on a shipped sample of the Adult data")
    print(
        f"  data:      {DATA.relative_to(ROOT)} (3,257 rows; Becker & Kohavi 1996, UCI, CC BY 4.0)"
    )
    print(f"  workload:  {WORKLOAD.relative_to(ROOT)}: {tables} marginal tables, {t} cells")
    print(f"  budget:    epsilon = {args.epsilon:g} (pure DP, discrete Laplace noise, OS CSPRNG)")
    print("  ledger:    in memory (a demo: nothing is kept; `dpcurator answer` needs --ledger)")
    print()
    print("What composition charges for the whole release:")
    print(
        f"  sequential composition: the {t} cells share epsilon      -> {args.epsilon / t:.3g} per cell"
    )
    print(
        f"  parallel composition:   a person is in {plan.gamma:g} cells (gamma)  -> {args.epsilon / plan.gamma:.3g} per cell"
    )
    print()
    print("Expected total |noise| over all cells (exact discrete Laplace):")
    for k, label in (
        ("sequential", "sequential (eps / t)"),
        ("uniform", "uniform (eps / gamma, the paper)"),
        ("optimal", "optimal allocation"),
    ):
        print(f"  {label:<34} {e[k]:12,.0f}   ({e[k] / t:8.1f} per cell)")
    print(f"  saved by parallel composition:     {e['sequential'] / e['uniform']:.0f}x less noise")
    print(f"  saved on top by the optimal split: {1 - e['optimal'] / e['uniform']:.1%} less noise")
    print(f"  utility gain U = 1 - E_optimal / E_sequential = {plan.utility_gain:.4f}")
    print()
    g = plan.guarantee
    print(f"Guarantee: {g.describe()} ({g.worst_queries} queries at the worst point)")
    print(f"  {g.theorem}")
    print()
    if show:
        print(
            f"One released table, {SHOWCASE}, made consistent with the other {tables - 1} "
            "(least squares), with 95% intervals:"
        )
        print(f"  {'cell':<40} {'answer':>9}  {'95% interval':<20} {'noisy count':>11}")
        for i in show:
            r = rows[i]
            iv = f"[{r['interval_low']:,.0f}, {r['interval_high']:,.0f}]"
            print(f"  {r['query']:<40} {r['answer']:>9,.0f}  {iv:<20} {r['noisy_answer']:>11,}")
        print(
            "  (interval: normal approximation with the consistent answer's exact variance; "
            f"the noisy counts alone have ±{rows[show[0]]['noisy_half_width']})"
        )
    tail = []
    if args.out:
        tail.append(f"all answers in {args.out}")
    if args.plot:
        tail.append(f"pictures in {args.plot}")
    print(
        f"\nReleased {t} noisy counts in {seconds:.1f} s" + ("; " + "; ".join(tail) if tail else "")
    )
    return 0


def _line_of(text: str) -> int | None:
    for ln, line in enumerate(WORKLOAD.read_text().splitlines(), start=1):
        if line.strip() == text:
            return ln
    return None
