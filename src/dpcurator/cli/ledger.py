"""``dpcurator ledger ACTION``: read and look after a curator's ledger.

A ledger is named as everywhere else: a file path (or ``sqlite:///PATH``), or
``postgresql://user@host/dbname[?schema=NAME]``, given as ``LEDGER`` (``SRC``) or as
``--ledger LEDGER``; messages and output name it without its password or any
``*password*`` parameter.

A group of actions, each a ``_register_<action>(actions)`` function below listed in
:data:`ACTIONS`; each sets ``handler`` to a function ``(args) -> int``. Errors are
:class:`~dpcurator.errors.LedgerError`: one line on stderr, exit status 2.

``show``, ``history`` and ``analysts`` read the ledger only, never the data: its identity
holds the budget and every table's public schema, and its charges hold every answered
query's coverage and cost, which is all the overlap-aware filter needs
(:func:`dpcurator.curator.standing.remaining_from_ledger`). Amounts are printed with at
most 6 significant digits, what remains rounded down and what is spent rounded up;
``--json`` adds the exact fractions as strings (``"remaining_exact": "7/10"``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcurator.cli import ledger_head, options, output
from dpcurator.cli.anchoring import add_anchor, anchor_of, warn_unanchored
from dpcurator.curator.ledger import Ledger, backup_ledger, copy_ledger
from dpcurator.curator.stores import is_url, location_of, target_of
from dpcurator.errors import InvalidParameter, LedgerError, QueryError

_LEDGER_HELP = "the ledger: a file, or postgresql://user@host/dbname[?schema=NAME]"

_BACKUP_EPILOG = """\
The ledger may be in use: the copy is one consistent snapshot of its rows, holding every
charge committed before the command started, while curators keep charging. Copying an
SQLite file by other means while a curator writes to it can catch it half-written; this
command is the supported way to copy a live ledger. A PostgreSQL ledger backs up to a
file the same way (pg_dump of its schema is the database's own way).
Exit status 2 on any error (one line naming the ledger)."""

_COPY_EPILOG = """\
SRC and DST are each a file (SQLite) or postgresql://user@host/dbname[?schema=NAME]:
from SQLite to PostgreSQL to move a curator onto several servers, and back. SRC may be in
use: the copy is one consistent snapshot of its rows, holding every charge committed
before the command started. Rows are copied as stored, so the copy has the same hash
chains and head. DST is built beside the file, or in a scratch schema, verified there,
put in place, and verified again. A DST that holds a ledger (a file that exists, a schema
with a ledger's tables) is replaced only with --force; a schema that holds other tables
is never written. Stop the servers of a DST before replacing it.
Exit status 2 on any error (one line naming the ledger)."""


def _register_backup(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "backup",
        help="copy a ledger to a file, even while it is in use, and verify the copy",
        description="Verify the ledger SRC (every charge's hash chain, the quotas, the "
        "identity), write one snapshot of it to the file DST, then verify DST.",
        epilog=_BACKUP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_ledger(p, _LEDGER_HELP, positional="src")
    p.add_argument("dst", nargs="?", metavar="DST", help="the new file (refused if it exists)")
    add_anchor(p)
    p.add_argument("--force", action="store_true", help="replace DST if it exists")
    p.set_defaults(handler=_backup)


def _register_copy(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "copy",
        help="copy a ledger between SQLite and PostgreSQL, verified before and after",
        description="Verify the ledger SRC, copy one snapshot of it to DST (a file or a "
        "PostgreSQL database), and verify DST.",
        epilog=_COPY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_ledger(p, _LEDGER_HELP, positional="src")
    p.add_argument(
        "dst", nargs="?", metavar="DST", help="where the copy goes: a file or a PostgreSQL URL"
    )
    add_anchor(p)
    p.add_argument("--force", action="store_true", help="replace a ledger DST already holds")
    p.set_defaults(handler=_copy)


def _existing(ledger: str) -> str:
    """``ledger`` if it may exist; a missing file is refused here (never created)."""
    name = target_of(ledger)
    assert name is not None
    if not is_url(name) and not Path(name).exists():
        raise LedgerError(f"ledger {name}: no such file")
    return ledger


def _source_and_target(args: argparse.Namespace) -> tuple[str, str]:
    """SRC and DST, given as ``SRC DST`` or as ``--ledger SRC DST``."""
    if args.ledger_option is not None and args.dst is None:
        args.src, args.dst = None, args.src  # the one positional argument is DST
    if args.dst is None:
        raise InvalidParameter("give SRC and DST (or --ledger SRC DST)")
    return options.ledger_from(args, "src"), args.dst


def _backup(args: argparse.Namespace) -> int:
    args.src, args.dst = _source_and_target(args)
    _existing(args.src)
    dst = target_of(args.dst)
    assert dst is not None
    if is_url(dst):
        raise LedgerError(
            f"backup {location_of(dst)}: a backup is a file; `dpcurator ledger copy` writes "
            "a ledger into a database"
        )
    if Path(dst).exists() and not args.force:
        raise LedgerError(f"backup {dst}: the file exists; pass --force to replace it")
    r = backup_ledger(args.src, dst, force=args.force, anchor=anchor_of(args))
    print(
        f"backed up {r.source} to {r.target}: {r.charges} charges, {r.analysts} analysts, "
        f"verified (head {r.head[:16]})"
    )
    return 0


def _copy(args: argparse.Namespace) -> int:
    args.src, args.dst = _source_and_target(args)
    _existing(args.src)
    dst = target_of(args.dst)
    assert dst is not None
    if not is_url(dst) and Path(dst).exists() and not args.force:
        raise LedgerError(f"copy {dst}: the file exists; pass --force to replace it")
    try:
        r = copy_ledger(args.src, dst, force=args.force, anchor=anchor_of(args))
    except LedgerError as err:
        text = str(err)
        if text.endswith("refusing to overwrite it"):
            text += " (pass --force to replace it)"
        raise LedgerError(text) from None
    print(
        f"copied {r.source} to {r.target}: {r.charges} charges, {r.analysts} analysts, "
        f"verified (head {r.head[:16]})"
    )
    return 0


# --- reading a ledger -----------------------------------------------------------------

_READ_EPILOG = """\
Reads the ledger only, never the data: the ledger's identity holds the budget and
every table's public schema, and each charge the points its query covered and its cost.
Every charge's hash chain is verified first. Amounts have at most 6 significant digits:
what remains is rounded down and what is spent rounded up, so neither is ever shown
more favourable than it is; --json also gives each amount exactly, as a fraction in the
ledger's additive unit (epsilon, rho, or mu^2 for a Gaussian-DP budget).
Exit status 2 on any error (one line naming the ledger)."""


def _open_ledger(ledger: str, args: argparse.Namespace) -> Ledger:
    led = Ledger(_existing(ledger), create=False, anchor=anchor_of(args))
    warn_unanchored(led)
    return led


def _add_file(p: argparse.ArgumentParser) -> None:
    options.add_ledger(p, _LEDGER_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    add_anchor(p)


def _register_show(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "show",
        help="budget, spent and remaining: overall, on a query's points, per table and analyst",
        description="Show a ledger's budget, what is spent at the worst point of the domain "
        "and what remains; with --query, what is spent and left on the points that query "
        "covers; per table (its worst point) and per analyst (quota, spent at her worst "
        "point, what is left of it).",
        epilog=_READ_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_file(p)
    p.add_argument(
        "--query", metavar="Q", help='a query, e.g. "age < 30": spent and left on its points'
    )
    p.add_argument("--table", metavar="NAME", help="the table --query is about (if several)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the spend over time, per analyst (PNG)")
    p.set_defaults(handler=_show)


def _register_history(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "history",
        help="every charge: time, analyst, table, query and cost",
        description="List every charge of a ledger, oldest first: when, by whom, on which "
        "table, the request as asked, and what it cost.",
        epilog=_READ_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_file(p)
    p.add_argument("--analyst", metavar="NAME", help="only this analyst's charges")
    p.set_defaults(handler=_history)


def _register_analysts(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "analysts",
        help="every analyst: quota, role, whether her token works",
        description="List the analysts a ledger knows: their quota (in the budget's "
        "unit), their role, and whether they hold a working token for `dpcurator serve`.",
        epilog=_READ_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_file(p)
    p.set_defaults(handler=_analysts)


def _unit(currency: str) -> str:
    return "mu^2" if currency == "mu" else currency


def _show(args: argparse.Namespace) -> int:
    from dpcurator.curator.standing import filter_from_ledger, remaining_from_ledger

    if args.table is not None and args.query is None:
        raise LedgerError("--table goes with --query")
    if args.plot:
        output.check_writable(args.plot, "--plot")
    led = _open_ledger(options.ledger_from(args), args)
    try:
        ident = led.identity
        rows = led.charges_after(0)
        filt = filter_from_ledger(led)
        overall = remaining_from_ledger(led, filt=filt)
        on_query = None
        if args.query is not None:
            try:
                on_query = remaining_from_ledger(led, args.query, table=args.table, filt=filt)
            except QueryError as err:
                raise QueryError(f"--query {args.query!r}: {err}") from None
        cur = overall.currency
        tables: dict[str, dict[str, Any]] = {}
        fork = filt.fork()
        # the tables, and the joins on the unit that were charged (a table of their own)
        charged = {r.table for r in rows}
        for t in sorted(set(ident.get("tables", {})) | charged):  # type: ignore[arg-type]
            worst = fork.worst(t)
            tables[t] = {
                "charges": sum(1 for r in rows if r.table == t),
                "spent": worst.value,
                "exact": worst.exact,
            }
        analysts: dict[str, dict[str, Any]] = {}
        for name in sorted(led.analysts()):
            st = remaining_from_ledger(led, analyst=name, filt=filt)
            analysts[name] = {
                "quota": st.quota,
                "spent": st.quota_spent,
                "remaining": st.quota_remaining,
                "charges": sum(1 for r in rows if r.analyst == name),
                "exact": st.exact,
            }
        unnamed = sum(1 for r in rows if r.analyst is None)
        if args.plot:
            _plot_spend(led.path, rows, filt, ident, args.plot, led.analysts())
        shown = led.path
    finally:
        led.close()
    if args.json:
        d: dict[str, Any] = {
            "ledger": shown,
            "budget": ident.get("budget"),
            "currency": cur,
            "exact_unit": _unit(cur),
            "charges": len(rows),
            **output.amount_json("budget_amount", overall.budget, cur),
            **output.amount_json("spent", overall.spent, cur, up=True),
            **output.amount_json("remaining", overall.remaining, cur),
            "exact": overall.exact,
            "query": None,
            "tables": {
                t: {
                    "charges": v["charges"],
                    **output.amount_json("spent", v["spent"], cur, up=True),
                    "exact": v["exact"],
                }
                for t, v in tables.items()
            },
            "analysts": {
                n: {
                    "charges": v["charges"],
                    **output.amount_json("quota", v["quota"], cur),
                    **output.amount_json("spent", v["spent"], cur, up=True),
                    **output.amount_json("remaining", v["remaining"], cur),
                    "exact": v["exact"],
                }
                for n, v in analysts.items()
            },
            "charges_without_analyst": unnamed,
        }
        if on_query is not None:
            d["query"] = {
                "query": args.query,
                "table": args.table or (next(iter(tables)) if len(tables) == 1 else None),
                **output.amount_json("spent", on_query.spent, cur, up=True),
                **output.amount_json("remaining", on_query.remaining, cur),
                "exact": on_query.exact,
            }
        if args.plot:
            d["plot"] = args.plot
        print(json.dumps(d))
        return 0

    def up(x: Fraction | None) -> str:
        return "-" if x is None else output.amount(x, cur, up=True)

    def down(x: Fraction | None) -> str:
        return "-" if x is None else output.amount(x, cur)

    bound = "" if overall.exact else " (bounds: an overlap computation ran out of time)"
    print(f"ledger:     {shown} (verified: {len(rows)} charges, {len(analysts)} analysts)")
    print(f"budget:     {ident.get('budget')}, kept in {cur}: {down(overall.budget)}")
    print(f"spent:      {up(overall.spent)} at the worst point of the domain{bound}")
    print(f"remaining:  {down(overall.remaining)} everywhere (the least left at any point)")
    if on_query is not None:
        on = f" (table {args.table})" if args.table else ""
        print(
            f"on {args.query!r}{on}: spent {up(on_query.spent)}, "
            f"remaining {down(on_query.remaining)}" + ("" if on_query.exact else " (bounds)")
        )
    print()
    print(f"{'table':<24} {'charges':>8}  spent at its worst point")
    for t, v in tables.items():
        print(f"{t:<24} {v['charges']:>8}  {up(v['spent'])}")
    if analysts or unnamed:
        print()
        print(
            f"{'analyst':<24} {'charges':>8}  {'quota':>10}  {'spent':>10}  {'left of quota':>13}"
        )
        for n, v in analysts.items():
            print(
                f"{n:<24} {v['charges']:>8}  {down(v['quota']):>10}  {up(v['spent']):>10}  "
                f"{down(v['remaining']):>13}"
            )
        if unnamed:
            print(f"{'(no analyst)':<24} {unnamed:>8}")
    if args.plot:
        print(f"\nspend over time drawn in {args.plot}")
    return 0


def _when(created: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(created))


def _history(args: argparse.Namespace) -> int:
    led = _open_ledger(options.ledger_from(args), args)
    try:
        cur = str(led.identity.get("currency"))
        if args.analyst is not None and args.analyst not in led.analysts():
            raise LedgerError(f"ledger {led.path}: no analyst {args.analyst!r}")
        rows = [
            r for r in led.charges_after(0) if args.analyst is None or r.analyst == args.analyst
        ]
    finally:
        led.close()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": r.id,
                        "time": _when(r.created) + "Z",
                        "created": r.created,
                        "analyst": r.analyst,
                        "table": r.table,
                        "kind": r.kind,
                        "query": r.request,
                        **output.amount_json("cost", r.cost, cur, up=True),
                        "noise": r.noise,
                        "answered": r.answer is not None,
                        # as released: a caller whose output was lost can recover it
                        "answer": r.answer,
                    }
                    for r in rows
                ]
            )
        )
        return 0
    print(
        f"{'id':>6}  {'time (UTC)':<19}  {'analyst':<12} {'table':<10} {'kind':<10} {'cost':>10}  query"
    )
    for r in rows:
        print(
            f"{r.id:>6}  {_when(r.created):<19}  {r.analyst or '-':<12} {r.table:<10} "
            f"{r.kind:<10} {output.amount(r.cost, cur, up=True):>10}  {r.request}"
        )
    total = sum((r.cost for r in rows), Fraction(0))
    print(
        f"{len(rows)} charges; their costs add up to {output.amount(total, cur, up=True)} {cur}"
        + (" (in mu^2: " + output.amount(total) + ")" if cur == "mu" else "")
        + ", but queries on disjoint points share the budget: `dpcurator ledger show` "
        "gives what is spent at the worst point"
    )
    return 0


def _analysts(args: argparse.Namespace) -> int:
    led = _open_ledger(options.ledger_from(args), args)
    try:
        cur = str(led.identity.get("currency"))
        creds = led.credentials()
    finally:
        led.close()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": c.name,
                        **output.amount_json("quota", c.quota, cur),
                        "admin": c.admin,
                        "active": c.active,
                    }
                    for c in creds
                ]
            )
        )
        return 0
    print(f"{'name':<24} {'quota':>10}  {'role':<14} token")
    for c in creds:
        quota = "-" if c.quota is None else output.amount(c.quota, cur)
        role = "administrator" if c.admin else "analyst"
        print(f"{c.name:<24} {quota:>10}  {role:<14} {'active' if c.active else 'none'}")
    if not creds:
        print("(no analysts)")
    return 0


def _plot_spend(
    path: str, rows: list, filt: Any, ident: dict, out: str, quotas: dict[str, Fraction | None]
) -> None:
    """Spend at the worst point over time: everyone's, and each analyst's own."""
    import matplotlib

    matplotlib.use("Agg")
    import datetime as dt

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from dpcurator.curator.overlap_filter import OverlapFilter

    cur = str(ident.get("currency"))
    budget = Fraction(str(ident.get("amount")))
    show = (lambda x: float(x) ** 0.5) if cur == "mu" else float
    who = sorted({r.analyst for r in rows if r.analyst is not None})
    # The moments to evaluate at: the end of each burst of charges (a workload is one
    # burst), at most 60 of them.
    ends = [
        i
        for i in range(len(rows))
        if i + 1 == len(rows) or rows[i + 1].created - rows[i].created > 0.5
    ]
    if len(ends) > 60:
        ends = [ends[round(j * (len(ends) - 1) / 59)] for j in range(60)]
    charges = {c.id: c for t in ident.get("tables", {}) for c in filt.charges(t)}
    step = OverlapFilter(filt.budget, filt.currency)
    series: dict[str | None, list[tuple[float, float]]] = {None: []}
    for a in who:
        series[a] = []
    start = 0
    for i in ends:
        for r in rows[start : i + 1]:
            step.add(charges[r.id])
        start = i + 1
        when = rows[i].created
        for a in series:
            series[a].append((when, show(step.spent_anywhere(a).value)))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    t0 = [dt.datetime.fromtimestamp(rows[0].created, dt.UTC)] if rows else []
    for a, pts in series.items():
        xs = t0 + [dt.datetime.fromtimestamp(w, dt.UTC) for w, _ in pts]
        ys = [0.0] + [v for _, v in pts] if pts else []
        label = "everyone (the budget)" if a is None else f"analyst {a}"
        quota = quotas.get(a) if a is not None else None
        if quota is not None:
            label += f" (quota {show(quota):.6g})"
        line = ax.step(
            xs,
            ys,
            where="post",
            lw=2.4 if a is None else 1.6,
            label=label,
            color="black" if a is None else None,
            marker="o",
            ms=3,
        )
        if quota is not None:
            ax.axhline(show(quota), color=line[0].get_color(), ls=":", lw=1.2)
    ax.axhline(
        show(budget), color="firebrick", ls="--", lw=1.2, label=f"budget ({show(budget):.6g} {cur})"
    )
    ax.set_ylim(0, show(budget) * 1.08)
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel(f"spent at the worst point ({cur})")
    name = path if is_url(path) else Path(path).name
    ax.set_title(f"Privacy budget spent over time\nledger {name}: {len(rows)} charges")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M:%S"))
    fig.autofmt_xdate()
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.9), fontsize=9, framealpha=0.9)
    fig.tight_layout()
    try:
        output.save_figure(fig, out, "--plot")
    finally:
        plt.close(fig)


#: The actions of ``dpcurator ledger``, in the order ``--help`` lists them.
ACTIONS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _register_show,
    ledger_head.register,
    _register_history,
    _register_analysts,
    _register_backup,
    _register_copy,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ledger",
        help="read a ledger (show, head, history, analysts), back it up or copy it",
        description="Read, back up or copy the ledger where a curator records every charge "
        "(a file, or a PostgreSQL database that several servers share). Reading needs only "
        "the ledger, never the data.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in ACTIONS:
        add(actions)
