"""The overlap-aware privacy filter (DESIGN.md §7): pure bookkeeping, no I/O, no data.

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
can appear in several tables (seed 003's two hospitals) at unknown points, so the other
tables are charged at their worst point: queries on different tables compose sequentially.

All arithmetic is exact: costs are fractions, and the maximum-overlap solver receives
integer weights (costs times the common denominator), which float64 represents exactly.

The fast path. Each charge a records its *level* s_a: an upper bound on L(x) for every x
in C_a right after a was admitted. A point's loss never grows after the last charge that
covers it, so L(x) <= s_a for that last charge a; hence max_{x in C_q} L(x) <= max of
s_a over the charges a overlapping q (or over any superset of them). That bound costs a
few vector compares. The filter admits on the bound when it fits; it runs the exact
maximum-overlap computation only when the bound would refuse, so every refusal is exact:
a query is refused only when some point it covers would really pass the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpcurator.queries import Query, Schema, max_overlap
from dpcurator.queries.dense import dense_max_overlap
from dpcurator.queries.predicates import disjoint, intersect

#: Seconds the exact solver may take per check before a safe upper bound is used instead.
SOLVER_TIME_LIMIT = 5.0


@dataclass(frozen=True)
class Charge:
    """One answered request: the points it covered (``query``) and what it cost there."""

    id: int
    table: str
    analyst: str | None
    query: Query
    cost: Fraction
    level: Fraction  # upper bound on L(x) over C_query right after this charge


def restrict(query: Query, to: Query) -> Query:
    """The query whose coverage is C_query ∩ C_to (a conjunction is closed under ∩)."""
    names = set(query.attributes) | set(to.attributes)
    covs = {n: intersect(query.coverage(n), to.coverage(n)) for n in names}
    return Query.from_coverages(query.schema, covs, text=query.text)


def _key(q: Query) -> tuple:
    return tuple((p.attribute.name, p.coverage) for p in q.predicates)


@dataclass(frozen=True)
class Loss:
    """The largest loss over some set of points, with a point where it is reached."""

    value: Fraction
    exact: bool
    witness: dict[str, int | str] | None = field(default=None, compare=False)


def max_loss(charges: Iterable[Charge], within: Query | None = None) -> Loss:
    """max over x in C_within (the whole domain if None) of the sum of covering costs.

    Charges that do not meet C_within may be passed: they add nothing there. Exact
    unless the solver hits :data:`SOLVER_TIME_LIMIT`; then a safe upper bound (rounded
    up), which can only make the filter refuse more, never less.
    """
    live = [c for c in charges if not c.query.is_empty]
    if within is not None and within.is_empty:
        return Loss(Fraction(0), True, None)
    if not live:
        return Loss(Fraction(0), True, None)
    scale = math.lcm(*{c.cost.denominator for c in live})
    ints = np.array([float(c.cost * scale) for c in live])
    if len(live) > 1 and ints.sum() < 2**53:
        # Small grids of elementary segments: exact by prefix sums, no restriction needed.
        dense = dense_max_overlap([c.query for c in live], ints, within=within)
        if dense is not None:
            return Loss(Fraction(round(dense[0]), scale), True, dense[1])
    merged: dict[tuple, tuple[Query, Fraction]] = {}
    for c in live:
        if within is not None:
            if disjoint(c.query, within):
                continue
            q = restrict(c.query, within)
        else:
            q = c.query
        k = _key(q)
        prev = merged.get(k)
        merged[k] = (q, c.cost + (prev[1] if prev else 0))
    if not merged:
        return Loss(Fraction(0), True, None)
    if len(merged) == 1:
        ((q, w),) = merged.values()
        return Loss(w, True, None)
    queries = [q for q, _ in merged.values()]
    costs = [w for _, w in merged.values()]
    scale = math.lcm(*(w.denominator for w in costs))
    weights = [int(w * scale) for w in costs]
    if sum(weights) < 2**53:
        res = max_overlap(queries, weights=weights, time_limit=SOLVER_TIME_LIMIT)
        value = round(res.value) if res.exact else math.ceil(res.value)
        return Loss(Fraction(value, scale), res.exact, dict(res.witness) if res.exact else None)
    # Astronomical denominators: fall back to floats with a relative safety margin.
    floats = [float(w) for w in costs]
    res = max_overlap(queries, weights=floats, time_limit=SOLVER_TIME_LIMIT)
    upper = (
        Fraction(res.value) * (1 + Fraction(1, 10**9)) if res.exact else Fraction(res.upper_bound)
    )
    return Loss(upper, False, None)


def _float_up(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


class _TableIndex:
    """The charges of one table, with each one's per-attribute hull [lo, hi) and level in
    numpy arrays, so that the charges that may overlap a query are found, and their
    largest level read, in a few vector operations (10^4 charges: ~0.2 ms)."""

    def __init__(self, schema: Schema) -> None:
        self.names = {name: j for j, name in enumerate(schema.names)}
        self.sizes = np.array([schema.attribute(n).size for n in schema.names], dtype=np.int64)
        self.charges: list[Charge] = []
        self.lo = np.zeros((64, len(self.names)), dtype=np.int64)
        self.hi = np.zeros((64, len(self.names)), dtype=np.int64)
        self.level = np.zeros(64)  # float levels rounded up: safe for bounds
        self.top = Fraction(0)  # max level: bounds max_x L(x) over the whole table

    def add(self, charge: Charge) -> None:
        n = len(self.charges)
        if n == len(self.lo):
            self.lo = np.concatenate([self.lo, np.zeros_like(self.lo)])
            self.hi = np.concatenate([self.hi, np.zeros_like(self.hi)])
            self.level = np.concatenate([self.level, np.zeros_like(self.level)])
        self.charges.append(charge)
        if charge.query.is_empty:
            return  # lo = hi = 0: overlaps nothing
        self.lo[n] = 0
        self.hi[n] = self.sizes
        for p in charge.query.predicates:
            j = self.names[p.attribute.name]
            self.lo[n, j], self.hi[n, j] = p.coverage[0][0], p.coverage[-1][1]
        self.level[n] = _float_up(charge.level)
        self.top = max(self.top, charge.level)

    def _hull_mask(self, query: Query) -> np.ndarray:
        """Charges whose per-attribute hulls meet the query's: a superset of the overlapping."""
        n = len(self.charges)
        mask = self.hi[:n, 0] > self.lo[:n, 0]  # non-empty charges
        for p in query.predicates:
            j = self.names[p.attribute.name]
            mask &= (self.lo[:n, j] < p.coverage[-1][1]) & (self.hi[:n, j] > p.coverage[0][0])
        return mask

    def bound(self, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on max_{x in C_query} L(x): the largest level among the charges
        whose hulls meet the query (see the module docstring); with ``refine``, among the
        charges that really overlap it (a Python pass over the hull candidates)."""
        if query.is_empty or not self.charges:
            return Fraction(0)
        if refine:
            return max((c.level for c in self.overlapping(query)), default=Fraction(0))
        levels = self.level[: len(self.charges)][self._hull_mask(query)]
        return Fraction(float(levels.max())) if levels.size else Fraction(0)

    def candidates(self, query: Query) -> list[Charge]:
        """The charges whose hulls meet ``query``'s: a superset of those overlapping it."""
        if query.is_empty or not self.charges:
            return []
        return [self.charges[i] for i in np.flatnonzero(self._hull_mask(query))]

    def overlapping(self, query: Query) -> list[Charge]:
        """The charges that share at least one point with ``query`` (exact)."""
        return [c for c in self.candidates(query) if not disjoint(c.query, query)]


@dataclass(frozen=True)
class Decision:
    """The filter's verdict on one request.

    ``spent`` is what the covered points had lost before (in the limiting currency):
    exact when the request is refused, possibly an upper bound when it is admitted.
    ``level`` is the new charge's level; ``by`` names what refused it (budget or quota).
    """

    admitted: bool
    spent: Fraction
    limit: Fraction
    level: Fraction
    by: str = ""


class OverlapFilter:
    """The refusal rule of DESIGN.md §7 over several tables about the same people.

    Mutable bookkeeping only: the curator holds the lock and the durable ledger.
    ``quick_*`` methods return valid upper bounds; the others are exact.
    """

    def __init__(self, budget: Fraction, currency: str) -> None:
        self.budget = budget
        self.currency = currency
        self._tables: dict[str, _TableIndex] = {}
        self._worst: dict[tuple[str, str | None], Fraction] = {}  # cache of max_x L_T(x)

    def add(self, charge: Charge) -> None:
        index = self._tables.get(charge.table)
        if index is None:
            index = self._tables[charge.table] = _TableIndex(charge.query.schema)
        index.add(charge)
        for key in [k for k in self._worst if k[0] == charge.table]:
            del self._worst[key]

    def snapshot(self) -> dict[str, int]:
        """How many charges each table has: a point to :meth:`rollback` to."""
        return {t: len(ix.charges) for t, ix in self._tables.items()}

    def rollback(self, snapshot: dict[str, int]) -> None:
        """Forget the charges added since ``snapshot`` (a batch that was refused)."""
        for t in list(self._tables):
            ix = self._tables[t]
            keep = snapshot.get(t, 0)
            if keep == len(ix.charges):
                continue
            if keep == 0:
                del self._tables[t]
            else:
                del ix.charges[keep:]
                ix.level[keep:] = 0
                ix.top = max(c.level for c in ix.charges)
            for key in [k for k in self._worst if k[0] == t]:
                del self._worst[key]

    def charges(self, table: str, analyst: str | None = None) -> list[Charge]:
        index = self._tables.get(table)
        cs = index.charges if index else []
        return cs if analyst is None else [c for c in cs if c.analyst == analyst]

    # --- exact -----------------------------------------------------------------------

    def worst(self, table: str, analyst: str | None = None) -> Fraction:
        """max_x L_T(x) over the whole domain of ``table`` (exact)."""
        key = (table, analyst)
        if key not in self._worst:
            self._worst[key] = max_loss(self.charges(table, analyst)).value
        return self._worst[key]

    def local(self, table: str, query: Query, analyst: str | None = None) -> Fraction:
        """max_{x in C_query} L_table(x), exact (only ``analyst``'s charges if given)."""
        index = self._tables.get(table)
        near = index.candidates(query) if index else []
        if analyst is not None:
            near = [c for c in near if c.analyst == analyst]
        return max_loss(near, within=query).value

    def elsewhere(self, table: str, analyst: str | None = None) -> Fraction:
        """What a person may have lost in the *other* tables: their worst points (exact)."""
        return sum((self.worst(t, analyst) for t in self._tables if t != table), Fraction(0))

    def spent_on(self, table: str, query: Query, analyst: str | None = None) -> Fraction:
        """The most any person covered by ``query`` has lost so far (all tables, exact)."""
        return self.local(table, query, analyst) + self.elsewhere(table, analyst)

    def spent_anywhere(self, analyst: str | None = None) -> Fraction:
        """The most any person has lost so far (exact)."""
        return sum((self.worst(t, analyst) for t in self._tables), Fraction(0))

    # --- the decision ------------------------------------------------------------------

    def decide(
        self,
        table: str,
        query: Query,
        cost: Fraction,
        *,
        analyst: str | None = None,
        quota: Fraction | None = None,
    ) -> Decision:
        """Admit iff every covered point stays within the budget (and the analyst's quota).

        Bounds first; the exact computation only when a bound does not fit, so a refusal
        is always exact. Reads only queries and costs, never data.
        """
        here, there = self.quick_local(table, query), self.quick_elsewhere(table)
        if here + there + cost > self.budget:
            here = self.quick_local(table, query, refine=True)
        if here + there + cost > self.budget:
            here, there = self.local(table, query), self.elsewhere(table)
            if here + there + cost > self.budget:
                return Decision(False, here + there, self.budget, here + cost, "budget")
        level = here + cost
        if analyst is not None and quota is not None:
            # The global loss bounds the analyst's own; refine only if needed.
            mine = here + there
            if mine + cost > quota:
                mine = self.local(table, query, analyst) + self.elsewhere(table, analyst)
                if mine + cost > quota:
                    return Decision(False, mine, quota, level, "quota")
        return Decision(True, here + there, self.budget, level)

    # --- fast upper bounds --------------------------------------------------------------

    def quick_local(self, table: str, query: Query, *, refine: bool = False) -> Fraction:
        """An upper bound on :meth:`local` (for every analyst too): the largest level."""
        index = self._tables.get(table)
        return index.bound(query, refine=refine) if index else Fraction(0)

    def quick_elsewhere(self, table: str) -> Fraction:
        """An upper bound on :meth:`elsewhere`: each other table's largest level."""
        return sum((ix.top for t, ix in self._tables.items() if t != table), Fraction(0))
