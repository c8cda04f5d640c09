"""The overlap-aware privacy filter: pure bookkeeping, no I/O, no data.

For every point x of a table's domain, the loss L(x) is the sum of the costs of the
answered queries whose coverage contains x; it is never stored per point, but derived
from the answered queries. A query q of cost c is answered only if

    max over x in C_q of L(x)  +  c  +  sum over the *other* tables T' of max_x L_T'(x)  <=  B.

Why this is valid under full adaptivity: take two neighbouring databases that differ in
one person whose row lies at x. Every answered query that does not cover x has the same
output distribution on both, so for this pair the interaction is an ordinary additive
filter with costs c_q [x in C_q] — valid in the budget's additive currency (pure DP:
Dwork & Roth 2014, Lemma 2.6; zCDP: Feldman & Zrnic 2021; Gaussian DP: Smith & Thakurta
2022). The refusal rule reads only the public queries and costs, never the data. A person
can appear in several tables (Dwork & Roth's two hospitals) at unknown points, so the
other tables are charged at their worst point: queries on different tables compose
sequentially.

All arithmetic is exact: costs are fractions, and the maximum-overlap solver receives
integer weights (costs times the common denominator), of any width.

The fast path. Each charge a has a *level* s_a: an upper bound on L(x) for every x whose
last covering charge is a. A point's loss never grows after the last charge that covers
it, so L(x) <= s_a for that charge; hence max_{x in C_q} L(x) <= max of s_a over the
charges a overlapping q. That bound costs a few vector compares. The filter admits on
the bound when it fits, and runs the exact maximum-overlap computation only when the
bound would refuse, so a refusal is exact unless the solver ran out of time (then it is
conservative, and says so). Exact results also *lower* levels: once max L over C_q is
known to be E, every charge whose coverage lies inside C_q can have level E.

The admission check needs less than the maximum: only whether it is at most the
threshold T = B - c - (the other tables). :func:`max_loss` takes T (``at_most``) and may
stop as soon as that is certain: a safe upper bound <= T admits, a real point whose
exact loss exceeds T refuses. Either answer is exact as a decision although the maximum
itself was not proved (``Loss.settles``).

Slow checks never hold a lock. The curator forks the filter (:meth:`OverlapFilter.fork`)
under its lock, decides on the fork without any lock (the exact computation may take
seconds), and then re-validates under the lock: charges committed meanwhile can only add
their costs to the points they cover (:meth:`OverlapFilter.increments_since`), so the
decision on the fork plus those costs is an upper bound on the present loss.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcurator import deadlines
from dpcurator.curator.lazy_rows import LazyRows
from dpcurator.curator.table_index import Charge, TableIndex
from dpcurator.errors import DpCuratorError, LedgerError
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery, contains, intersection
from dpcurator.queries.overlap.dense import DENSE_LIMIT, dense_max_overlap
from dpcurator.queries.overlap.wide import max_overlap_wide
from dpcurator.queries.predicates import disjoint

if TYPE_CHECKING:
    from dpcurator.curator.checkpoint import Summary, TableSegment

#: Seconds the exact maximum-overlap computations of one request may take in all, before
#: safe upper bounds are used instead.
SOLVER_TIME_LIMIT = 5.0


def restrict(query: Query | BooleanQuery, to: Query | BooleanQuery) -> Query | BooleanQuery:
    """The query whose coverage is C_query ∩ C_to."""
    return intersection(query, to)


def coverage_key(q: Query | BooleanQuery) -> tuple:
    """A hashable form of a coverage: equal for queries covering the same boxes."""
    return tuple(tuple((p.attribute.name, p.coverage) for p in b.predicates) for b in q.boxes)


@dataclass(frozen=True)
class Loss:
    """The largest loss over some set of points, with a point where it is reached.

    ``value`` is always a safe upper bound on the maximum, and the maximum itself when
    ``exact``; ``exact`` is False when the solver stopped at its time limit or at a
    threshold. ``reached``, when known, is the exact loss of a real point of the set
    (``witness`` if given), hence a lower bound on the maximum.
    """

    value: Fraction
    exact: bool
    witness: dict[str, int | str] | None = field(default=None, compare=False)
    reached: Fraction | None = None

    def settles(self, threshold: Fraction) -> bool:
        """Whether "maximum <= threshold" is known for certain: the upper bound is
        within it, or a real point exceeds it."""
        if self.exact or self.value <= threshold:
            return True
        return self.reached is not None and self.reached > threshold


def max_loss(
    charges: Iterable[Charge],
    within: Query | None = None,
    *,
    time_limit: float = SOLVER_TIME_LIMIT,
    at_most: Fraction | None = None,
) -> Loss:
    """max over x in C_within (the whole domain if None) of the sum of covering costs.

    Charges that do not meet C_within may be passed: they add nothing there. Exact
    unless the solver hits ``time_limit``; then a safe upper bound (rounded up), which
    can only make the filter refuse more, never less. Exact for costs of any
    denominators too: integer weights wider than a float's 53 bits are searched in
    exact integers (:mod:`~dpcurator.queries.overlap.wide`).

    ``at_most``: only whether the maximum is at most this matters; the solver may stop
    once that is certain (see :meth:`Loss.settles`), so ``exact`` may be False for an
    answer that is still decided. A refusal is only settled by a point whose loss is
    recomputed here in exact arithmetic.
    """
    live = [c for c in charges if not c.query.is_empty]
    quick = quick_loss(live, within, DENSE_LIMIT)
    if quick is not None:
        return quick
    merged: dict[tuple, tuple[Query, Fraction]] = {}
    for n, c in enumerate(live):
        if n % 64 == 0:
            deadlines.check()
        if within is not None:
            if disjoint(c.query, within):
                continue
            q = restrict(c.query, within)
        else:
            q = c.query
        k = coverage_key(q)
        prev = merged.get(k)
        merged[k] = (q, c.cost + (prev[1] if prev else 0))
    if not merged:
        return Loss(Fraction(0), True, None, Fraction(0))
    if len(merged) == 1:
        ((q, w),) = merged.values()
        return Loss(w, True, None, w)
    queries = [q for q, _ in merged.values()]
    costs = [w for _, w in merged.values()]
    scale = math.lcm(*(w.denominator for w in costs))
    ints = [w.numerator * (scale // w.denominator) for w in costs]
    # integer weights: the maximum is <= at_most iff it is <= floor(at_most * scale)
    at = None if at_most is None else math.floor(at_most * scale)
    # the grid was tried above (the same one: the grid of the charges within C_within)
    res = max_overlap_wide(queries, ints, max(0.0, time_limit), decide_at=at, grid_first=False)
    witness = res.witness
    if res.exact:
        exact_value = Fraction(res.upper, scale)
        return Loss(exact_value, True, witness, exact_value)
    if witness is not None and within is not None and not within.covers(witness):
        witness = None
    # a refusal must rest on a real point: the solver's point, weighed again exactly
    reached = None if witness is None else Fraction(res.lower, scale)
    return Loss(Fraction(res.upper, scale), False, witness, reached)


def quick_loss(
    charges: list[Charge], within: Query | BooleanQuery | None, cells: int
) -> Loss | None:
    """:func:`max_loss` when it needs no search: no charge (or an empty region), one, or
    a dense grid of at most ``cells`` cells (exact by prefix sums); else None."""
    if within is not None and within.is_empty:
        return Loss(Fraction(0), True, None)
    live = [c for c in charges if not c.query.is_empty]
    if not live:
        return Loss(Fraction(0), True, None)
    if len(live) == 1 and within is None:
        return Loss(live[0].cost, True, None, live[0].cost)
    return _dense_loss(live, within, cells)


#: An answer's remaining figure is computed exactly when the charges near its query are
#: at most this many and their segment grid has at most ``QUICK_CELLS`` cells (a few
#: milliseconds); otherwise it is the levels' bound.
QUICK_CHARGES = 256
QUICK_CELLS = 50_000
#: The most charges near a query that :meth:`OverlapFilter.quick_spent_on` looks at one
#: by one (beyond it, a batch's answers would cost O(history) Python work each: it takes
#: the levels' maximum, a vector operation, alone).
QUICK_NEAR = 2048


def _small_grid_loss(charges: list[Charge], within: Query) -> Fraction | None:
    """max over C_within of the charges' summed costs, exactly, when that is cheap (a
    small dense grid); else None."""
    if len(charges) > QUICK_CHARGES:
        return None
    live = [c for c in charges if not c.query.is_empty]
    if not live:
        return Fraction(0)
    got = _dense_loss(live, within, QUICK_CELLS)
    return None if got is None else got.value


def _dense_loss(live: list[Charge], within: Query | None, limit: int) -> Loss | None:
    """The exact maximum by the dense prefix-sum grid (integer weights of any size: the
    costs times their common denominator), or None when the grid is too large."""
    scale = math.lcm(*{c.cost.denominator for c in live})
    weights = [c.cost.numerator * (scale // c.cost.denominator) for c in live]
    if len(live) == 1:
        if within is not None and disjoint(live[0].query, within):
            return Loss(Fraction(0), True, None, Fraction(0))
        return Loss(live[0].cost, True, None, live[0].cost)
    # floats when they add up exactly (the common case), else Python ints (in limbs)
    ws = np.array(weights, dtype=np.float64) if sum(weights) < 2**53 else weights
    dense = dense_max_overlap([c.query for c in live], ws, within=within, limit=limit)
    if dense is None:
        return None
    v = Fraction(round(dense[0]), scale)
    return Loss(v, True, dense[1], v)


@dataclass(frozen=True)
class Decision:
    """The filter's verdict on one request.

    ``spent`` is what the covered points had lost before, over all analysts, and
    ``mine`` what the requesting analyst's own charges cost them (both upper bounds,
    except on a refusal decided exactly, where they are what a covered point has really
    lost, enough to refuse). ``exact`` says that the verdict is the one the exact maxima
    would give (False: a refusal on a safe upper bound, the exact check did not finish).
    ``limit`` is the budget or quota that decided; ``level`` is the new charge's level;
    ``by`` names what refused it (``budget`` or ``quota``).
    """

    admitted: bool
    spent: Fraction
    limit: Fraction
    level: Fraction
    by: str = ""
    exact: bool = True
    mine: Fraction = Fraction(0)


class OverlapFilter:
    """The refusal rule over several tables about the same people.

    Mutable bookkeeping only: the curator holds the lock and the durable ledger.
    ``quick_*`` methods return valid upper bounds in a few vector operations; the others
    are exact unless the solver's time runs out, and say so.
    """

    def __init__(self, budget: Fraction, currency: str) -> None:
        self.budget = budget
        self.currency = currency
        self._tables: dict[str, TableIndex] = {}
        # every charge, in the order added (shared, see fork)
        self._log: LazyRows[Charge] = LazyRows()
        self._n = 0  # how many of _log are this filter's
        self.last_id = 0  # the largest committed charge id held
        self._worst: dict[tuple[str, str | None], Loss] = {}  # cache of max_x L_T(x)
        #: What computes :func:`max_loss` for this filter and its forks (the curator may
        #: hand it to worker processes: :mod:`dpcurator.curator.solver_processes`).
        self.solve: Callable[..., Loss] = max_loss
        #: Held by whoever adds charges to this filter (always under the ledger's lock
        #: too) and by whoever forks it *without* the ledger's lock: a request that
        #: finds a commit being written forks the filter as it is, rather than wait for
        #: the commit (see :func:`dpcurator.curator.admission.check_and_charge`).
        self.changing = threading.Lock()
        #: When (``time.monotonic()``) it was last brought up to date with its ledger:
        #: forks taken soon after need not read the ledger again (see admission).
        self.synced_at = -math.inf

    # --- state ------------------------------------------------------------------------

    def add(self, charge: Charge) -> bool:
        """Add a charge: a committed one (a positive id above every id held; one already
        held is ignored) or a provisional one (a negative id, on a fork)."""
        if charge.id > 0:
            if charge.id <= self.last_id:
                return False
            self.last_id = charge.id
        index = self._tables.get(charge.table)
        if index is None:
            index = self._tables[charge.table] = TableIndex(charge.query.schema)
        index.add(charge)
        if len(self._log) != self._n:  # a fork's own log (see fork), or a rollback's tail
            self._log = self._log.head(self._n)
        self._log.append(charge)
        self._n += 1
        self._update_worst(charge)
        return True

    def load(
        self,
        parts: Sequence[TableSegment],
        summary: Summary,
        upto: int,
        schema_of: Callable[[str], Schema],
        query_of: Callable[[Schema, dict[str, Any]], Query | BooleanQuery],
    ) -> None:
        """Start from a checkpoint (an empty filter only): the charges 1..``upto`` as its
        segments ``parts`` hold them (see :mod:`dpcurator.curator.checkpoint`), each
        table's largest level and analysts' sums from its ``summary``; a charge's query
        is made (``query_of``) only when an exact computation first reads it.
        ``ValueError`` if the segments are not those charges exactly, or do not fit the
        schemas."""
        assert self._n == 0, "only an empty filter starts from a checkpoint"
        by_table: dict[str, list[TableSegment]] = {}
        for p in parts:
            by_table.setdefault(p.table, []).append(p)
        if set(by_table) != set(summary.tables):
            raise ValueError("the summary names other tables than the segments")
        where: list[np.ndarray] = []
        for table, segs in by_table.items():
            schema = schema_of(table)
            n, top, spent = summary.tables[table]
            ids = np.concatenate([p.ids for p in segs])
            if len(ids) != n:
                raise ValueError(f"table {table}: {len(ids)} charges, the summary says {n}")
            whos = [
                a
                for p in segs
                for a in (p.analysts[j] if j >= 0 else None for j in p.analyst.tolist())
            ]
            costs = [p.costs[j] for p in segs for j in p.cost.tolist()]
            levels = [v for p in segs for v in p.levels]
            covs = [c for p in segs for c in p.coverages]

            def make(
                i: int, t: str = table, s: Schema = schema, ids: np.ndarray = ids,
                whos: list = whos, costs: list = costs, levels: list = levels,
                covs: list = covs,
            ) -> Charge:  # fmt: skip
                try:
                    q = query_of(s, json.loads(covs[i]))
                    return Charge(int(ids[i]), t, whos[i], q, Fraction(costs[i]), _level(levels[i]))
                except (ValueError, TypeError, KeyError, AttributeError, DpCuratorError):
                    raise _malformed(int(ids[i])) from None

            def level_of(i: int, levels: list = levels, ids: np.ndarray = ids) -> Fraction:
                try:
                    return _level(levels[i])
                except (ValueError, TypeError):
                    raise _malformed(int(ids[i])) from None

            index = TableIndex(schema)
            try:
                index.load(segs, top, spent, make, level_of)
            except KeyError as err:
                raise ValueError(f"table {table}: no attribute {err}") from None
            self._tables[table] = index
            where.append(np.stack([ids, np.full(len(ids), len(where)), np.arange(len(ids))]))
        every = np.concatenate(where, axis=1) if where else np.zeros((3, 0), np.int64)
        order = np.argsort(every[0], kind="stable")
        if not np.array_equal(every[0][order], np.arange(1, upto + 1)):
            raise ValueError(f"the segments do not hold the charges 1 to {upto} once each")
        indexes = [self._tables[t] for t in by_table]
        table_at, pos_at = every[1][order], every[2][order]

        def logged(i: int) -> Charge:
            return indexes[int(table_at[i])].charges[int(pos_at[i])]

        self._log = LazyRows(upto, logged)
        self._n = upto
        self.last_id = upto

    def _update_worst(self, charge: Charge) -> None:
        """The table's cached worst losses after ``charge``, in O(analysts): the points
        it covers have lost at most its level (see the module docstring) and at most the
        previous maximum plus its cost, the others what they had: so the maximum is at
        most min(max(previous, level), previous + cost), and exactly the previous
        maximum when that was exact and the level does not pass it (the previous
        witness is then outside the charge). An analyst's own maximum grows by at most
        the cost, and only hers."""
        for key in [k for k in self._worst if k[0] == charge.table]:
            old = self._worst[key]
            if key[1] is None:
                if charge.level <= old.value:
                    continue
                bound = min(charge.level, old.value + charge.cost)
                self._worst[key] = Loss(bound, False)
            elif key[1] == charge.analyst:
                self._worst[key] = Loss(old.value + charge.cost, False)

    def _forget(self, table: str) -> None:
        if self._worst:
            for key in [k for k in self._worst if k[0] == table]:
                del self._worst[key]

    @property
    def version(self) -> int:
        """How many charges the filter holds: a point to :meth:`rollback` to."""
        return self._n

    def rollback(self, version: int) -> None:
        """Forget the provisional charges added to a fork since ``version``."""
        for charge in self._log.range(version, self._n):
            ix = self._tables[charge.table]
            ix.truncate(ix.n - 1)
            if not ix.n:
                del self._tables[charge.table]
            self._forget(charge.table)
        self._n = version

    def fork(self) -> OverlapFilter:
        """A snapshot to decide on without the curator's lock, in O(tables).

        It shares storage with this filter (see :class:`~dpcurator.curator.table_index.TableIndex`): this filter keeps
        appending committed charges, which the fork does not see, and the fork's own
        provisional charges go to private copies. Levels the fork lowers by exact
        computations are lowered here too, which is valid: a level bounds L(x) at the
        points whose last covering charge it is, and at such a point no later charge
        (committed after the fork) has added anything."""
        new = OverlapFilter(self.budget, self.currency)
        new._tables = {t: ix.snapshot() for t, ix in self._tables.items()}
        new._log = self._log
        new._n = self._n
        new.last_id = self.last_id
        new._worst = dict(self._worst)
        new.solve = self.solve
        return new

    def charges(self, table: str, analyst: str | None = None) -> list[Charge]:
        index = self._tables.get(table)
        cs = index.all_charges() if index else []
        return cs if analyst is None else [c for c in cs if c.analyst == analyst]

    def increments_since(
        self, version: int, table: str, query: Query, analyst: str | None = None
    ) -> tuple[Fraction, Fraction]:
        """What the charges added since ``version`` can add to the loss of any point of
        C_query: their costs on ``table`` where they meet the query, and on the other
        tables wherever they are (a person may be anywhere there). Returns (everyone's,
        ``analyst``'s own)."""
        every, mine = Fraction(0), Fraction(0)
        for c in self._log.range(version, self._n):
            if c.table == table and disjoint(c.query, query):
                continue
            every += c.cost
            if analyst is not None and c.analyst == analyst:
                mine += c.cost
        return every, mine

    def added_since(self, version: int, analyst: str | None = None) -> tuple[Fraction, Fraction]:
        """The costs of every charge added since ``version``, summed: what they can add to
        any point's loss, whatever it covers (everyone's, ``analyst``'s own)."""
        every, mine = Fraction(0), Fraction(0)
        for c in self._log.range(version, self._n):
            every += c.cost
            if analyst is not None and c.analyst == analyst:
                mine += c.cost
        return every, mine

    # --- exact ------------------------------------------------------------------------

    def worst(
        self,
        table: str,
        analyst: str | None = None,
        *,
        deadline: float = math.inf,
        at_most: Fraction | None = None,
    ) -> Loss:
        """max_x L_T(x) over the whole domain of ``table``; with ``at_most``, possibly
        only whether it is at most that (see :func:`max_loss`). Kept until the table
        changes."""
        key = (table, analyst)
        cached = self._worst.get(key)
        if cached is not None and (
            cached.exact or (at_most is not None and cached.settles(at_most))
        ):
            return cached
        ix = self._tables.get(table)
        boxes = None if ix is None else ix.box_worst(all if analyst is None else analyst)
        if boxes is not None:
            loss = Loss(boxes[0], True, _point(ix, boxes[1]), boxes[0])
        else:
            charges = self.charges(table, analyst)
            loss = self.solve(charges, time_limit=_left(deadline), at_most=at_most)
        if cached is None or loss.exact or loss.value < cached.value:
            self._worst[key] = loss
        if analyst is None and ix is not None:
            if loss.exact:
                ix.lower_all(loss.value)
            ix.top = min(ix.top, loss.value)  # every level is at most the maximum's bound
        return loss

    def learn(self, fork: OverlapFilter) -> None:
        """Keep the whole-table worst losses a fork computed, for the tables that have not
        changed since it was made (its levels are shared already, see :meth:`fork`)."""
        for t, theirs in fork._tables.items():
            mine = self._tables.get(t)
            if mine is None or theirs.owned or theirs.n > mine.n:
                continue  # the fork's own charges, or not a fork of this filter
            if theirs.top < mine.top:  # the fork's levels (shared) are at most its top
                later = max(mine.levels.range(theirs.n, mine.n), default=Fraction(0))
                mine.top = max(theirs.top, later)
            if mine.n == theirs.n:
                for (table, who), loss in fork._worst.items():
                    if table == t:
                        self._worst.setdefault((table, who), loss)

    def local(
        self,
        table: str,
        query: Query,
        analyst: str | None = None,
        *,
        deadline: float = math.inf,
        at_most: Fraction | None = None,
    ) -> Loss:
        """max_{x in C_query} L_table(x) (only ``analyst``'s charges if given); with
        ``at_most``, possibly only whether it is at most that (see :func:`max_loss`)."""
        index = self._tables.get(table)
        if index is None:
            return Loss(Fraction(0), True)
        positions = index.candidate_positions(query)
        near = [index.charges[i] for i in positions]
        if analyst is not None:
            near = [c for c in near if c.analyst == analyst]
        loss = self.solve(near, within=query, time_limit=_left(deadline), at_most=at_most)
        if analyst is None and loss.exact:
            # Every point of a charge inside C_query has lost at most this much.
            for i in index.within_hull(query, positions):
                if contains(query, index.charges[i].query):
                    index.lower(i, loss.value)
        return loss

    def elsewhere(
        self,
        table: str | None,
        analyst: str | None = None,
        *,
        deadline: float = math.inf,
        at_most: Fraction | None = None,
    ) -> Loss:
        """What a person may have lost in the tables other than ``table`` (all tables if
        None): the sum of their worst points. With ``at_most``, possibly only whether
        that sum is at most it: each table then only needs to settle the room the
        others' bounds leave (``exact`` False when a table stopped there)."""
        others = [t for t in self._tables if t != table]
        quick = {t: self._quick_worst(t, analyst) for t in others}
        total, exact = Fraction(0), True
        for n, t in enumerate(others):
            room = None
            if at_most is not None:
                room = at_most - total - sum((quick[u] for u in others[n + 1 :]), Fraction(0))
            w = self.worst(t, analyst, deadline=deadline, at_most=room)
            total += w.value
            exact &= w.exact
        return Loss(total, exact)

    def _quick_worst(self, table: str, analyst: str | None) -> Fraction:
        """An upper bound on :meth:`worst` in O(1): the cached figure or the top level
        (for an analyst, also her summed costs)."""
        ix = self._tables[table]
        bound = ix.top
        cached = self._worst.get((table, analyst))
        if cached is not None:
            bound = min(bound, cached.value)
        if analyst is not None:
            bound = min(bound, ix.spent.get(analyst, Fraction(0)))
        return bound

    def spent_on(
        self, table: str, query: Query, analyst: str | None = None, *, deadline: float = math.inf
    ) -> Loss:
        """The most any person covered by ``query`` has lost so far (all tables)."""
        here = self.local(table, query, analyst, deadline=deadline)
        there = self.elsewhere(table, analyst, deadline=deadline)
        return Loss(here.value + there.value, here.exact and there.exact, here.witness)

    def spent_anywhere(self, analyst: str | None = None, *, deadline: float = math.inf) -> Loss:
        """The most any person has lost so far."""
        return self.elsewhere(None, analyst, deadline=deadline)

    # --- the decision ------------------------------------------------------------------

    def decide(
        self,
        table: str,
        query: Query,
        cost: Fraction,
        *,
        analyst: str | None = None,
        quota: Fraction | None = None,
        deadline: float | None = math.inf,
    ) -> Decision | None:
        """Admit iff every covered point stays within the budget (and the analyst's quota).

        Bounds first; the exact computation only when a bound does not fit, and then
        only as far as needed to tell whether the largest loss over the covered points
        is at most what the budget leaves for them (a bound within it admits, a point
        beyond it refuses), so a refusal is exact unless the solver ran out of time
        (``Decision.exact``). Admission always rests on a safe upper bound. With
        ``deadline=None`` no exact computation is run: None means "the bounds do not fit"
        (the caller then decides again with the exact computation, where it may take
        time). Reads only queries and costs, never data.
        """
        here, there = self.quick_local(table, query), self.quick_elsewhere(table)
        if here + there + cost > self.budget:
            here = self.quick_local(table, query, refine=True)
        exact = True
        if here + there + cost > self.budget:
            if deadline is None:
                return None
            if time.monotonic() >= deadline:  # no time left for the exact check
                return Decision(False, here + there, self.budget, here + cost, "budget", False)
            others = self.elsewhere(table, deadline=deadline, at_most=self.budget - cost - here)
            if not others.exact and others.value > self.budget - cost - here:
                # not settled with the local bound: the exact local figure may leave more
                others = self.elsewhere(table, deadline=deadline)
            room = self.budget - cost - others.value  # what the covered points may have lost
            local = self.local(table, query, deadline=deadline, at_most=room)
            here, there = local.value, others.value
            exact = local.settles(room) and others.exact
            if here > room:
                hit = _hit(local, room)
                return Decision(False, hit + there, self.budget, here + cost, "budget", exact)
        level = here + cost
        mine = self.quick_mine(table, query, analyst, here, there)
        if analyst is not None and quota is not None and mine + cost > quota:
            if deadline is None:
                return None
            if time.monotonic() >= deadline:
                return Decision(False, mine, quota, level, "quota", False, mine)
            own_there = self.elsewhere(table, analyst, deadline=deadline)
            room = quota - cost - own_there.value
            own = self.local(table, query, analyst, deadline=deadline, at_most=room)
            mine = own.value + own_there.value
            if own.value > room:
                mine = _hit(own, room) + own_there.value
                settled = own.settles(room) and own_there.exact
                return Decision(False, mine, quota, level, "quota", settled, mine)
        return Decision(True, here + there, self.budget, level, "", exact, mine)

    # --- fast upper bounds --------------------------------------------------------------

    def quick_local(self, table: str, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on :meth:`local` (for every analyst too): the largest level."""
        index = self._tables.get(table)
        return index.bound(query, refine=refine) if index else Fraction(0)

    def quick_elsewhere(self, table: str | None) -> Fraction:
        """An upper bound on :meth:`elsewhere`: each other table's cached worst loss or
        its largest level, O(tables)."""
        return sum((self._quick_worst(t, None) for t in self._tables if t != table), Fraction(0))

    def quick_mine(
        self,
        table: str,
        query: Query,
        analyst: str | None,
        here: Fraction,
        there: Fraction,
    ) -> Fraction:
        """An upper bound on what ``analyst``'s own charges cost any point of C_query (all
        tables): everyone's bound ``here + there``, or her own costs summed, per table,
        whichever is smaller."""
        if analyst is None:
            return here + there
        index = self._tables.get(table)
        mine_here = index.spent.get(analyst, Fraction(0)) if index else Fraction(0)
        mine_there = Fraction(0)
        for t, ix in self._tables.items():
            if t != table:
                cached = self._worst.get((t, analyst))
                own = ix.spent.get(analyst, Fraction(0))
                mine_there += min(own, cached.value) if cached is not None else own
        return min(here, mine_here) + min(there, mine_there)

    def quick_spent_on(
        self, table: str, query: Query, analyst: str | None = None, *, grid: bool = True
    ) -> Loss:
        """A safe upper bound on :meth:`spent_on`, in a few milliseconds whatever the
        history: levels and each table's cached worst loss, and (with ``grid``) the
        exact maximum where the charges near the query make a small grid (``exact``
        then says so). What an answer reports as its remaining budget: never more than
        truly remains."""
        index = self._tables.get(table)
        here, exact = Fraction(0), True
        if index is not None and not query.is_empty and index.n:
            if not grid and analyst is None:  # the levels alone, whatever the history
                return self._with_others(table, analyst, Fraction(index.top_near(query)), False)
            if index.likely_near(query) > QUICK_NEAR:  # many: the levels' bound alone
                mask, few = None, False
                top = Fraction(index.top_near(query))
            else:
                mask = index._hull_mask(query)
                top = (
                    Fraction(float(index.level[: index.n][mask].max()))
                    if mask.any()
                    else Fraction(0)
                )
                few = int(np.count_nonzero(mask)) <= QUICK_NEAR
            small = None
            if few and mask is not None:  # the charges near the query
                positions = np.flatnonzero(mask)
                who = all if analyst is None else analyst
                small = index.box_within(positions, query, who, QUICK_CELLS) if grid else None
                if small is None:  # one by one, in Python
                    near = [index.charges[i] for i in positions.tolist()]
                    if analyst is not None:
                        near = [c for c in near if c.analyst == analyst]
                    small = _small_grid_loss(near, query) if grid else None
            if small is not None:
                here = small
            else:
                exact = False  # the largest level near the query (floats rounded up)
                if analyst is None:
                    here = top
                elif few:
                    here = min(top, sum((c.cost for c in near), Fraction(0)))
                else:  # her costs on the whole table bound her costs near the query
                    here = min(top, index.spent.get(analyst, Fraction(0)))
        return self._with_others(table, analyst, here, exact)

    def _with_others(self, table: str, analyst: str | None, here: Fraction, exact: bool) -> Loss:
        """``here`` (a bound on ``table``) plus each other table's cached worst loss, or
        its largest level."""
        there = Fraction(0)
        for t, ix in self._tables.items():
            if t == table:
                continue
            cached = self._worst.get((t, analyst))
            if cached is not None:
                there += cached.value
                exact &= cached.exact
            else:
                exact = False
                top = self._worst[(t, None)].value if (t, None) in self._worst else ix.top
                there += top if analyst is None else min(top, ix.spent.get(analyst, Fraction(0)))
        return Loss(here + there, exact)


def _hit(loss: Loss, room: Fraction) -> Fraction:
    """The loss a refusal reports: a real point's when one exceeds ``room``, else the
    upper bound."""
    return loss.reached if loss.reached is not None and loss.reached > room else loss.value


def _level(text: str) -> Fraction:
    """A level as a checkpoint stores it: a positive fraction (``ValueError`` if not)."""
    v = Fraction(text)
    if v <= 0:
        raise ValueError(text)
    return v


def _malformed(cid: int) -> LedgerError:
    return LedgerError(
        f"the ledger's checkpoint holds charge {cid} malformed; restore the ledger from a backup"
    )


def _point(index: TableIndex, positions: dict[str, int]) -> dict[str, int | str]:
    """The point at these positions (the attributes not given at their first value)."""
    schema = index.schema
    return {a.name: a.value(positions.get(a.name, 0)) for a in schema.attributes}  # type: ignore[misc]


def _left(deadline: float) -> float:
    """Seconds left before ``deadline`` (a time.monotonic() value), for the solver."""
    return max(0.0, deadline - time.monotonic()) if deadline != math.inf else SOLVER_TIME_LIMIT
