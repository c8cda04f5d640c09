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
import re
import sys
from collections.abc import Sequence

from dpcurator.errors import DpCuratorError

#: Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = (
    "account",
    "overlap",
    "answer",
    "demo",
    "serve",
    "analysts",
    "ledger",
    "units",
    "schema",
    "sql",
)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


#: Library phrasings of loading options, and what they are called on the command line.
_CLI_TERMS = (
    (re.compile(r"on_invalid='drop'"), "--on-invalid drop"),
    (re.compile(r"\bmax_dropped="), "--max-dropped "),
    (re.compile(r"\bmax_dropped\b"), "--max-dropped"),
    (re.compile(r"on_invalid=\S*"), "--on-invalid"),
    (re.compile(r"replace=\{attribute: value\}"), "--replace ATTRIBUTE=VALUE"),
    (re.compile(r"\breplace: "), "--replace: "),
    (re.compile(r"pass columns=\[\.\.\.\]"), "pass --columns a,b,c (or a file of names)"),
    (re.compile(r"\bcolumns= names"), "--columns names"),
    (re.compile(r"\bseparator must"), "--separator must"),
    (re.compile(r"\bskip must"), "--skip must"),
    (re.compile(r"name one with table="), "name one with --table"),
    (re.compile(r"\bprivacy unit column "), "--privacy-unit column "),
)


def cli_terms(message: str) -> str:
    """A library error message, with its keyword arguments named as the CLI's flags."""
    for pattern, flag in _CLI_TERMS:
        message = pattern.sub(flag, message)
    return message


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpcurator")
    except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dpcurator",
        description="Differentially private statistics with tight composition "
        "and parallel composition by maximum overlap. Design and mathematics: "
        "docs/design.md; a first walk through: docs/tutorial.md.",
    )
    parser.add_argument("--version", action="version", version=f"dpcurator {_version()}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, required=True
    )
    for name in SUBCOMMANDS:
        importlib.import_module(f"dpcurator.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given (serve --workers)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except DpCuratorError as err:
        sys.stderr.write(f"dpcurator {args.command}: error: {_one_line(cli_terms(str(err)))}\n")
        return 2
    except OSError as err:
        # Unreadable files, unwritable outputs: one line naming the file, no errno.
        what = f"{err.filename}: " if getattr(err, "filename", None) else ""
        sys.stderr.write(f"dpcurator {args.command}: error: {what}{err.strerror or err}\n")
        return 2
    except ValueError as err:
        # Bad numbers deep in a library: still one line, still exit status 2.
        sys.stderr.write(f"dpcurator {args.command}: error: {_one_line(str(err))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("dpcurator: interrupted\n")
        return 130


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
