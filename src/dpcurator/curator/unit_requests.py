"""``units(condition)``: how many privacy units have a kept row satisfying a condition.

With a privacy unit of k rows, adding or removing one unit changes the number of
distinct units a condition covers by at most 1, so the release is that number plus the
noise of a per-row count at the request's cost c (discrete Laplace of scale 1/c,
discrete Gaussian of sensitivity 1 for zCDP and GDP): one unit loses at most c (the
geometric mechanism, Ghosh, Roughgarden & Sundararajan 2009; Canonne, Kamath & Steinke
2020, Thm 4; the effective mu of docs/design.md §9).

The per-point filter bounds a unit's loss by the mean, over its (at most k) kept rows,
of the charges on their points (docs/design.md §7). A unit with m >= 1 kept rows in
the condition loses c <= (1/k) * m * (k c), so the request charges **k c** on every
point it covers: the mean-of-rows bound, and with it every unit's total within the
budget, keeps holding whatever mix of counts, statistics and ``units()`` is asked
(for zCDP the loss rho * 1[m >= 1] <= (1/k) * m * k rho; for GDP likewise in mu^2).
Without a privacy unit every unit is one row and the request is refused: ``count``
answers it.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpcurator.curator import requests
from dpcurator.curator.admission import Request
from dpcurator.curator.answers import Answer, Estimate
from dpcurator.curator.budget import Cost
from dpcurator.curator.timing import timed
from dpcurator.errors import BudgetExceeded, InvalidParameter
from dpcurator.mechanisms import DiscreteLaplaceNoise
from dpcurator.queries import Query
from dpcurator.queries.boolean import BooleanQuery

#: The refusal of ``units()`` on a curator without a privacy unit.
NO_UNIT = "no privacy unit: every row is its own unit, so count(...) counts them"


@dataclass(frozen=True)
class PreparedUnits:
    """A ``units()`` request validated and priced: the points it covers, the cost its
    noise is calibrated to (``cost``) and the amount charged on each point
    (``charged`` = k times the cost's additive amount)."""

    table: str
    covered: Query | BooleanQuery
    request: str
    cost: Cost
    charged: Fraction


def units_text(q: Query | BooleanQuery, given: bool) -> str:
    """The request as the ledger and the answer name it: ``units(origin = 'EWR')``, and
    ``units()`` without a condition."""
    return f"units({q.text})" if given and q.text else "units()"


class UnitRequests:
    """The curator's ``units()`` (mixed into :class:`~dpcurator.curator.Curator`)."""

    _k: int
    privacy_unit: Any
    budget: Any
    _backends: dict[str, Any]
    _rng: Any

    def _prepare_units(
        self,
        condition: str | Query | None = None,
        *,
        epsilon: object = None,
        rho: object = None,
        mu: object = None,
        table: str | None = None,
    ) -> PreparedUnits:
        """Validate and price a ``units()`` request; nothing is read or charged."""
        if self.privacy_unit is None:
            raise InvalidParameter(NO_UNIT)
        t = self._table(table)  # type: ignore[attr-defined]
        q = requests.canonical_query(condition, self._schema(t))  # type: ignore[attr-defined]
        cost = self.budget.cost(epsilon, rho, mu)
        charged = cost.amount * self._k
        if charged > self.budget.amount:
            cur = self.budget.currency
            raise BudgetExceeded(
                f"refused: units() at {cur}={self.budget.show(cost.amount)} charges "
                f"k = {self._k} times that on every point it covers, more than the whole "
                f"budget {self.budget.describe()}"
            )
        return PreparedUnits(t, q, units_text(q, condition is not None), cost, charged)

    def _planned_units(self, spec: Any, value: object, table: str) -> PreparedUnits:
        """A workload's ``units(...)`` line at its planned cost ``value``: charged that
        cost on every point it covers, its noise calibrated to a k-th of it (in the
        additive unit: for epsilon a count's noise at that cost), rounded down for mu
        (the k-th of mu^2 has an irrational square root)."""
        if self.privacy_unit is None:
            raise InvalidParameter(NO_UNIT)
        q = requests.canonical_query(spec.where, self._schema(table))  # type: ignore[attr-defined]
        charged = self.budget.cost(**{self.budget.currency: value}).amount
        share = charged / self._k
        param = share
        if self.budget.currency == "mu":
            param = Fraction(math.sqrt(float(share)))
            while param * param > share:
                param = Fraction(math.nextafter(float(param), 0.0))
        cost = Cost(param, self.budget.additive(param))
        return PreparedUnits(table, q, units_text(q, spec.where is not None), cost, charged)

    @timed
    def units(
        self,
        condition: str | Query | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
        _analyst: str | None = None,
    ) -> Answer:
        """A noisy number of distinct privacy units with a kept row satisfying
        ``condition`` (None: every unit with a kept row).

        The noise is a per-row count's at the given cost (sensitivity 1: one unit changes
        the number by at most 1), and the request charges k times that cost on every
        point the condition covers, so that every unit's loss stays within the budget
        (see the module docstring); the answer's ``cost`` is that charge."""
        p = self._prepare_units(condition, epsilon=epsilon, rho=rho, mu=mu, table=table)
        self._known(_analyst)  # type: ignore[attr-defined]
        noise, half = self._noise(p.cost, 1)  # type: ignore[attr-defined]
        noisy: list[int] = []

        def answer() -> list[object]:
            # counted and noised once admitted; released only once the charge is committed
            truth = int(self._backends[p.table].distinct_units(p.covered))
            noisy.append(truth + int(noise.sample(rng=self._rng)))
            return [{p.request: noisy[0]}]

        ((charge_id, _),) = self._charge(  # type: ignore[attr-defined]
            p.table,
            [Request(p.covered, p.charged, "units", p.request, str(noise))],
            _analyst,
            answer,
        )
        left = self._quick_remaining([p.covered], p.table, _analyst)[0]  # type: ignore[attr-defined]
        laplace = isinstance(noise, DiscreteLaplaceNoise)
        return Answer(
            p.request,
            noisy[0],
            "discrete_laplace" if laplace else "discrete_gaussian",
            float(noise.scale if laplace else noise.sigma),
            self.budget.display(p.charged),
            self.budget.currency,
            half,
            left.value,
            charge_id,
            left.exact,
        )

    def _estimate_units(self, args: dict[str, Any], analyst: str | None) -> Estimate:
        """:meth:`Curator.estimate` of ``units``: its charge, noise and admission now."""
        try:
            inspect.signature(self._prepare_units).bind(**args)
        except TypeError as err:  # an unknown or missing keyword
            raise InvalidParameter(f"units: {err}") from None
        p = self._prepare_units(**args)
        self._known(analyst)  # type: ignore[attr-defined]
        noise, half = self._noise(p.cost, 1)  # type: ignore[attr-defined]
        d = self._decide(p.table, p.covered, p.charged, analyst)  # type: ignore[attr-defined]
        laplace = isinstance(noise, DiscreteLaplaceNoise)
        return Estimate(
            kind="units",
            request=p.request,
            cells=1,
            cost=self.budget.display(p.charged),
            currency=self.budget.currency,
            noise="discrete_laplace" if laplace else "discrete_gaussian",
            noise_parameter=float(noise.scale if laplace else noise.sigma),
            expected_abs_error=noise.expected_abs(),
            half_width=half,
            admitted=d.admitted,
            exact=d.exact,
        )


class SessionUnits:
    """An analyst session's ``units()`` (mixed into
    :class:`~dpcurator.curator.AnalystSession`): the curator's, charged to her quota."""

    _c: Any
    name: str

    def units(self, condition: str | Query | None = None, **kw: Any) -> Answer:
        return self._c.units(condition, _analyst=self.name, **kw)
