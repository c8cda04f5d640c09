"""Workload releases: a whole workload planned (:func:`dpcurator.planner.make_plan`) and
released all or nothing, either as the asked queries' noisy counts (the direct
strategy, through :meth:`~dpcurator.curator.Curator.release`) or as a strategy's measured
tables, charged in one transaction, from which every asked answer is derived by least
squares (docs/answer.md, *Strategies*).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcurator import deadlines
from dpcurator.curator import requests
from dpcurator.curator.admission import Request
from dpcurator.curator.answers import Answer, DerivedAnswer
from dpcurator.curator.budget import exact_number
from dpcurator.curator.timing import timed
from dpcurator.errors import InvalidParameter, QueryError, TooLarge, WorkloadError
from dpcurator.mechanisms.noisy import noise_for_cost
from dpcurator.queries import Query, Schema, Workload, parse_workload_text
from dpcurator.queries.statistics import StatisticSpec

if TYPE_CHECKING:
    from dpcurator.planner import Plan


def _cells(wl: Workload, schema: Schema) -> int:
    """The cells a workload asks for in all, from its text and the public schema: one
    per count (a histogram's or marginal's cells are its counts), and a statistic
    line's groups (times candidates x quantiles for a quantile)."""
    stats = wl.statistics
    if not stats:
        return len(wl.queries)
    if not isinstance(stats, tuple) or len(stats) != len(wl.queries):
        raise WorkloadError("a workload's statistics must be one entry per query")
    total = 0
    for spec in stats:
        if spec is None:
            total += 1
        elif isinstance(spec, StatisticSpec):
            total += spec.cells(schema)
        else:
            raise WorkloadError("a workload's statistics must be StatisticSpec entries or None")
    return total


