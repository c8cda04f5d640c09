"""The curator: the only place where data, noise and budget meet (DESIGN.md §2, §7).

Every released number passes through :meth:`Curator._release`, which (1) validates the
request completely, (2) checks and charges the overlap-aware filter inside one ledger
transaction that commits to disk, and only then (3) counts, (4) adds exact noise and
(5) records the answer. Bad input raises before step 2 and charges nothing; a refusal
(:class:`~dpcurator.errors.BudgetExceeded`) depends only on the public queries and
costs (Dwork & Roth 2014, Lemma 2.6).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpcurator.curator.answers import Answer, HistoryEntry, TableAnswer
from dpcurator.curator.ledger import ChargeRow, Ledger
from dpcurator.curator.overlap_filter import Charge, OverlapFilter
from dpcurator.errors import BudgetExceeded, InvalidParameter, QueryError
from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise, noise_for_cost
from dpcurator.mechanisms.randomness import RandomSource, ensure_secure
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import exact, largest_zcdp_within
from dpcurator.queries import Query, Schema, parse_query
from dpcurator.queries.predicates import intersect

#: The single table's name when the curator is opened with ``data=`` and ``schema=``.
DEFAULT_TABLE = "data"
#: The most cells one histogram or marginal may have.
MAX_CELLS = 1_000_000


@dataclass(frozen=True)
class Budget:
    """A budget in its additive currency (DESIGN.md §5)."""

    guarantee: PureDP | ApproxDP | ZCDP | GDP
    currency: str  # the keyword a cost is given with: epsilon, rho or mu
    amount: Fraction  # in the additive unit: eps, rho, or mu^2

    @staticmethod
    def of(guarantee: object) -> Budget:
        """PureDP -> eps; ZCDP -> rho; GDP -> mu^2; (eps, delta) -> the largest rho whose
        conversion meets it (Bun & Steinke 2016 / Canonne, Kamath & Steinke 2020)."""
        if isinstance(guarantee, PureDP):
            b = Budget(guarantee, "epsilon", exact(guarantee.epsilon))
        elif isinstance(guarantee, ZCDP):
            b = Budget(guarantee, "rho", exact(guarantee.rho))
        elif isinstance(guarantee, GDP):
            b = Budget(guarantee, "mu", exact(guarantee.mu) ** 2)
        elif isinstance(guarantee, ApproxDP):
            rho = largest_zcdp_within(guarantee.epsilon, guarantee.delta).rho
            b = Budget(
                guarantee, "rho", Fraction(rho)
            )  # the float's exact value: it meets the target
        else:
            raise InvalidParameter(
                "budget must be PureDP(eps), ApproxDP(eps, delta), ZCDP(rho) or GDP(mu), "
                f"got {guarantee!r}"
            )
        if b.amount <= 0:
            raise InvalidParameter(f"budget must be positive, got {guarantee!r}")
        return b

    def charge(self, value: float) -> Fraction:
        """A cost given in this currency, in the additive unit (mu is squared)."""
        return exact(value) ** 2 if self.currency == "mu" else exact(value)

    def display(self, amount: Fraction) -> float:
        """An additive amount back in the currency's own unit (mu = sqrt of mu^2), rounded down."""
        if self.currency == "mu":
            mu = math.sqrt(max(0.0, float(amount)))
            while mu > 0 and Fraction(mu) ** 2 > amount:
                mu = math.nextafter(mu, 0.0)
            return mu
        return float(amount)

    def describe(self) -> str:
        g = self.guarantee
        if isinstance(g, ApproxDP):
            return f"ApproxDP(epsilon={g.epsilon:g}, delta={g.delta:g}) enforced as rho={float(self.amount):.6g}"
        return repr(g)


def _cost_guarantee(currency: str, value: float) -> PureDP | ZCDP | GDP:
    return {"epsilon": PureDP, "rho": ZCDP, "mu": GDP}[currency](value)


