"""``dpcurator demo``: the main job on a small shipped copy of the Adult data.

Releases all 1- and 2-way marginals of seven attributes of a 3,257-row sample of Adult
(Becker & Kohavi 1996, UCI, CC BY 4.0; examples/data/README.md) under one budget, with
noise from the operating system's CSPRNG, planned with the default objective (per-table)
and made consistent by least squares. Shows what each way of splitting the budget
(sequential, uniform, optimal for each objective) costs in expected error, and one
released table with its intervals. No network.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from dpcurator.cli import options
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
        help="release marginal tables of a shipped Adult sample and compare the allocations",
        description="Release all 1- and 2-way marginals of seven attributes of a small "
        "shipped sample of the Adult data (CC BY 4.0) under one privacy budget, planned "
        "with the default objective (per-table) and made consistent (least squares, free "
        "post-processing). Shows the expected error of sequential and uniform allocation "
        "and of the optimal allocation for each objective (total, per-table, max), and one "
        "released table with its intervals. Noise comes from the operating system's "
        "CSPRNG; the ledger is in memory (a demo keeps nothing); no network.",
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
    options.add_privacy_unit(p)
    p.add_argument(
        "--progress", action="store_true", help="show a progress bar (default: on a terminal)"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dpcurator import Curator
    from dpcurator.cli import load_report, output
    from dpcurator.cli.answer import guarantee_text, summary, unit_text
    from dpcurator.cli.release import release_intervals, rows_of
    from dpcurator.planner import compare_objectives, strategy_errors
    from dpcurator.planner.consistency import consistency_system
    from dpcurator.privacy import PureDP
    from dpcurator.queries import Schema, parse_workload

    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidParameter(f"--epsilon must be a finite number > 0, got {args.epsilon}")
    unit = options.privacy_unit_from(args)
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
    with output.progress(6, True if args.progress else None) as bar:
        bar.step("reading the workload")
        schema = Schema.load(SCHEMA)
        wl = parse_workload(WORKLOAD, schema)
        budget = PureDP(args.epsilon)
        bar.step("loading the data, planning")
        with Curator.open(
            data=DATA, schema=schema, budget=budget, separator=",", header=True, privacy_unit=unit
        ) as cur:
            bar.step("planning, charging, counting, noise")
            plan, answers = cur.release_workload(wl)  # default objective and strategy
            reports = cur.load_reports()
        bar.step("the other allocations, planned")
        splits = compare_objectives(plan) + strategy_errors(plan)
        bar.step("consistent answers (least squares)")
        line = _line_of(SHOWCASE)
        show = [i for i, q in enumerate(plan.queries) if q.line == line]
        system = consistency_system(plan.queries) if plan.strategy is None else None
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
                splits=splits,
            )
    seconds = time.monotonic() - t0
    d = summary(plan, args.out, seconds, unit)
    d["load_report"] = load_report.as_json(reports)
    d["postprocess"] = ["consistent"]
    d["ledger"] = {"path": ":memory:", "durable": False}
    d["showcase_table"] = SHOWCASE
    d["showcase"] = [rows[i] for i in show]
    d["allocations"] = [dict(e.to_dict(line), released=_released(e, plan)) for e in splits]
    if args.plot:
        d["plot"] = args.plot
    if args.json:
        print(json.dumps(d))
        return 0
    tables = len({q.line for q in plan.queries})
    t = len(plan.queries)
    print("dpcurator demo: the main job, on a shipped sample of the Adult data")
    print(
        f"  data:      {DATA.relative_to(ROOT)} (3,257 rows; Becker & Kohavi 1996, UCI, CC BY 4.0)"
    )
    if unit is not None:
        loaded, *more = load_report.lines(reports, unit)
        print(f"  unit:      every cost is {unit.describe()}; {loaded}")
        for text in more:
            print(f"             {text}")
    print(f"  workload:  {WORKLOAD.relative_to(ROOT)}: {tables} marginal tables, {t:,} cells")
    print(f"  budget:    epsilon = {args.epsilon:g} (pure DP, discrete Laplace noise, OS CSPRNG)")
    print("  ledger:    in memory (a demo: nothing is kept; `dpcurator answer` needs --ledger)")
    print()
    print("What composition charges for the whole release:")
    print(
        f"  sequential composition: the {t:,} cells share epsilon     -> {args.epsilon / t:.3g} per cell"
    )
    print(
        f"  parallel composition:   a person is in {plan.gamma:g} cells (gamma)  -> {args.epsilon / plan.gamma:.3g} per cell"
    )
    print()
    _print_splits(splits, plan, line, tables, t)
    print()
    g = plan.guarantee
    print(
        f"Guarantee: {guarantee_text(g.to_dict())} {unit_text(d)} "
        f"({g.worst_queries} queries at the worst point)"
    )
    print(f"  {g.theorem}")
    print()
    if show and plan.strategy is not None:
        print(
            f"One released table, {SHOWCASE}, derived by least squares from the "
            f"{len(plan.strategy.measurements)} measured tables ({plan.strategy_name}: "
            f"{plan.strategy.detail}), with 95% intervals:"
        )
        print(f"  {'cell':<40} {'answer':>9}  {'95% interval':<20} {'std. error':>10}")
        for i in show:
            r = rows[i]
            iv = f"[{math.floor(r['interval_low']):,}, {math.ceil(r['interval_high']):,}]"
            print(
                f"  {r['query']:<40} {r['answer']:>9,.0f}  {iv:<20} {math.sqrt(r['variance']):>10.1f}"
            )
        print("  (interval: normal approximation with the answer's exact variance)")
    elif show:
        print(
            f"One released table, {SHOWCASE}, made consistent with the other {tables - 1} "
            "(least squares), with 95% intervals:"
        )
        print(f"  {'cell':<40} {'answer':>9}  {'95% interval':<20} {'noisy count':>11}")
        for i in show:
            r = rows[i]
            # rounded outwards: the interval shown contains the one computed
            iv = f"[{math.floor(r['interval_low']):,}, {math.ceil(r['interval_high']):,}]"
            print(f"  {r['query']:<40} {r['answer']:>9,.0f}  {iv:<20} {r['noisy_answer']:>11,}")
        print(
            "  (95% interval: normal approximation with the consistent answer's exact "
            "variance; a noisy count alone\n  is within "
            f"{rows[show[0]]['noisy_half_width']} of the true count with 95% probability, "
            "exactly: its 95% half-width)"
        )
    tail = []
    if args.out:
        tail.append(f"all answers in {args.out}")
    if args.plot:
        tail.append(f"pictures in {args.plot}")
    what = (
        f"{t:,} noisy counts"
        if plan.strategy is None
        else f"{t:,} answers derived from {len(plan.strategy.measurements)} noisy tables"
    )
    print(f"\nReleased {what} in {seconds:.1f} s" + ("; " + "; ".join(tail) if tail else ""))
    return 0


def _released(e, plan) -> bool:
    if plan.strategy is not None:
        return e.allocation == plan.strategy_name
    return e.allocation == plan.allocation.name and e.objective in (None, plan.objective)


def _print_splits(splits, plan, line: int | None, tables: int, t: int) -> None:
    """The headline: what each way of splitting the budget costs, in expected error."""
    from dpcurator.cli import output

    by = {e.label: e for e in splits}
    print(
        "How each way of splitting the budget does: the expected errors of the noisy counts "
        "(exact discrete\nLaplace, rounded up). ± is a standard deviation (the root of an "
        'expected squared error); "table\naverage" is the root of the mean, over the '
        f"{tables} tables, of a table's mean squared error."
    )
    print(f"  {'split':<33} {'total squared':>13} {'worst':>8} {'table':>8}   a cell of")
    print(f"  {'':<33} {f'error ({t:,})':>13} {'answer':>8} {'average':>8}   {SHOWCASE}")
    names = {
        "sequential": "sequential (eps / t)",
        "uniform": "uniform (eps / gamma, the paper)",
        "optimal (total)": "optimal for total",
        "optimal (per-table)": "optimal for per-table",
        "optimal (max)": "optimal for max",
        f"{plan.strategy_name} ({plan.objective})": f"{plan.strategy_name} strategy, least squares",
    }

    def sd(v: float) -> str:
        return "±" + output.error_figure(math.sqrt(v))

    for e in splits:
        mark = "*" if _released(e, plan) else " "
        show = sd(e.line(line)) if line is not None else ""
        print(
            f"{mark} {names.get(e.label, e.label):<33} {output.error_figure(e.total):>13} {sd(e.worst):>8} "
            f"{sd(e.per_table):>8}   {show}"
        )
    tot, per, mx = by["optimal (total)"], by["optimal (per-table)"], by["optimal (max)"]
    small = f"a cell of {SHOWCASE} {sd(tot.line(line))}, " if line is not None else ""
    print("Each objective is best in its own column:")
    print(
        "  total      the least total squared error: the tables with many cells get more "
        f"budget and\n             the small ones pay ({small}the worst answer {sd(tot.worst)});"
    )
    print(
        f"  per-table  each of the {tables} tables weighs the same, whatever its number of cells;"
    )
    print("  max        the largest error of any answer is as small as it can be.")
    if _same(per, mx):
        print(
            "Here every person is in exactly one cell of each table, so per-table and max both "
            f"come to\nthe equal split, eps / {plan.gamma:g} for each table: the uniform allocation."
        )
    gaps = " and ".join(e.objective for e in (tot, per) if e.gap is not None)
    worst_gap = max((e.gap for e in (tot, per) if e.gap is not None), default=0.0)
    if plan.strategy is not None:
        print(
            f"Released (*): the {plan.strategy_name} strategy, chosen for the default objective "
            f"({plan.objective}): {len(plan.strategy.measurements)} tables measured (asked or "
            "not), every answer\ntheir least-squares estimate. The splits above measure the "
            "asked cells themselves. Certified:\nthe optimal splits for "
            f"{gaps} are within {_pct(worst_gap)} of their dual bounds; the equal split is "
            "optimal for max\nby proof."
        )
        return
    print(
        f"Released (*): {plan.objective}, the default: no table is starved, so every table's "
        "intervals are\nusable. Certified: the optimal splits for "
        f"{gaps} are within {_pct(worst_gap)} of their\ndual bounds; the equal split is "
        "optimal for max by proof."
    )


def _same(a, b) -> bool:
    import numpy as np

    return bool(np.allclose(a.variances, b.variances, rtol=1e-6, atol=0))


def _pct(gap: float) -> str:
    """A relative gap as a percentage, rounded up to 2 decimals."""
    return f"{math.ceil(gap * 1e4) / 100:.2f}%" if gap > 0 else "0%"


def _line_of(text: str) -> int | None:
    for ln, line in enumerate(WORKLOAD.read_text().splitlines(), start=1):
        if line.strip() == text:
            return ln
    return None
