"""Options that several subcommands share: the budget, how to load a data file, the privacy
unit, and the ledger (``LEDGER`` or ``--ledger LEDGER``, whichever is typed)."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

from dpcurator.errors import InvalidParameter


def add_budget(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("budget")
    g.add_argument("--epsilon", type=float, help="pure DP epsilon (with --delta: (eps, delta)-DP)")
    g.add_argument("--delta", type=float, help="delta of an (eps, delta) target")
    g.add_argument("--rho", type=float, help="zCDP rho")
    g.add_argument("--mu", type=float, help="Gaussian DP mu")


def add_loading(p: argparse.ArgumentParser) -> None:
    ld = p.add_argument_group("loading the data")
    ld.add_argument("--separator", default=",", help="field separator (Adult: ', ')")
    hd = ld.add_mutually_exclusive_group()
    hd.add_argument("--header", dest="header", action="store_true", default=None)
    hd.add_argument("--no-header", dest="header", action="store_false")
    ld.add_argument(
        "--columns",
        metavar="NAMES",
        help="every column of a headerless file, comma-separated, or @FILE / a file "
        "with one name per line",
    )
    ld.add_argument("--skip", type=int, default=0, metavar="N", help="skip N leading lines")
    ld.add_argument(
        "--on-invalid",
        choices=("error", "drop"),
        default="error",
        help="rows with values outside the schema: stop (default) or drop them",
    )
    ld.add_argument(
        "--max-dropped",
        type=_share,
        default=None,
        metavar="SHARE",
        help="with --on-invalid drop: refuse the data (charge nothing) when more than SHARE "
        "of the rows would be dropped, e.g. 0.05 or 5%% (default 5%%)",
    )
    ld.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="ATTR=VALUE",
        help="replace ATTR's values outside the schema (or missing) by VALUE, a declared "
        "value; repeat for several attributes",
    )
    be = p.add_argument_group("counting engine")
    be.add_argument(
        "--backend",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="count with DuckDB in this process (default) or on Spark (the spark extra)",
    )
    be.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master for --backend spark, e.g. spark://host:7077 or local[4] "
        "(default: a local session)",
    )


def add_ledger(p: argparse.ArgumentParser, help: str, *, positional: str = "ledger") -> None:
    """The ledger, as a positional argument (its ``dest`` is ``positional``; may be left
    out) or as ``--ledger LEDGER``: both forms work everywhere (:func:`ledger_from`)."""
    p.add_argument(positional, nargs="?", metavar=positional.upper(), help=help)
    p.add_argument(
        "--ledger",
        dest="ledger_option",
        metavar="LEDGER",
        help=f"the same as {positional.upper()}",
    )


def ledger_from(args: argparse.Namespace, positional: str = "ledger") -> str:
    """The ledger given by ``add_ledger``'s two forms: either, or both if the same."""
    given, option = getattr(args, positional), args.ledger_option
    if given is not None and option is not None and given != option:
        # never quoted: either may hold a password
        raise InvalidParameter(
            f"give the ledger once: {positional.upper()} and --ledger name different ledgers"
        )
    ledger = option if given is None else given
    if ledger is None:
        raise InvalidParameter(f"give the ledger: {positional.upper()} or --ledger LEDGER")
    return ledger


def budget_from(args: argparse.Namespace):
    from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP

    given = [n for n in ("epsilon", "rho", "mu") if getattr(args, n) is not None]
    if len(given) != 1:
        raise InvalidParameter(
            "give exactly one budget: --epsilon E [--delta D], --rho R or --mu M"
        )
    for n in ("epsilon", "delta", "rho", "mu"):
        v = getattr(args, n)
        if v is not None and not math.isfinite(v):
            raise InvalidParameter(f"--{n} must be a finite number, got {v}")
    if args.delta is not None and given != ["epsilon"]:
        raise InvalidParameter("--delta goes with --epsilon")
    if args.epsilon is not None:
        if not args.epsilon > 0:
            raise InvalidParameter(f"--epsilon must be > 0, got {args.epsilon:g}")
        if args.delta is None or args.delta == 0:
            return PureDP(args.epsilon)
        if not 0 < args.delta < 1:
            raise InvalidParameter(f"--delta must be in (0, 1), got {args.delta:g}")
        return ApproxDP(args.epsilon, args.delta)
    if args.rho is not None:
        if not args.rho > 0:
            raise InvalidParameter(f"--rho must be > 0, got {args.rho:g}")
        return ZCDP(args.rho)
    if not args.mu > 0:
        raise InvalidParameter(f"--mu must be > 0, got {args.mu:g}")
    return GDP(args.mu)


