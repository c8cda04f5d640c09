"""``dpcurator answer``: release a whole workload under one budget (docs/design.md).

Parse, plan (:mod:`dpcurator.planner`), release through the curator (one transaction,
one scan, exact noise), post-process, write. Every check that can fail runs before
anything is charged.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from dpcurator.cli import load_report, options, output
from dpcurator.cli.anchoring import add_anchor, anchor_of, warn_unanchored
from dpcurator.cli.release import (
    POSTPROCESS,
    check_confidence,
    postprocess_steps,
    release_intervals,
    rows_of,
)
from dpcurator.cli.statistic_rows import check_statistics, mixed_rows
from dpcurator.errors import InvalidParameter

__all__ = ["POSTPROCESS", "postprocess_steps", "rows_of", "run", "summary"]

STATISTICS_NOTE = (
    "statistic lines (mean, variance, stdev, quantile(s), median) are one measurement "
    "each, charged on the points they read and planned like a count of them; the expected "
    "|noise| above treats them as counts, their rows give their own errors"
)

_EPILOG = """\
budget (exactly one):
  --epsilon E             pure E-DP: discrete Laplace noise, costs in epsilon
  --epsilon E --delta D   (E, D)-DP: planned and charged in zCDP under the largest rho
                          that meets (E, D), discrete Gaussian noise; the summary also
                          reports the final (eps, D) from the tightest theorem, and what
                          Laplace noise with optimal composition would have given
  --rho R                 R-zCDP: discrete Gaussian noise
  --mu M                  M-GDP: discrete Gaussian noise, each with its effective mu
                          (Dong, Roth & Su 2022 applied to the discrete Gaussian)

allocation:
  sequential  the budget split over all t queries (the baseline)
  uniform     budget / gamma per query, gamma = maximum overlap (Smith et al. 2022)
  optimal     minimise the --objective subject to the budget at every point of the
              domain (default); never worse than uniform for it, optimality gap reported

--objective (what optimal minimises; expected squared errors of the noisy answers):
  per-table   the sum over workload lines of a line's mean error: every line (table)
              weighs the same whatever its number of cells, so a small table is not
              starved next to a large one (default)
  total       the total over all answers: a table with many cells weighs more
  max         the largest error of any answer: the equal split budget / gamma, which
              no allocation beats

