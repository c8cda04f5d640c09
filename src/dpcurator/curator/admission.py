"""Check and charge: deciding a request without letting it stall anyone else.

The check must see every charge already committed, by every thread and process, and
the charge must be on disk before any answer exists (Dwork & Roth 2014, Lemma 2.6: the
curator refuses once the total would pass the budget). The charge happens in one
write transaction of the ledger, which holds the store's write lock (SQLite's
``BEGIN IMMEDIATE``; on PostgreSQL an advisory lock that serialises every replica on
every host); nothing slow runs under it:

1. Under the lock, the filter is brought up to date with the ledger and *forked*
   (O(tables): a fork shares the filter's storage).
2. Without any lock, the request (or the whole batch, each admitted request added
   provisionally so that the next ones see it) is decided on the fork: by the levels'
   bounds in microseconds, or, when they do not admit it, by the exact maximum-overlap
   computation in the :class:`~dpcurator.curator.solver_pool.SolverPool` (bounded
   concurrency, under the request's deadline). An exact refusal is final: losses only
   grow.
3. Under the lock again, in the transaction, the decisions are *re-validated*: charges
   committed since the fork can add at most their costs to the points they cover, so the
   fork's figure plus those costs bounds the present loss. First with every new charge's
   cost added everywhere (O(new charges)); where that does not fit, per request with the
   new charges that meet it, when that is a bounded amount of work. If it still fits,
   the charges are written and committed; otherwise back to step 1, a few times within
   the deadline, then the request is ``Undecided`` (nothing charged). A transaction the
   database aborted before it committed
   (:class:`~dpcurator.curator.ledger.TransactionAborted`: a PostgreSQL serialisation
   failure or deadlock, a connection lost mid-transaction) wrote nothing and goes back
   to step 1 too.

So the lock is held for O(new charges + batch) work plus the commit, whatever the
history. A batch goes through the same steps as one unit, all or nothing. Step 3 runs
for every request that reached it while another's transaction was being written, in
one transaction (:mod:`dpcurator.curator.group_commit`): each re-validated against the
group's earlier charges too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpcurator import deadlines
from dpcurator.curator.group_commit import Entry, GroupCommit
from dpcurator.curator.ledger import Ledger, TransactionAborted
from dpcurator.curator.overlap_filter import Charge, Decision, OverlapFilter
from dpcurator.curator.solver_pool import SolverPool
from dpcurator.curator.turns import away
from dpcurator.deadlines import Deadline
from dpcurator.errors import QueryError, Undecided
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.predicates import disjoint

#: How often a fork's decision may be overtaken by other charges before the request is
#: answered ``Undecided``.
FORK_ATTEMPTS = 4
#: The most (new charge, request) pairs re-validated one by one under the lock.
REVALIDATE_PAIRS = 20_000
#: Seconds of exact checks a request may run in its own thread before it queues for the
#: solver pool (most are settled within them).
QUICK_EXACT = 0.05


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


def _decide_from(
    filt: OverlapFilter,
    table: str,
    batch: Sequence[Request],
    done: list[Decision],
    analyst: str | None,
    quota: Fraction | None,
    deadline: float | None,
    *,
    settled_only: bool = False,
) -> bool:
    """Decide the requests of the batch after the ``len(done)`` already decided, in
    order, on the fork ``filt``, appending to ``done`` and adding each admitted one
    (with a provisional negative id) when a later one must see it. Returns False when
    ``deadline`` is None and the bounds do not suffice, or, with ``settled_only``, at a
    refusal the exact check could not settle in time (to be decided again with more);
    raises :class:`Refused`."""
    for i in range(len(done), len(batch)):
        if i % 64 == 0:
            deadlines.check()
        r = batch[i]
        d = filt.decide(table, r.query, r.cost, analyst=analyst, quota=quota, deadline=deadline)
        if d is None:
            return False
        if not d.admitted:
            if settled_only and not d.exact:
                return False
            raise Refused(i, d)
        if i + 1 < len(batch):
            filt.add(Charge(-1 - i, table, analyst, r.query, r.cost, d.level))
        done.append(d)
    return True


def _quickly(
    fork: OverlapFilter,
    table: str,
    batch: Sequence[Request],
    done: list[Decision],
    analyst: str | None,
    quota: Fraction | None,
    deadline: Deadline,
) -> bool:
    """Continue deciding with exact checks in this thread, for :data:`QUICK_EXACT`
    seconds at most (every loop of the computation sees that deadline); False when
    that does not settle everything (the rest waits for the solver pool)."""
    quick = Deadline(min(time.monotonic() + QUICK_EXACT, deadline.at), deadline.seconds)
    try:
        with deadlines.within(quick):
            return _decide_from(
                fork, table, batch, done, analyst, quota, quick.at, settled_only=True
            )
    except Undecided:
        deadlines.check()  # the request's own deadline, or a shutdown: give up
        return False


def revalidate(
    filt: OverlapFilter,
    version: int,
    table: str,
    batch: Sequence[Request],
    decisions: Sequence[Decision],
    analyst: str | None,
    quota: Fraction | None,
    earlier: Sequence[Charge] = (),
) -> list[Decision] | None:
    """The fork's decisions, raised by what was charged since ``version`` and by the
    ``earlier`` charges of the group being written with them (not in ``filt`` yet);
    None if one of them may no longer fit (decide again on a new fork)."""
    every, mine = filt.added_since(version, analyst)
    every += sum((c.cost for c in earlier), Fraction(0))
    mine += sum(
        (c.cost for c in earlier if analyst is not None and c.analyst == analyst), Fraction(0)
    )
    if all(
        d.spent + every + r.cost <= filt.budget
        and (quota is None or d.mine + mine + r.cost <= quota)
        for r, d in zip(batch, decisions, strict=True)
    ):
        return [
            replace(d, spent=d.spent + every, level=d.level + every, mine=d.mine + mine)
            for d in decisions
        ]
    if (filt.version - version + len(earlier)) * len(batch) > REVALIDATE_PAIRS:
        return None
    out = []
    for r, d in zip(batch, decisions, strict=True):
        every, mine = filt.increments_since(version, table, r.query, analyst)
        for c in earlier:  # as increments_since counts them
            if c.table == table and disjoint(c.query, r.query):
                continue
            every += c.cost
            if analyst is not None and c.analyst == analyst:
                mine += c.cost
        if d.spent + every + r.cost > filt.budget:
            return None
        if quota is not None and d.mine + mine + r.cost > quota:
            return None
        out.append(replace(d, spent=d.spent + every, level=d.level + every, mine=d.mine + mine))
    return out


#: Seconds within which a fork does not read the ledger again for other processes'
#: charges (see :func:`_fork`).
SYNC_EVERY = 0.05


def _fork(ledger: Ledger, filt: OverlapFilter, sync: Callable[[], None]) -> OverlapFilter:
    """A fork of ``filt`` to decide on, brought up to date with the ledger first (what
    other processes committed) when it was last so more than :data:`SYNC_EVERY` seconds
    ago and the ledger's lock is free. Otherwise the filter as it is: a fork older than
    the ledger is still sound, since the write transaction (which brings the filter up
    to date) re-validates the decision against every charge committed after the fork's
    version (:func:`revalidate`). So a request never waits for another's commit to be
    written before deciding, and sixteen requests a few milliseconds apart do not each
    read the ledger under the lock the next commit needs."""
    if time.monotonic() - filt.synced_at > SYNC_EVERY and ledger.lock.acquire(blocking=False):
        try:
            sync()
            return filt.fork()
        finally:
            ledger.lock.release()
    with filt.changing:
        return filt.fork()


def _recordable(r: Request) -> None:
    """Refuse a request whose texts hold half of a surrogate pair (a JSON body can send
    one alone): no UTF-8 encodes it, so the ledger could not hash its charge, and that
    failure, inside a group's transaction, would fail every request of the group."""
    for text in (r.request, r.kind, r.noise):
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise QueryError(
                    f"the request holds U+{ord(text[err.start]):04X}, half of a surrogate "
                    "pair, not a character"
                ) from None