def _columns(text: str | None) -> list[str] | None:
    if text is None:
        return None
    path = Path(text[1:] if text.startswith("@") else text)
    if text.startswith("@") or ("," not in text and path.is_file()):
        names = [ln.strip() for ln in path.read_text().splitlines()]
        names = [n for n in names if n and not n.startswith("#")]
    else:
        names = [n.strip() for n in text.split(",")]
    if not names or any(not n for n in names):
        raise InvalidParameter(f"--columns: give every column name, got {text!r}")
    return names


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """``backend=`` and ``spark=`` for Curator.open from --backend and --spark-master."""
    backend = getattr(args, "backend", "duckdb")
    master = getattr(args, "spark_master", None)
    if master is not None and backend != "spark":
        raise InvalidParameter("--spark-master goes with --backend spark")
    if backend == "duckdb":
        return {}
    return {"backend": backend, "spark": master}


def _share(text: str) -> float:
    """A share as ``0.05`` or ``5%``."""
    t = text.strip()
    try:
        x = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a share such as 0.05 or 5%, got {text!r}"
        ) from None
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1 (0% to 100%), got {text!r}")
    return x


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.skip < 0:
        raise InvalidParameter(f"--skip must be >= 0, got {args.skip}")
    opts: dict[str, Any] = {"separator": args.separator, "skip": args.skip}
    if args.header is not None:
        opts["header"] = args.header
    cols = _columns(args.columns)
    if cols is not None:
        opts["columns"] = cols
    if args.on_invalid == "drop":
        opts["on_invalid"] = "drop"
    if getattr(args, "max_dropped", None) is not None:
        opts["max_dropped"] = args.max_dropped
    replace = {}
    for item in getattr(args, "replace", None) or []:
        attr, eq, value = item.partition("=")
        if not eq or not attr.strip():
            raise InvalidParameter(f"--replace: give ATTR=VALUE, got {item!r}")
        replace[attr.strip()] = value.strip()
    if replace:
        opts["replace"] = replace
    return opts


def add_privacy_unit(p: argparse.ArgumentParser) -> None:
    """``--privacy-unit COLUMN:K`` and ``--unit-name NAME`` (see :func:`privacy_unit_from`)."""
    g = p.add_argument_group("privacy unit (default: every row protected on its own)")
    g.add_argument(
        "--privacy-unit",
        metavar="COLUMN:K",
        help="a person (or aircraft, ...) is the rows sharing one value of COLUMN; keep "
        "K of each, chosen uniformly at random (the same rows for the ledger's life), and "
        "make every cost per unit, e.g. tailnum:50",
    )
    g.add_argument(
        "--unit-name",
        metavar="NAME",
        help="what one unit is, for the texts that state a cost (default: person), e.g. aircraft",
    )


def parse_privacy_unit(text: str, what: str = "--privacy-unit") -> tuple[str, int]:
    """``COLUMN:K`` as (column, k). The column is what precedes the last colon, so a
    column whose name holds a colon still works; stripped of surrounding whitespace, as
    a data file's header names are (so ``' tailnum : 5'`` is ``tailnum:5``: a column
    name with surrounding spaces never matched a header, so no ledger holds one)."""
    from dpcurator.backends._validation import WHITESPACE
    from dpcurator.curator.privacy_unit import MAX_ROWS

    column, colon, k = text.rpartition(":")
    if not colon:
        raise InvalidParameter(
            f"{what}: give COLUMN:K, the id column and the most rows one unit may own "
            f"(e.g. tailnum:50), got {text!r}"
        )
    if not column.strip():
        raise InvalidParameter(f"{what}: give the id column before the colon, got {text!r}")
    if re.fullmatch(r"[0-9]{1,7}", k.strip()) is None or not 1 <= int(k) <= MAX_ROWS:
        raise InvalidParameter(
            f"{what}: K must be an integer from 1 to {MAX_ROWS:,} (rows one unit may own), "
            f"got {k.strip()!r}"
        )
    return column.strip(WHITESPACE), int(k)


def unit_name(text: str | None, what: str = "--unit-name") -> str | None:
    """A unit's name (surrounding spaces dropped), checked as every text shows it."""
    from dpcurator.curator.privacy_unit import check_name

    return None if text is None else check_name(text.strip(), what)


def privacy_unit_from(args: argparse.Namespace) -> Any:
    """The PrivacyUnit of ``--privacy-unit`` and ``--unit-name``, or None."""
    from dpcurator.curator.privacy_unit import DEFAULT_NAME, PrivacyUnit

    name = unit_name(args.unit_name)
    if args.privacy_unit is None:
        if name is not None:
            raise InvalidParameter(
                "--unit-name names the privacy unit: give --privacy-unit COLUMN:K too"
            )
        return None
    column, k = parse_privacy_unit(args.privacy_unit)
    return PrivacyUnit(column, k, name or DEFAULT_NAME)
