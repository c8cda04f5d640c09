"""What remains of the budget, and the history: the curator's figures (a mixin of
:class:`~dpcurator.curator.curator.Curator`).

The figure a request asks for (:meth:`RemainingRequests.remaining_detail`) is exact: the
maximum-overlap computations on a fork of the filter, without the ledger's lock, in the
solver pool within the solver's time limit. The figure an answer carries
(:meth:`RemainingRequests._quick_remaining`) is the filter's quick bound, a few
milliseconds whatever the history. Both are never more than truly remains.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcurator import deadlines
from dpcurator.curator import requests
from dpcurator.curator.answers import HistoryEntry
from dpcurator.curator.overlap_filter import Loss, coverage_key
from dpcurator.curator.statistics import expanded_record
from dpcurator.curator.timing import timed as _timed
from dpcurator.queries import Query

if TYPE_CHECKING:
    from dpcurator.curator.budget import Budget
    from dpcurator.curator.ledger import Ledger
    from dpcurator.curator.overlap_filter import OverlapFilter
    from dpcurator.curator.solver_pool import SolverPool

#: How many of one request's answers (distinct coverages) may have their remaining
#: figures made exact on a small grid (a few milliseconds each); the others get the
#: levels' bound, so that a large batch stays quick and the figures do not depend on
#: timing.
QUICK_GRIDS = 32


@dataclass(frozen=True)
class Remaining:
    """What is left, in the budget's unit: on the points of a query (or on the worst
    point), for everyone and, for an analyst with a quota, of her quota.

    ``value`` is the smaller of the two. ``exact`` is False when the figures are lower
    bounds (never more than truly remains): a maximum-overlap computation ran out of its
    time limit, or, for the figure an answer carries, the quick bound did not settle it.
    """

    value: float
    budget: float
    quota: float | None
    exact: bool


class RemainingRequests:
    """The remaining budget and the history; the attributes used are the curator's."""

    budget: Budget
    _ledger: Ledger
    _filter: OverlapFilter
    _pool: SolverPool
    _time_limit: float
    _sync: Callable[[], None]
    _quota: Callable[..., Fraction | None]
    _table: Callable[[object], str]
    _schema: Callable[[str], Any]

    @_timed
    def remaining_detail(
        self,
        query: str | Query | None = None,
        *,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> Remaining:
        """What is left on the points ``query`` covers (on the worst point if None), for
        everyone and of the analyst's quota, and whether the figures are exact.

        The exact maximum-overlap computations run on a fork of the filter, without the
        ledger's lock, within the curator's solver time limit."""
        if query is None:
            return self._remaining([None], None, _analyst)[0]
        t = self._table(table)
        return self._remaining([requests.canonical_query(query, self._schema(t))], t, _analyst)[0]

    def _remaining(
        self, queries: Sequence[Query | None], table: str | None, analyst: str | None
    ) -> list[Remaining]:
        """:meth:`remaining_detail` of several queries of one table (None: the worst
        point), exactly, on one fork of the filter: in the solver pool, the maximum-overlap
        computations within the solver's time limit (past it, ``exact`` False)."""
        with self._ledger.lock:
            self._sync()
            quota = self._quota(analyst)
            fork = self._filter.fork()

        def work() -> list[Remaining]:
            until = time.monotonic() + self._time_limit
            done: dict[tuple, Remaining] = {}
            out: list[Remaining] = []
            for q in queries:
                key = () if q is None else coverage_key(q)
                if key not in done:

                    def spent(who: str | None, q: Query | None = q) -> Loss:
                        if q is None:
                            return fork.spent_anywhere(who, deadline=until)
                        assert table is not None
                        return fork.spent_on(table, q, who, deadline=until)

                    done[key] = self._left(spent, quota, analyst)
                out.append(done[key])
            return out

        got = self._pool.run(work, analyst, deadlines.current())
        with self._ledger.lock:
            self._filter.learn(fork)
        return got

    def _quick_remaining(
        self, queries: Sequence[Query], table: str, analyst: str | None
    ) -> list[Remaining]:
        """What an answer reports as remaining on its points: the filter's quick bound
        (:meth:`OverlapFilter.quick_spent_on`, a few milliseconds whatever the history),
        exact where it settles, else a lower bound flagged ``exact`` False; never more
        than :meth:`remaining_detail` would report right after."""
        # the quota as the charge's transaction just read it; the filter as it is (the
        # charge is in it), forked without waiting for the ledger's lock, which the next
        # group's commit may hold: this figure came after the answer's own commit
        quota = self._quota(analyst, fresh=False)
        with self._filter.changing:
            fork = self._filter.fork()
        done: dict[tuple, Remaining] = {}
        out = []
        for q in queries:
            key = coverage_key(q)
            if key not in done:
                grid = len(done) < QUICK_GRIDS  # then the levels alone

                def spent(who: str | None, q: Query = q, grid: bool = grid) -> Loss:
                    return fork.quick_spent_on(table, q, who, grid=grid)

                done[key] = self._left(spent, quota, analyst)
            out.append(done[key])
        return out

    def _left(
        self,
        spent: Callable[[str | None], Loss],
        quota: Fraction | None,
        analyst: str | None,
    ) -> Remaining:
        """The budget and the quota left, from what everyone and the analyst spent."""
        everyone = spent(None)
        left, exact = self.budget.amount - everyone.value, everyone.exact
        quota_left = None
        if quota is not None:
            mine = spent(analyst)
            quota_left = quota - mine.value
            exact = exact and mine.exact
        value = left if quota_left is None else min(left, quota_left)
        return Remaining(
            self.budget.display(value),
            self.budget.display(left),
            None if quota_left is None else self.budget.display(quota_left),
            exact,
        )

    def remaining(
        self,
        query: str | Query | None = None,
        *,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> float:
        """The budget left on the points ``query`` covers (on the worst point if None),
        in the budget's own unit (epsilon, rho or mu); for an analyst with a quota, the
        smaller of that and her quota left. Exact, unless the maximum-overlap computation
        ran out of time: then a lower bound (:meth:`remaining_detail` says which)."""
        return self.remaining_detail(query, table=table, _analyst=_analyst).value

    def history(self, _analyst: str | None = None) -> list[HistoryEntry]:
        """Every charge in the ledger (all processes), oldest first."""
        rows = self._ledger.charges_after(0)
        return [
            HistoryEntry(
                r.id,
                r.created,
                r.analyst,
                r.table,
                r.kind,
                r.request,
                self.budget.display(r.cost),
                self.budget.currency,
                r.noise,
                expanded_record(r.answer, self._schema(r.table)),
            )
            for r in rows
            if _analyst is None or r.analyst == _analyst
        ]
