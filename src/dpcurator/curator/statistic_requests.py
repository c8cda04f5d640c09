"""The analyst's statistics requests: ``mean``, ``variance``, ``stdev``, ``quantile``,
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

from dpcurator.curator.answers import StatisticAnswer
from dpcurator.curator.statistics import StatisticCore
from dpcurator.curator.timing import timed
from dpcurator.queries import Query


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
