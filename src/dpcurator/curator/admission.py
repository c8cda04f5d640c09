"""Check and charge: deciding a request without letting it stall anyone else.

The check must see every charge already committed, by every thread and process, and
the charge must be on disk before any answer exists (Dwork & Roth 2014, Lemma 2.6: the
curator refuses once the total would pass the budget). Both happen in one ``BEGIN
IMMEDIATE`` transaction of the ledger, which is SQLite's write lock, so that lock is held
only for decisions that take microseconds:

1. Under the lock, the cheap level bounds decide (the common case): admit and charge.
2. When they cannot admit, the lock is released; the filter is *forked* and the exact
   maximum-overlap computation runs on the fork without any lock, within the request's
   time limit. An exact refusal there is final: losses only grow.
3. Back under the lock, the fork's decision is *re-validated*: charges committed in the
   meantime can add at most their costs to the points they cover, so the fork's figure
   plus those costs bounds the present loss. If it still fits, charge; otherwise go
   back to step 2 (a few times, then decide under the lock).

A batch goes through the same steps as one unit, all or nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpcurator.curator.ledger import Ledger
from dpcurator.curator.overlap_filter import Charge, Decision, OverlapFilter
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery

#: How often a fork's decision may be overtaken by other charges before the request is
#: decided under the lock.
FORK_ATTEMPTS = 3


@dataclass(frozen=True)
class Request:
    """One charge to make: what it covers, what it costs (additive unit) and its record."""

    query: Query
    cost: Fraction
    kind: str
    request: str
    noise: str


class Refused(Exception):
    """A request (or the ``index``-th of a batch) that the filter refuses."""

    def __init__(self, index: int, decision: Decision) -> None:
        super().__init__(index, decision)
        self.index = index
        self.decision = decision


def _decide_all(
    filt: OverlapFilter,
    table: str,
    batch: Sequence[Request],
    analyst: str | None,
    quota: Fraction | None,
    deadline: float | None,
) -> list[Decision] | None:
    """Decide every request of the batch in order on ``filt``, adding each admitted one
    (with a provisional negative id) so that the next ones see it. Returns None when
    ``deadline`` is None and the bounds do not suffice; raises :class:`Refused`."""
    out: list[Decision] = []
    for i, r in enumerate(batch):
        d = filt.decide(table, r.query, r.cost, analyst=analyst, quota=quota, deadline=deadline)
        if d is None:
            return None
        if not d.admitted:
            raise Refused(i, d)
        filt.add(Charge(-1 - i, table, analyst, r.query, r.cost, d.level))
        out.append(d)
    return out


def _revalidate(
    filt: OverlapFilter,
    version: int,
    table: str,
    batch: Sequence[Request],
    decisions: Sequence[Decision],
    analyst: str | None,
    quota: Fraction | None,
) -> list[Decision] | None:
    """The fork's decisions, raised by what was charged since ``version``; None if one
    of them no longer fits (decide again on a new fork)."""
    out = []
    for r, d in zip(batch, decisions, strict=True):
        every, mine = filt.increments_since(version, table, r.query, analyst)
        if d.spent + every + r.cost > filt.budget:
            return None
        if quota is not None and d.mine + mine + r.cost > quota:
            return None
        out.append(replace(d, spent=d.spent + every, level=d.level + every, mine=d.mine + mine))
    return out


def check_and_charge(
    ledger: Ledger,
    filt: OverlapFilter,
    sync: Callable[[], None],
    quota_of: Callable[[str | None], Fraction | None],
    table: str,
    batch: Sequence[Request],
    analyst: str | None,
    time_limit: float,
) -> list[tuple[int, Decision]]:
    """Charge every request of ``batch`` durably, or none (raises :class:`Refused`).

    ``sync`` brings ``filt`` up to date with the ledger (called under the lock);
    ``quota_of`` reads an analyst's quota from the ledger. Returns the charge ids and
    decisions; the charges are in ``filt`` when this returns.
    """
    deadline = time.monotonic() + time_limit
    plan: tuple[int, list[Decision], OverlapFilter] | None = None
    for attempt in range(FORK_ATTEMPTS + 1):
        last = attempt == FORK_ATTEMPTS
        with ledger.lock:
            with ledger.transaction():
                sync()
                quota = quota_of(analyst)
                version = filt.version
                try:
                    if plan is not None:
                        filt.adopt(plan[2], plan[0])
                        got = _revalidate(filt, plan[0], table, batch, plan[1], analyst, quota)
                    else:
                        got = None
                    if got is None:
                        got = _decide_all(
                            filt, table, batch, analyst, quota, deadline if last else None
                        )
                finally:
                    filt.rollback(version)  # provisional charges out; real ones below
                if got is not None:
                    ids = [
                        ledger.insert_charge(
                            analyst=analyst,
                            table=table,
                            kind=r.kind,
                            request=r.request,
                            coverage=coverage_json(r.query),
                            cost=r.cost,
                            level=d.level,
                            noise=r.noise,
                        )
                        for r, d in zip(batch, got, strict=True)
                    ]
            if got is not None:
                # Committed: only now does the filter (and then the answer) see them.
                for cid, r, d in zip(ids, batch, got, strict=True):
                    filt.add(Charge(cid, table, analyst, r.query, r.cost, d.level))
                return list(zip(ids, got, strict=True))
            fork, version = filt.fork(), filt.version
        # No lock held: the exact computation may take up to the time limit.
        decisions = _decide_all(fork, table, batch, analyst, quota, deadline)
        assert decisions is not None
        fork.rollback(version)
        plan = (version, decisions, fork)
    raise AssertionError("unreachable")  # pragma: no cover


def coverage_json(q: Query | BooleanQuery) -> dict[str, Any]:
    """The coverage as the ledger stores it: ``{attribute: [[start, end], ...]}`` for a
    box, ``{"|": [box, box, ...]}`` for a union of disjoint boxes."""
    if isinstance(q, BooleanQuery):
        return {"|": [coverage_json(b) for b in q.boxes]}
    return {p.attribute.name: [list(iv) for iv in p.coverage] for p in q.predicates}


def query_of(schema: Schema, coverage: dict[str, Any], text: str) -> Query | BooleanQuery:
    """The query a stored coverage describes (the inverse of :func:`coverage_json`)."""
    union = coverage.get("|")
    if len(coverage) == 1 and isinstance(union, list) and union and isinstance(union[0], dict):
        parts = [{n: tuple(tuple(iv) for iv in ivs) for n, ivs in b.items()} for b in union]
        return BooleanQuery.from_boxes(schema, parts, text=text)
    covs = {name: tuple(tuple(iv) for iv in ivs) for name, ivs in coverage.items()}
    return Query.from_coverages(schema, covs, text=text)
