"""What a ledger says is spent and left, read from the ledger alone (never the data):
``dpcurator ledger show``, ``answer``'s summary, and anything that reads a ledger without
opening a curator. The filter is rebuilt from the charges as a curator rebuilds it on
opening, so the figures are :meth:`~dpcurator.curator.Curator.remaining_detail`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from dpcurator.curator import requests
from dpcurator.curator.admission import query_of
from dpcurator.curator.ledger import Ledger
from dpcurator.curator.overlap_filter import SOLVER_TIME_LIMIT, Charge, OverlapFilter
from dpcurator.errors import InvalidParameter, LedgerError
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.joins import join_named


@dataclass(frozen=True)
class Standing:
    """What a ledger says is spent and left, exactly, in its additive unit (epsilon, rho,
    or mu squared): at the worst point of the domain, or on the points of one query; for
    an analyst with a quota, of her quota too. ``exact`` is False when a maximum-overlap
    computation ran out of time: ``spent`` figures are then upper bounds and
    ``remaining`` ones lower bounds."""

    currency: str
    budget: Fraction
    spent: Fraction
    remaining: Fraction
    quota: Fraction | None
    quota_spent: Fraction | None
    quota_remaining: Fraction | None
    exact: bool

    @property
    def value(self) -> Fraction:
        """What may still be spent: the smaller of the budget's and the quota's remains."""
        if self.quota_remaining is None:
            return self.remaining
        return min(self.remaining, self.quota_remaining)


def ledger_schemas(ledger: Ledger) -> dict[str, Schema]:
    """Every table's public schema, as the ledger's identity records it."""
    tables = ledger.identity.get("tables")
    if not isinstance(tables, Mapping):
        raise InvalidParameter(f"ledger {ledger.path}: its identity names no tables")
    return {name: Schema.from_dict(d) for name, d in tables.items()}


def charged_schema(ledger: Ledger, schemas: Mapping[str, Schema], table: str) -> Schema:
    """The schema a charge on ``table`` was made on: a table's, or for a join on the
    privacy unit (``a JOIN b``, charged per point of the joined domain) the joined
    schema, made from both tables' as the curator makes it."""
    schema = schemas.get(table)
    if schema is not None:
        return schema
    unit = ledger.identity.get("privacy_unit")
    joined = join_named(table, schemas, str(unit[0]) if unit else None)
    if joined is not None:
        return joined.schema
    raise LedgerError(f"ledger {ledger.path}: a charge names a table it does not know: {table!r}")


def filter_from_ledger(
    ledger: Ledger, schemas: Mapping[str, Schema] | None = None
) -> OverlapFilter:
    """The overlap-aware filter rebuilt from the ledger's charges alone (as a curator
    rebuilds it on opening), without the data."""
    ident = ledger.identity
    schemas = ledger_schemas(ledger) if schemas is None else schemas
    filt = OverlapFilter(Fraction(str(ident["amount"])), str(ident["currency"]))
    joined: dict[str, Schema] = {}
    for row in ledger.charges_after(0):
        schema = schemas.get(row.table) or joined.get(row.table)
        if schema is None:
            schema = joined[row.table] = charged_schema(ledger, schemas, row.table)
        q = query_of(schema, row.coverage, row.request)
        filt.add(Charge(row.id, row.table, row.analyst, q, row.cost, row.level))
    return filt


def remaining_from_ledger(
    ledger: Ledger,
    query: str | Query | None = None,
    *,
    table: str | None = None,
    analyst: str | None = None,
    time_limit: float = SOLVER_TIME_LIMIT,
    filt: OverlapFilter | None = None,
) -> Standing:
    """What is spent and left, read from the ledger only (never the data): on the points
    ``query`` covers (at the worst point of the domain if None), for everyone and, for
    ``analyst``, of her quota. The same figures as :meth:`Curator.remaining_detail`,
    exact, before any rounding. ``filt``: a filter already rebuilt from this ledger."""
    schemas = ledger_schemas(ledger)
    q: Query | BooleanQuery | None = None
    t: str | None = None
    if query is not None:
        t = requests.table_name(table, list(schemas))
        q = requests.canonical_query(query, schemas[t])
    elif table is not None:
        requests.table_name(table, list(schemas))
    quota: Fraction | None = None
    if analyst is not None:
        have = ledger.quota(analyst)
        if have is False:
            raise InvalidParameter(f"unknown analyst {analyst!r} in ledger {ledger.path}")
        quota = have  # type: ignore[assignment]
    fork = (filter_from_ledger(ledger, schemas) if filt is None else filt).fork()
    deadline = time.monotonic() + time_limit

    def spent(who: str | None) -> tuple[Fraction, bool]:
        if q is None:
            loss = fork.spent_anywhere(who, deadline=deadline)
        else:
            assert t is not None
            loss = fork.spent_on(t, q, who, deadline=deadline)  # type: ignore[arg-type]
        return loss.value, loss.exact

    everyone, exact = spent(None)
    mine = quota_left = None
    if analyst is not None:
        mine, mine_exact = spent(analyst)
        exact = exact and mine_exact
        if quota is not None:
            quota_left = max(Fraction(0), quota - mine)
    return Standing(
        fork.currency,
        fork.budget,
        everyone,
        max(Fraction(0), fork.budget - everyone),
        quota,
        mine,
        quota_left,
        exact,
    )
