"""One DP ``SELECT`` is one request: planned, priced and charged once, then measured.

A SELECT (:mod:`dpcurator.sql`) reads the rows its ``WHERE`` covers, per group of its
``GROUP BY`` (every group of the public domain that the WHERE can reach, empty ones
included: which groups these are follows from the query alone). Its aggregates
need *measurements* — a noisy count of the rows read, a noisy centred sum of a clipped
column, a noisy sum of its squares, a clipped sum, a selection for a percentile, a
noisy number of distinct units — and aggregates that need the same measurement share
it: ``COUNT(*)`` and ``AVG(x)`` of a column that is never missing read one noisy count,
``AVG(x)`` and ``VAR_POP(x)`` with the same bounds one centred sum.

**The split.** The SELECT's cost (``OPTIONS(epsilon=...)``) is divided equally over its
distinct measurements. Measurement i with cost c_i has noise variance proportional to
(Δ_i / c_i)^2 under pure DP (the discrete Laplace) and to Δ_i^2 / c_i under zCDP (the
discrete Gaussian); measured in units of its own sensitivity Δ_i, the total variance
Σ c_i^-2 (or Σ c_i^-1) under Σ c_i = c is least when every c_i = c / m (Lagrange: the
derivatives -2 c_i^-3, resp. -c_i^-2, are equal only when the c_i are). A distinct
count spends its share k times (see :mod:`dpcurator.curator.unit_requests`).

**The charge.** Every measurement reads only rows of the WHERE region (each group's
rows, the groups disjoint: Smith et al. 2022, Thm 5), so at any point of that region the
SELECT's measurements cost at most the sum of their shares, the SELECT's cost: one
charge of exactly that cost on the WHERE region covers them all (sequential composition
within the region; Dwork & Roth 2014, Thm 3.16 and Bun & Steinke 2016, Lemma 1.7). It is
checked and committed once, all or nothing, before any data is read; HAVING, ORDER BY
and LIMIT then shape the released rows (post-processing).

A join on the privacy unit (``FROM flights JOIN planes USING (tailnum)``) is a table of
its own (:mod:`dpcurator.queries.joins`), built once from both tables' kept rows, each
unit keeping at most k joined rows by the same keyed hash (so its per-point filter holds
as for any table), and charged per point of the joined domain; it composes sequentially
with the tables it joins, as any two tables about the same people do.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcurator.backends._grouping import HISTOGRAM_VALUES, bin_counts
from dpcurator.curator import requests
from dpcurator.curator.admission import Request
from dpcurator.curator.budget import Cost
from dpcurator.errors import InvalidParameter, QueryError, TooLarge
from dpcurator.mechanisms.moments import MOMENT_STATISTICS, MomentsMechanism, centred_sums
from dpcurator.mechanisms.quantile import (
    quantile_fraction,
    quantile_mechanism,
    quantile_sensitivity,
    rank_scores,
)
from dpcurator.privacy.filters import largest_zcdp_within
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.joins import JoinedSchema, join_named
from dpcurator.queries.parts import GroupTerm, group_term, table_cell
from dpcurator.queries.predicates import complement
from dpcurator.queries.values import decimal_text
from dpcurator.sql.result import SqlResult

if TYPE_CHECKING:  # sqlglot is loaded when the first SELECT is read, not at import
    from dpcurator.sql.select import SelectRequest

#: How many SELECTs a curator keeps read (see ``_parsed``).
PARSED = 256
#: The columns of an EXPLAIN's answer.
EXPLAIN_COLUMNS = (
    "output",
    "aggregate",
    "measurements",
    "cost",
    "noise",
    "expected_abs_error",
    "half_width",
    "error",
)


@dataclass(frozen=True)
class _Measure:
    """One measurement of a SELECT: what it reads and its noise (or selection)."""

    key: tuple[Any, ...]
    noise: Any
    unit: Fraction = Fraction(1)  # a sum's or centred sum's (see requests.value_unit)
    low: int = 0  # clip bounds in units
    high: int = 0


@dataclass
class _Plan:
    request: SelectRequest
    table: str
    schema: Schema
    covered: Query | BooleanQuery
    cost: Cost
    terms: list[GroupTerm]
    measures: dict[tuple[Any, ...], _Measure]
    #: per aggregate, the keys of its measurements
    needs: list[list[tuple[Any, ...]]]
    candidates: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)
    alpha: float = 0.05

    @property
    def cells(self) -> int:
        return math.prod(t.groups for t in self.terms)


class SqlRequests:
    """How the curator answers a SQL SELECT (mixed into
    :class:`~dpcurator.curator.Curator`, whose validation, budget, noise, filter and
    ledger it uses)."""

    _k: int
    _rng: Any
    _backends: dict[str, Any]
    budget: Any
    limits: requests.RequestLimits
    privacy_unit: Any

    # --- the request ----------------------------------------------------------------

    def sql(self, text: str, *, _analyst: str | None = None) -> SqlResult:
        """Answer a DP SELECT (BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY
        OPTIONS(epsilon=...) ...``; see docs/sql.md) as a table: one row per group, the
        group columns first, then each aggregate's value and the low and high ends of its
        interval (95% unless ``confidence=``). One charge of exactly the OPTIONS cost on
        the rows the WHERE clause covers, all or nothing. ``EXPLAIN SELECT ...`` answers
        what it would cost and each aggregate's expected error, charging nothing."""
        self._known(_analyst)  # type: ignore[attr-defined]  # an unknown analyst: refused first
        plan = self._plan_sql(text)
        if plan.request.explain:
            return self._explain_sql(plan, _analyst)
        released: list[SqlResult] = []

        def answers() -> list[object]:
            columns, rows = self._measure_sql(plan)
            released.append(
                SqlResult(plan.request.text, columns, tuple(tuple(r) for r in rows), 0.0, "", None)
            )
            return [
                {
                    "sql": plan.request.text,
                    "columns": list(columns),
                    "rows": [list(r) for r in rows],
                }
            ]

        noise = "; ".join(f"{_label(m.key)} {m.noise}" for m in plan.measures.values())
        charge = Request(plan.covered, plan.cost.amount, "sql", plan.request.text, noise)  # type: ignore[arg-type]
        ((charge_id, _),) = self._charge(plan.table, [charge], _analyst, answers)  # type: ignore[attr-defined]
        left = self._quick_remaining([plan.covered], plan.table, _analyst)[0]  # type: ignore[attr-defined]
        r = released[0]
        return SqlResult(
            r.query,
            r.columns,
            r.rows,
            self.budget.display(plan.cost.amount),
            self.budget.currency,
            left.value,
            charge_id,
            left.exact,
        )

    # --- planning: every parameter and limit, nothing read, nothing charged -----------

    def _sql_schemas(self) -> dict[str, Schema]:
        return {name: be.schema for name, be in self._backends.items()}

    def _parsed(self, text: object) -> SelectRequest:
        """A SELECT read once per curator (its meaning depends only on its text and the
        curator's public schemas and unit, which never change): a dashboard asking the
        same SELECT again is not parsed again. The most recent :data:`PARSED` are kept."""
        if isinstance(text, str):
            with self._join_lock:
                got = self._sql_parsed.get(text)
                if got is not None:
                    self._sql_parsed.move_to_end(text)
                    return got
        from dpcurator.sql.output import compile_having
        from dpcurator.sql.select import parse_select

        unit = self.privacy_unit.column if self.privacy_unit is not None else None
        req = parse_select(text, self._sql_schemas(), unit=unit, having=compile_having)
        with self._join_lock:
            self._sql_parsed[str(text)] = req
            while len(self._sql_parsed) > PARSED:
                self._sql_parsed.popitem(last=False)
        return req

    def _plan_sql(self, text: str) -> _Plan:
        req = self._parsed(text)
        o = req.options
        if o.max_rows_per_unit is not None and o.max_rows_per_unit != self._k:
            raise QueryError(
                f"SQL: OPTIONS max_rows_per_unit={o.max_rows_per_unit}: this ledger keeps "
                f"{self._k} rows per unit (chosen once for its life); give {self._k} or leave it out"
            )
        table = req.table
        schema = req.join.schema if req.join is not None else self._schema(table)  # type: ignore[attr-defined]
        if req.join is not None:  # built (once) before anything is charged
            self._table_backend(table)
        covered = req.located(lambda: requests.canonical_query(req.where, schema), schema)
        cost = self._sql_cost(req)
        terms = [group_term(schema, g) for g in req.groups]
        cap, limit = self.limits.cell_cap
        cells = math.prod(t.groups for t in terms)
        if cells > cap:
            raise TooLarge(f"SQL: GROUP BY makes {cells} groups, over the limit {limit} = {cap}")
        plan = _Plan(
            req, table, schema, covered, cost, terms, {}, [], alpha=float(1 - o.confidence)
        )
        keys: list[tuple[Any, ...]] = []
        for agg in req.aggregates:
            need = self._needs(agg, schema, req.aggregates)
            plan.needs.append(need)
            keys.extend(k for k in need if k not in keys)
        work = cells * len(req.aggregates)
        parts = self._shares(cost, [Fraction(1, len(keys))] * len(keys))  # type: ignore[attr-defined]
        for key, part in zip(keys, parts, strict=True):
            plan.measures[key] = self._measure_plan(key, part, schema, plan)
            if key[0] == "quantile":
                work += cells * len(plan.candidates[key])
        self.limits.check_request(work, "this SELECT")
        return plan

    def _sql_cost(self, req: SelectRequest) -> Cost:
        """The OPTIONS cost in the ledger's currency: epsilon on a pure-DP ledger, rho on
        a zCDP one, mu on a Gaussian-DP one; epsilon with delta on an (epsilon,
        delta)-ledger (kept in rho) as the largest rho whose conversion meets them."""
        name, value = req.options.cost
        delta = req.options.delta
        cur = self.budget.currency
        if name == "epsilon" and cur == "rho" and delta is not None and delta > 0:
            # the floats at most the exact decimals: the rho found then meets them
            rho = largest_zcdp_within(_float_at_most(value), _float_at_most(delta)).rho
            return self.budget.cost(rho=Fraction(rho))
        if delta is not None and delta != 0 and not (name == "epsilon" and cur == "rho"):
            raise QueryError(
                f"SQL: OPTIONS delta: this ledger keeps {cur} (delta applies with epsilon on "
                "an (epsilon, delta) ledger)"
            )
        if name == "epsilon" and cur == "rho":
            # (an (epsilon, delta) ledger keeps rho): a pure epsilon is the rho of
            # PureDP.to_zcdp (Bun & Steinke 2016, Prop. 1.4), named, not applied unasked
            raise QueryError(
                f"SQL: OPTIONS epsilon={decimal_text(value)} "
                f"{'without delta' if delta is None else 'with delta=0'}: this ledger keeps "
                "rho; add delta=... (the cost is then the largest rho meeting (epsilon, "
                "delta)), or give rho= (pure epsilon-DP is rho = epsilon^2/2: "
                f"rho={decimal_text(value * value / 2)})"
            )
        if name != cur:
            raise QueryError(
                f"SQL: OPTIONS {name}=: this ledger keeps {cur}; give the cost as {cur}="
            )
        return self.budget.cost(**{cur: value})

    def _needs(self, agg: Any, schema: Schema, every: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The measurements an aggregate reads (see the module docstring). A SUM beside
        a mean, variance or deviation of the same column and bounds reads their count and
        centred sum (the sum is (S + (L + U) N) / 2: post-processing), rather than a
        measurement of its own that would take a share of the cost."""

        def present(col: str) -> tuple[str, ...]:
            return (col,) if schema.attribute(col).missing is not None else ()

        k = agg.kind
        if k == "count":
            return [("count", present(agg.column) if agg.column else ())]
        if k == "units":
            return [("distinct",)]
        if k == "share":
            return [("count", ()), ("share", agg.condition)]
        if k == "sum":
            same = (agg.column, agg.lower, agg.upper)
            if any(
                a.kind in MOMENT_STATISTICS and (a.column, a.lower, a.upper) == same for a in every
            ):
                return [("count", present(agg.column)), ("centred", *same)]
            return [("sum", *same)]
        if k == "quantile":
            return [("quantile", agg.column, agg.q, agg.lower, agg.upper)]
        bounds = (agg.column, agg.lower, agg.upper)
        need = [("count", present(agg.column)), ("centred", *bounds)]
        if k in ("variance", "stdev"):
            need.append(("squares", *bounds))
        return need

    def _measure_plan(
        self, key: tuple[Any, ...], part: Cost, schema: Schema, plan: _Plan
    ) -> _Measure:
        k = self._k
        kind = key[0]
        if kind == "count":
            return _Measure(key, self._noise(part, k)[0])  # type: ignore[attr-defined]
        if kind == "share":
            plan.request.located(lambda: requests.canonical_query(key[1], schema), schema)
            return _Measure(key, self._noise(part, k)[0])  # type: ignore[attr-defined]
        if kind == "distinct":
            own = self._shares(part, [Fraction(1, k)])[0]  # type: ignore[attr-defined]
            return _Measure(key, self._noise(own, 1)[0])  # type: ignore[attr-defined]
        if kind == "quantile":
            _, col, q, lo, hi = key
            attr = schema.attribute(col)
            try:
                fq = quantile_fraction(q, "PERCENTILE_CONT's p")
            except InvalidParameter as err:
                raise QueryError(f"SQL: {err}") from None
            missing = attr.missing_position
            cap, limit = self.limits.cell_cap
            if lo is None:
                if attr.value_count > cap:
                    raise TooLarge(
                        f"SQL: PERCENTILE_CONT({col}): {attr.value_count} values, over the limit "
                        f"{limit} = {cap}: give contribution_bounds_per_row => (lower, upper)"
                    )
                pos = [p for p in range(attr.value_count) if p != missing]
            else:
                if attr.grid is None:
                    raise QueryError(
                        f"SQL: PERCENTILE_CONT({col}): bounds need a number, time or date column"
                    )
                a, b = attr.boundary(lo, after=False), attr.boundary(hi, after=True)
                if b - a > cap:
                    raise TooLarge(
                        f"SQL: PERCENTILE_CONT({col}): {b - a} values in its bounds, over {limit} = {cap}"
                    )
                pos = list(range(a, b))
            if not pos:
                raise QueryError(
                    f"SQL: PERCENTILE_CONT({col}): no value of {col!r} lies in its bounds"
                )
            plan.candidates[key] = pos
            sel = quantile_mechanism(
                self.budget.currency, part.amount, quantile_sensitivity(fq, k), fq.denominator
            )
            return _Measure(key, sel)
        _, col, lo, hi = key
        attr = schema.attribute(col)
        unit = requests.value_unit(attr, lo, hi)
        low, high = int(lo / unit), int(hi / unit)
        r = high - low
        if kind == "sum":
            sens = k * max(abs(low), abs(high))
        elif kind == "centred":
            sens = k * r
        else:
            from dpcurator.curator.statistics import MAX_VARIANCE_SPAN

            if r > MAX_VARIANCE_SPAN:
                raise QueryError(
                    f"SQL: VAR_POP({col}): (upper - lower) / {unit} must be <= {MAX_VARIANCE_SPAN}"
                )
            sens = k * r * r
        return _Measure(key, self._noise(part, sens)[0], unit, low, high)  # type: ignore[attr-defined]

    # --- joins ----------------------------------------------------------------------

    _joins: dict[str, Any]
    _join_lock: threading.Lock
    _sql_parsed: OrderedDict[str, SelectRequest]

    def _joined_schema(self, table: str) -> JoinedSchema:
        """The schema of a join on the unit named ``a JOIN b`` (a ledger's charge on it is
        read back before the join is built): :class:`KeyError` for any other name."""
        unit = self.privacy_unit
        schemas = {name: be.schema for name, be in self._backends.items()}
        joined = join_named(table, schemas, None if unit is None else unit.column)
        if joined is None:
            raise KeyError(table)
        return joined

    def _table_backend(self, table: str) -> Any:
        """The backend of a table, or of a join on the unit, built at its first use from
        both tables' kept rows (see :mod:`dpcurator.backends.joins`)."""
        be = self._backends.get(table)
        if be is not None:
            return be
        with self._join_lock:
            if table not in self._joins:
                from dpcurator.backends.joins import join_tables

                joined = self._joined_schema(table)
                left, right = table.split(" JOIN ")
                self._joins[table] = join_tables(
                    self._backends[left], self._backends[right], joined, self._k,
                    self._ledger.unit_key,  # type: ignore[attr-defined]
                    self._ledger.unit_rows,  # type: ignore[attr-defined]
                )  # fmt: skip
            return self._joins[table]

    # --- measuring, once charged -----------------------------------------------------

    def _present(self, plan: _Plan, cols: Sequence[str]) -> Query | BooleanQuery:
        q: Query | BooleanQuery = plan.covered
        for c in cols:
            attr = plan.schema.attribute(c)
            p = attr.missing_position
            if p is not None:
                keep = Query.from_coverages(plan.schema, {c: complement(((p, p + 1),), attr.size)})
                q = intersection(q, keep, text="")
        return q

    def _measure_sql(self, plan: _Plan) -> tuple[tuple[str, ...], list[list[Any]]]:
        """Read the exact aggregates, add every measurement's noise once, estimate."""
        be = self._table_backend(plan.table)
        cells = plan.cells
        schema = plan.schema
        exact: dict[tuple[Any, ...], Any] = {}
        sums: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        if not self._measure_in_one_scan(plan, be, exact, sums):
            self._measure_each(plan, be, exact, sums)
        for key in plan.measures:
            if key[0] == "distinct":
                exact[key] = [
                    be.distinct_units(self._group_rows(plan, combo))
                    for combo in itertools.product(*(range(t.groups) for t in plan.terms))
                ]
        noisy: dict[tuple[Any, ...], list[int]] = {}
        for key, m in plan.measures.items():
            kind = key[0]
            if kind == "quantile":
                continue
            if kind in ("count", "share", "distinct"):
                truth = [int(v) for v in exact[key]]
                if kind == "share":
                    n = [int(v) for v in exact[("count", ())]]
                    truth = [
                        2 * s - c for s, c in zip(truth, n, strict=True)
                    ]  # centred: y = 2 ind - 1
            else:
                n, s1, s2 = sums[key[1:]]
                if kind == "sum":
                    truth = [int(v) for v in s1]
                else:
                    cs = [
                        centred_sums(
                            int(n[i]), int(s1[i]), None if s2 is None else int(s2[i]), m.low, m.high
                        )
                        for i in range(cells)
                    ]
                    truth = [c[1] if kind == "centred" else c[2] for c in cs]  # type: ignore[misc]
            draws = np.atleast_1d(np.asarray(m.noise.sample(size=cells, rng=self._rng)))
            noisy[key] = [t + int(z) for t, z in zip(truth, draws, strict=True)]
        selected: dict[tuple[Any, ...], list[Any]] = {}
        for key, m in plan.measures.items():
            if key[0] != "quantile":
                continue
            counts, edges = exact[key]
            pos = plan.candidates[key]
            where_bin = np.searchsorted(np.asarray(edges), np.asarray(pos))
            attr = schema.attribute(key[1])
            q = quantile_fraction(key[2])
            chosen = []
            for row in counts:
                before = np.concatenate(([0], np.cumsum(row)[:-1]))
                i = m.noise.select(
                    rank_scores(before[where_bin], row[where_bin], int(row.sum()), q), self._rng
                )
                chosen.append(attr.value(pos[i]))
            selected[key] = chosen
        rows: list[list[Any]] = []
        req = plan.request
        group_outputs = [(n, i) for n, kind, i in req.outputs if kind == "group"]
        agg_outputs = [(n, i) for n, kind, i in req.outputs if kind == "aggregate"]
        reached = self._reached(plan)
        for g, combo in enumerate(itertools.product(*(range(t.groups) for t in plan.terms))):
            if not all(reached[i][v] for i, v in enumerate(combo)):
                continue  # a value the WHERE excludes (see _reached)
            row: list[Any] = [plan.terms[i].value(combo[i]) for _, i in group_outputs]
            for _, a in agg_outputs:
                row.extend(self._answer(plan, a, g, noisy, selected))
            rows.append(row)
        columns = req.columns
        column_of = []
        gi = iter(range(len(group_outputs)))
        ai = iter(range(len(group_outputs), len(columns), 3))
        for _, kind, _ in req.outputs:
            column_of.append(next(gi) if kind == "group" else next(ai))
        from dpcurator.sql.output import shape

        return columns, shape(rows, req.having, req.order, req.limit, column_of)

    def _measure_in_one_scan(self, plan: _Plan, be: Any, exact: dict, sums: dict) -> bool:
        """Every count, sum and share from ONE pass (the backend's ``grouped_counts``:
        rows per group, per condition, and each clipped column's counts and code sums),
        and a percentile's ranks from its column's rows per code; False when a percentile's
        column has too many values for a count per value (then each is measured alone)."""
        schema = plan.schema
        quantiles = [key for key in plan.measures if key[0] == "quantile"]
        if not hasattr(be, "grouped_counts") or any(
            schema.attribute(key[1]).size > HISTOGRAM_VALUES for key in quantiles
        ):
            return False
        shares = [key for key in plan.measures if key[0] == "share"]
        present = [key for key in plan.measures if key[0] == "count" and key[1]]
        clipped = list(
            dict.fromkeys(
                key[1:] for key in plan.measures if key[0] in ("centred", "squares", "sum")
            )
        )
        conditions = [requests.canonical_query(key[1], schema) for key in shares]
        conditions += [self._present(plan, key[1]) for key in present]  # rows with a value
        moments = []
        for bkey in clipped:
            m = plan.measures.get(("centred", *bkey)) or plan.measures[("sum", *bkey)]
            moments.append((bkey[0], m.low, m.high, m.unit, ("squares", *bkey) in plan.measures))
        columns = list(dict.fromkeys(key[1] for key in quantiles))
        got = be.grouped_counts(
            plan.covered, list(plan.request.groups), conditions, moments, columns
        )
        cells = plan.cells
        for key in plan.measures:
            kind = key[0]
            if kind == "count" and key[1]:
                exact[key] = got.held[len(shares) + present.index(key)]
            elif kind == "count":
                exact[key] = got.rows
            elif kind == "share":
                exact[key] = got.held[shares.index(key)]
            elif kind in ("centred", "squares", "sum"):
                sums[key[1:]] = got.moments[clipped.index(key[1:])]
            elif kind == "quantile":
                pos = plan.candidates[key]
                attr = schema.attribute(key[1])
                edges = np.asarray(sorted({0, attr.size, *pos, *(p + 1 for p in pos)}), np.int64)
                cell, code, n = got.codes[key[1]]
                p = attr.missing_position
                keep = code != p if p is not None else np.ones(code.shape, bool)
                exact[key] = (
                    bin_counts(cells, edges, cell[keep], code[keep], n[keep]),
                    edges.tolist(),
                )
        return True

    def _measure_each(self, plan: _Plan, be: Any, exact: dict, sums: dict) -> None:
        """The measurements one scan each (a column with too many values for a count
        per value)."""
        by = list(plan.request.groups)
        schema = plan.schema
        first = schema.attributes[0]
        for key in plan.measures:
            kind = key[0]
            if kind == "count":
                rows = self._present(plan, key[1])
                exact[key] = be.binned_counts(first.name, [0, first.size], rows, by)[:, 0]
            elif kind == "share":
                holds = intersection(
                    plan.covered, requests.canonical_query(key[1], schema), text=""
                )
                exact[key] = be.binned_counts(first.name, [0, first.size], holds, by)[:, 0]
            elif kind in ("centred", "squares", "sum"):
                m = plan.measures[key]
                bkey = key[1:]
                if bkey not in sums:
                    squares = ("squares", *bkey) in plan.measures
                    sums[bkey] = be.clipped_moments(
                        key[1], m.low, m.high, self._present(plan, [key[1]]), by,
                        squares=squares, unit=m.unit,
                    )  # fmt: skip
            elif kind == "quantile":
                col = key[1]
                pos = plan.candidates[key]
                attr = schema.attribute(col)
                edges = sorted({0, attr.size, *pos, *(p + 1 for p in pos)})
                exact[key] = (be.binned_counts(col, edges, self._present(plan, [col]), by), edges)

    def _reached(self, plan: _Plan) -> list[list[bool]]:
        """For each GROUP BY term, whether the WHERE region meets each of its values.

        A group with a value the WHERE excludes (``WHERE species = 'Gentoo' GROUP BY
        species``: Adelie; ``WHERE year > 2010 GROUP BY year``: 2010 and before) reads no
        row, so its answer would be noise about nothing: it is not shown. Which groups
        those are follows from the query's text alone (never from the data). One test per
        value of each term, not per group: a WHERE of ORs may still exclude some
        combinations of values reached one by one, and those groups stay."""
        out = []
        for term in plan.terms:
            name = term.attribute.name
            out.append(
                [
                    not intersection(
                        plan.covered,
                        Query.from_coverages(plan.schema, {name: term.coverage(v)}),
                        text="",
                    ).is_empty
                    for v in range(term.groups)
                ]
            )
        return out

    def _group_rows(self, plan: _Plan, combo: Sequence[int]) -> Query | BooleanQuery:
        if not plan.terms:
            return plan.covered
        covs, _ = table_cell(plan.terms, combo)
        if any(not c for c in covs.values()):
            return Query.from_coverages(plan.schema, {next(iter(covs)): ()})
        return intersection(plan.covered, Query.from_coverages(plan.schema, covs), text="")

    def _answer(
        self, plan: _Plan, a: int, g: int, noisy: dict[tuple[Any, ...], list[int]], selected: dict
    ) -> list[Any]:
        """An aggregate's (value, low, high) in group ``g``."""
        agg = plan.request.aggregates[a]
        need = plan.needs[a]
        alpha = plan.alpha
        k = agg.kind
        if k in ("count", "units"):
            m = plan.measures[need[0]]
            v = noisy[need[0]][g]
            half = m.noise.interval(alpha)
            return [v, v - half, v + half]
        if k == "sum" and len(need) == 2:  # from a mean's count and centred sum
            count, total = plan.measures[need[0]], plan.measures[need[1]]
            n, s = noisy[need[0]][g], noisy[need[1]][g]
            c = total.low + total.high
            value = Fraction(s + c * n, 2) * total.unit
            # each noise within its half-width at alpha/2: both, with probability 1 - alpha
            half = Fraction(
                total.noise.interval(alpha / 2) + abs(c) * count.noise.interval(alpha / 2), 2
            )
            low, high = value - half * total.unit, value + half * total.unit
            return [_number(value), _down(low), _up(high)]
        if k == "sum":
            m = plan.measures[need[0]]
            v = noisy[need[0]][g]
            half = m.noise.interval(alpha)
            return [_scaled(v, m.unit), _scaled(v - half, m.unit), _scaled(v + half, m.unit)]
        if k == "quantile":
            return [selected[need[0]][g], None, None]
        count = plan.measures[need[0]]
        if k == "share":
            mech = MomentsMechanism("mean", 0, 1, count.noise, plan.measures[need[1]].noise)
            n, s, t = noisy[need[0]][g], noisy[need[1]][g], None
        else:
            total = plan.measures[need[1]]
            squares = plan.measures[need[2]] if len(need) > 2 else None
            mech = MomentsMechanism(
                k, total.low, total.high, count.noise, total.noise,
                None if squares is None else squares.noise, unit=total.unit,
            )  # fmt: skip
            n, s = noisy[need[0]][g], noisy[need[1]][g]
            t = noisy[need[2]][g] if len(need) > 2 else None
        value, interval, _ = mech.estimate(n, s, t, alpha)
        if not mech.informative(interval):  # a small group: no value, the whole range
            return [None, interval[0], interval[1]]
        return [value, interval[0], interval[1]]

    # --- EXPLAIN -------------------------------------------------------------------------

    def _explain_sql(self, plan: _Plan, analyst: str | None) -> SqlResult:
        d = self._decide(plan.table, plan.covered, plan.cost.amount, analyst)  # type: ignore[attr-defined]
        share = self.budget.display(plan.cost.amount / len(plan.measures))
        rows = []
        for agg, need in zip(plan.request.aggregates, plan.needs, strict=True):
            first = plan.measures[need[0]]
            if agg.kind == "quantile":
                sel = first.noise
                q = quantile_fraction(agg.q)
                n = len(plan.candidates[need[0]])
                exp_err = sel.expected_rank_error(n, q)
                half = sel.rank_error_bound(n, q, Fraction(1) - plan.request.options.confidence)
                error = f"rank error at most {half} rows with the stated confidence"
                noise = str(sel)
            elif agg.kind == "sum" and len(need) == 2:  # from a mean's measurements
                total = plan.measures[need[1]]
                c = total.low + total.high
                var = total.noise.variance() / 4 + (c / 2) ** 2 * first.noise.variance()
                exp_err = math.sqrt(var) * float(total.unit)  # its standard deviation
                half = _up(
                    Fraction(
                        total.noise.interval(plan.alpha / 2)
                        + abs(c) * first.noise.interval(plan.alpha / 2),
                        2,
                    )
                    * total.unit
                )
                error = "(S + (lower + upper) N) / 2 of the mean's noisy sum S and count N"
                noise = f"{first.noise}; {total.noise}"
            elif agg.kind in (*MOMENT_STATISTICS, "share"):
                total = plan.measures[need[1]]
                mech = MomentsMechanism(
                    "mean" if agg.kind in ("mean", "share") else "variance",
                    total.low if agg.kind != "share" else 0,
                    total.high if agg.kind != "share" else 1,
                    first.noise, total.noise,
                    plan.measures[need[2]].noise if len(need) > 2 else None,
                    unit=total.unit,
                )  # fmt: skip
                scale = mech.error_scale()
                exp_err = scale
                half = None  # in a group of n rows: about 2 * error_scale / n
                what = "variance" if agg.kind in ("variance", "stdev") else "value"
                error = (
                    f"the {what}'s standard error is at most {scale:.4g} / n in a group of n rows"
                )
                noise = "; ".join(str(plan.measures[k].noise) for k in need)
            else:
                exp_err = first.noise.expected_abs() * float(first.unit)
                half = _scaled(first.noise.interval(plan.alpha), first.unit)
                error = "each group's value is within half_width with the stated confidence"
                noise = str(first.noise)
            rows.append(
                [agg.name, agg.text, len(need), share * len(need), noise, exp_err, half, error]
            )
        left = self._quick_remaining([plan.covered], plan.table, analyst)[0]  # type: ignore[attr-defined]
        return SqlResult(
            plan.request.text,
            EXPLAIN_COLUMNS,
            tuple(tuple(r) for r in rows),
            self.budget.display(plan.cost.amount),
            self.budget.currency,
            left.value,
            None,
            left.exact,
            explain=True,
            admitted=d.admitted,
        )


def _scaled(value: int, unit: Fraction) -> int | float:
    return value if unit == 1 else float(value * unit)


def _number(x: Fraction) -> int | float:
    """An exact answer as JSON carries it: an int when whole, else its float."""
    return int(x) if x.denominator == 1 else float(x)


def _float_at_most(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def _down(x: Fraction) -> int | float:
    """An interval's low end, rounded outward (never above ``x``)."""
    if x.denominator == 1:
        return int(x)
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def _up(x: Fraction) -> int | float:
    """An interval's high end, rounded outward (never below ``x``)."""
    if x.denominator == 1:
        return int(x)
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _label(key: tuple[Any, ...]) -> str:
    kind = key[0]
    if kind == "count":
        return f"count{'(' + ', '.join(key[1]) + ')' if key[1] else ''}"
    if kind in ("centred", "squares", "sum"):
        return f"{kind}({key[1]})"
    if kind == "quantile":
        return f"percentile({key[1]})"
    return kind