def _spends_at_most(noise: object, sensitivity: int, charged: Fraction, currency: str) -> bool:
    """Whether the noise's exact privacy cost is within what the ledger charges."""
    if currency == "epsilon" and isinstance(noise, DiscreteLaplaceNoise):
        return Fraction(sensitivity) / noise.scale <= charged
    if currency == "rho" and isinstance(noise, DiscreteGaussianNoise):
        return Fraction(sensitivity * sensitivity) / (2 * noise.sigma**2) <= charged
    return False  # GDP's effective mu is a float: always calibrate from below (see _noise)


def _describe(noise: object) -> tuple[str, float]:
    """The released noise's name and parameter (scale or sigma)."""
    if isinstance(noise, DiscreteLaplaceNoise):
        return "discrete_laplace", float(noise.scale)
    assert isinstance(noise, DiscreteGaussianNoise)
    return "discrete_gaussian", float(noise.sigma)


def _coverage_json(q: Query) -> dict[str, list[list[int]]]:
    return {p.attribute.name: [list(iv) for iv in p.coverage] for p in q.predicates}


def _and(q: Query, coverages: Mapping[str, tuple]) -> Query:
    names = set(q.attributes) | set(coverages)
    covs = {
        n: intersect(q.coverage(n), coverages[n]) if n in coverages else q.coverage(n)
        for n in names
    }
    return Query.from_coverages(q.schema, covs)


