"""The analyst's statistics requests: ``mean``, ``variance``, ``stdev``, ``share``, ``quantile``,
``quantiles`` and ``median`` on the curator and on an analyst's session.

Each validates and prices its request completely, then charges it once on the points its
``where`` covers and measures it (:mod:`dpcurator.curator.statistics`); the mechanisms
and their theorems are in :mod:`dpcurator.mechanisms.moments`,
:mod:`dpcurator.mechanisms.quantile` and docs/aggregations.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dpcurator.curator import requests
from dpcurator.curator.admission import Request
from dpcurator.curator.answers import Answer, StatisticAnswer
from dpcurator.curator.statistics import PreparedStatistic, StatisticCore, statistic_record
from dpcurator.curator.timing import timed
from dpcurator.errors import TooLarge
from dpcurator.mechanisms.noise import DiscreteLaplaceNoise
from dpcurator.queries import Query
from dpcurator.queries.boolean import BooleanQuery


class StatisticRequests(StatisticCore):
    """The curator's statistics (mixed into :class:`~dpcurator.curator.Curator`)."""

    @timed
    def mean(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The mean of ``attribute`` clipped to the public integer bounds [lower, upper],
        over the rows ``where`` covers, per group of ``by`` (one attribute name or a
        list): a noisy centred sum over a noisy count, half the cost each
        (docs/aggregations.md). Each result has a rigorous 95% interval."""
        p = self._prepare_moments(
            "mean",
            attribute,
            lower,
            upper,
            where,
            by=by,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    @timed
    def variance(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The (population) variance of ``attribute`` clipped to [lower, upper], from a
        noisy count, centred sum and centred sum of squares, a third of the cost each."""
        p = self._prepare_moments(
            "variance",
            attribute,
            lower,
            upper,
            where,
            by=by,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    @timed
    def stdev(
        self,
        attribute: str,
        lower: int,
        upper: int,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The standard deviation of ``attribute`` clipped to [lower, upper]: the square
        root of :meth:`variance`'s estimate, with the interval's ends' square roots."""
        p = self._prepare_moments(
            "stdev",
            attribute,
            lower,
            upper,
            where,
            by=by,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    @timed
    def share(
        self,
        condition: str | Query,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The fraction of the rows ``where`` covers (per group of ``by``) that satisfy
        ``condition``, counted as a count query counts it: the mean of its 0/1 indicator,
        a noisy sum over a noisy count, half the cost each, with a rigorous 95% interval
        within [0, 1] (docs/aggregations.md). Charged once on the rows read."""
        p = self._prepare_share(
            condition, where, by=by, epsilon=epsilon, rho=rho, mu=mu, table=table
        )
        return self._release_statistic(p, _analyst)

    @timed
    def quantile(
        self,
        attribute: str,
        q: float,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[int | str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The q-th quantile (q in [0, 1], at most six decimals) of an ordered attribute,
        a value of its domain (or of ``candidates``), chosen exactly by permute-and-flip
        (epsilon, mu budgets) or the exponential mechanism (rho) on the rank score."""
        p = self._prepare_quantiles(
            "quantile",
            attribute,
            [q],
            where,
            by=by,
            candidates=candidates,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    @timed
    def quantiles(
        self,
        attribute: str,
        qs: Sequence[float],
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[int | str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """Several quantiles at once, the cost split equally between them (composed in
        the budget's currency); results per group, in the order of ``qs``."""
        p = self._prepare_quantiles(
            "quantiles",
            attribute,
            qs,
            where,
            by=by,
            candidates=candidates,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    @timed
    def median(
        self,
        attribute: str,
        where: str | Query | None = None,
        *,
        by: str | Sequence[str] | None = None,
        candidates: Sequence[int | str] | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """The median: :meth:`quantile` with q = 0.5."""
        p = self._prepare_quantiles(
            "median",
            attribute,
            [Fraction(1, 2)],
            where,
            by=by,
            candidates=candidates,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return self._release_statistic(p, _analyst)

    def _release_mixed(
        self, plan: Any, specs: Sequence[Any], table: str, analyst: str | None
    ) -> list[Answer | StatisticAnswer]:
        """A planned workload with statistic lines, all or nothing: every count and every
        statistic at its planned cost in one committed transaction (a statistic line is
        one measurement on the points it reads), then one scan for the counts and one
        aggregate per statistic."""
        self._quota(analyst)  # type: ignore[attr-defined]
        schema = self._schema(table)  # type: ignore[attr-defined]
        cur = self.budget.currency
        if len(plan.queries) > self.limits.max_charges:
            raise TooLarge(
                f"a workload of {len(plan.queries)} lines' queries would write as many ledger "
                f"rows, over the limit max_charges = {self.limits.max_charges}"
            )
        batch: list[Request] = []
        counted: list[tuple[int, Query | BooleanQuery, Any, int]] = []
        stats: list[tuple[int, PreparedStatistic]] = []
        units: dict[int, tuple[Any, Any, int]] = {}  # units(...) lines: prepared, noise, half
        for i, (q, spec, value) in enumerate(zip(plan.queries, specs, plan.values, strict=True)):
            if spec is not None and spec.kind == "units":
                u = self._planned_units(spec, value, table)  # type: ignore[attr-defined]
                noise, half = self._noise(u.cost, 1)  # type: ignore[attr-defined]
                units[i] = (u, noise, half)
                batch.append(Request(u.covered, u.charged, "units", u.request, str(noise)))
            elif spec is None:  # every noise and limit before the charge
                cost = self.budget.cost(**{cur: value})
                noise, half = self._noise(cost, self._k)  # type: ignore[attr-defined]
                cq = requests.canonical_query(q, schema)
                counted.append((i, cq, noise, half))
                batch.append(Request(cq, cost.amount, "workload", cq.text or "total", str(noise)))  # type: ignore[arg-type]
            else:
                p = self._prepare_statistic(spec.kind, {**spec.args(), cur: value, "table": table})
                stats.append((i, p))
                batch.append(Request(p.covered, p.cost.amount, p.kind, p.request, p.noise))  # type: ignore[arg-type]
        values: dict[int, object] = {}

        def answers() -> list[object]:
            # measured once admitted; released once committed
            be = self._backends[table]
            truth = be.counts([cq for _, cq, _, _ in counted]) if counted else []
            records: dict[int, object] = {}
            for (i, cq, noise, _), t in zip(counted, truth, strict=True):
                values[i] = int(t) + int(noise.sample(rng=self._rng))
                records[i] = {cq.text or "total": values[i]}
            for i, (u, noise, _) in units.items():
                truth = int(be.distinct_units(u.covered))
                values[i] = truth + int(noise.sample(rng=self._rng))
                records[i] = {u.request: values[i]}
            for i, p in stats:
                results = self._measure(p)
                values[i] = results
                records[i] = statistic_record(p, results)
            return [records[i] for i in range(len(batch))]

        charged = self._charge(table, batch, analyst, answers)  # type: ignore[attr-defined]
        left = self._quick_remaining([r.query for r in batch], table, analyst)  # type: ignore[attr-defined]
        out: list[Answer | StatisticAnswer] = []
        counts = {i: (cq, noise, half) for i, cq, noise, half in counted}
        prepared = dict(stats)
        for i, (charge_id, _) in enumerate(charged):
            cost = self.budget.display(batch[i].cost)
            if i in counts or i in units:
                cq, noise, half = counts[i] if i in counts else units[i]
                text = cq.request if i in units else (cq.text or "total")
                laplace = isinstance(noise, DiscreteLaplaceNoise)
                out.append(
                    Answer(
                        text,
                        values[i],  # type: ignore[arg-type]
                        "discrete_laplace" if laplace else "discrete_gaussian",
                        float(noise.scale if laplace else noise.sigma),
                        cost,
                        cur,
                        half,
                        left[i].value,
                        charge_id,
                        left[i].exact,
                    )
                )
            else:
                p = prepared[i]
                out.append(
                    StatisticAnswer(
                        p.request,
                        p.kind,
                        tuple(values[i]),  # type: ignore[arg-type]
                        p.mechanism,
                        cost,
                        cur,
                        left[i].value,
                        charge_id,
                        left[i].exact,
                    )
                )
        return out


class SessionStatistics:
    """The statistics of an analyst session (mixed into
    :class:`~dpcurator.curator.AnalystSession`): the curator's, charged to her quota."""

    _c: Any
    name: str

    def mean(
        self, attribute: str, lower: int, upper: int, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.mean(attribute, lower, upper, where, _analyst=self.name, **kw)

    def variance(
        self, attribute: str, lower: int, upper: int, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.variance(attribute, lower, upper, where, _analyst=self.name, **kw)

    def stdev(
        self, attribute: str, lower: int, upper: int, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.stdev(attribute, lower, upper, where, _analyst=self.name, **kw)

    def share(
        self, condition: str | Query, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.share(condition, where, _analyst=self.name, **kw)

    def quantile(
        self, attribute: str, q: float, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.quantile(attribute, q, where, _analyst=self.name, **kw)

    def quantiles(
        self, attribute: str, qs: Sequence[float], where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.quantiles(attribute, qs, where, _analyst=self.name, **kw)

    def median(
        self, attribute: str, where: str | Query | None = None, **kw: Any
    ) -> StatisticAnswer:
        return self._c.median(attribute, where, _analyst=self.name, **kw)