class WorkloadRequests:
    """The curator's workload releases (mixed into :class:`~dpcurator.curator.Curator`,
    whose validation, budget, noise, charging and counting they use)."""

    _k: int
    _rng: Any
    _backends: dict[str, Any]
    budget: Any
    limits: requests.RequestLimits

    @timed
    def release_workload(
        self,
        workload: str | Workload,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        allocation: str = "optimal",
        table: str | None = None,
        time_limit: float = 30.0,
        objective: str = "per-table",
        strategy: str = "auto",
        _analyst: str | None = None,
    ) -> tuple[Plan, list[Answer] | list[DerivedAnswer]]:
        """Plan a whole workload and release it, all or nothing.

        ``strategy`` (see :func:`dpcurator.planner.make_plan`): ``direct`` measures the
        asked queries and returns their noisy counts (:class:`Answer`); ``marginals``,
        ``identity`` and ``tree`` measure tables, charged like histograms in one
        transaction, and return every asked query's least-squares estimate
        (:class:`DerivedAnswer`); ``auto`` (the default) picks the least expected error.

        ``workload``: workload text (queries, ``histogram(...)``, ``marginal(...)``, one
        per line; never read as a file name) or a parsed :class:`Workload`. The cost,
        in the budget's currency, is this release's total (default: the whole budget);
        the plan spends at most what is left at the worst point of the domain (and of
        the analyst's quota), so the filter admits it everywhere. The planner chooses
        per-query costs (``sequential``, ``uniform`` or ``optimal``, the last minimising
        ``objective``: ``total``, ``per-table`` or ``max`` expected error; see
        :func:`dpcurator.planner.make_plan`) from public information only; the release
        then goes through :meth:`release`.
        """
        from dpcurator.planner import make_plan

        t = self._table(table)
        schema = self._schema(t)
        limit = self.limits.max_queries
        if isinstance(workload, Workload):
            wl = workload
        else:  # counted line by line before any line is expanded
            wl = parse_workload_text(workload, schema, max_queries=limit)
        if len(wl) == 0:
            raise InvalidParameter("the workload has no queries")
        if len(wl) > limit:
            raise TooLarge(
                f"a workload of {len(wl)} queries exceeds the limit max_queries = {limit}"
            )
        for q in wl.queries:
            if q.schema != schema:
                raise QueryError("the workload was parsed against another schema than this table's")
        self.limits.check_request(_cells(wl, schema), "this workload")
        if (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, int | float)
            or not (0 < time_limit <= 3600)
        ):
            raise InvalidParameter(
                f"time_limit must be a number of seconds in (0, 3600], got {time_limit!r}"
            )
        if epsilon is None and rho is None and mu is None:
            guarantee: Any = self.budget.guarantee
            total = self.budget.amount
        else:
            cost = self.budget.cost(epsilon, rho, mu)
            guarantee = self.budget.guarantee_of(float(cost.param))
            total = cost.amount
        # The whole release's cost on one count is the least noise any of its
        # measurements can have: refused up front if even that is beyond every sampler.
        noise_for_cost(self.budget.guarantee_of(self.budget.display(total)), self._k)
        left = self.remaining_detail(_analyst=_analyst)
        available = min(
            total,
            self.budget.additive(exact_number(left.value, "remaining"))
            if left.value > 0
            else Fraction(0),
        )
        if wl.statistics:  # statistics are measured themselves: the direct strategy
            if strategy not in ("auto", "direct"):
                raise InvalidParameter(
                    f"strategy {strategy!r} measures counts; a workload with statistics "
                    "(mean, quantile, ...) is released directly: use strategy='direct'"
                )
            strategy = "direct"
        plan = make_plan(
            wl.queries,
            wl.weights,
            guarantee,
            allocation,
            available=float(available) if available < total * (1 - Fraction(1, 10**12)) else None,
            time_limit=time_limit,
            objective=objective,
            strategy=strategy,
            # the plan's noises, and every expected error, interval and variance read
            # from them, are the ones added: a count's sensitivity is the unit's k
            sensitivity=self._k,
        )
        if plan.strategy is not None:
            return plan, self._release_strategy(plan, t, _analyst)
        if wl.statistics:
            return plan, self._release_mixed(plan, wl.statistics, t, _analyst)  # type: ignore[return-value]
        answers = self.release(
            list(plan.queries), list(plan.values), table=t, kind="workload", _analyst=_analyst
        )
        return plan, answers

    def _release_strategy(self, plan: Plan, t: str, analyst: str | None) -> list[DerivedAnswer]:
        """Charge every measured table of ``plan``'s strategy in one transaction (each on
        its pieces: the points where its cells cost the same, every point for a table
        that partitions the domain, like a histogram), count its cells, form and noise
        its rows, and derive every asked answer by least squares."""
        from statistics import NormalDist

        sp = plan.strategy
        assert sp is not None
        self._known(analyst)
        schema = self._schema(t)
        cur = self.budget.currency
        everywhere = Query(schema, (), "total")
        for m in sp.measurements:  # every limit before any cell is built
            if max(len(m.cells), m.rows) > self.limits.max_cells:
                raise TooLarge(
                    f"the strategy's table {m.label} has {max(len(m.cells), m.rows)} cells, "
                    f"over the limit max_cells = {self.limits.max_cells}"
                )
        noises, cells = [], []
        for m in sp.measurements:  # every noise before the charge
            cost = self.budget.cost(**{cur: m.value})
            noise, _ = self._noise(cost, 1)
            if noise != m.noise:  # the planned variances assume exactly this noise
                raise InvalidParameter(f"internal error: {m.label}: noise differs from the plan")
            qs = []
            for i, c in enumerate(m.cells):
                if i % 1024 == 0:
                    deadlines.check()  # a request's deadline (see dpcurator.deadlines)
                qs.append(Query.from_coverages(schema, c))
            noises.append(noise)
            cells.append(qs)
        pieces = sp.charges(schema, plan.budget)
        batch = []
        for piece in pieces:
            m = sp.measurements[piece.measurement]
            unit = self.budget.cost(**{cur: m.value}).amount
            if piece.additive != unit * piece.factor:
                raise InvalidParameter(f"internal error: {m.label}: a charge differs from the plan")
            batch.append(
                Request(piece.region, piece.additive, "strategy", piece.label, str(piece.noise))
            )
        if len(batch) > self.limits.max_charges:
            raise TooLarge(
                f"the strategy makes {len(batch)} charges, over the limit max_charges = "
                f"{self.limits.max_charges}"
            )
        flat = [q for qs in cells for q in qs]
        estimates: list[float] = []

        def answers() -> list[object]:
            # counted, noised and reconstructed once admitted; released once committed
            truth = np.asarray(self._backends[t].counts(flat), np.int64)
            noisy, start = [], 0
            for m, qs, noise in zip(sp.measurements, cells, noises, strict=True):
                rows = m.measure(truth[start : start + len(qs)])
                drawn = np.atleast_1d(noise.sample(size=len(rows), rng=self._rng)).astype(np.int64)
                noisy.append(rows + drawn)
                start += len(qs)
            estimates.extend(float(v) for v in sp.reconstruct(noisy))
            texts = [q.text or "total" for q in plan.queries]
            records: list[object] = []
            first = {}
            for i, piece in enumerate(pieces):
                first.setdefault(piece.measurement, i)
            for i, piece in enumerate(pieces):
                j = piece.measurement
                m, qs, y = sp.measurements[j], cells[j], noisy[j]
                rec: dict[str, object] = {
                    "strategy": sp.name,
                    # i-th of n charges written consecutively in one transaction: the
                    # release's charges are ids (this one - i) .. (this one - i + n - 1)
                    "part": [i, len(pieces)],
                }
                if first[j] != i:  # another weight level of a measurement recorded above
                    rec["piece of"] = first[j]
                elif m.weights is None:
                    rec["cells"] = {q.text: int(v) for q, v in zip(qs, y, strict=True)}
                else:  # the rows, and what each is: re-derivable from the weights
                    rec["cells"] = {f"row {r + 1}": int(v) for r, v in enumerate(y)}
                    rec["weights"] = {"cells": [q.text for q in qs], **m.weights.to_json()}
                if i == 0:  # the asked answers, derived from every charge of the release
                    rec["derived"] = dict(zip(texts, estimates, strict=True))
                records.append(rec)
            return records

        charged = self._charge(t, batch, analyst, answers)
        ids = tuple(cid for cid, _ in charged)
        texts = [q.text or "total" for q in plan.queries]
        # What is left after the release is reported at the worst point of the table (on
        # any query's points, at least this is left).
        left = self._quick_remaining([everywhere], t, analyst)[0].value
        z = NormalDist().inv_cdf(0.975)
        return [
            DerivedAnswer(
                tx,
                float(v),
                float(var),
                z * math.sqrt(max(float(var), 0.0)),
                sp.name,
                cur,
                left,
                ids,
            )
            for tx, v, var in zip(texts, estimates, sp.variances, strict=True)
        ]
