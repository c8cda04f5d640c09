"""``--anchor FILE``, taken wherever a ledger is: the file outside the ledger's store that
records its heads, so that a rollback of the store is refused (see
:mod:`dpcurator.curator.ledger_anchoring`). Without it, an SQLite ledger's anchor is
``LEDGER.anchor`` beside it, and a PostgreSQL ledger has none: ``serve`` then refuses to
start, and other commands say on stderr that a rollback would go unnoticed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dpcurator.errors import InvalidParameter

HELP = (
    "the ledger's anchor: a file outside its store where its heads are recorded, so that "
    "a rollback is refused (default: LEDGER.anchor beside an SQLite file; none for "
    "PostgreSQL)"
)


def add_anchor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--anchor", metavar="FILE", help=HELP)


def anchor_of(args: argparse.Namespace) -> str | bool:
    """What ``Ledger(anchor=...)`` takes for ``--anchor`` (True: the default place)."""
    given = getattr(args, "anchor", None)
    if given is None:
        return True
    if not given:
        raise InvalidParameter("--anchor: give a file name")
    return str(given)


def warn_unanchored(ledger: Any) -> None:
    """One line on stderr when a PostgreSQL ledger was opened without an anchor."""
    if ledger.anchor is None and ledger.kind == "postgresql":
        sys.stderr.write(
            f"dpcurator: warning: ledger {ledger.path} has no anchor (--anchor FILE): a "
            "rollback of its database cannot be detected here\n"
        )