--strategy (what is measured; the answers are derived from the measurements):
  auto        the candidate below with the least expected error for --objective (default);
              the summary and --json `strategies` give every candidate's figure
  direct      the asked queries themselves, split by --allocation
  marginals   weighted marginal tables on the atoms the workload cuts (any attribute
              subsets, asked or not), every answer their least-squares estimate; under
              zCDP also residual measurements (ResidualPlanner's optimum)
  identity    the histogram of the one ordered attribute a range workload constrains
  tree        a b-ary hierarchy of ranges on that attribute, per-level costs optimised
  p-identity  HDMM's p-Identity: the histogram plus p weighted rows (integer weights),
              a Kronecker product of them for boxes over several attributes
  Answers of marginals, identity, tree and p-identity are least-squares estimates
  (consistent by construction) with their exact variances; their rows carry `variance`
  and the ledger `charges` they come from instead of a noisy count.

--postprocess (comma-separated, applied in order; free: post-processing never costs
privacy, Dwork & Roth 2014, Prop. 2.1):
  none        the noisy integers as released (default)
  consistent  least-squares adjustment (weighted by each answer's noise variance) so
              that queries covering the same cells agree, e.g. a total equals the sum of
              its breakdown; gives real numbers. Errors if the workload is too large
              (more than 2,000,000 cells and more than 6,000 queries).
  clamp       replace negative answers by 0
  round       round to the nearest integer (useful after consistent)
  e.g. --postprocess consistent,clamp,round

ledger (required): --ledger FILE records every charge durably, so that a second run
against the same ledger spends what the first left (and is refused once the budget is
spent); --ledger :memory: is a throwaway run whose budget dies with the process (the
summary says so). Read a ledger with `dpcurator ledger show FILE`.

output: one row per query to --out, by its extension: .csv, .json or .parquet. Columns:
  query, line            the query and its workload line
  answer                 the released answer, post-processed if --postprocess says so
  interval_low/high      an interval for `answer` at --confidence (default 0.95):
                         without post-processing, the exact interval of the discrete
                         noise; after `consistent`, the normal approximation with the
                         consistent answer's exact variance (or, beyond 2,000 queries,
                         an upper bound on it); `clamp` and `round` clamp or round the
                         ends outwards, which keeps the coverage
  confidence, interval   the level, and how the interval was made
  noisy_answer           the noisy count as released by the curator
  noisy_half_width       the exact half-width of noisy_answer's interval at that level
  cost, currency, noise, noise_parameter, expected_abs_noise
Without --out the rows go to stdout as CSV and the summary to stderr.
--plot FILE.png draws one released table with its intervals, the expected error of each
answer under the three allocations, and the budget each answer cost.

The Adult data (headerless, ", " separated, 15 columns):
  dpcurator answer --data adult.data --schema examples/adult/schema.json \\
    --workload examples/adult/marginals.txt --epsilon 1 --separator ', ' --no-header \\
    --columns examples/adult/columns.txt --ledger ledger.db --out answers.csv
Statistics in a workload (one measurement each, charged on the rows it reads; the planner
splits the budget as if it were a count of them, weight included; rows per group):
  mean(hours-per-week, 0, 100, where=age < 30)    variance(...), stdev(...) alike
  median(age, by=sex)    quantile(age, 0.9)    quantiles(age, [0.25, 0.5, 0.75], by=[sex, race])
Bad input: one line on stderr, exit status 2, nothing charged.
Every option: docs/answer.md; why it is private and how it is computed: docs/design.md."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "answer",
        help="release a workload (marginals, breakdowns, range counts) under one budget",
        description="Plan a workload with maximum overlap and an optimal allocation, charge "
        "the budget, count everything in one scan, add exact noise and write the answers.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, metavar="FILE", help="CSV (optionally .gz) or Parquet")
    p.add_argument("--schema", required=True, metavar="S.json", help="schema file (JSON)")
    p.add_argument("--workload", required=True, metavar="W.txt", help="workload file")
    options.add_budget(p)
    p.add_argument("--allocation", choices=("optimal", "uniform", "sequential"), default="optimal")
    p.add_argument(
        "--objective",
        choices=("total", "per-table", "max"),
        default="per-table",
        help="what the optimal allocation minimises: the expected squared error of each "
        "workload line, every line weighing the same whatever its cell count (per-table, "
        "the default), the total over all answers (total: a table with many cells weighs "
        "more), or the largest expected error of any answer (max: the equal split)",
    )
    p.add_argument(
        "--strategy",
        default="auto",
        metavar="NAME",
        help="what to measure: auto (default: the least expected error), direct, "
        "marginals, identity, tree or p-identity (see below)",
    )
    p.add_argument("--out", metavar="FILE", help="answers file: .csv, .json or .parquet")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--ledger",
        metavar="LEDGER",
        help="the ledger, created if missing: an SQLite file or postgresql://user@host/dbname "
        "(required; :memory: for a throwaway run)",
    )
    add_anchor(p)
    p.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        metavar="C",
        help="level of the intervals, in (0, 1) (default 0.95)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="draw the release (see below)")
    p.add_argument(
        "--postprocess",
        default="none",
        metavar="OPTS",
        help="none | consistent | clamp | round, comma-separated (see below)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="time for the overlap solver and the optimiser (default 30)",
    )
    options.add_loading(p)
    options.add_privacy_unit(p)
    p.add_argument(
        "--progress", action="store_true", help="show a progress bar (default: on a terminal)"
    )
    p.set_defaults(handler=run)


#: What each objective minimises, in words (its value is shown as the strategies show it).
_MEASURES = {
    "per-table": "the sum over workload lines of a line's mean expected squared error",
    "total": "the weighted total of the answers' expected squared errors",
    "max": "the largest expected squared error of any answer",
}


