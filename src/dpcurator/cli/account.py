"""``dpcurator account``: compose mechanisms with every applicable theorem."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.privacy.composition import METHODS, Composition, accountants, compose, fmt_up
from dpcurator.privacy.specs import KINDS, parse_spec

_EPILOG = f"""\
SPEC is KIND:PARAMS[xCOUNT], KIND one of {", ".join(KINDS)}:
  pure:EPS  approx:EPS,DELTA  zcdp:RHO  gdp:MU          (a guarantee)
  laplace:SCALE  dlaplace:SCALE  gaussian:SIGMA  dgaussian:SIGMA
                                                       (noise on a sensitivity-1 count)
example: dpcurator account --delta 1e-5 pure:0.1x100 gaussian:20x10
methods: {" ".join(METHODS)} (a method that does not apply is left out;
clt is an approximation, never used as a bound)"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "account",
        help="compose mechanisms with every applicable theorem",
        description="Compose privacy mechanisms (parameters fixed in advance) with every "
        "applicable composition theorem; mark the tightest rigorous one.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--delta", type=float, help="target total delta (default 1e-6)")
    target.add_argument("--epsilon", type=float, help="report each method's delta at this epsilon")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write the composed trade-off curves")
    p.add_argument("specs", nargs="+", metavar="SPEC")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Parse, compose, print. Any numerical failure is one line (exit 2), never a traceback."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # library warnings would add lines to stderr
        try:
            return _run(args)
        except (ArithmeticError, RuntimeError, MemoryError) as err:
            raise InvalidParameter(
                f"cannot account for these parameters ({type(err).__name__}: {err})"
            ) from None


def _run(args: argparse.Namespace) -> int:
    specs = [parse_spec(s) for s in args.specs]
    if args.epsilon is not None:
        if not math.isfinite(args.epsilon) or args.epsilon < 0:
            raise InvalidParameter(f"--epsilon must be a finite number >= 0, got {args.epsilon}")
        result = compose([s.event for s in specs], epsilon=args.epsilon)
    else:
        delta = 1e-6 if args.delta is None else args.delta
        if not math.isfinite(delta) or not 0 < delta < 1:
            raise InvalidParameter(f"--delta must satisfy 0 < delta < 1, got {delta}")
        result = compose([s.event for s in specs], delta=delta)
    if args.plot:
        from dpcurator.cli.plots import plot_tradeoffs

        plot_tradeoffs(accountants([s.event for s in specs]), args.plot, title=" ".join(args.specs))
    if args.json:
        print(json.dumps(as_json(result, specs)))
    else:
        print(as_table(result, specs))
        if args.plot:
            print(f"trade-off curves written to {args.plot}")
    return 0


def as_json(result: Composition, specs: list) -> dict:
    out: dict = {}
    if result.target_delta is not None:
        out["delta"] = result.target_delta
    else:
        out["epsilon"] = result.target_epsilon
    out["mechanisms"] = [{"spec": s.text, "count": s.count} for s in specs]
    out["methods"] = {
        name: {
            "epsilon": r.epsilon,
            "delta": r.delta,
            "rigorous": r.rigorous,
            "theorem": r.theorem,
        }
        for name, r in result.methods.items()
    }
    best = result.best
    if best is None:
        out["best"] = None
    elif result.target_delta is not None:
        out["best"] = {"method": best.method, "epsilon": best.epsilon}
    else:
        out["best"] = {"method": best.method, "delta": best.delta}
    return out


def as_table(result: Composition, specs: list) -> str:
    mechs = ", ".join(f"{s.text} x{s.count}" for s in specs)
    if result.target_delta is not None:
        head = f"Composition of {mechs} at delta = {result.target_delta:g}"
    else:
        head = f"Composition of {mechs} at epsilon = {result.target_epsilon:g}"
    best = result.best
    rows = [("", "method", "epsilon", "delta", "rigorous", "theorem")]
    for name, r in result.methods.items():
        mark = "*" if best is not None and name == best.method else ""
        rigorous = "yes" if r.rigorous else "no (approx.)"
        # A rigorous figure is shown rounded up, so the printed number still holds.
        show = fmt_up if r.rigorous else (lambda v: f"{v:.6g}")
        eps_text = show(r.epsilon) if result.target_delta is not None else f"{r.epsilon:.6g}"
        delta_text = show(r.delta) if result.target_delta is None else f"{r.delta:.6g}"
        rows.append((mark, name, eps_text, delta_text, rigorous, r.theorem))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [head, ""]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(5)] + [row[5]]
        lines.append("  ".join(cells).rstrip())
    absent = [m for m in METHODS if m not in result.methods]
    lines.append("")
    if best is not None:
        value = (
            f"epsilon = {fmt_up(best.epsilon)}"
            if result.target_delta is not None
            else (f"delta = {fmt_up(best.delta)}")
        )
        lines.append(f"* best rigorous: {best.method}, {value}")
    else:
        lines.append("no rigorous method certifies this target")
    if absent:
        lines.append(f"not applicable here: {', '.join(absent)}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: dpcurator account ...")
