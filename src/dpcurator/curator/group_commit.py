"""Group commit: the charges of concurrent requests written in one durable transaction.

Why. Each answer used to commit a transaction of its own under the ledger's lock: a
durable commit (the file and its journal synced, then the anchor) per answer, during
which every other request waited for the lock. Under sixteen clients that commit was
the line everyone stood in. Now a request that reaches its commit while another's is
being written waits for that one to finish, and then all the requests that queued
meanwhile are re-validated and written in one transaction, with one commit: the
*leader* (the first to arrive, or the next in line, promoted when the previous group
is done) writes the group; the others wait for its result.

What does not change (see :mod:`dpcurator.curator.admission`):

* each request is re-validated in the group's transaction against every charge
  committed since its fork *and* the charges of the requests before it in the group
  (not yet in the filter: it only sees committed charges), so requests written together
  never overspend together;
* each answer leaves only after the commit that holds its charge (a request's result is
  handed over after the commit), so no answer exists without its charge, and a crash
  before the commit loses the whole group's charges and answers together;
* a commit that fails fails every request of the group, nothing of it written; a
  transaction the database aborted sends every request back to decide again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpcurator.curator.ledger import Coverage, Ledger
from dpcurator.curator.overlap_filter import Charge, Decision, OverlapFilter
from dpcurator.errors import DpCuratorError, LedgerError

#: Reads an analyst's quota (None: none); ``fresh`` reads the ledger, else the view
#: as last read (see :meth:`Ledger.quota`).
QuotaOf = Callable[..., Fraction | None]
#: Re-validates one request of a group: (filter, version, table, batch, decisions,
#: analyst, quota, the group's earlier charges) -> the decisions raised, or None.
Revalidate = Callable[..., list[Decision] | None]


@dataclass(eq=False)
class Entry:
    """One request waiting to be written: its batch, its decisions on the fork made at
    ``version``, and the answers recorded with its charges; then what came of it."""

    table: str
    batch: Sequence[Any]
    decisions: Sequence[Decision]
    analyst: str | None
    version: int
    fork: OverlapFilter
    answers: Sequence[object] | None
    #: Each request's coverage as the ledger stores it (made before the lock is taken).
    coverages: Sequence[Coverage]
    #: The charge ids and decisions, None (overtaken: decide again), or an error.
    outcome: list[tuple[int, Decision]] | BaseException | None = None
    leads: bool = False
    wake: threading.Event = field(default_factory=threading.Event)


class GroupCommit:
    """Writes the requests of one curator, grouped (see the module docstring)."""

    def __init__(
        self,
        ledger: Ledger,
        filt: OverlapFilter,
        sync: Callable[[], None],
        quota_of: QuotaOf,
        revalidate: Revalidate,
    ) -> None:
        self._ledger = ledger
        self._filter = filt
        self._sync = sync
        self._quota_of = quota_of
        self._revalidate = revalidate
        self._lock = threading.Lock()
        self._queue: list[Entry] = []
        self._writing = False

    def submit(self, entry: Entry) -> list[tuple[int, Decision]] | None:
        """Write ``entry`` with whatever else is waiting; its charge ids and decisions
        once committed (then the charges are in the filter), or None when charges
        committed since its fork overtook it. Raises what the write raised."""
        with self._lock:
            self._queue.append(entry)
            lead = not self._writing
            self._writing = True
        if not lead:
            entry.wake.wait()
        if lead or entry.leads:
            try:
                with self._lock:
                    group, self._queue = self._queue, []
                self._write(group)
            finally:
                with self._lock:
                    if self._queue:
                        first = self._queue[0]
                        first.leads = True
                        first.wake.set()
                    else:
                        self._writing = False
        if isinstance(entry.outcome, BaseException):
            raise entry.outcome
        return entry.outcome

    def _write(self, group: list[Entry]) -> None:
        """Re-validate and write ``group`` in one transaction, then hand each its result."""
        ledger, filt = self._ledger, self._filter
        written: list[tuple[Entry, list[int], list[Decision]]] = []
        try:
            with ledger.lock:
                try:
                    with ledger.transaction():
                        self._sync()
                        earlier: list[Charge] = []  # the group's charges so far
                        quotas: dict[str | None, Fraction | None] = {}
                        for e in group:
                            try:  # its own failure (an analyst just removed) is its own
                                if e.analyst not in quotas:
                                    # the first read brings the quotas up to date; no one
                                    # changes them while this transaction holds the lock
                                    fresh = all(a is None for a in quotas)
                                    quotas[e.analyst] = self._quota_of(e.analyst, fresh=fresh)
                                got = self._revalidate(
                                    filt, e.version, e.table, e.batch, e.decisions,
                                    e.analyst, quotas[e.analyst], earlier,
                                )  # fmt: skip
                            except DpCuratorError as err:
                                if isinstance(err, LedgerError):
                                    raise  # the store's: the whole group's
                                e.outcome = err  # nothing of it written
                                continue
                            if got is None:
                                continue  # overtaken: its outcome stays None
                            ids = [
                                ledger.insert_charge(
                                    analyst=e.analyst,
                                    table=e.table,
                                    kind=r.kind,
                                    request=r.request,
                                    coverage=e.coverages[i],
                                    cost=r.cost,
                                    level=d.level,
                                    noise=r.noise,
                                    answer=None if e.answers is None else e.answers[i],
                                )
                                for i, (r, d) in enumerate(zip(e.batch, got, strict=True))
                            ]
                            written.append((e, ids, got))
                            earlier += [
                                Charge(cid, e.table, e.analyst, r.query, r.cost, d.level)
                                for cid, r, d in zip(ids, e.batch, got, strict=True)
                            ]
                except BaseException as err:
                    for e in group:  # nothing of the group was written
                        e.outcome = err
                    return
                # Committed: only now does the filter (and then each answer) see them.
                with filt.changing:
                    for e, ids, got in written:
                        for cid, r, d in zip(ids, e.batch, got, strict=True):
                            filt.add(Charge(cid, e.table, e.analyst, r.query, r.cost, d.level))
                        filt.learn(e.fork)
                        e.outcome = list(zip(ids, got, strict=True))
        finally:
            for e in group:
                e.wake.set()  # the followers' results (the leader is not waiting)
