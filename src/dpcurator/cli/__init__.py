"""The ``dpcurator`` command line: parse, call, format. Nothing else lives here.

Each subcommand is a module in this package with ``register(subparsers)``; that
function adds its parser and sets ``handler`` to a function ``(args) -> int``.
Every :class:`~dpcurator.errors.DpCuratorError` becomes one line on stderr and
exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dpcurator.errors import DpCuratorError

#: Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ("account", "overlap", "answer", "demo", "serve", "analysts", "ledger")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dpcurator",
        description="Differentially private statistics with tight composition "
        "and parallel composition by maximum overlap.",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, required=True
    )
    for name in SUBCOMMANDS:
        importlib.import_module(f"dpcurator.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except DpCuratorError as err:
        sys.stderr.write(f"dpcurator {args.command}: error: {err}\n")
        return 2
    except (OSError, ValueError) as err:
        # Unreadable files, unwritable outputs, bad numbers deep in a library:
        # still one line, still exit status 2.
        sys.stderr.write(f"dpcurator {args.command}: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("dpcurator: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