class Curator:
    """Answers counts, histograms, marginals and sums under one overlap-aware budget."""

    def __init__(
        self,
        backends: Mapping[str, Any],
        budget: Budget,
        ledger: Ledger,
        *,
        rng: RandomSource,
        group_size: int = 1,
    ) -> None:
        self._backends = dict(backends)
        self.budget = budget
        self._ledger = ledger
        self._rng = rng
        self._k = group_size
        self._filter = OverlapFilter(budget.amount, budget.currency)
        self._last_id = 0
        with ledger.lock:
            self._sync()

    # --- opening ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        data: object = None,
        schema: Schema | str | Path | None = None,
        *,
        budget: object,
        ledger: str | Path | None = None,
        privacy_unit: tuple[str, int] | None = None,
        tables: Mapping[str, tuple[object, Schema | str | Path]] | None = None,
        rng: RandomSource | None = None,
        allow_insecure: bool = False,
        **load_options: Any,
    ) -> Curator:
        """Load the data, open (or create) the ledger, and rebuild the filter from it.

        ``privacy_unit=("user_id", k)``: each person's rows beyond k are dropped (in file
        order, a rule that reads no other value) and every cost is a per-person cost: the
        noise is calibrated to sensitivity k, which is the k-fold group privacy of the
        per-row mechanism (seed 003, Lemma 2.8; Bun & Steinke 2016, Prop. 1.9 for zCDP;
        Dong, Roth & Su 2022 for GDP). ``ledger=None`` keeps the ledger in memory only.
        """
        from dpcurator.backends import DuckDBBackend

        b = Budget.of(budget)
        source = ensure_secure(rng, allow_insecure=allow_insecure)
        k = 1
        if privacy_unit is not None:
            if (
                not isinstance(privacy_unit, tuple)
                or len(privacy_unit) != 2
                or not isinstance(privacy_unit[0], str)
                or isinstance(privacy_unit[1], bool)
                or not isinstance(privacy_unit[1], int)
                or privacy_unit[1] < 1
            ):
                raise InvalidParameter(
                    f"privacy_unit must be (id_column, k) with an integer k >= 1, got {privacy_unit!r}"
                )
            k = privacy_unit[1]
        if tables is None:
            if data is None or schema is None:
                raise InvalidParameter("give data= and schema=, or tables={name: (data, schema)}")
            tables = {DEFAULT_TABLE: (data, schema)}
        elif data is not None or schema is not None:
            raise InvalidParameter("give either data= and schema=, or tables=, not both")
        if not tables:
            raise InvalidParameter("tables= is empty")
        schemas = {
            name: (s if isinstance(s, Schema) else Schema.load(s))
            for name, (_, s) in tables.items()
        }
        identity = {
            "budget": b.describe(),
            "currency": b.currency,
            "amount": str(b.amount),
            "tables": {n: s.to_dict() for n, s in schemas.items()},
            "privacy_unit": list(privacy_unit) if privacy_unit else None,
        }
        backends = {}
        try:
            for name, (d, _) in tables.items():
                backends[name] = DuckDBBackend.load(
                    d, schemas[name], privacy_unit=privacy_unit, name=name, **load_options
                )
            led = Ledger(ledger, identity)
        except BaseException:
            for be in backends.values():
                be.close()
            raise
        return cls(backends, b, led, rng=source, group_size=k)

    def close(self) -> None:
        for be in self._backends.values():
            be.close()
        self._ledger.close()

    def __enter__(self) -> Curator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the filter's state ------------------------------------------------------------

    def _sync(self) -> None:
        """Read charges committed by other processes (or before a restart)."""
        for row in self._ledger.charges_after(self._last_id):
            self._filter.add(self._charge_of(row))
            self._last_id = row.id

    def _charge_of(self, row: ChargeRow) -> Charge:
        schema = self._backends[row.table].schema
        covs = {name: tuple(tuple(iv) for iv in ivs) for name, ivs in row.coverage.items()}
        q = Query.from_coverages(schema, covs, text=row.request)
        return Charge(row.id, row.table, row.analyst, q, row.cost, row.level)

    def _table_name(self, table: str | None) -> str:
        """The table a request names (or the only one)."""
        if table is None:
            if len(self._backends) == 1:
                return next(iter(self._backends))
            raise InvalidParameter(
                f"this curator has several tables ({', '.join(sorted(self._backends))}): "
                "name one with table="
            )
        if table not in self._backends:
            raise InvalidParameter(
                f"unknown table {table!r}; known: {', '.join(sorted(self._backends))}"
            )
        return table

    # --- validation ----------------------------------------------------------------------

    def _query(self, query: str | Query | None, table: str) -> Query:
        schema = self._backends[table].schema
        if query is None:
            return Query.from_coverages(schema, {})
        if isinstance(query, Query):
            if query.schema != schema:
                raise QueryError(
                    f"the query was parsed against another schema than table {table!r}'s"
                )
            return query
        if not isinstance(query, str):
            raise QueryError(f"a query must be text or a Query, got {type(query).__name__}")
        return parse_query(query, schema)

    def _cost(
        self, epsilon: object, rho: object, mu: object
    ) -> tuple[Fraction, PureDP | ZCDP | GDP]:
        given = {k: v for k, v in (("epsilon", epsilon), ("rho", rho), ("mu", mu)) if v is not None}
        cur = self.budget.currency
        if len(given) != 1 or cur not in given:
            raise InvalidParameter(
                f"give the cost as {cur}= (the budget {self.budget.describe()} is kept in {cur})"
            )
        value = given[cur]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidParameter(f"{cur} must be a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise InvalidParameter(f"{cur} must be a finite number > 0, got {value!r}")
        return self.budget.charge(value), _cost_guarantee(cur, value)

    # --- check, charge, count, noise ----------------------------------------------------

    def _charge(
        self,
        table: str,
        covered: Query,
        cost: Fraction,
        kind: str,
        request: str,
        noise: str,
        analyst: str | None,
    ) -> tuple[int, Fraction]:
        """Check and charge in one committed transaction; return (charge id, remaining).

        The remaining budget on the covered points is exact when the filter needed its
        exact computation, and otherwise a lower bound (never more than really remains);
        :meth:`remaining` is always exact.
        """
        with self._ledger.lock, self._ledger.transaction():
            self._sync()
            quota = None
            if analyst is not None:
                quota = self._ledger.quota(analyst)
                if quota is False:
                    raise InvalidParameter(f"unknown analyst {analyst!r}")
            d = self._filter.decide(table, covered, cost, analyst=analyst, quota=quota)
            if not d.admitted and d.by == "budget":
                raise BudgetExceeded(
                    f"refused: {request!r} costs {self._show(cost)} {self.budget.currency}, but "
                    f"the points it covers have {self._show(d.limit - d.spent)} left of the "
                    f"budget {self.budget.describe()}"
                )
            if not d.admitted:
                raise BudgetExceeded(
                    f"refused: {request!r} costs {self._show(cost)} {self.budget.currency}, "
                    f"but analyst {analyst!r} has {self._show(d.limit - d.spent)} left of the "
                    f"quota {self._show(d.limit)} on the points it covers"
                )
            left = self.budget.amount - d.spent - cost
            charge_id = self._ledger.insert_charge(
                analyst=analyst,
                table=table,
                kind=kind,
                request=request,
                coverage=_coverage_json(covered),
                cost=cost,
                level=d.level,
                noise=noise,
            )
        # Committed: only now does the filter (and then the answer) see it.
        self._filter.add(Charge(charge_id, table, analyst, covered, cost, d.level))
        self._last_id = max(self._last_id, charge_id)
        return charge_id, left

    def _noise(self, guarantee: PureDP | ZCDP | GDP, sensitivity: int) -> Any:
        """Exact noise that never spends more than the exact decimal the ledger charges.

        The noise is calibrated to the cost's float (eps 0.1 gives scale exactly 10); when
        that float lies above the charged decimal (the float 0.1 is 1/10 + 5.5e-18) and the
        exact check cannot confirm the noise, it is recalibrated to the largest float
        below the charged decimal.
        """
        cur = self.budget.currency
        param = float(getattr(guarantee, cur))
        noise = noise_for_cost(guarantee, sensitivity)
        if _spends_at_most(noise, sensitivity, self.budget.charge(param), cur):
            return noise
        below = param
        if Fraction(below) > exact(param):
            below = math.nextafter(below, 0.0)
        return noise_for_cost(_cost_guarantee(cur, below), sensitivity)

    def _show(self, amount: Fraction) -> str:
        return f"{self.budget.display(amount):.6g}"

    def _release(
        self,
        *,
        table: str,
        covered: Query,
        cells: Sequence[Query],
        labels: Sequence[str],
        kind: str,
        request: str,
        cost: Fraction,
        guarantee: PureDP | ZCDP | GDP,
        sensitivity: int,
        analyst: str | None,
        true_values=None,
    ) -> tuple[int, Fraction, list[Answer]]:
        noise = self._noise(guarantee, sensitivity * self._k)  # validates before charging
        charge_id, left = self._charge(table, covered, cost, kind, request, str(noise), analyst)
        be = self._backends[table]
        truth = be.counts(list(cells)) if true_values is None else true_values(be)
        drawn = np.atleast_1d(noise.sample(size=len(cells), rng=self._rng))
        noisy = [int(t) + int(z) for t, z in zip(np.atleast_1d(truth), drawn, strict=True)]
        half = noise.interval(0.05)
        name, param = _describe(noise)
        remaining = self.budget.display(left)
        answers = [
            Answer(
                label,
                v,
                name,
                param,
                self.budget.display(cost),
                self.budget.currency,
                half,
                remaining,
                charge_id,
            )
            for label, v in zip(labels, noisy, strict=True)
        ]
        self._ledger.record_answer(
            charge_id, {lab: v for lab, v in zip(labels, noisy, strict=True)}
        )
        return charge_id, left, answers

    def _release_table(
        self,
        table: str,
        covered: Query,
        cells: list[Query],
        labels: list[str],
        kind: str,
        request: str,
        cost: Fraction,
        guarantee: PureDP | ZCDP | GDP,
        analyst: str | None,
    ) -> TableAnswer:
        """Disjoint cells of one histogram or marginal: one charge on their union."""
        charge_id, left, answers = self._release(
            table=table,
            covered=covered,
            cells=cells,
            labels=labels,
            kind=kind,
            request=request,
            cost=cost,
            guarantee=guarantee,
            sensitivity=1,
            analyst=analyst,
        )
        return TableAnswer(
            request,
            tuple(answers),
            self.budget.display(cost),
            self.budget.currency,
            self.budget.display(left),
            charge_id,
        )

    # --- the analyst's requests ---------------------------------------------------------

    def count(
        self,
        query: str | Query | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> Answer:
        """A noisy count of the rows satisfying ``query`` (None: all rows)."""
        t = self._table_name(table)
        q = self._query(query, t)
        cost, g = self._cost(epsilon, rho, mu)
        text = q.text or "total"
        _, _, answers = self._release(
            table=t,
            covered=q,
            cells=[q],
            labels=[text],
            kind="count",
            request=text,
            cost=cost,
            guarantee=g,
            sensitivity=1,
            analyst=_analyst,
        )
        return answers[0]

    def histogram(
        self,
        attribute: str,
        bins: Sequence[int] | None = None,
        *,
        where: str | Query | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> TableAnswer:
        """Noisy counts of every value (or half-open integer bin) of ``attribute``.

        The bins are disjoint, so the histogram costs its cost once on every point it
        covers (seed 002, Thm 5; DESIGN.md §7), not once per bin.
        """
        t = self._table_name(table)
        schema = self._backends[t].schema
        if not isinstance(attribute, str) or attribute not in schema:
            raise QueryError(f"unknown attribute {attribute!r}")
        attr = schema.attribute(attribute)
        base = self._query(where, t)
        cost, g = self._cost(epsilon, rho, mu)
        if bins is None:
            spans = [(i, i + 1) for i in range(attr.size)]
            labels = [str(attr.value(i)) for i in range(attr.size)]
        else:
            spans, labels = self._bins(attr, bins)
        if len(spans) > MAX_CELLS:
            raise InvalidParameter(f"a histogram of {len(spans)} cells exceeds {MAX_CELLS}")
        cells = [_and(base, {attribute: (s,)}) for s in spans]
        covered = _and(base, {attribute: tuple(spans)}) if bins is not None else base
        request = f"histogram({attribute}{'' if bins is None else f', bins={list(bins)}'})"
        if where is not None:
            request += f" where {base.text}"
        full = [
            f"{attribute} = {lab}" if bins is None else f"{attribute} in {lab}" for lab in labels
        ]
        return self._release_table(t, covered, cells, full, "histogram", request, cost, g, _analyst)

    @staticmethod
    def _bins(attr: Any, bins: Sequence[int]) -> tuple[list[tuple[int, int]], list[str]]:
        if attr.type != "integer":
            raise QueryError(f"bins= needs an integer attribute; {attr.name!r} is categorical")
        try:
            edges = [int(b) for b in bins]
        except (TypeError, ValueError):
            raise QueryError(f"bins must be integers, got {bins!r}") from None
        if any(float(b) != e for b, e in zip(bins, edges, strict=True)):
            raise QueryError(f"bins must be integers, got {bins!r}")
        if len(edges) < 2 or any(b >= a for a, b in zip(edges[1:], edges, strict=False)):
            raise QueryError(f"bins must be at least two strictly increasing edges, got {bins!r}")
        lo, hi = 0, attr.size
        first, last = edges[0] - attr.min, edges[-1] - attr.min
        if first < lo or last > hi:
            raise QueryError(
                f"bins {edges} leave the domain of {attr.name!r} [{attr.min}, {attr.max}] "
                "(bins are half-open: the last edge may be max + 1)"
            )
        spans = [(a - attr.min, b - attr.min) for a, b in itertools.pairwise(edges)]
        return spans, [f"[{a}, {b})" for a, b in itertools.pairwise(edges)]

    def marginal(
        self,
        attributes: Sequence[str],
        *,
        where: str | Query | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> TableAnswer:
        """Noisy counts of every cell of the product of ``attributes``' values: disjoint
        cells, charged once on every point they cover."""
        t = self._table_name(table)
        schema = self._backends[t].schema
        if isinstance(attributes, str) or not attributes:
            raise QueryError("marginal needs a non-empty list of attribute names")
        for a in attributes:
            if a not in schema:
                raise QueryError(f"unknown attribute {a!r}")
        if len(set(attributes)) != len(attributes):
            raise QueryError(f"repeated attribute in marginal {list(attributes)}")
        base = self._query(where, t)
        cost, g = self._cost(epsilon, rho, mu)
        attrs = [schema.attribute(a) for a in attributes]
        n = math.prod(a.size for a in attrs)
        if n > MAX_CELLS:
            raise InvalidParameter(f"a marginal of {n} cells exceeds {MAX_CELLS}")
        cells, labels = [], []
        for combo in itertools.product(*(range(a.size) for a in attrs)):
            cells.append(
                _and(base, {a.name: ((i, i + 1),) for a, i in zip(attrs, combo, strict=True)})
            )
            labels.append(
                ", ".join(f"{a.name} = {a.value(i)}" for a, i in zip(attrs, combo, strict=True))
            )
        request = f"marginal({', '.join(attributes)})" + (
            f" where {base.text}" if where is not None else ""
        )
        return self._release_table(t, base, cells, labels, "marginal", request, cost, g, _analyst)

    def sum(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: str | Query | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> Answer:
        """A noisy sum of ``attribute`` clipped to the public bounds [lower, upper].

        Sensitivity under add/remove-one-row is max(|lower|, |upper|). The bounds must be
        integers: the clipped sum of an integer attribute is then an integer, and integer
        noise hides all of it (a fractional part would leak untouched).
        """
        t = self._table_name(table)
        schema = self._backends[t].schema
        if not isinstance(attribute, str) or attribute not in schema:
            raise QueryError(f"unknown attribute {attribute!r}")
        if schema.attribute(attribute).type != "integer":
            raise QueryError(f"sum needs an integer attribute; {attribute!r} is categorical")
        for name, v in (("lower", lower), ("upper", upper)):
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or v != int(v)
            ):
                raise InvalidParameter(f"{name} must be a finite integer, got {v!r}")
        lo, hi = int(lower), int(upper)
        if lo > hi:
            raise InvalidParameter(f"lower must be <= upper, got [{lo}, {hi}]")
        sensitivity = max(abs(lo), abs(hi))
        if sensitivity == 0:
            raise InvalidParameter("clip bounds [0, 0] make every sum 0: nothing to release")
        base = self._query(where, t)
        cost, g = self._cost(epsilon, rho, mu)
        request = f"sum({attribute}, {lo}, {hi})" + (
            f" where {base.text}" if where is not None else ""
        )

        def truth(be: Any) -> list[int]:
            return [round(be.clipped_sum(attribute, lo, hi, base))]

        _, _, answers = self._release(
            table=t,
            covered=base,
            cells=[base],
            labels=[request],
            kind="sum",
            request=request,
            cost=cost,
            guarantee=g,
            sensitivity=sensitivity,
            analyst=_analyst,
            true_values=truth,
        )
        return answers[0]

    def release(
        self,
        queries: Sequence[str | Query],
        costs: Sequence[float],
        *,
        table: str | None = None,
        kind: str = "workload",
        _analyst: str | None = None,
    ) -> list[Answer]:
        """Release a batch of counts, each with its own cost (in the budget's currency),
        all or nothing: either every query passes the filter and is charged, in one
        committed transaction, or none is (:class:`BudgetExceeded` names the first that
        does not fit). All counts are then taken in one scan."""
        t = self._table_name(table)
        qs = [self._query(q, t) for q in queries]
        if len(costs) != len(qs):
            raise InvalidParameter(f"got {len(costs)} costs for {len(qs)} queries")
        cur = self.budget.currency
        priced = [
            self._cost(*(c if k == cur else None for k in ("epsilon", "rho", "mu"))) for c in costs
        ]
        noises = [self._noise(g, self._k) for _, g in priced]  # validates before charging
        ids: list[int] = []
        with self._ledger.lock, self._ledger.transaction():
            self._sync()
            mark = self._filter.snapshot()
            try:
                for i, (q, (cost, _), noise) in enumerate(zip(qs, priced, noises, strict=True)):
                    d = self._filter.decide(t, q, cost)
                    if not d.admitted:
                        raise BudgetExceeded(
                            f"refused: query {i + 1} of the batch ({q.text!r}) costs "
                            f"{self._show(cost)} {cur}, but its points have "
                            f"{self._show(d.limit - d.spent)} left of the budget "
                            f"{self.budget.describe()}; nothing in the batch was charged"
                        )
                    charge_id = self._ledger.insert_charge(
                        analyst=_analyst,
                        table=t,
                        kind=kind,
                        request=q.text or "total",
                        coverage=_coverage_json(q),
                        cost=cost,
                        level=d.level,
                        noise=str(noise),
                    )
                    self._filter.add(Charge(charge_id, t, _analyst, q, cost, d.level))
                    ids.append(charge_id)
            except BaseException:
                self._filter.rollback(mark)
                raise
        self._last_id = max(self._last_id, *ids) if ids else self._last_id
        truth = np.asarray(self._backends[t].counts(qs), dtype=np.int64)
        noisy = truth.copy()
        by_noise: dict[object, list[int]] = {}
        for i, noise in enumerate(noises):
            by_noise.setdefault(noise, []).append(i)
        for noise, idx in by_noise.items():  # one vectorised draw per distinct noise
            noisy[idx] += np.atleast_1d(noise.sample(size=len(idx), rng=self._rng))
        answers = []
        for i, (q, (cost, _), noise, charge_id) in enumerate(
            zip(qs, priced, noises, ids, strict=True)
        ):
            name, param = _describe(noise)
            # Remaining after the whole batch, from the levels: a lower bound.
            left = (
                self.budget.amount
                - self._filter.quick_local(t, q)
                - self._filter.quick_elsewhere(t)
            )
            answers.append(
                Answer(
                    q.text or "total",
                    int(noisy[i]),
                    name,
                    param,
                    self.budget.display(cost),
                    cur,
                    noise.interval(0.05),
                    self.budget.display(max(left, Fraction(0))),
                    charge_id,
                )
            )
        self._ledger.record_answers([(a.charge_id, {a.query: a.value}) for a in answers])
        return answers

    # --- budget and history ------------------------------------------------------------

    def remaining(
        self,
        query: str | Query | None = None,
        *,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> float:
        """The budget left on the points ``query`` covers (on the worst point if None),
        in the budget's own unit (epsilon, rho or mu)."""
        with self._ledger.lock:
            self._sync()
            if query is None:
                spent = self._filter.spent_anywhere()
            else:
                t = self._table_name(table)
                spent = self._filter.spent_on(t, self._query(query, t))
            left = self.budget.amount - spent
            if _analyst is not None:
                quota = self._ledger.quota(_analyst)
                if quota not in (None, False):
                    if query is None:
                        mine = self._filter.spent_anywhere(_analyst)
                    else:
                        t = self._table_name(table)
                        mine = self._filter.spent_on(t, self._query(query, t), _analyst)
                    left = min(left, quota - mine)
        return self.budget.display(left)

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
                r.answer,
            )
            for r in rows
            if _analyst is None or r.analyst == _analyst
        ]

    def analyst(self, name: str, quota: float | None = None) -> AnalystSession:
        """A session whose spending counts against its own ``quota`` (in the budget's
        currency, overlap-aware like the budget) and the global budget."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidParameter("an analyst needs a non-empty name")
        q = None
        if quota is not None:
            if (
                isinstance(quota, bool)
                or not isinstance(quota, int | float)
                or not math.isfinite(quota)
                or quota <= 0
            ):
                raise InvalidParameter(f"quota must be a finite number > 0, got {quota!r}")
            q = self.budget.charge(quota)
        self._ledger.set_quota(name, q)
        return AnalystSession(self, name)


class AnalystSession:
    """The curator seen by one analyst: same requests, charged to the analyst's quota too."""

    def __init__(self, curator: Curator, name: str) -> None:
        self._c = curator
        self.name = name

    def count(self, query: str | Query | None = None, **kw: Any) -> Answer:
        return self._c.count(query, _analyst=self.name, **kw)

    def histogram(
        self, attribute: str, bins: Sequence[int] | None = None, **kw: Any
    ) -> TableAnswer:
        return self._c.histogram(attribute, bins, _analyst=self.name, **kw)

    def marginal(self, attributes: Sequence[str], **kw: Any) -> TableAnswer:
        return self._c.marginal(attributes, _analyst=self.name, **kw)

    def sum(
        self, attribute: str, lower: int, upper: int, where: str | Query | None = None, **kw: Any
    ) -> Answer:
        return self._c.sum(attribute, lower, upper, where, _analyst=self.name, **kw)

    def remaining(self, query: str | Query | None = None, **kw: Any) -> float:
        return self._c.remaining(query, _analyst=self.name, **kw)

    def history(self) -> list[HistoryEntry]:
        return self._c.history(_analyst=self.name)