def summary(plan, out: str | None, seconds: float | None = None, unit=None) -> dict[str, Any]:
    """The release's summary (what ``--json`` prints); ``unit``: the PrivacyUnit whom
    every cost protects (None: each row)."""
    from dpcurator.planner import objective_values

    d: dict[str, Any] = {
        "queries": len(plan.queries),
        "gamma": plan.gamma,
        "gamma_exact": plan.gamma_exact,
        "allocation": plan.allocation.name,
        "strategy": plan.strategy_name,
        "strategy_detail": "" if plan.strategy is None else plan.strategy.detail,
        "strategies": [c.to_dict() for c in plan.candidates],
        "budget": plan.budget.describe(),
        "guarantee": plan.guarantee.to_dict(),
        "privacy_unit": None if unit is None else unit.to_dict(),
        "utility_gain": plan.utility_gain,
        "expected_abs_noise": dict(plan.expected_abs),
        "expected_squared_error": dict(plan.expected_sq),
        "out": out,
    }
    if plan.allocation.name == "optimal":
        d["objective"] = plan.objective
        d["objective_error"] = objective_values(plan)
    if plan.allocation.name == "optimal" and plan.allocation.lower_bound is not None:
        gap = plan.allocation.objective / plan.allocation.lower_bound - 1
        d["optimality_gap"] = max(0.0, gap)
    if plan.alternative is not None:
        d["laplace_alternative"] = plan.alternative
    if plan.notes:
        d["notes"] = list(plan.notes)
    if seconds is not None:
        d["seconds"] = round(seconds, 3)
    return d


def guarantee_text(g: dict[str, Any]) -> str:
    """The guarantee as people read it, from the worst point's exact total (rounded up,
    as the ledger's "spent" is: one figure, shown the same way everywhere)."""
    from fractions import Fraction

    up = output.up  # a privacy loss is never shown smaller than it is
    kind = g["kind"]
    total = Fraction(g["total_exact"]) if g.get("total_exact") else None

    def additive(key: str, currency: str = "") -> str:
        if total is None:
            return up(g[key])
        return output.amount(total, currency, up=True)

    if kind == "pure":
        return f"{additive('epsilon')}-DP"
    if kind == "approx":
        return f"({up(g['epsilon'])}, {g['delta']:g})-DP (planned as rho = {additive('rho')} zCDP)"
    if kind == "zcdp":
        return f"{additive('rho')}-zCDP"
    return f"{additive('mu', 'mu')}-GDP"


def unit_text(d: dict[str, Any]) -> str:
    """Whom the summary's guarantee protects: ``per aircraft (tailnum), up to 50 rows
    each``, or ``per row``."""
    from dpcurator.curator.privacy_unit import PrivacyUnit, unit_text

    u = d.get("privacy_unit")
    return unit_text(None if u is None else PrivacyUnit(**u))


