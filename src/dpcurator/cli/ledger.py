"""``dpcurator ledger ACTION``: look after a curator's ledger file.

A group of actions, each a ``_register_<action>(actions)`` function below listed in
:data:`ACTIONS`; each sets ``handler`` to a function ``(args) -> int``. Errors are
:class:`~dpcurator.errors.LedgerError`: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from dpcurator.curator.ledger import backup_ledger
from dpcurator.errors import LedgerError

_BACKUP_EPILOG = """\
The ledger may be in use: the copy is one consistent snapshot, taken with SQLite's
online backup API, holding every charge committed before the command started. Copying
the file by other means while a curator writes to it can catch it half-written; this
command is the supported way to copy a live ledger.
Exit status 2 on any error (one line naming the file)."""


def _register_backup(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "backup",
        help="copy a ledger, even while it is in use, and verify the copy",
        description="Verify the ledger SRC (every charge's hash chain, the quotas, the "
        "identity), copy it to DST with SQLite's online backup API, then verify DST.",
        epilog=_BACKUP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("src", metavar="SRC", help="the ledger file to copy")
    p.add_argument("dst", metavar="DST", help="the new file (refused if it exists)")
    p.add_argument("--force", action="store_true", help="replace DST if it exists")
    p.set_defaults(handler=_backup)


def _backup(args: argparse.Namespace) -> int:
    src, dst = Path(args.src), Path(args.dst)
    if not src.exists():
        raise LedgerError(f"ledger {src}: no such file")
    if dst.exists() and not args.force:
        raise LedgerError(f"backup {dst}: the file exists; pass --force to replace it")
    r = backup_ledger(src, dst, force=args.force)
    print(
        f"backed up {r.source} to {r.target}: {r.charges} charges, {r.analysts} analysts, "
        f"verified (head {r.head[:16]})"
    )
    return 0


#: The actions of ``dpcurator ledger``, in the order ``--help`` lists them.
ACTIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_register_backup,)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ledger",
        help="look after a ledger file (backup)",
        description="Look after the ledger file where a curator records every charge.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in ACTIONS:
        add(actions)
