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
integer weights (costs times the common denominator).

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

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpcurator.queries import Query, Schema, max_overlap
from dpcurator.queries.boolean import BooleanQuery, contains, hull, intersection
from dpcurator.queries.overlap.dense import dense_max_overlap
from dpcurator.queries.predicates import disjoint

#: Seconds the exact maximum-overlap computations of one request may take in all, before
#: safe upper bounds are used instead.
SOLVER_TIME_LIMIT = 5.0


@dataclass(frozen=True)
class Charge:
    """One answered request: the points it covered (``query``) and what it cost there.

    ``level`` is the level recorded when it was admitted (see the module docstring); the
    filter may later lower it in memory when an exact computation shows a smaller bound.
    """

    id: int
    table: str
    analyst: str | None
    query: Query
    cost: Fraction
    level: Fraction


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
    can only make the filter refuse more, never less. Never raises on large exact
    rationals: weights that do not fit a float's 53 bits go to the solver as floats
    with a relative margin that covers their rounding.

    ``at_most``: only whether the maximum is at most this matters; the solver may stop
    once that is certain (see :meth:`Loss.settles`), so ``exact`` may be False for an
    answer that is still decided. A refusal is only settled by a point whose loss is
    recomputed here in exact arithmetic.
    """
    if within is not None and within.is_empty:
        return Loss(Fraction(0), True, None)
    live = [c for c in charges if not c.query.is_empty]
    if not live:
        return Loss(Fraction(0), True, None)
    scale = math.lcm(*{c.cost.denominator for c in live})
    weights = [c.cost.numerator * (scale // c.cost.denominator) for c in live]
    if len(live) > 1 and sum(weights) < 2**53:
        # Small grids of elementary segments: exact by prefix sums, no restriction needed.
        dense = dense_max_overlap(
            [c.query for c in live], np.array(weights, dtype=np.float64), within=within
        )
        if dense is not None:
            v = Fraction(round(dense[0]), scale)
            return Loss(v, True, dense[1], v)
    merged: dict[tuple, tuple[Query, Fraction]] = {}
    for c in live:
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
    limit = max(0.0, time_limit)
    if sum(ints) < 2**53:
        # integer weights: the maximum is <= at_most iff it is <= floor(at_most * scale)
        at = None if at_most is None else math.floor(at_most * scale)
        res = max_overlap(queries, weights=ints, time_limit=limit, decide_at=at)
        value = round(res.value) if res.exact else math.ceil(res.value)
        if res.exact:
            exact_value = Fraction(value, scale)
            return Loss(exact_value, True, dict(res.witness), exact_value)
        witness = dict(res.witness) if res.witness else None
        if witness is not None and within is not None and not within.covers(witness):
            witness = None
        reached = None
        if witness is not None and at_most is not None:
            # the solver's point, weighed again exactly: a refusal must rest on a real point
            reached = sum((w for q, w in merged.values() if q.covers(witness)), Fraction(0))
        return Loss(Fraction(value, scale), False, witness, reached)
    # Astronomical numerators or denominators: floats, each rounded up, with a margin
    # far above the rounding error of summing them (n * 2^-53 relative).
    floats = [_float_up(w) for w in costs]
    res = max_overlap(queries, weights=floats, time_limit=limit)
    bound = Fraction(res.value if res.exact else res.upper_bound)
    return Loss(bound * (1 + Fraction(1, 10**9)), False, None)


def _float_up(x: Fraction) -> float:
    """The smallest float >= x (inf if x is beyond the float range)."""
    try:
        f = float(x)
    except OverflowError:
        return math.inf
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


class _TableIndex:
    """The charges of one table, with each one's per-attribute hull [lo, hi) and level in
    numpy arrays, so that the charges that may overlap a query are found, and their
    largest level read, in a few vector operations (10^4 charges: ~0.2 ms)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.names = {name: j for j, name in enumerate(schema.names)}
        self.sizes = np.array([schema.attribute(n).size for n in schema.names], dtype=np.int64)
        self.charges: list[Charge] = []
        self.levels: list[Fraction] = []  # current levels (exact), may be lowered
        self.lo = np.zeros((64, len(self.names)), dtype=np.int64)
        self.hi = np.zeros((64, len(self.names)), dtype=np.int64)
        self.level = np.zeros(64)  # float levels rounded up: safe for bounds

    def copy(self) -> _TableIndex:
        new = _TableIndex.__new__(_TableIndex)
        new.schema, new.names, new.sizes = self.schema, self.names, self.sizes
        new.charges, new.levels = list(self.charges), list(self.levels)
        new.lo, new.hi, new.level = self.lo.copy(), self.hi.copy(), self.level.copy()
        return new

    @property
    def top(self) -> Fraction:
        """The largest level: bounds max_x L(x) over the whole table."""
        return max(self.levels, default=Fraction(0))

    def add(self, charge: Charge) -> None:
        n = len(self.charges)
        if n == len(self.lo):
            self.lo = np.concatenate([self.lo, np.zeros_like(self.lo)])
            self.hi = np.concatenate([self.hi, np.zeros_like(self.hi)])
            self.level = np.concatenate([self.level, np.zeros_like(self.level)])
        self.charges.append(charge)
        self.levels.append(charge.level)
        self.lo[n] = 0
        self.hi[n] = 0  # lo = hi = 0: overlaps nothing (empty charges stay so)
        self.level[n] = _float_up(charge.level)
        if charge.query.is_empty:
            return
        self.hi[n] = self.sizes
        for name, (lo, hi) in hull(charge.query).items():
            j = self.names[name]
            self.lo[n, j], self.hi[n, j] = lo, hi

    def truncate(self, keep: int) -> None:
        del self.charges[keep:]
        del self.levels[keep:]
        self.level[keep:] = 0
        self.hi[keep:] = 0
        self.lo[keep:] = 0

    def lower(self, i: int, value: Fraction) -> None:
        """Lower charge i's level to ``value`` (never raise it)."""
        if value < self.levels[i]:
            self.levels[i] = value
            self.level[i] = _float_up(value)

    def _hull_mask(self, query: Query) -> np.ndarray:
        """Charges whose per-attribute hulls meet the query's: a superset of the overlapping."""
        n = len(self.charges)
        mask = self.hi[:n, 0] > self.lo[:n, 0]  # non-empty charges
        for name, (lo, hi) in hull(query).items():
            j = self.names[name]
            mask &= (self.lo[:n, j] < hi) & (self.hi[:n, j] > lo)
        return mask

    def bound(self, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on max_{x in C_query} L(x): the largest level among the charges
        whose hulls meet the query (see the module docstring); with ``refine``, among the
        charges that really overlap it (a Python pass over the hull candidates)."""
        if query.is_empty or not self.charges:
            return Fraction(0)
        if refine:
            return max(
                (self.levels[i] for i in self.overlapping_positions(query)), default=Fraction(0)
            )
        levels = self.level[: len(self.charges)][self._hull_mask(query)]
        return Fraction(float(levels.max())) if levels.size else Fraction(0)

    def candidate_positions(self, query: Query) -> list[int]:
        if query.is_empty or not self.charges:
            return []
        return np.flatnonzero(self._hull_mask(query)).tolist()

    def within_hull(self, query: Query, positions: list[int]) -> list[int]:
        """Those of ``positions`` whose charge's hull lies inside the query's hull: a
        superset of the charges C_query contains (a few vector operations, so that the
        exact containment test runs on few charges)."""
        if not positions:
            return []
        pos = np.array(positions, dtype=np.int64)
        mask = np.ones(len(pos), dtype=bool)
        for name, (lo, hi) in hull(query).items():
            j = self.names[name]
            mask &= (self.lo[pos, j] >= lo) & (self.hi[pos, j] <= hi)
        return pos[mask].tolist()

    def candidates(self, query: Query) -> list[Charge]:
        """The charges whose hulls meet ``query``'s: a superset of those overlapping it."""
        return [self.charges[i] for i in self.candidate_positions(query)]

    def overlapping_positions(self, query: Query) -> list[int]:
        return [
            i for i in self.candidate_positions(query) if not disjoint(self.charges[i].query, query)
        ]


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
    ``quick_*`` methods return valid upper bounds; the others are exact unless the
    solver's time runs out, and say so.
    """

    def __init__(self, budget: Fraction, currency: str) -> None:
        self.budget = budget
        self.currency = currency
        self._tables: dict[str, _TableIndex] = {}
        self._log: list[Charge] = []  # every charge, in the order added
        self._ids: set[int] = set()
        self.last_id = 0  # the largest committed charge id held
        self._worst: dict[tuple[str, str | None], Loss] = {}  # cache of max_x L_T(x)

    # --- state ------------------------------------------------------------------------

    def add(self, charge: Charge) -> bool:
        """Add a committed charge; a charge already known (same id) is ignored."""
        if charge.id in self._ids:
            return False
        index = self._tables.get(charge.table)
        if index is None:
            index = self._tables[charge.table] = _TableIndex(charge.query.schema)
        index.add(charge)
        self._log.append(charge)
        self._ids.add(charge.id)
        self.last_id = max(self.last_id, charge.id)
        self._forget(charge.table)
        return True

    def _forget(self, table: str) -> None:
        for key in [k for k in self._worst if k[0] == table]:
            del self._worst[key]

    @property
    def version(self) -> int:
        """How many charges the filter holds: a point to :meth:`rollback` to."""
        return len(self._log)

    def rollback(self, version: int) -> None:
        """Forget the charges added since ``version`` (a batch that was refused)."""
        for charge in self._log[version:]:
            self._ids.discard(charge.id)
            ix = self._tables[charge.table]
            ix.truncate(len(ix.charges) - 1)
            if not ix.charges:
                del self._tables[charge.table]
            self._forget(charge.table)
        del self._log[version:]

    def fork(self) -> OverlapFilter:
        """An independent copy to decide on without the curator's lock."""
        new = OverlapFilter(self.budget, self.currency)
        new._tables = {t: ix.copy() for t, ix in self._tables.items()}
        new._log = list(self._log)
        new._ids = set(self._ids)
        new.last_id = self.last_id
        new._worst = dict(self._worst)
        return new

    def charges(self, table: str, analyst: str | None = None) -> list[Charge]:
        index = self._tables.get(table)
        cs = index.charges if index else []
        return cs if analyst is None else [c for c in cs if c.analyst == analyst]

    def increments_since(
        self, version: int, table: str, query: Query, analyst: str | None = None
    ) -> tuple[Fraction, Fraction]:
        """What the charges added since ``version`` can add to the loss of any point of
        C_query: their costs on ``table`` where they meet the query, and on the other
        tables wherever they are (a person may be anywhere there). Returns (everyone's,
        ``analyst``'s own)."""
        every, mine = Fraction(0), Fraction(0)
        for c in self._log[version:]:
            if c.table == table and disjoint(c.query, query):
                continue
            every += c.cost
            if analyst is not None and c.analyst == analyst:
                mine += c.cost
        return every, mine

    # --- exact ------------------------------------------------------------------------

    def worst(self, table: str, analyst: str | None = None, *, deadline: float = math.inf) -> Loss:
        """max_x L_T(x) over the whole domain of ``table``."""
        key = (table, analyst)
        if key not in self._worst:
            loss = max_loss(self.charges(table, analyst), time_limit=_left(deadline))
            self._worst[key] = loss
            if analyst is None and loss.exact:
                ix = self._tables.get(table)
                for i in range(len(ix.charges) if ix else 0):
                    ix.lower(i, loss.value)  # type: ignore[union-attr]
        return self._worst[key]

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
        loss = max_loss(near, within=query, time_limit=_left(deadline), at_most=at_most)
        if analyst is None and loss.exact:
            # Every point of a charge inside C_query has lost at most this much.
            for i in index.within_hull(query, positions):
                if contains(query, index.charges[i].query):
                    index.lower(i, loss.value)
        return loss

    def elsewhere(
        self, table: str | None, analyst: str | None = None, *, deadline: float = math.inf
    ) -> Loss:
        """What a person may have lost in the tables other than ``table`` (all tables if
        None): the sum of their worst points."""
        total, exact = Fraction(0), True
        for t in self._tables:
            if t != table:
                w = self.worst(t, analyst, deadline=deadline)
                total += w.value
                exact &= w.exact
        return Loss(total, exact)

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
        ``deadline=None`` no exact computation is run: None means "the bounds do not fit,
        decide on a fork" (the curator's fast path under its lock). Reads only queries
        and costs, never data.
        """
        here, there = self.quick_local(table, query), self.quick_elsewhere(table)
        if here + there + cost > self.budget:
            here = self.quick_local(table, query, refine=True)
        exact = True
        if here + there + cost > self.budget:
            if deadline is None:
                return None
            others = self.elsewhere(table, deadline=deadline)
            room = self.budget - cost - others.value  # what the covered points may have lost
            local = self.local(table, query, deadline=deadline, at_most=room)
            here, there = local.value, others.value
            exact = local.settles(room) and others.exact
            if here > room:
                hit = _hit(local, room)
                return Decision(False, hit + there, self.budget, here + cost, "budget", exact)
        level = here + cost
        mine = here + there  # the global loss bounds the analyst's own
        if analyst is not None and quota is not None and mine + cost > quota:
            if deadline is None:
                return None
            own_there = self.elsewhere(table, analyst, deadline=deadline)
            room = quota - cost - own_there.value
            own = self.local(table, query, analyst, deadline=deadline, at_most=room)
            mine = own.value + own_there.value
            if own.value > room:
                mine = _hit(own, room) + own_there.value
                settled = own.settles(room) and own_there.exact
                return Decision(False, mine, quota, level, "quota", settled, mine)
        return Decision(True, here + there, self.budget, level, "", exact, mine)

    def adopt(self, fork: OverlapFilter, version: int) -> None:
        """Take over what a fork made at ``version`` learned: lowered levels of the
        charges both hold, and whole-table worst losses of tables that did not change.

        Valid although the fork may hold provisional charges beyond ``version``: its
        figures then bound a superset of the losses (see the module docstring)."""
        changed = {c.table for c in self._log[version:]} | {c.table for c in fork._log[version:]}
        for t, ix in self._tables.items():
            theirs = fork._tables.get(t)
            if theirs is None:
                continue
            n = min(len(ix.charges), len(theirs.charges))
            for i in range(n):
                if ix.charges[i].id != theirs.charges[i].id:
                    break
                ix.lower(i, theirs.levels[i])
            if t not in changed:
                for key, loss in fork._worst.items():
                    if key[0] == t:
                        self._worst.setdefault(key, loss)

    # --- fast upper bounds --------------------------------------------------------------

    def quick_local(self, table: str, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on :meth:`local` (for every analyst too): the largest level."""
        index = self._tables.get(table)
        return index.bound(query, refine=refine) if index else Fraction(0)

    def quick_elsewhere(self, table: str | None) -> Fraction:
        """An upper bound on :meth:`elsewhere`: each other table's largest level."""
        total = Fraction(0)
        for t, ix in self._tables.items():
            if t != table:
                cached = self._worst.get((t, None))
                total += cached.value if cached is not None else ix.top
        return total


def _hit(loss: Loss, room: Fraction) -> Fraction:
    """The loss a refusal reports: a real point's when one exceeds ``room``, else the
    upper bound."""
    return loss.reached if loss.reached is not None and loss.reached > room else loss.value


def _left(deadline: float) -> float:
    """Seconds left before ``deadline`` (a time.monotonic() value), for the solver."""
    return max(0.0, deadline - time.monotonic()) if deadline != math.inf else SOLVER_TIME_LIMIT