def print_summary(d: dict[str, Any], stream) -> None:
    g = d["guarantee"]
    p = lambda s="": print(s, file=stream)  # noqa: E731
    p(f"queries:      {d['queries']}")
    p(
        f"gamma:        {d['gamma']:g} ({'exact' if d['gamma_exact'] else 'upper bound'}): "
        f"at most {d['gamma']:g} queries share a point of the domain"
    )
    p(f"budget:       {d['budget']}")
    obj = f" (objective: {d['objective']})" if d.get("objective") else ""
    p(f"allocation:   {d['allocation']}{obj}")
    detail = f" ({d['strategy_detail']})" if d.get("strategy_detail") else ""
    p(f"strategy:     {d['strategy']}{detail}")
    for c in d.get("strategies", []):
        mark = "*" if c["strategy"] == d["strategy"] else " "
        if c["objective_value"] is None:
            p(f"  {mark} {c['strategy']:<10} does not apply: {c['note']}")
        else:
            bound = ">= " if c["lower_bound"] else ""
            p(
                f"  {mark} {c['strategy']:<10} {bound}{output.up(c['objective_value'])} "
                f"expected error ({d.get('objective') or 'objective'}), planned in "
                f"{c['seconds']:.2f} s"
            )
    p(
        f"guarantee:    {guarantee_text(g)} {unit_text(d)}  "
        f"[{g['worst_point_queries']} queries at the worst point]"
    )
    p(f"theorem:      {g['theorem']}")
    e = d["expected_abs_noise"]
    direct = d.get("strategy", "direct") == "direct"
    of = "" if direct else " of the direct measurement (not released)"
    by = d.get("objective_error")
    objective = d.get("objective")
    star = " (* released)" if direct else ""
    if by and objective:
        p(f"expected error of the noisy answers{of}, by allocation{star}:")
        p(f"    {'':<11} {'total |noise|':>14}  {'objective (' + objective + ')':>24}")
        for k in ("sequential", "uniform", "optimal"):
            if k in e:
                mark = "*" if k == d["allocation"] and direct else " "
                p(f"  {mark} {k:<11} {e[k]:14,.1f}  {output.up(by[k]):>24}")
        p(
            f"    optimal minimises the {objective} objective, {_MEASURES[objective]}; "
            "total |noise| is another measure"
        )
    else:
        p(f"expected total |noise|{of}{star}:")
        for k in ("sequential", "uniform", "optimal"):
            if k in e:
                mark = "*" if k == d["allocation"] and direct else " "
                p(f"  {mark} {k:<11} {e[k]:14,.1f}")
    if "laplace_alternative" in d:
        a = d["laplace_alternative"]
        p(
            f"    laplace     {a['expected_abs_noise']:14,.1f}  (uniform discrete Laplace, eps' = "
            f"{a['epsilon_per_query']:.6g} per query by optimal composition; not additive, so "
            "not kept in a ledger)"
        )
    if direct:
        p(f"utility gain: U = 1 - E_plan/E_sequential = {d['utility_gain']:.4f}")
    if "optimality_gap" in d and direct:
        p(f"optimality:   within {d['optimality_gap']:.2%} of the optimum (dual bound)")
    for n in d.get("notes", []):
        p(f"note:         {n}")
    if d.get("data"):
        p(f"data:         {d['data']}")
    for line in d.get("units", []):
        p(f"units:        {line.removeprefix('units: ')}")
    led = d.get("ledger")
    if led:
        c = led["currency"]
        where = (
            f"{led['path']}"
            if led["durable"]
            else ":memory: (NOT durable: this budget is forgotten when the command ends)"
        )
        p(f"ledger:       {where}")
        p(
            f"remaining:    {output.amount_text(led['remaining_exact'], c)} {c} at the worst "
            f"point of the domain (spent {output.amount_text(led['spent_exact'], c, up=True)})"
        )
    if d.get("out"):
        p(f"answers:      {d['out']}")
    if d.get("plot"):
        p(f"plot:         {d['plot']}")


def ledger_option(ledger: str | None) -> str:
    """The --ledger value: a file, a PostgreSQL URL, or ``:memory:`` said explicitly."""
    if ledger is None:
        raise InvalidParameter(
            "pass --ledger FILE to record what this release spends (a run without it would "
            "start from a fresh budget every time), or --ledger :memory: for a throwaway run"
        )
    from dpcurator.curator.stores import is_url, target_of

    name = target_of(ledger)
    if ledger != ":memory:" and name is not None and not is_url(name):
        p = Path(name)
        if p.is_dir():
            raise InvalidParameter(f"--ledger {ledger}: is a folder; give a file name")
        if not p.exists():
            output.check_writable(p, "--ledger")
    return ledger


def ledger_summary(d: dict[str, Any], cur: Any, ledger: str, table: str | None = None) -> None:
    """What the ledger has left right after the release: the same figures as
    ``dpcurator ledger show`` (exact fractions in the JSON)."""
    from dpcurator.curator.standing import remaining_from_ledger

    st = remaining_from_ledger(cur.ledger, table=table)
    c = st.currency
    d["ledger"] = {
        "path": cur.ledger.path if cur.ledger.durable else ledger,
        "durable": cur.ledger.durable,
        "currency": c,
        **output.amount_json("spent", st.spent, c, up=True),
        **output.amount_json("remaining", st.remaining, c),
        "exact": st.exact,
    }


