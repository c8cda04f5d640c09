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
draft: each column gets the first type that fits it: boolean, date, timestamp (the
coarsest unit its values are whole in), integer (within 64 bits), float (a step nearly
every value is written to, at most 10^6 positions, magnitudes below 10^15), categorical
(its values; more than 50 go to a values file beside --out; also numbers no grid holds);
bounds rounded outward (times to whole years); columns with blank or NA cells a missing
value. Columns loading cannot find by name (no name in the header, as pandas writes its
index; two columns of one name) are left out. Review every line it prints before
publishing; warnings go to stderr.
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
        reasons = dict.fromkeys(f"{c.name}: {(c.warnings + c.notes)[0]}" for c in columns)
        why = "; ".join(list(reasons)[:3])
        more = f"; {len(reasons) - 3} more" if len(reasons) > 3 else ""
        raise DataError(f"{args.data}: no column can be drafted ({why}{more})")
    schema = Schema.from_dict({"attributes": attrs}).to_dict()
    report = sys.stderr if args.out is None else sys.stdout
    if args.out is None:
        sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    else:
        out = Path(args.out)
        files = _values_files(schema, out)
        for path, lines in files.items():
            path.write_text("".join(f"{v}\n" for v in lines), encoding="utf-8")
        out.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
        also = f" (and {len(files)} values files beside it)" if files else ""
        print(f"wrote {args.out}: {len(attrs)} attributes{also}", file=report)
    print(
        "review before publishing: a domain read from the data reveals its extremes and "
        "rare values; replace what is listed below by public bounds and lists",
        file=report,
    )
    for c in columns:
        for note in c.notes:
            print(f"  {c.name}: {note}", file=report)
    # always on stderr, after the notes: a fallback or a step that merges most values
    # changes what the column can answer, and must not scroll by among the notes
    for c in columns:
        for warning in c.warnings:
            print(f"dpcurator schema: warning: {c.name}: {warning}", file=sys.stderr)
    return 0


def _values_files(schema: dict, out: Path) -> dict[Path, list[str]]:
    """Long value lists moved to files beside the schema (``flights.dest.txt``), one value
    per line; ``schema`` is changed to name them (``"values_file"``)."""
    from dpcurator.backends.schema_draft import MANY_VALUES

    files: dict[Path, list[str]] = {}
    for a in schema["attributes"]:
        vals = a.get("values", [])
        if len(vals) <= MANY_VALUES or any(("\n" in v or "\r" in v) for v in vals):
            continue
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in a["name"])
        path = out.with_name(f"{out.stem}.{safe}.txt")
        while path in files:
            path = path.with_name(path.stem + "_.txt")
        files[path] = vals
        a.pop("values")
        a["values_file"] = path.name
    return files


def run_check(args: argparse.Namespace) -> int:
    from dpcurator.backends.duckdb_load import refusals
    from dpcurator.cli import cli_terms
    from dpcurator.queries import Schema

    schema = Schema.load(args.schema)
    rows, refused = refusals(args.data, schema, separator=args.separator)
    bad = {name: message for name, _, message in refused}
    for attr in schema.attributes:
        if attr.name in bad:
            message = cli_terms(bad[attr.name]).split(": ", 1)[-1]
            print(f"{message.replace('fix the data', 'fix', 1)}")
        else:
            print(f"attribute {attr.name!r}: all {rows:,} rows load")
    if bad:
        print(f"{len(bad)} of {len(schema)} attributes have rows that would not load")
        return 1
    print("every row loads")
    return 0