def check_and_charge(
    commits: GroupCommit,
    ledger: Ledger,
    filt: OverlapFilter,
    sync: Callable[[], None],
    quota_of: Callable[..., Fraction | None],
    table: str,
    batch: Sequence[Request],
    analyst: str | None,
    *,
    solver_time_limit: float,
    pool: SolverPool,
    deadline: Deadline,
    answers: Callable[[], Sequence[object]] | None = None,
) -> list[tuple[int, Decision]]:
    """Charge every request of ``batch`` durably, or none (raises :class:`Refused`, or
    :class:`~dpcurator.errors.Undecided` past ``deadline``).

    ``sync`` brings ``filt`` up to date with the ledger (called under the lock);
    ``quota_of`` reads an analyst's quota; ``commits`` writes the charges, with those
    of concurrent requests (:mod:`dpcurator.curator.group_commit`). The exact computations of one decision share
    ``solver_time_limit`` seconds (within the deadline). ``answers()``, called once the
    batch is admitted and before the transaction, gives each request's answer, recorded
    with its charge in that one transaction: the answer exists before the charge is
    committed but leaves the curator only after, so a crash in between releases nothing,
    and an answer costs one durable commit. Returns the charge ids and decisions; the
    charges are in ``filt`` when this returns.
    """
    made: Sequence[object] | None = None
    aborted: TransactionAborted | None = None
    for r in batch:  # what the ledger cannot record is refused here, not in a group's commit
        _recordable(r)
    coverages = [ledger.coverage(coverage_json(r.query)) for r in batch]  # before the lock
    for _ in range(FORK_ATTEMPTS):
        deadlines.check()
        # as last read: the decision is re-validated with the quota read in the write
        # transaction, which also refreshes this view for a next round
        quota = quota_of(analyst, fresh=False)
        fork = _fork(ledger, filt, sync)
        version = fork.version
        done: list[Decision] = []
        # the bounds; then a short exact check in this thread (a threshold far from the
        # maximum settles in milliseconds); only what that leaves waits for the pool
        if not _decide_from(fork, table, batch, done, analyst, quota, None) and not _quickly(
            fork, table, batch, done, analyst, quota, deadline
        ):

            def exact(
                fork: OverlapFilter = fork,
                done: list[Decision] = done,
                quota: Fraction | None = quota,
            ) -> None:
                until = min(time.monotonic() + solver_time_limit, deadline.at)
                _decide_from(fork, table, batch, done, analyst, quota, until)

            pool.run(exact, analyst, deadline)
        if answers is not None and made is None:
            with away():  # the backend counts without the interpreter lock
                made = answers()
        entry = Entry(table, batch, done, analyst, version, fork, made, coverages)
        try:
            with away():  # waiting for the group's commit, or writing it (see turns)
                got = commits.submit(entry)
        except TransactionAborted as err:
            aborted = err  # nothing was written: decide again
            continue
        aborted = None
        if got is not None:
            return got
    if aborted is not None:
        raise aborted
    raise Undecided(
        "the request could not be decided: other requests' charges overtook its check "
        f"{FORK_ATTEMPTS} times; nothing was charged, try again"
    )


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
