"""``dpcurator overlap``: the maximum overlap of a workload (Smith et al. 2022; docs/design.md §6)."""

from __future__ import annotations

import argparse
import json
import math

from dpcurator.errors import InvalidParameter
from dpcurator.queries import Schema, max_overlap, parse_workload
from dpcurator.queries.overlap import colouring_bound

#: Above this many queries the colouring bound (quadratic in them) is not computed.
COLOURING_MAX = 20_000

_EPILOG = """\
workload: one query per line, e.g.
  age BETWEEN 30 AND 39 AND sex = 'Female'
  histogram(age, bins=[17, 30, 50, 91]) @ 0.5
  marginal(sex, race)
  total
'#' starts a comment; '@ w' gives a weight (default 1). JSON lists are accepted too.
Exit status 2 on bad input (one line naming the file and line)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "overlap",
        help="maximum overlap of a workload (what parallel composition charges)",
        description="Compute the maximum (weighted) overlap gamma of a workload of "
        "predicate queries: the largest total weight of queries sharing a point of the "
        "domain. Exact unless the time limit stops it; then a safe upper bound. Compared "
        "with the colouring bound of Smith et al. 2022 (up to 20,000 queries).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--schema", required=True, metavar="S.json", help="schema file (JSON)")
    p.add_argument("--workload", required=True, metavar="W.txt", help="workload file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="stop the exact search after this long and report a safe upper bound",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.time_limit is not None and not (args.time_limit > 0 and math.isfinite(args.time_limit)):
        raise InvalidParameter(f"--time-limit must be a positive number, got {args.time_limit}")
    schema = Schema.load(args.schema)
    workload = parse_workload(_path(args.workload), schema)
    res = max_overlap(workload, time_limit=args.time_limit)
    sequential = workload.total_weight
    if all(float(w).is_integer() for w in workload.weights):
        sequential = int(sequential)
    saving = 1 - float(res.value) / sequential if sequential > 0 else 0.0
    weights = None if all(w == 1 for w in workload.weights) else list(workload.weights)
    colouring = (
        colouring_bound(workload.queries, weights).value if len(workload) <= COLOURING_MAX else None
    )
    if args.json:
        out = {
            "queries": len(workload),
            "gamma": res.value,
            "exact": res.exact,
            "upper_bound": res.upper_bound,
            "method": res.method,
            "witness": dict(res.witness),
            "witness_queries": list(res.witness_queries),
            "colouring_bound": colouring,
            "sequential": sequential,
            "saving": saving,
        }
        print(json.dumps(out))
        return 0
    kind = "exact" if res.exact else "upper bound (time limit reached)"
    print(f"queries:  {len(workload)}")
    print(f"gamma:    {res.value} ({kind})")
    print(f"method:   {res.method}")
    if not res.exact:
        print(f"best point found covers weight {res.lower_bound}")
    if colouring is None:
        print(f"colouring bound: not computed (more than {COLOURING_MAX:,} queries)")
    else:
        print(f"colouring bound: {colouring} (Smith et al. 2022: an upper bound on gamma)")
    print("witness:  " + ", ".join(f"{k}={v!r}" for k, v in res.witness.items()))
    print(f"witness queries ({len(res.witness_queries)}):")
    shown = res.witness_queries[:20]
    for i in shown:
        q = workload.queries[i]
        print(f"  [{i}] line {q.line}: {q.text}")
    if len(res.witness_queries) > len(shown):
        print(f"  ... and {len(res.witness_queries) - len(shown)} more")
    print(f"sequential composition would charge {sequential}; saving {saving:.1%}")
    return 0


def _path(p: str):  # a workload argument is always a file, never inline text
    from pathlib import Path

    return Path(p)