def run(args: argparse.Namespace) -> int:
    from dpcurator import Curator
    from dpcurator.planner.consistency import consistency_system
    from dpcurator.planner.strategies import STRATEGIES
    from dpcurator.queries import Schema, parse_workload

    t0 = time.monotonic()
    if args.strategy not in STRATEGIES:
        raise InvalidParameter(
            f"--strategy: unknown strategy {args.strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    if args.allocation != "optimal" and args.strategy not in ("auto", "direct"):
        raise InvalidParameter(
            f"--allocation {args.allocation} splits the direct measurement; it does not apply "
            f"to --strategy {args.strategy}"
        )
    if not (args.time_limit > 0 and math.isfinite(args.time_limit)):
        raise InvalidParameter(f"--time-limit must be a positive number, got {args.time_limit}")
    ledger = ledger_option(args.ledger)
    guarantee = options.budget_from(args)
    unit = options.privacy_unit_from(args)
    steps = postprocess_steps(args.postprocess)
    confidence = check_confidence(args.confidence)
    opts = options.load_options(args)
    fmt = output.out_format(args.out) if args.out is not None else None
    if args.out is not None:  # fail before charging if the outputs cannot be written
        output.check_writable(args.out, "--out")
    if args.plot is not None:
        output.check_writable(args.plot, "--plot")
    with output.progress(5, True if args.progress else None) as bar:
        bar.step("reading the workload")
        schema = Schema.load(args.schema)
        workload = parse_workload(Path(args.workload), schema)
        if len(workload) == 0:
            raise InvalidParameter(f"{args.workload}: the workload has no queries")
        check_statistics(workload, steps, fmt, schema, args.strategy)
        if workload.statistics and args.plot is not None:
            raise InvalidParameter("--plot draws counts; this workload has statistic lines")
        system = (
            consistency_system(workload.queries)
            if "consistent" in steps and args.strategy in ("auto", "direct")
            else None
        )
        bar.step("loading the data")
        with Curator.open(
            data=args.data,
            schema=schema,
            budget=guarantee,
            ledger=ledger,
            anchor=anchor_of(args),
            privacy_unit=unit,
            **opts,
            **options.backend_options(args),
        ) as cur:
            warn_unanchored(cur.ledger)
            # What loading dropped, said before anything is charged (all used: nothing).
            dropped = {k: r for k, r in cur.load_reports().items() if r and r.rows != r.rows_read}
            for line in load_report.lines(dropped, unit):
                print(f"data: {line}", file=sys.stderr)
            bar.step("planning, charging, counting, noise")
            plan, answers = cur.release_workload(
                workload,
                allocation=args.allocation,
                time_limit=args.time_limit,
                objective=args.objective,
                strategy=args.strategy,
            )
            d = summary(plan, args.out, None, unit)
            ledger_summary(d, cur, ledger)
            reports = cur.load_reports()
        bar.step("post-processing")
        if workload.statistics:
            rows, rel = mixed_rows(plan, workload.statistics, answers, steps, confidence)
            d.setdefault("notes", []).append(STATISTICS_NOTE)
        else:
            rel = release_intervals(plan, answers, steps, confidence, system)
            rows = rows_of(plan, answers, rel, confidence)
        bar.step("writing")
        if args.out is not None:
            assert fmt is not None
            output.write_rows(rows, args.out, fmt)
        if args.plot is not None:
            from dpcurator.cli.plots import plot_release

            text = Path(args.workload).read_text().splitlines()
            plot_release(
                plan,
                rows,
                args.plot,
                line_text={q.line: text[q.line - 1].strip() for q in plan.queries},
                title=f"dpcurator answer: {Path(args.workload).name}",
            )
    d["seconds"] = round(time.monotonic() - t0, 3)
    d["confidence"] = confidence
    d["postprocess"] = steps
    if rel.note:
        d.setdefault("notes", []).append(rel.note)
    loaded = [load_report.describe(r, unit) for r in reports.values() if r is not None]
    if loaded:
        d["data"] = "; ".join(loaded)
        per_unit = [ln for r in reports.values() if r is not None
                    for ln in load_report.describe_units(r, unit)]  # fmt: skip
        if per_unit:
            d["units"] = per_unit
        d["load_report"] = load_report.as_json(reports)
    if args.plot:
        d["plot"] = args.plot
    if args.out is None and args.json:
        d["answers"] = rows
    if args.json:
        print(json.dumps(d))
    elif args.out is None:
        output.write_stream(rows, sys.stdout, False)
        print_summary(d, sys.stderr)
    else:
        print_summary(d, sys.stdout)
    return 0
