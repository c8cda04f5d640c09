"""``dpcurator ledger head LEDGER [--anchor FILE]``: where the ledger's chains end, what
its anchor records, and whether the ledger extends it; ``dpcurator ledger verify
LEDGER``: every charge, analyst entry and checkpoint verified, against the anchor too.

``head``: the ledger is verified in full first (a broken chain is refused as by every
command); then its heads are compared with the anchor's furthest entry. Exit status 0
when the ledger extends its anchor (or there is nothing anchored yet), 2 when it does
not: the report is printed all the same, and the reason is the one line on stderr.

``verify``: what a curator's open skips (:mod:`dpcurator.curator.checkpoint`): every
checkpoint rebuilt from the charges it covers, besides every chain from its genesis.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dpcurator.cli import options
from dpcurator.cli.anchoring import add_anchor, anchor_of
from dpcurator.curator.anchor import Anchor, Heads, problem
from dpcurator.curator.ledger import Ledger
from dpcurator.curator.ledger_anchoring import anchor_file
from dpcurator.curator.stores import is_url, target_of
from dpcurator.errors import LedgerError

_EPILOG = """\
The anchor is a file outside the ledger's store, appended after each commit with the
heads of its two chains (charges, and the analysts' quotas and tokens); a ledger that
does not contain the anchored heads was rolled back or replaced, and `ledger show`,
`serve` and every other command refuse it. Default anchor: LEDGER.anchor beside an
SQLite file; a PostgreSQL ledger has the one its servers were given (--anchor).
Exit status 2 when the ledger does not extend its anchor, or on any error."""


#: What each status means, as the plain output says it.
_SAID = {
    "equal": "agree: the ledger ends where its anchor does",
    "ahead": "agree: the ledger extends its anchor (the next commit anchors the rest)",
    "empty": "agree: nothing anchored yet (the next commit anchors the ledger)",
    "none": "no anchor: a rollback cannot be detected",
    "refused": "REFUSED: the ledger does not extend its anchor",
}


def register(actions: argparse._SubParsersAction) -> None:
    for name, handler, summary, description in (
        (
            "head",
            _head,
            "the ledger's chain heads and its anchor's, and whether they agree",
            "Verify the ledger, print where its chains end (charge id and hash, analyst "
            "entry and hash), the anchor's furthest entry, and whether the ledger extends it.",
        ),
        (
            "verify",
            _verify,
            "verify every charge, analyst entry and checkpoint, and the anchor",
            "Verify the whole ledger: both hash chains from their genesis, every checkpoint "
            "rebuilt from the charges it covers (a curator opening the ledger checks only "
            "the charges after the last one), and that the ledger extends its anchor.",
        ),
    ):
        p = actions.add_parser(
            name,
            help=summary,
            description=description,
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        options.add_ledger(p, "the ledger: a file, or a postgresql:// URL")
        p.add_argument("--json", action="store_true", help="print one JSON document")
        add_anchor(p)
        p.set_defaults(handler=handler)


def _existing(args: argparse.Namespace) -> str | None:
    """The ledger the arguments name (refused if a file that is not there), and its
    anchor file."""
    args.ledger = options.ledger_from(args)
    name = target_of(args.ledger)
    assert name is not None
    if not is_url(name) and not Path(name).exists():
        raise LedgerError(f"ledger {name}: no such file")
    return anchor_file(args.ledger, anchor_of(args))


def _heads_json(h: Heads) -> dict[str, object]:
    return {
        "charges": h.charges,
        "charges_hash": h.charges_hash,
        "analysts": h.analysts,
        "analysts_hash": h.analysts_hash,
        "genesis": h.genesis,
        "checkpoints": h.checkpoints,
        "checkpoints_hash": h.checkpoints_hash or None,
    }


def _verify(args: argparse.Namespace) -> int:
    path = _existing(args)
    led = Ledger(args.ledger, None, create=False, anchor=path)
    try:
        n = led.verify()
        have, shown = led.heads, led.path
    finally:
        led.close()
    if args.json:
        print(json.dumps({"ledger": shown, "verified": True, "anchor": path, **_heads_json(have)}))
        return 0
    sealed = f", {have.checkpoints} checkpoints (each rebuilt from its charges)"
    print(f"ledger:   {shown} (verified: {n} charges, {have.analysts} analyst entries{sealed})")
    print(f"anchor:   {path or 'none'}{' (extended)' if path else ''}")
    return 0


def _head(args: argparse.Namespace) -> int:
    path = _existing(args)
    anchored = Anchor(path).latest() if path is not None else None  # before the ledger's
    led = Ledger(args.ledger, None, create=False, anchor=None)  # compared below
    try:
        have = led.heads
        why = None
        if anchored is not None:
            why = problem(led.path, f"its anchor {path}", anchored, have, led.hash_at)
        shown = led.path
    finally:
        led.close()
    if why is not None:
        status = "refused"
    elif anchored is None:
        status = "empty" if path is not None else "none"
    elif (anchored.charges, anchored.analysts, anchored.checkpoints) == (
        have.charges,
        have.analysts,
        have.checkpoints,
    ):
        status = "equal"
    else:
        status = "ahead"
    if args.json:
        print(
            json.dumps(
                {
                    "ledger": shown,
                    **_heads_json(have),
                    "anchor": path,
                    "anchored": None if anchored is None else _heads_json(anchored),
                    "agrees": why is None,
                    "status": status,
                    "problem": why,
                }
            )
        )
    else:
        print(f"ledger:   {shown} (verified)")
        print(f"head:     charge {have.charges} {have.charges_hash}")
        print(f"          analyst entry {have.analysts} {have.analysts_hash}")
        if have.checkpoints:
            print(f"          checkpoint {have.checkpoints} {have.checkpoints_hash}")
        if path is None:
            print("anchor:   none (a PostgreSQL ledger's is the file its servers were given)")
        elif anchored is None:
            print(f"anchor:   {path} (no entry yet)")
        else:
            print(f"anchor:   {path}")
            print(f"anchored: charge {anchored.charges} {anchored.charges_hash}")
            print(f"          analyst entry {anchored.analysts} {anchored.analysts_hash}")
            if anchored.checkpoints:
                print(f"          checkpoint {anchored.checkpoints} {anchored.checkpoints_hash}")
        print(f"status:   {_SAID[status]}")
    if why is not None:
        raise LedgerError(why)
    return 0
