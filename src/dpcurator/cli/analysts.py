"""``dpcurator analysts add|list|revoke``: who may ask the served curator, with what quota.

Analysts and the hashes of their tokens live in the ledger (a file, or a PostgreSQL
database several servers share), in its verified chain; every running server sees a
change at its next request. The ledger is given as ``LEDGER`` or ``--ledger LEDGER``. A
token is printed once, by ``add``, as the last line of its output (``--json``:
``{"name": ..., "token": ...}``).
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

from dpcurator.cli import options
from dpcurator.cli.anchoring import add_anchor, anchor_of, warn_unanchored
from dpcurator.errors import InvalidParameter

_LEDGER_HELP = "the curator's ledger: a file, or postgresql://user@host/dbname[?schema=NAME]"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "analysts",
        help="add, list or revoke the analysts of a served curator",
        description="Manage the analysts who may query a curator served with "
        "`dpcurator serve`: their bearer tokens and quotas, kept in the ledger.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="register an analyst and print a new token")
    add.add_argument("name", metavar="NAME")
    options.add_ledger(add, _LEDGER_HELP)
    add.add_argument(
        "--quota", type=float, metavar="Q", help="her own budget, in the ledger's currency"
    )
    add.add_argument("--admin", action="store_true", help="may manage analysts over HTTP")
    add.add_argument("--json", action="store_true", help='print {"name": ..., "token": ...}')
    add_anchor(add)
    add.set_defaults(handler=_add)
    ls = actions.add_parser("list", help="every analyst, quota, role and whether active")
    options.add_ledger(ls, _LEDGER_HELP)
    ls.add_argument("--json", action="store_true")
    add_anchor(ls)
    ls.set_defaults(handler=_list)
    rv = actions.add_parser("revoke", help="stop an analyst's token from working, at once")
    rv.add_argument("name", metavar="NAME")
    options.add_ledger(rv, _LEDGER_HELP)
    add_anchor(rv)
    rv.set_defaults(handler=_revoke)


def _open(path: str, args: argparse.Namespace):
    from dpcurator.curator.ledger import Ledger

    led = Ledger(path, create=False, anchor=anchor_of(args))
    warn_unanchored(led)
    return led


def _additive(ledger, quota: float | None) -> Fraction | None:
    """A quota given on the command line, in the ledger's additive unit (mu: squared)."""
    from dpcurator.curator.budget import exact_number

    if quota is None:
        return None
    q = exact_number(quota, "--quota")
    return q * q if ledger.identity.get("currency") == "mu" else q


def _add(args: argparse.Namespace) -> int:
    from dpcurator.curator.requests import analyst_name

    name = analyst_name(args.name)  # the names the curator and the service accept
    led = _open(options.ledger_from(args), args)
    try:
        token = led.add_credential(name, quota=_additive(led, args.quota), admin=args.admin)
    finally:
        led.close()
    if args.json:
        print(json.dumps({"name": args.name, "token": token}))
    else:
        role = "administrator" if args.admin else "analyst"
        print(f"added {role} {args.name!r}; their token (shown once, keep it secret):")
        print(token)
    return 0


def _list(args: argparse.Namespace) -> int:
    led = _open(options.ledger_from(args), args)
    try:
        creds = led.credentials()
        mu = led.identity.get("currency") == "mu"
    finally:
        led.close()

    def shown(q: Fraction | None) -> float | None:
        if q is None:
            return None
        return float(q) ** 0.5 if mu else float(q)

    rows = [
        {"name": c.name, "quota": shown(c.quota), "admin": c.admin, "active": c.active}
        for c in creds
    ]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'name':<24} {'quota':>10} {'role':<14} status")
    for r in rows:
        quota = "-" if r["quota"] is None else f"{r['quota']:.6g}"
        role = "administrator" if r["admin"] else "analyst"
        status = "active" if r["active"] else "no token"
        print(f"{r['name']:<24} {quota:>10} {role:<14} {status}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    led = _open(options.ledger_from(args), args)
    try:
        if args.name not in {c.name for c in led.credentials()}:
            raise InvalidParameter(f"no analyst {args.name!r} in {led.path}")
        led.revoke(args.name)
    finally:
        led.close()
    print(f"revoked {args.name!r}: their token no longer works")
    return 0
