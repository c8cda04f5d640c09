"""The analyst's statistics requests: ``mean``, ``variance``, ``stdev``, ``share``, ``quantile``,
``quantiles`` and ``median`` on the curator and on an analyst's session.

Each validates and prices its request completely, then charges it once on the points its
``where`` covers and measures it (:mod:`dpcurator.curator.statistics`); the mechanisms
and their theorems are in :mod:`dpcurator.mechanisms.moments`,
:mod:`dpcurator.mechanisms.quantile` and docs/aggregations.md.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from dpcurator.queries.statistic_request import StatisticRequest, statistic_method


class StatisticRequests(StatisticCore):
    """The curator's statistics (mixed into :class:`~dpcurator.curator.Curator`): one
    typed request (:class:`~dpcurator.queries.statistic_request.StatisticRequest`)
    answered by :meth:`statistic`, and a method per statistic made from its constructor
    (``c.mean("age", 0, 100, by="sex", epsilon=1)`` is
    ``c.statistic(StatisticRequest.mean("age", 0, 100, by="sex"), epsilon=1)``)."""

    @timed
    def statistic(
        self,
        request: StatisticRequest,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> StatisticAnswer:
        """Answer ``request`` (a mean, variance, stdev, share, quantile, quantiles or
        median): validated against ``table``'s schema and priced completely, charged once
        on the rows it reads, then measured, with a rigorous 95% interval (means,
        variances, deviations, shares) or rank-error bound (quantiles)."""
        p = self._prepare_statistic(request, epsilon=epsilon, rho=rho, mu=mu, table=table)
        return self._release_statistic(p, _analyst)

    mean = statistic_method("mean", private=True)
    variance = statistic_method("variance", private=True)
    stdev = statistic_method("stdev", private=True)
    share = statistic_method("share", private=True)
    quantile = statistic_method("quantile", private=True)
    quantiles = statistic_method("quantiles", private=True)
    median = statistic_method("median", private=True)

    def _release_mixed(
        self, plan: Any, specs: Sequence[Any], table: str, analyst: str | None
    ) -> list[Answer | StatisticAnswer]:
        """A planned workload with statistic lines, all or nothing: every count and every
        statistic at its planned cost in one committed transaction (a statistic line is
        one measurement on the points it reads), then one scan for the counts and one
        aggregate per statistic."""
        self._known(analyst)  # type: ignore[attr-defined]
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
                p = self._prepare_statistic(spec, **{cur: value}, table=table)
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

    def statistic(self, request: StatisticRequest, **kw: Any) -> StatisticAnswer:
        return self._c.statistic(request, _analyst=self.name, **kw)  # type: ignore[no-any-return]

    mean = statistic_method("mean")
    variance = statistic_method("variance")
    stdev = statistic_method("stdev")
    share = statistic_method("share")
    quantile = statistic_method("quantile")
    quantiles = statistic_method("quantiles")
    median = statistic_method("median")
