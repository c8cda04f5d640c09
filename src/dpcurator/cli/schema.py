"""``dpcurator schema draft DATA --out schema.json`` and ``dpcurator schema check SCHEMA
DATA``: write a first schema from the data, and say which rows a schema would refuse.

Both are for the data custodian, who holds the data: they read it and print what
depends on it (bounds, rare values, invalid rows), charge nothing and touch no ledger.
A drafted domain is read from the data, so it is not public until the custodian has
reviewed it: ``draft`` prints exactly which bounds and values came from the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dpcurator.errors import DataError, InvalidParameter

_EPILOG = """\
draft: integer columns get bounds rounded outward, text and boolean columns their values
(as the loader reads them), columns with blank or NA cells a missing value; date and time
columns are left out (not supported yet). Review every line it prints before publishing.
check: exit status 0 when every row loads, 1 when some would not (each column's count,
its first bad row and the fix), 2 on bad input. Neither charges anything."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "schema",
        help="draft a schema from a data file, or check which rows a schema refuses (no charge)",
        description="Draft a schema from the data for review, or check a schema against it.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    d = sub.add_parser("draft", help="propose a schema from DATA (CSV with a header, or Parquet)")
    d.add_argument("data", metavar="DATA", help="a CSV file with a header, or a Parquet file")
    d.add_argument("--out", metavar="FILE", help="write the schema here (default: stdout)")
    d.add_argument("--separator", default=",", help="CSV field separator")
    d.set_defaults(handler=run_draft)
    c = sub.add_parser("check", help="which rows of DATA would not load with SCHEMA")
    c.add_argument("schema", metavar="SCHEMA", help="the schema (JSON)")
    c.add_argument("data", metavar="DATA", help="a CSV, CSV.gz or Parquet file")
    c.add_argument("--separator", default=",", help="CSV field separator")
    c.set_defaults(handler=run_check)


def run_draft(args: argparse.Namespace) -> int:
    from dpcurator.backends.schema_draft import draft
    from dpcurator.queries import Schema

    if args.out is not None and Path(args.out).is_dir():
        raise InvalidParameter(f"--out {args.out} is a folder")
    columns = draft(args.data, separator=args.separator)
    attrs = [c.attribute for c in columns if c.attribute is not None]
    if not attrs:
        raise DataError(f"{args.data}: no column can be drafted")
    text = json.dumps(Schema.from_dict({"attributes": attrs}).to_dict(), indent=2) + "\n"
    report = sys.stderr if args.out is None else sys.stdout
    if args.out is None:
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}: {len(attrs)} attributes", file=report)
    print(
        "review before publishing: a domain read from the data reveals its extremes and "
        "rare values; replace what is listed below by public bounds and lists",
        file=report,
    )
    for c in columns:
        for note in c.notes:
            print(f"  {c.name}: {note}", file=report)
    return 0


def run_check(args: argparse.Namespace) -> int:
    from dpcurator.backends.duckdb_backend import DuckDBBackend
    from dpcurator.cli import cli_terms
    from dpcurator.queries import Schema

    schema = Schema.load(args.schema)
    bad = 0
    for attr in schema.attributes:
        try:
            b = DuckDBBackend.load(args.data, Schema((attr,)), separator=args.separator)
        except DataError as err:
            bad += 1
            message = cli_terms(str(err)).split(": ", 1)[-1]
            print(f"{message.replace('fix the data', 'fix', 1)}")
            continue
        rows = b.report.rows_read
        b.close()
        print(f"attribute {attr.name!r}: all {rows:,} rows load")
    if bad:
        print(f"{bad} of {len(schema)} attributes have rows that would not load")
        return 1
    print("every row loads")
    return 0
