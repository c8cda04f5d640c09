"""Means, variances, standard deviations and quantiles, in the curator.

Like a count, a statistic is validated and priced completely (its attribute, bounds,
quantiles, candidates, groups, every noise and selection and every limit) before
anything is charged; it is then charged once, in one committed ledger transaction, on the
points its ``where`` covers (rows whose attribute is missing are left out of both the
statistic and the charge); only then are the exact aggregates read and the noise drawn
(:func:`~dpcurator.curator.admission.check_and_charge`), and the answer leaves the
curator after the commit.

**Grouped** statistics (``by=``) answer one result per combination of the ``by``
attributes' values, every one of the public domain, empty or not (no key depends on the
data). Each group's result reads only that group's rows, and the groups are disjoint, so
together they cost the statistic's cost once at every point (parallel composition, Smith
et al. 2022, Thm 5), like the cells of a histogram: one charge covering their union.

The mechanisms and their theorems: :mod:`dpcurator.mechanisms.moments`,
:mod:`dpcurator.mechanisms.quantile` and docs/aggregations.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.curator import requests
from dpcurator.curator.admission import Request
from dpcurator.curator.answers import Estimate, Statistic, StatisticAnswer
from dpcurator.curator.budget import Cost
from dpcurator.errors import InvalidParameter, QueryError, TooLarge
from dpcurator.mechanisms.moments import (
    MOMENT_STATISTICS,
    MomentsMechanism,
    centred_sums,
    sensitivities,
    shares,
)
from dpcurator.mechanisms.noise import DiscreteLaplaceNoise
from dpcurator.mechanisms.noisy import scientific
from dpcurator.mechanisms.quantile import (
    QuantileMechanism,
    quantile_fraction,
    quantile_mechanism,
    quantile_sensitivity,
    rank_scores,
)
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery, intersection
from dpcurator.queries.parts import GroupTerm, group_term
from dpcurator.queries.predicates import complement
from dpcurator.queries.statistic_request import STATISTICS, StatisticRequest
from dpcurator.queries.values import decimal_text

#: The widest clipped range of a variance: its squares' sensitivity (U - L)^2 stays an
#: integer well inside 2^62.
MAX_VARIANCE_SPAN = 2**31
#: The largest clip bound of a mean, variance or standard deviation: its estimate, its
#: interval and its error scale are then finite floats (the noise range refuses far
#: smaller bounds at any realistic budget).
MAX_MOMENT_BOUND = 2**128
#: The most quantiles one request may ask for.
MAX_QUANTILES = 1000
#: The level of every interval and rank-error bound.
CONFIDENCE = Fraction(95, 100)


@dataclass(frozen=True)
class PreparedStatistic:
    """A statistic validated and priced, not yet charged."""

    table: str
    covered: Query | BooleanQuery
    kind: str  # mean, variance, stdev, share or quantile
    request: str
    cost: Cost
    attribute: str
    by: tuple[str, ...]
    labels: tuple[str, ...]  # one per group cell
    moments: MomentsMechanism | None = None
    lower: int = 0  # clip bounds in units of ``unit``
    upper: int = 0
    unit: Fraction = Fraction(1)
    qs: tuple[Fraction, ...] = ()
    selections: tuple[QuantileMechanism, ...] = ()
    candidates: tuple[int, ...] = ()  # value positions
    edges: tuple[int, ...] = ()
    holds: Query | BooleanQuery | None = None  # a share's rows read where its condition holds

    @property
    def noise(self) -> str:
        if self.moments is not None:
            return str(self.moments)
        return "; ".join(str(m) for m in self.selections)

    @property
    def mechanism(self) -> str:
        if self.moments is not None:
            laplace = isinstance(self.moments.total, DiscreteLaplaceNoise)
            return "discrete_laplace" if laplace else "discrete_gaussian"
        return self.selections[0].name

    @property
    def results(self) -> int:
        return len(self.labels) * max(1, len(self.qs))


def _decimal(q: Fraction) -> str:
    return format((Decimal(q.numerator) / Decimal(q.denominator)).normalize(), "f")


def _listing(values: Sequence[object]) -> str:
    shown = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values[:20])
    return f"[{shown}{', ...' if len(values) > 20 else ''}]"


class StatisticCore:
    """How the curator prepares, measures and releases statistics (mixed into
    :class:`~dpcurator.curator.Curator`, whose validation, budget, noise, filter and
    ledger it uses)."""

    _k: int
    _rng: Any
    _backends: dict[str, Any]
    budget: Any
    limits: requests.RequestLimits

    # --- validation and pricing ---------------------------------------------------------

    def _groups(
        self, schema: Schema, by: object, attribute: str
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The ``by`` group terms (attributes, or parts of times such as
        ``month(time_hour)``) as written canonically, and the label of every group cell."""
        if by is None:
            return (), ("",)
        if isinstance(by, bytes) or not isinstance(by, str | Iterable):
            raise QueryError(f"by must be an attribute name or a list of them, got {by!r}")
        names = [by] if isinstance(by, str) else requests.bounded_list(by, len(schema), "by")
        if not names:
            return (), ("",)
        terms = [group_term(schema, n) for n in names]
        texts = [t.text if t.part is not None else t.attribute.name for t in terms]
        if len(set(texts)) != len(texts):
            raise QueryError(f"by names an attribute twice: {names}")
        if attribute in texts:
            raise QueryError(f"by must not include the attribute {attribute!r} itself")
        cells = math.prod(t.groups for t in terms)
        cap, limit = self.limits.cell_cap
        if cells > cap:
            raise TooLarge(f"by={texts} makes {cells} groups, over the limit {limit} = {cap}")
        return tuple(texts), tuple(group_labels(terms))

    def _base(
        self, schema: Schema, attribute: str, base: Query | BooleanQuery
    ) -> Query | BooleanQuery:
        """The rows a statistic reads (and is charged on): ``where``, without the rows
        whose attribute holds its missing-value marker."""
        attr = schema.attribute(attribute)
        if attr.missing is None:
            return base
        p = attr.position(attr.missing)
        present = {attribute: complement(((p, p + 1),), attr.size)}
        return intersection(base, Query.from_coverages(schema, present), text="")

    def _shares(self, cost: Cost, parts: Sequence[Fraction]) -> list[Cost]:
        """The cost split into ``parts`` (summing to 1) of its additive amount; a part's
        parameter never above its share (mu: a rational just below the square root)."""
        out = []
        for w in parts:
            amount = cost.amount * w
            if self.budget.currency == "mu":
                b = 64
                param = Fraction(math.isqrt(math.floor(amount * 4**b)), 2**b)
            else:
                param = amount
            out.append(Cost(param, amount))
        return out

    @staticmethod
    def _tail(where: object, w: Query | BooleanQuery, by: tuple[str, ...]) -> str:
        """The request text's ``by=`` and ``where=`` (canonical) parts."""
        tail = f", by=[{', '.join(by)}]" if len(by) > 1 else (f", by={by[0]}" if by else "")
        return tail + ("" if where is None else f", where={w.text or 'TRUE'}")

    def _prepare_moments(
        self, r: StatisticRequest, epsilon: object, rho: object, mu: object, table: str | None
    ) -> PreparedStatistic:
        kind, attribute, lower, upper, where, by = (
            r.kind,
            r.attribute,
            r.lower,
            r.upper,
            r.where,
            r.by,
        )
        t = self._table(table)  # type: ignore[attr-defined]
        schema = self._schema(t)  # type: ignore[attr-defined]
        name = requests.attribute_name(attribute, schema)
        attr = schema.attribute(name)
        if not attr.numeric:
            raise QueryError(f"{kind} needs an integer or float attribute; {name!r} is {attr.type}")
        lo, hi = requests.clip_bounds(lower, upper)
        shown = f"[{decimal_text(lo)}, {decimal_text(hi)}]"
        if lo == hi:
            raise InvalidParameter(
                f"the {kind} of values clipped to {shown} is known: give lower < upper"
            )
        if max(-lo, hi) > MAX_MOMENT_BOUND:
            raise InvalidParameter(
                f"a {kind} needs clip bounds within [-2^128, 2^128] (about 3.4e38), got "
                f"[{scientific(lo)}, {scientific(hi)}]"
            )
        unit = requests.value_unit(attr, lo, hi)
        low, high = int(lo / unit), int(hi / unit)  # whole numbers of units
        if kind != "mean" and high - low > MAX_VARIANCE_SPAN:
            per = "" if unit == 1 else f" / {decimal_text(unit)}"
            raise InvalidParameter(
                f"a {kind} needs (upper - lower){per} <= {MAX_VARIANCE_SPAN}, got "
                f"{scientific(Fraction(high - low))}"
            )
        names, labels = self._groups(schema, by, name)
        w = requests.canonical_query(where, schema)
        base = self._base(schema, name, w)
        cost = self.budget.cost(epsilon, rho, mu)
        noises = [
            self._noise(c, s)[0]  # type: ignore[attr-defined]
            for c, s in zip(
                self._shares(cost, shares(kind)),
                sensitivities(kind, low, high, self._k),
                strict=True,
            )
        ]
        request = (
            f"{kind}({name}, {decimal_text(lo)}, {decimal_text(hi)}{self._tail(where, w, names)})"
        )
        return PreparedStatistic(
            t, base, kind, request, cost, name, names, labels,
            moments=MomentsMechanism(kind, low, high, *noises, unit=unit),
            lower=low, upper=high, unit=unit,
        )  # fmt: skip

    def _prepare_share(
        self, r: StatisticRequest, epsilon: object, rho: object, mu: object, table: str | None
    ) -> PreparedStatistic:
        """A share: the mean of the condition's 0/1 indicator over the rows read, by the
        mean's mechanism with bounds [0, 1] (so its noises, split and interval are the
        mean's), charged on the rows read (all of ``where``: a row the condition does not
        hold for, a missing value included, is read as 0)."""
        condition, where, by = r.condition, r.where, r.by
        t = self._table(table)  # type: ignore[attr-defined]
        schema = self._schema(t)  # type: ignore[attr-defined]
        if condition is None:
            raise QueryError('a share needs a condition, e.g. share("arr_delay > 15")')
        cond = requests.canonical_query(condition, schema)
        names, labels = self._groups(schema, by, "")
        w = requests.canonical_query(where, schema)
        holds = intersection(w, cond, text="")  # refused here if too many boxes
        cost = self.budget.cost(epsilon, rho, mu)
        noises = [
            self._noise(c, s)[0]  # type: ignore[attr-defined]
            for c, s in zip(
                self._shares(cost, shares("mean")),
                sensitivities("mean", 0, 1, self._k),
                strict=True,
            )
        ]
        request = f"share({cond.text or 'TRUE'}{self._tail(where, w, names)})"
        return PreparedStatistic(
            t, w, "share", request, cost, "", names, labels,
            moments=MomentsMechanism("mean", 0, 1, *noises), lower=0, upper=1, holds=holds,
        )  # fmt: skip

    def _prepare_quantiles(
        self, r: StatisticRequest, epsilon: object, rho: object, mu: object, table: str | None
    ) -> PreparedStatistic:
        kind, attribute, qs, where, by, candidates = (
            r.kind, r.attribute, r.qs, r.where, r.by, r.candidates
        )  # fmt: skip
        t = self._table(table)  # type: ignore[attr-defined]
        schema = self._schema(t)  # type: ignore[attr-defined]
        name = requests.attribute_name(attribute, schema)
        attr = schema.attribute(name)
        if not attr.ordered:
            raise QueryError(f"a quantile needs an ordered attribute; {name!r} is not ordered")
        raw = requests.bounded_list(qs, MAX_QUANTILES, "quantiles")
        if not raw:
            raise InvalidParameter("give at least one quantile")
        fr = tuple(
            quantile_fraction(q, "q" if kind == "quantile" else "every quantile") for q in raw
        )
        names, labels = self._groups(schema, by, name)
        missing = None if attr.missing is None else attr.position(attr.missing)
        cap, limit = self.limits.cell_cap
        if candidates is None:
            if attr.size > cap:
                raise TooLarge(
                    f"{name!r} has {attr.size} values, over the limit {limit} = {cap}: "
                    "give candidates="
                )
            pos = [p for p in range(attr.size) if p != missing]
        else:
            given = requests.bounded_list(candidates, cap, "candidates", limit)
            pos = sorted({self._position(attr, v) for v in given})
            if missing in pos:
                raise QueryError(f"candidate {attr.missing!r} is {name!r}'s missing-value marker")
        if not pos:
            raise QueryError(f"{name!r} has no value to choose from")
        work = len(labels) * len(pos) * len(fr)
        if work > cap:
            raise TooLarge(
                f"{len(labels)} groups x {len(pos)} candidates x {len(fr)} quantiles = {work}, "
                f"over the limit {limit} = {cap}"
            )
        w = requests.canonical_query(where, schema)
        base = self._base(schema, name, w)
        cost = self.budget.cost(epsilon, rho, mu)
        parts = self._shares(cost, [Fraction(1, len(fr))] * len(fr))
        cur = self.budget.currency
        sel = tuple(
            quantile_mechanism(cur, c.amount, quantile_sensitivity(q, self._k), q.denominator)
            for c, q in zip(parts, fr, strict=True)
        )
        edges = sorted({0, attr.size, *pos, *(p + 1 for p in pos)})
        text = {
            "median": f"median({name}",
            "quantile": f"quantile({name}, {_decimal(fr[0])}",
            "quantiles": f"quantiles({name}, [{', '.join(_decimal(q) for q in fr)}]",
        }[kind]
        if candidates is not None:
            text += f", candidates={_listing([attr.value(p) for p in pos])}"
        request = text + self._tail(where, w, names) + ")"
        return PreparedStatistic(
            t, base, "quantile", request, cost, name, names, labels,
            qs=fr, selections=sel, candidates=tuple(pos), edges=tuple(edges),
        )  # fmt: skip

    @staticmethod
    def _position(attr: Any, value: object) -> int:
        if attr.type == "integer":
            v = requests.integer(value, "every candidate")
            if not attr.min <= v <= attr.max:
                raise QueryError(f"candidate {v} is outside {attr.name!r} [{attr.min}, {attr.max}]")
            return v - attr.min
        if attr.grid is not None:  # a float, a timestamp, a date
            x = attr.grid_number(value)
            try:
                return int(attr.exact_position(x)) if x is not None else attr.position(value)
            except KeyError:
                raise QueryError(
                    f"candidate {value!r} is not a value of {attr.name!r} {attr.describe()}"
                ) from None
        if not isinstance(value, str) or value not in attr.values:
            raise QueryError(f"candidate {value!r} is not a value of {attr.name!r}")
        return int(attr.position(value))

    def _prepare_statistic(
        self,
        r: StatisticRequest,
        *,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> PreparedStatistic:
        """A statistic request validated against the table's schema and priced, every
        noise and limit computed; nothing charged."""
        if not isinstance(r, StatisticRequest):
            raise InvalidParameter(
                "a statistic is a StatisticRequest, e.g. StatisticRequest.mean('age', 0, 100), "
                f"got {type(r).__name__}"
            )
        if r.kind not in STATISTICS:
            raise InvalidParameter(f"kind must be one of {', '.join(STATISTICS)}, got {r.kind!r}")
        # Rebuilt by its constructor: a hand-made request's fields are those of its kind
        # alone (a median's q is 1/2, a quantile has one q), so that what is recorded is
        # what is released.
        r = StatisticRequest.build(r.kind, (), r.args())
        if r.kind in MOMENT_STATISTICS:
            return self._prepare_moments(r, epsilon, rho, mu, table)
        if r.kind == "share":
            return self._prepare_share(r, epsilon, rho, mu, table)
        return self._prepare_quantiles(r, epsilon, rho, mu, table)

    # --- measuring, once charged ---------------------------------------------------------

    def _measure(self, p: PreparedStatistic) -> list[Statistic]:
        """Read the exact aggregates, add the noise or select: the released results."""
        be = self._backends[p.table]
        alpha = float(1 - CONFIDENCE)
        if p.holds is not None:  # a share: the indicator's sum is a count
            schema = self._schema(p.table)  # type: ignore[attr-defined]
            one = group_term(schema, p.by[0]).attribute if p.by else schema.attributes[0]
            whole = [0, one.size]  # one bin: every row of the group
            n = be.binned_counts(one.name, whole, p.covered, p.by)[:, 0]
            s1 = be.binned_counts(one.name, whole, p.holds, p.by)[:, 0]
            s2 = None
        elif p.moments is not None:
            n, s1, s2 = be.clipped_moments(
                p.attribute,
                p.lower,
                p.upper,
                p.covered,
                p.by,
                squares=p.kind != "mean",
                unit=p.unit,
            )
        if p.moments is not None:
            exact: list[tuple[int, ...]] = []
            for i in range(len(p.labels)):
                nn, ss, tt = centred_sums(
                    int(n[i]), int(s1[i]), None if s2 is None else int(s2[i]), p.lower, p.upper
                )
                exact.append((nn, ss) if tt is None else (nn, ss, tt))
            out = []
            for label, noisy in zip(p.labels, p.moments.noisy(exact, self._rng), strict=True):
                value, interval, se = p.moments.estimate(
                    noisy[0], noisy[1], noisy[2] if len(noisy) > 2 else None, alpha
                )
                if p.moments.informative(interval):
                    out.append(
                        Statistic(label, value, interval=interval, std_error=se, count=noisy[0])
                    )
                else:  # a small group: no estimate, only the whole range
                    out.append(
                        Statistic(label, None, interval=interval, count=noisy[0], small_group=True)
                    )
            return out
        counts = be.binned_counts(p.attribute, list(p.edges), p.covered, p.by)
        where_bin = np.searchsorted(np.asarray(p.edges), np.asarray(p.candidates))
        attr = self._schema(p.table).attribute(p.attribute)  # type: ignore[attr-defined]
        bounds = [
            m.rank_error_bound(len(p.candidates), q, 1 - CONFIDENCE)
            for m, q in zip(p.selections, p.qs, strict=True)
        ]
        out = []
        for label, row in zip(p.labels, counts, strict=True):
            before = np.concatenate(([0], np.cumsum(row)[:-1]))
            below, equal = before[where_bin], row[where_bin]
            for q, m, t in zip(p.qs, p.selections, bounds, strict=True):
                i = m.select(rank_scores(below, equal, int(row.sum()), q), self._rng)
                value = attr.value(p.candidates[i])
                out.append(Statistic(label, value, q=float(q), rank_error=t))
        return out

    def _release_statistic(self, p: PreparedStatistic, analyst: str | None) -> StatisticAnswer:
        """Charge once on the covered points, then measure; the answer is recorded with
        the charge in one transaction."""
        self._known(analyst)  # type: ignore[attr-defined]
        results: list[Statistic] = []

        def answers() -> list[object]:
            results.extend(self._measure(p))
            return [statistic_record(p, results)]

        # a union of disjoint boxes is charged like a box (the filter takes both)
        charge = Request(p.covered, p.cost.amount, p.kind, p.request, p.noise)  # type: ignore[arg-type]
        ((charge_id, _),) = self._charge(p.table, [charge], analyst, answers)  # type: ignore[attr-defined]
        left = self._quick_remaining([p.covered], p.table, analyst)[0]  # type: ignore[attr-defined]
        return StatisticAnswer(
            p.request,
            p.kind,
            tuple(results),
            p.mechanism,
            self.budget.display(p.cost.amount),
            self.budget.currency,
            left.value,
            charge_id,
            left.exact,
        )

    def _estimate_statistic(
        self, kind: str, args: Mapping[str, Any], analyst: str | None
    ) -> Estimate:
        """A statistic's :class:`~dpcurator.curator.curator.Estimate`: the moments' sum
        noise (and the statistic's error scale) or the selection's rank-error bounds, in
        rows; charges nothing and reads no data."""
        paid = {k: args[k] for k in ("epsilon", "rho", "mu", "table") if k in args}
        asked = {k: v for k, v in args.items() if k not in paid}
        p = self._prepare_statistic(StatisticRequest.of(kind, asked), **paid)
        self._known(analyst)  # type: ignore[attr-defined]
        d = self._decide(p.table, p.covered, p.cost.amount, analyst)  # type: ignore[attr-defined]
        common = {
            "kind": p.kind,
            "request": p.request,
            "cells": p.results,
            "cost": self.budget.display(p.cost.amount),
            "currency": self.budget.currency,
            "admitted": d.admitted,
            "exact": d.exact,
        }
        if p.moments is not None:
            total = p.moments.total
            name = p.mechanism
            param = float(total.scale if isinstance(total, DiscreteLaplaceNoise) else total.sigma)
            scale = p.moments.error_scale()
            what = "variance" if p.kind == "stdev" else p.kind
            return Estimate(
                **common,
                noise=name,
                noise_parameter=param,
                expected_abs_error=total.expected_abs(),
                half_width=total.interval(0.05),
                error_scale=scale,
                error=f"the {what}'s standard error is at most {scale:.4g} / n in a group of "
                "n rows (first order, wherever the values lie within the bounds)",
            )
        m = p.selections[0]
        bound = max(
            s.rank_error_bound(len(p.candidates), r, Fraction(1, 20))
            for s, r in zip(p.selections, p.qs, strict=True)
        )
        return Estimate(
            **common,
            noise=m.name,
            noise_parameter=float(m.epsilon),
            expected_abs_error=max(
                s.expected_rank_error(len(p.candidates), r)
                for s, r in zip(p.selections, p.qs, strict=True)
            ),
            half_width=bound,
            error=f"with probability 0.95 each result is within {bound} rows of its "
            "quantile's rank (beyond the best candidate's: 0 when every value is one)",
        )


def group_labels(terms: Sequence[GroupTerm]) -> Iterator[str]:
    """The condition of every group of ``by`` terms, in the order results come in: every
    combination of their groups, the last term varying fastest."""
    parts = [[t.label(g) for g in range(t.groups)] for t in terms]
    return (" AND ".join(c) for c in itertools.product(*parts))


def record(r: Statistic) -> dict[str, object]:
    """A result as the ledger records it (JSON)."""
    d: dict[str, object] = {"group": r.group, "value": r.value}
    for k in ("q", "interval", "rank_error", "std_error", "count"):
        v = getattr(r, k)
        if v is not None:
            d[k] = list(v) if isinstance(v, tuple) else v
    if r.small_group:
        d["small_group"] = True
    return d


def statistic_record(p: PreparedStatistic, results: Sequence[Statistic]) -> dict[str, object]:
    """A statistic's answer as the ledger records it (JSON).

    Without ``by``: ``{"statistic", "results": [{"group": "", "value", ...}]}``. Grouped,
    the groups' conditions are left out, being implied by ``by`` and the public schema
    (:func:`group_labels`' order), and each result is one row of ``columns``:
    ``{"statistic", "by", "groups", "columns", "rows"}``. A mean by 17,760 groups is then
    0.8 MB rather than 2.1 MB, a median (20 candidates) by them 0.25 MB rather than 1.3 MB:
    what the ledger, every replica's sync and every verification read."""
    records = [record(r) for r in results]
    if not p.by:
        return {"statistic": p.kind, "results": records}
    # every key any result has, in order (a small group's lacks std_error, has small_group)
    columns = list(dict.fromkeys(k for d in records for k in d if k != "group"))
    return {
        "statistic": p.kind,
        "by": list(p.by),
        "groups": len(p.labels),
        "columns": columns,
        "rows": [[d.get(c) for c in columns] for d in records],
    }


def recorded_results(
    answer: object, schema: Schema, limit: int | None = None
) -> list[object] | None:
    """The results of a recorded statistic answer (either form of
    :func:`statistic_record`; the first ``limit`` only, if given), each
    ``{"group", "value", ...}``; None if ``answer`` is not a statistic's record. Only the
    groups returned are labelled."""
    if not isinstance(answer, dict) or "statistic" not in answer:
        return None
    if "rows" not in answer:
        results = answer.get("results")
        return results[:limit] if isinstance(results, list) else None
    rows, by, groups, columns = (answer.get(k) for k in ("rows", "by", "groups", "columns"))
    if not (
        isinstance(rows, list)
        and isinstance(columns, list)
        and isinstance(by, list)
        and all(isinstance(n, str) and _known_term(schema, n) for n in by)
        and isinstance(groups, int)
        and not isinstance(groups, bool)
        and groups >= 1
        and len(rows) % groups == 0
    ):
        return None
    if not rows:
        return []
    each = len(rows) // groups  # results per group: one per quantile
    shown = groups if limit is None else min(groups, -(-limit // each))
    labels = itertools.islice(group_labels([group_term(schema, n) for n in by]), shown)
    out: list[object] = []
    for label, i in zip(labels, range(0, len(rows), each), strict=False):
        for row in rows[i : i + each]:
            if isinstance(row, list) and len(row) == len(columns):
                fields = dict(zip(columns, row, strict=True))
                for flag in _FLAGS:  # a flag a record leaves out when false
                    if fields.get(flag, False) is None:
                        del fields[flag]
                out.append({"group": label, **fields})
    return out[:limit]


def _known_term(schema: Schema, text: str) -> bool:
    try:
        group_term(schema, text)
    except QueryError:
        return False
    return True


#: Result fields a record holds only when true (stored as null in the other rows of a
#: compact record, and left out again when it is expanded).
_FLAGS = ("small_group",)


def expanded_record(answer: object, schema: Schema) -> object:
    """A recorded answer as history shows it: a grouped statistic's rows back in the
    form of every other statistic's, ``{"statistic", "results": [{"group", "value",
    ...}]}`` (the groups labelled from the schema); any other answer as it is."""
    if isinstance(answer, dict) and "rows" in answer:
        results = recorded_results(answer, schema)
        if results is not None:
            return {"statistic": answer["statistic"], "results": results}
    return answer
