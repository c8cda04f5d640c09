"""``dpcurator units DATA --schema S --unit COLUMN [--max-rows K]``: how many rows each
privacy unit holds, and how many rows each k would keep, to choose k.

For the data custodian, who holds the data anyway: it reads the data and prints figures
that depend on it (rows per unit, the largest unit), so it is no answer to an analyst,
charges nothing and touches no ledger. The rows it would keep are chosen with a
throw-away key; the counts it prints do not depend on the key.
"""

from __future__ import annotations

import argparse
import json
import secrets

from dpcurator.cli import load_report, options
from dpcurator.curator.privacy_unit import DEFAULT_NAME, PrivacyUnit, check_rows

_EPILOG = """\
Prints the rows read and used, the number of units, the rows per unit before the cap
(p50, p90, p99, max), and the rows each candidate k keeps (1, 2, 5, 10, ... up to the
largest unit). Reads the data, so it is for the custodian: no ledger, no budget."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "units",
        help="rows per privacy unit in a data file, and the rows each k keeps (no charge)",
        description="Load DATA with a privacy unit and report how many rows each unit has "
        "and how many rows each maximum k would keep.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", metavar="DATA", help="a CSV, CSV.gz or Parquet file")
    p.add_argument("--schema", required=True, help="the schema (JSON)")
    p.add_argument("--unit", required=True, metavar="COLUMN", help="the unit's id column")
    p.add_argument(
        "--max-rows",
        type=int,
        default=1,
        metavar="K",
        help="the k whose kept rows the first lines describe (default 1)",
    )
    p.add_argument("--unit-name", metavar="NAME", help="what one unit is (default: person)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    options.add_loading(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from dpcurator.backends import DuckDBBackend
    from dpcurator.backends.unit_rows import KEY_BYTES
    from dpcurator.errors import DataError, InvalidParameter

    if not args.unit.strip():
        raise InvalidParameter("--unit: give the id column")
    k = check_rows(args.max_rows, "--max-rows")
    unit = PrivacyUnit(args.unit, k, options.unit_name(args.unit_name) or DEFAULT_NAME)
    loader = DuckDBBackend.load
    if args.backend == "spark":
        import functools

        from dpcurator.backends.spark_backend import SparkBackend

        loader = functools.partial(SparkBackend.load, spark=args.spark_master)
    elif args.spark_master is not None:
        raise InvalidParameter("--spark-master goes with --backend spark")
    try:
        backend = loader(
            args.data,
            args.schema,
            privacy_unit=unit.pair,
            unit_key=secrets.token_bytes(KEY_BYTES),  # the counts do not depend on it
            **options.load_options(args),
        )
    except DataError as err:
        # the loader's "privacy unit column" is this command's --unit, not the
        # --privacy-unit of the commands that charge
        raise DataError(str(err).replace("privacy unit column ", "--unit column ")) from None
    try:
        report = backend.report
    finally:
        backend.close()
    if args.json:
        print(json.dumps(load_report.as_json({"data": report})["data"]))
    else:
        for line in load_report.lines({"data": report}, unit):
            print(line)
    return 0
