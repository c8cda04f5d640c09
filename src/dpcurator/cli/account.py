"""``dpcurator account``: compose mechanisms with every applicable theorem."""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from fractions import Fraction

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import _rigor
from dpcurator.privacy._rigor import Written
from dpcurator.privacy.bounds import Sums
from dpcurator.privacy.composition import METHODS, Composition, accountants, compose, fmt_up
from dpcurator.privacy.specs import KINDS, parse_spec

_EPILOG = f"""\
SPEC is KIND:PARAMS[xCOUNT], KIND one of {", ".join(KINDS)}:
  pure:EPS  approx:EPS,DELTA  zcdp:RHO  gdp:MU          (a guarantee)
  laplace:SCALE  dlaplace:SCALE  gaussian:SIGMA  dgaussian:SIGMA
                                                       (noise on a sensitivity-1 count)
example: dpcurator account --delta 1e-5 pure:0.1x100 gaussian:20x10
methods: {" ".join(METHODS)} (a method that does not apply is left out;
clt is an approximation, never used as a bound)
--delta 0 asks for pure composition: epsilon = the sum of the epsilons (basic
composition, Dwork & Roth 2014, Thm 3.16, which is exact at delta = 0); only pure,
laplace and dlaplace mechanisms have a finite epsilon at delta = 0.
When no method certifies the target, the output says why (e.g. the mechanisms' own
deltas already add up to more than the target). The theorems: docs/accounting.md and
docs/design.md."""


def number(text: str) -> float:
    """A number as written: a finite one keeps its exact decimal (a
    :class:`~dpcurator.privacy._rigor.Written`), so ``--delta 0.28`` is 28/100 exactly."""
    value = float(text)
    return Written(text) if math.isfinite(value) else value


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
    target.add_argument(
        "--delta", type=number, help="target total delta (default 1e-6; 0: pure composition)"
    )
    target.add_argument("--epsilon", type=number, help="report each method's delta at this epsilon")
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
        if not math.isfinite(delta) or not 0 <= delta < 1:
            raise InvalidParameter(f"--delta must satisfy 0 <= delta < 1, got {delta}")
        if delta == 0:
            return _pure(args, specs)
        result = compose([s.event for s in specs], delta=delta)
    if args.plot:
        from dpcurator.cli.output import check_writable
        from dpcurator.cli.plots import plot_tradeoffs

        check_writable(args.plot, "--plot")
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
        out["why_none"] = why_none(result, specs)
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
    if len(rows) == 1:
        rows = []  # no method applies: no table
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
        lines.append(f"no rigorous method certifies this target: {why_none(result, specs)}")
    if absent:
        lines.append(f"not applicable here: {', '.join(absent)}")
    return "\n".join(lines)


def _deltas(specs: list) -> list[tuple[str, int, Fraction]]:
    from dpcurator.privacy.events import Guaranteed
    from dpcurator.privacy.guarantees import ApproxDP

    out = []
    for s in specs:
        e = s.event
        if isinstance(e, Guaranteed) and isinstance(e.guarantee, ApproxDP):
            out.append((s.text, s.count, _rigor.worst_high(e.guarantee.delta)))  # as accounted
    return out


def why_none(result: Composition, specs: list) -> str:
    """Why no rigorous method certifies the target, in one sentence."""
    ds = _deltas(specs)
    if result.target_delta is not None and ds:
        total = sum((c * d for _, c, d in ds), Fraction(0))
        parts = " + ".join(f"{c} x {float(d):g} ({t})" for t, c, d in ds)
        # the floor as the accountants bound it (prod(1 - delta_i) from below)
        floor = 1 - Sums.of((0, d, c) for _, c, d in ds).keep_lo
        if floor > _rigor.worst_low(result.target_delta):
            return (
                f"the mechanisms' own deltas add up to {parts} = {float(total):.6g}, and no "
                f"composition has a delta below 1 - prod(1 - delta_i) = {float(floor):.10g}, which "
                f"exceeds the target delta = {float(result.target_delta):.10g}; give a larger "
                "--delta or mechanisms with smaller deltas"
            )
    applicable = [n for n, r in result.methods.items() if not r.rigorous]
    if applicable:
        return f"only approximations apply ({', '.join(applicable)}); they are never used as bounds"
    return "every method fails or does not apply to these parameters"


_NOT_PURE = {
    "approx": "(eps, delta)-DP with delta > 0",
    "zcdp": "zCDP is (eps, delta)-DP only with delta > 0",
    "gdp": "Gaussian DP is (eps, delta)-DP only with delta > 0",
    "gaussian": "Gaussian noise has delta > 0 at every finite epsilon",
    "dgaussian": "discrete Gaussian noise has delta > 0 at every finite epsilon",
}


def _pure_epsilon(spec) -> Fraction | None:
    from dpcurator.privacy.events import DiscreteLaplace, Guaranteed, Laplace
    from dpcurator.privacy.guarantees import PureDP

    e = spec.event
    if isinstance(e, Guaranteed) and isinstance(e.guarantee, PureDP):
        return Fraction(repr(float(e.guarantee.epsilon)))
    if isinstance(e, Laplace | DiscreteLaplace):
        return 1 / Fraction(repr(float(e.scale)))
    return None


def _pure(args: argparse.Namespace, specs: list) -> int:
    """--delta 0: pure composition, eps = sum of the epsilons (exact arithmetic)."""
    from dpcurator.cli.output import amount

    theorem = (
        "basic composition at delta = 0, eps = sum eps_i (Dwork & Roth 2014, Thm 3.16); "
        "exact at delta = 0 (Kairouz, Oh & Viswanath 2017, Thm 3.3)"
    )
    eps = [(s, _pure_epsilon(s)) for s in specs]
    bad = [s for s, e in eps if e is None]
    mechs = ", ".join(f"{s.text} x{s.count}" for s in specs)
    if bad:
        why = "; ".join(f"{s.text}: {_NOT_PURE.get(s.text.split(':')[0], 'not pure')}" for s in bad)
        reason = f"no finite epsilon at delta = 0 ({why}); give --delta > 0"
        if args.json:
            print(
                json.dumps(
                    {
                        "delta": 0.0,
                        "mechanisms": [{"spec": s.text, "count": s.count} for s in specs],
                        "methods": {},
                        "best": None,
                        "why_none": reason,
                    }
                )
            )
        else:
            print(
                f"Composition of {mechs} at delta = 0\n\nno method certifies this target: {reason}"
            )
        return 0
    total = sum((s.count * e for s, e in eps if e is not None), Fraction(0))
    shown = amount(total, up=True)
    if args.json:
        print(
            json.dumps(
                {
                    "delta": 0.0,
                    "mechanisms": [{"spec": s.text, "count": s.count} for s in specs],
                    "methods": {
                        "basic": {
                            "epsilon": float(shown),
                            "epsilon_exact": str(total),
                            "delta": 0.0,
                            "rigorous": True,
                            "theorem": theorem,
                        }
                    },
                    "best": {"method": "basic", "epsilon": float(shown)},
                }
            )
        )
        return 0
    print(f"Composition of {mechs} at delta = 0 (pure composition)\n")
    print(f"* basic  epsilon = {shown}  delta = 0  {theorem}")
    print(f"\n* best rigorous: basic, epsilon = {shown}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: dpcurator account ...")
