"""``dpcurator sql``: answer one DP SELECT from a data file, charging a durable ledger.

    dpcurator sql --data flights.csv --schema flights.json --epsilon 1 --ledger l.db \\
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.1) origin, COUNT(*) AS n
         FROM flights GROUP BY origin"

Several tables (to join on the privacy unit): ``--table NAME DATA SCHEMA`` once per
table. The answer is printed as a table (default), CSV or JSON, or written with
``--out FILE`` (``.csv``, ``.json``, ``.parquet``). ``EXPLAIN SELECT ...`` prints what
it would cost and each aggregate's expected error, charging nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from dpcurator.cli import load_report, options, output
from dpcurator.cli.anchoring import add_anchor, anchor_of, warn_unanchored
from dpcurator.cli.answer import ledger_option
from dpcurator.errors import InvalidParameter, LedgerError

_EPILOG = """\
The grammar, every rule and refusal: docs/sql.md. The SELECT's own cost is its
OPTIONS(epsilon=...) (rho= or mu= on a zCDP or Gaussian-DP ledger); --epsilon (--rho,
--mu) is the ledger's whole budget. One SELECT is one charge of its cost on the rows its
WHERE covers, all or nothing."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sql",
        help="answer a SELECT WITH DIFFERENTIAL_PRIVACY as a table, charging a ledger",
        description="Answer one DP SELECT (BigQuery's SELECT WITH DIFFERENTIAL_PRIVACY "
        "OPTIONS(...)) over a data file, charging a durable ledger.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", metavar="SQL", help='the SELECT, or "-" to read it from stdin')
    p.add_argument("--data", help="the data file (CSV, CSV.gz or Parquet)")
    p.add_argument("--schema", help="the public schema (JSON)")
    p.add_argument(
        "--table",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "DATA", "SCHEMA"),
        help="a table by name (repeat for several, to join them on the privacy unit)",
    )
    p.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="how to print the answer (default: a table)",
    )
    p.add_argument("--out", metavar="FILE", help="write the answer to FILE (.csv, .json, .parquet)")
    options.add_budget(p)
    p.add_argument("--ledger", help="the ledger (a file, postgresql://..., or :memory:)")
    add_anchor(p)
    options.add_privacy_unit(p)
    options.add_loading(p)
    p.set_defaults(handler=run)


def _tables(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    if args.table:
        if args.data is not None or args.schema is not None:
            raise InvalidParameter(
                "give --data and --schema, or --table NAME DATA SCHEMA, not both"
            )
        tables: dict[str, tuple[str, str]] = {}
        for name, data, schema in args.table:
            if name in tables:
                raise InvalidParameter(f"--table {name}: given twice")
            tables[name] = (data, schema)
        return tables
    if args.data is None or args.schema is None:
        raise InvalidParameter("give --data FILE and --schema FILE (or --table NAME DATA SCHEMA)")
    return {Path(args.data).name.split(".")[0] or "data": (args.data, args.schema)}


def _named_after_file(
    err: LedgerError, args: argparse.Namespace, tables: dict[str, tuple[str, str]]
) -> LedgerError:
    """A ledger refusing ``--data``'s table for its name: the name comes from the data
    file's, so a renamed file (penguins_v2.csv) no longer opens the ledger of
    penguins.csv; ``--table`` keeps the ledger's name. Other refusals are unchanged."""
    found = re.search(r"the ledger's tables are \[(.*?)\], not", str(err))
    if args.data is None or found is None:
        return err
    names = re.findall(r"'((?:[^'\\]|\\.)*)'", found.group(1))
    [(data, schema)] = tables.values()
    name = names[0] if len(names) == 1 else "NAME"
    return type(err)(
        f"{err}; with --data a table is named after its file ({next(iter(tables))!r} from "
        f"{Path(data).name}): --table {name} {data} {schema} keeps the ledger's name"
    )


def run(args: argparse.Namespace) -> int:
    from dpcurator import Curator
    from dpcurator.sql.text import decode  # (loads sqlglot: not at every CLI start)

    # as bytes, read strictly: an invalid byte named as one, a byte-order mark dropped
    text = decode(sys.stdin.buffer.read() if args.query == "-" else os.fsencode(args.query))
    ledger = ledger_option(args.ledger)
    guarantee = options.budget_from(args)
    unit = options.privacy_unit_from(args)
    tables = _tables(args)
    opts = options.load_options(args)
    fmt = output.out_format(args.out) if args.out is not None else None
    if args.out is not None:
        output.check_writable(args.out, "--out")
    try:
        cur = Curator.open(
            tables=tables,
            budget=guarantee,
            ledger=ledger,
            anchor=anchor_of(args),
            privacy_unit=unit,
            **opts,
            **options.backend_options(args),
        )
    except LedgerError as err:
        raise _named_after_file(err, args, tables) from None
    with cur:
        warn_unanchored(cur.ledger)
        dropped = {k: r for k, r in cur.load_reports().items() if r and r.rows != r.rows_read}
        for line in load_report.lines(dropped, unit):
            print(f"data: {line}", file=sys.stderr)
        result = cur.sql(text)
    rows = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
    if args.out is not None:
        assert fmt is not None
        output.write_rows(rows, args.out, fmt)
    spent = (
        f"would cost {result.cost:g} {result.currency}; "
        + ("admitted now" if result.admitted else "refused now")
        if result.explain
        else f"cost {result.cost:g} {result.currency}; charge {result.charge_id}"
    )
    left = f"{result.remaining:.6g} {result.currency} left on its points"
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=1, default=str))
    elif args.format == "csv":
        output.write_stream(rows, sys.stdout, False)
    else:
        print(_table(result.columns, result.rows))
    print(f"{spent}; {left}", file=sys.stderr)
    return 0


def _cell(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _table(columns: tuple[str, ...], rows: tuple[tuple[Any, ...], ...]) -> str:
    """A plain text table, columns aligned (numbers to the right)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and bool(rows)
        for i in range(len(columns))
    ]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(columns)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)
