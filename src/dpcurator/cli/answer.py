"""``dpcurator answer``: release a whole workload under one budget (DESIGN.md §8).

Parse, plan (:mod:`dpcurator.planner`), release through the curator (one transaction,
one scan, exact noise), post-process, write. Every check that can fail runs before
anything is charged.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpcurator.cli import options
from dpcurator.errors import InvalidParameter

POSTPROCESS = ("none", "clamp", "round", "consistent")

_EPILOG = """\
budget (exactly one):
  --epsilon E             pure E-DP: discrete Laplace noise, costs in epsilon
  --epsilon E --delta D   (E, D)-DP: planned and charged in zCDP under the largest rho
                          that meets (E, D), discrete Gaussian noise; the summary also
                          reports the final (eps, D) from the tightest theorem, and what
                          Laplace noise with optimal composition would have given
  --rho R                 R-zCDP: discrete Gaussian noise
  --mu M                  M-GDP: discrete Gaussian noise (effective mu, DESIGN §9)

allocation:
  sequential  the budget split over all t queries (the baseline)
  uniform     budget / gamma per query, gamma = maximum overlap (seed 002)
  optimal     minimise the total expected squared error subject to the budget at every
              point of the domain (default); never worse than uniform

--postprocess (comma-separated, applied in order; free: seed 003, Prop. 2.4):
  none        the noisy integers as released (default)
  consistent  least-squares adjustment (weighted by each answer's noise variance) so
              that queries covering the same cells agree, e.g. a total equals the sum of
              its breakdown; gives real numbers. Errors if the workload cuts the domain
              into more than 2,000,000 cells.
  clamp       replace negative answers by 0
  round       round to the nearest integer (useful after consistent)
  e.g. --postprocess consistent,clamp,round

output: one row per query (query, line, answer, noisy_answer, cost, currency, noise,
noise_parameter, expected_abs_noise, half_width_95, interval_low, interval_high) to --out
(CSV, or JSON if it ends in .json); the interval is the exact 95% interval of the noisy
answer. Without --out the rows go to stdout as CSV and the summary to stderr.

The Adult data (headerless, ", " separated, 15 columns):
  dpcurator answer --data adult.data --schema examples/adult/schema.json \\
    --workload examples/adult/marginals.txt --epsilon 1 --separator ', ' --no-header \\
    --columns examples/adult/columns.txt --out answers.csv
Bad input: one line on stderr, exit status 2, nothing charged."""


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
    p.add_argument("--out", metavar="FILE", help="answers file (.csv or .json)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--ledger", metavar="L.db", help="SQLite ledger (default: in memory)")
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
    p.add_argument("--progress", action="store_true", help="show progress on stderr")
    p.set_defaults(handler=run)


class Progress:
    """A minimal progress line on stderr (no dependency)."""

    def __init__(self, enabled: bool, steps: int) -> None:
        self.enabled, self.steps, self.i, self.t0 = enabled, steps, 0, time.monotonic()

    def step(self, what: str) -> None:
        self.i += 1
        if self.enabled:
            done = int(20 * (self.i - 1) / self.steps)
            bar = "#" * done + "." * (20 - done)
            sys.stderr.write(
                f"\r[{bar}] {self.i}/{self.steps} {what:<28} {time.monotonic() - self.t0:6.1f}s"
            )
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write(
                f"\r[{'#' * 20}] done in {time.monotonic() - self.t0:.1f}s{' ' * 30}\n"
            )


def postprocess_steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in steps if s not in POSTPROCESS]
    if bad or not steps:
        raise InvalidParameter(
            f"--postprocess: unknown option {bad[0] if bad else text!r}; choose from "
            f"{', '.join(POSTPROCESS)} (comma-separated)"
        )
    return [s for s in steps if s != "none"]


def apply_postprocess(steps, plan, values, system=None) -> np.ndarray:
    from dpcurator.planner import consistent

    out = np.asarray(values, float)
    for s in steps:
        if s == "consistent":
            var = [n.variance() for n in plan.noises]
            out = consistent(plan.queries, out, var, system)
        elif s == "clamp":
            out = np.maximum(out, 0.0)
        elif s == "round":
            out = np.rint(out)
    return out


def rows_of(plan, answers, released) -> list[dict[str, Any]]:
    rows = []
    for q, a, noise, v, cost in zip(
        plan.queries, answers, plan.noises, released, plan.values, strict=True
    ):
        val: float | int = int(v) if float(v).is_integer() else float(v)
        rows.append(
            {
                "query": q.text or "total",
                "line": q.line,
                "answer": val,
                "noisy_answer": a.value,
                "cost": cost,  # exactly what was charged (mu: its square is charged)
                "currency": a.currency,
                "noise": a.noise,
                "noise_parameter": a.noise_parameter,
                "expected_abs_noise": noise.expected_abs(),
                "half_width_95": a.half_width,
                "interval_low": a.interval[0],
                "interval_high": a.interval[1],
            }
        )
    return rows


def write_rows(rows: list[dict[str, Any]], stream: io.TextIOBase, as_json: bool) -> None:
    if as_json:
        json.dump(rows, stream, indent=1)
        stream.write("\n")
        return
    w = csv.DictWriter(stream, fieldnames=list(rows[0]) if rows else ["query"])
    w.writeheader()
    w.writerows(rows)


def summary(plan, out: str | None, seconds: float | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "queries": len(plan.queries),
        "gamma": plan.gamma,
        "gamma_exact": plan.gamma_exact,
        "allocation": plan.allocation.name,
        "budget": plan.budget.describe(),
        "guarantee": plan.guarantee.to_dict(),
        "utility_gain": plan.utility_gain,
        "expected_abs_noise": dict(plan.expected_abs),
        "expected_squared_error": dict(plan.expected_sq),
        "out": out,
    }
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


def print_summary(d: dict[str, Any], stream) -> None:
    g = d["guarantee"]
    p = lambda s="": print(s, file=stream)  # noqa: E731
    p(f"queries:      {d['queries']}")
    p(
        f"gamma:        {d['gamma']:g} ({'exact' if d['gamma_exact'] else 'upper bound'}): "
        f"at most {d['gamma']:g} queries share a point of the domain"
    )
    p(f"budget:       {d['budget']}")
    p(f"allocation:   {d['allocation']}")
    kind = g["kind"]
    if kind == "pure":
        what = f"{g['epsilon']:.6g}-DP"
    elif kind == "approx":
        what = f"({g['epsilon']:.6g}, {g['delta']:g})-DP (planned as rho = {g['rho']:.6g} zCDP)"
    elif kind == "zcdp":
        what = f"{g['rho']:.6g}-zCDP"
    else:
        what = f"{g['mu']:.6g}-GDP"
    p(f"guarantee:    {what}  [{g['worst_point_queries']} queries at the worst point]")
    p(f"theorem:      {g['theorem']}")
    e = d["expected_abs_noise"]
    p("expected total |noise|:")
    for k in ("sequential", "uniform", "optimal"):
        if k in e:
            mark = "*" if k == d["allocation"] else " "
            p(f"  {mark} {k:<11} {e[k]:14,.1f}")
    if "laplace_alternative" in d:
        a = d["laplace_alternative"]
        p(
            f"    laplace     {a['expected_abs_noise']:14,.1f}  (uniform discrete Laplace, eps' = "
            f"{a['epsilon_per_query']:.6g} per query by optimal composition; not additive, so "
            "not kept in a ledger)"
        )
    p(f"utility gain: U = 1 - E_plan/E_sequential = {d['utility_gain']:.4f}")
    if "optimality_gap" in d:
        p(f"optimality:   within {d['optimality_gap']:.2%} of the optimum (dual bound)")
    for n in d.get("notes", []):
        p(f"note:         {n}")
    if d.get("out"):
        p(f"answers:      {d['out']}")


def run(args: argparse.Namespace) -> int:
    from dpcurator import Curator
    from dpcurator.planner.consistency import cells_matrix
    from dpcurator.queries import Schema, parse_workload

    t0 = time.monotonic()
    if not (args.time_limit > 0 and math.isfinite(args.time_limit)):
        raise InvalidParameter(f"--time-limit must be a positive number, got {args.time_limit}")
    guarantee = options.budget_from(args)
    steps = postprocess_steps(args.postprocess)
    opts = options.load_options(args)
    prog = Progress(args.progress or sys.stderr.isatty(), 4)
    prog.step("reading the workload")
    schema = Schema.load(args.schema)
    workload = parse_workload(Path(args.workload), schema)
    if len(workload) == 0:
        raise InvalidParameter(f"{args.workload}: the workload has no queries")
    system = cells_matrix(workload.queries) if "consistent" in steps else None
    out_stream = tmp = None
    if args.out is not None:  # fail before charging if the output cannot be written
        out = Path(args.out)
        tmp = out.with_name(f".{out.name}.partial")
        out_stream = open(tmp, "w", newline="")  # noqa: SIM115 (closed in finally)
    ok = False
    try:
        prog.step("loading the data")
        with Curator.open(
            data=args.data, schema=schema, budget=guarantee, ledger=args.ledger, **opts
        ) as cur:
            prog.step("planning, charging, counting, noise")
            plan, answers = cur.release_workload(
                workload, allocation=args.allocation, time_limit=args.time_limit
            )
        prog.step("writing")
        released = apply_postprocess(steps, plan, [a.value for a in answers], system)
        rows = rows_of(plan, answers, released)
        as_json = args.out is not None and args.out.lower().endswith(".json")
        if out_stream is not None:
            write_rows(rows, out_stream, as_json)
        ok = True
    finally:
        if out_stream is not None:
            out_stream.close()
            if ok:
                os.replace(tmp, args.out)
            else:
                tmp.unlink(missing_ok=True)
    prog.done()
    d = summary(plan, args.out, time.monotonic() - t0)
    if args.out is None and args.json:
        d["answers"] = rows
    if args.json:
        print(json.dumps(d))
    elif args.out is None:
        write_rows(rows, sys.stdout, False)
        print_summary(d, sys.stderr)
    else:
        print_summary(d, sys.stdout)
    return 0
