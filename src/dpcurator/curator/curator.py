"""The curator: the only place where data, noise and budget meet.

Every released number passes through :meth:`Curator._release` (or the batch
:meth:`Curator.release`), which (1) validates the request completely and prepares its
noise, checking every limit (:mod:`dpcurator.curator.requests`), (2) checks and charges
the overlap-aware filter in one ledger transaction that commits to disk
(:mod:`dpcurator.curator.admission`), and only then (3) counts, (4) adds exact noise and
(5) records the answer. Bad input raises before step 2 and charges nothing; a refusal
(:class:`~dpcurator.errors.BudgetExceeded`) depends only on the public queries and
costs (Dwork & Roth 2014, Lemma 2.6).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcurator import deadlines
from dpcurator.curator import requests
from dpcurator.curator.admission import (
    Refused,
    Request,
    check_and_charge,
    query_of,
    revalidate,
)
from dpcurator.curator.answers import Answer, DerivedAnswer, Estimate, HistoryEntry, TableAnswer
from dpcurator.curator.budget import Budget, Cost, exact_number
from dpcurator.curator.counting_requests import CountingRequests, Prepared
from dpcurator.curator.group_commit import GroupCommit
from dpcurator.curator.ledger import ChargeRow, Ledger
from dpcurator.curator.opening import CuratorOpening
from dpcurator.curator.overlap_filter import (
    SOLVER_TIME_LIMIT,
    Charge,
    Decision,
    OverlapFilter,
)
from dpcurator.curator.privacy_unit import PrivacyUnit
from dpcurator.curator.remaining_requests import Remaining, RemainingRequests
from dpcurator.curator.solver_pool import SolverPool
from dpcurator.curator.solver_processes import SolverProcesses
from dpcurator.curator.sql_requests import SqlRequests
from dpcurator.curator.statistic_requests import SessionStatistics, StatisticRequests
from dpcurator.curator.statistics import STATISTICS
from dpcurator.curator.timing import timed as _timed
from dpcurator.curator.turns import Turns
from dpcurator.curator.unit_requests import SessionUnits, UnitRequests
from dpcurator.curator.workload_requests import WorkloadRequests
from dpcurator.deadlines import Deadline
from dpcurator.errors import (
    BudgetExceeded,
    InvalidParameter,
    LedgerError,
    TooLarge,
)
from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise, noise_for_cost
from dpcurator.mechanisms.randomness import RandomSource
from dpcurator.queries import Query, Schema, Workload
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.sql.result import SqlResult

if TYPE_CHECKING:
    from dpcurator.planner import Plan


def _in_units(value: int, unit: Fraction) -> int | float:
    """A noisy integer counted in ``unit`` as the attribute's number (an int when the
    unit is 1; a float sum's, the float of its exact decimal)."""
    return value if unit == 1 else float(value * unit)


def _describe(noise: object) -> tuple[str, float]:
    """The released noise's name and parameter (scale or sigma)."""
    if isinstance(noise, DiscreteLaplaceNoise):
        return "discrete_laplace", float(noise.scale)
    assert isinstance(noise, DiscreteGaussianNoise)
    return "discrete_gaussian", float(noise.sigma)


#: The requests released as noisy counts (the others are :data:`STATISTICS`).
_COUNTING_KINDS = ("count", "histogram", "marginal", "sum")


class Curator(
    CuratorOpening,
    CountingRequests,
    StatisticRequests,
    WorkloadRequests,
    UnitRequests,
    SqlRequests,
    RemainingRequests,
):
    """Answers counts, histograms, marginals, sums, means, variances, standard deviations,
    quantiles and (with a privacy unit) distinct units under one overlap-aware budget."""

    def __init__(
        self,
        backends: Mapping[str, Any],
        budget: Budget,
        ledger: Ledger,
        *,
        rng: RandomSource,
        privacy_unit: PrivacyUnit | None = None,
        solver_time_limit: float = SOLVER_TIME_LIMIT,
        limits: requests.RequestLimits | None = None,
        request_time_limit: float | None = None,
        solver_threads: int = 4,
        solver_processes: bool = True,
    ) -> None:
        self._backends = dict(backends)
        #: Tables joined on the privacy unit (``a JOIN b``), built at their first SELECT.
        self._joins: dict[str, Any] = {}
        self._join_lock = threading.Lock()
        self._sql_parsed: OrderedDict[str, Any] = OrderedDict()  # SELECTs read (sql_requests)
        self.limits = limits or requests.RequestLimits()
        self.budget = budget
        self._ledger = ledger
        self._rng = rng
        #: Whom a cost protects (None: each row); its k is every count's sensitivity.
        self.privacy_unit = privacy_unit
        self._k = 1 if privacy_unit is None else privacy_unit.max_rows
        self._time_limit = solver_time_limit
        self._request_limit = request_time_limit
        self._pool = SolverPool(solver_threads)
        # the exact checks' search, in worker processes (see solver_processes)
        self._processes = SolverProcesses(solver_threads) if solver_processes else None
        self._stopping = threading.Event()  # set by close(): requests in flight stop
        self._turns = Turns()  # how many requests run Python at once (see turns)
        self._filter = OverlapFilter(budget.amount, budget.currency)
        if self._processes is not None:
            self._filter.solve = self._processes.max_loss
        self._commits = GroupCommit(ledger, self._filter, self._sync, self._quota, revalidate)
        with ledger.lock:
            self._load_checkpoint()
            self._sync()

    def warm_solvers(self) -> None:
        """Start the first exact-check worker process now, in the background, so that no
        exact check ever searches in a request's thread (where it would hold the
        interpreter lock every other request needs); a server calls it as it starts.
        Without it the first check of a one-off command runs in its own thread while
        the worker starts. Nothing if the checks run in threads
        (``solver_processes=False``)."""
        if self._processes is not None:
            self._processes.warm()

    def stop(self) -> None:
        """Refuse new requests and those in flight that are not charged yet (at their
        next deadline check, :class:`~dpcurator.errors.Undecided`, nothing charged);
        requests already charged finish and are answered. A server calls it as soon as
        it is asked to shut down."""
        self._stopping.set()

    def close(self) -> None:
        """Stop the requests in flight (see :meth:`stop`), then close the data and the
        ledger."""
        self.stop()
        self._pool.close()
        if self._processes is not None:
            self._processes.close()
        for be in [*self._backends.values(), *self._joins.values()]:
            be.close()
        self._ledger.close()

    def _deadline(self) -> Deadline:
        """The deadline of a request starting now (see ``request_time_limit``)."""
        return Deadline.after(self._request_limit)

    def __enter__(self) -> Curator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ledger(self) -> Ledger:
        """The durable ledger (charges, analysts, credentials)."""
        return self._ledger

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self._backends)

    def load_reports(self) -> dict[str, Any]:
        """What loading did to each table (rows read, kept, dropped, replaced): for the
        data custodian only, since it depends on the data; None for a backend without
        a report."""
        return {name: getattr(be, "report", None) for name, be in self._backends.items()}

    def schema(self, table: str | None = None) -> Schema:
        """The public schema of ``table`` (or of the only table)."""
        return self._schema(self._table(table))

    def add_analyst(self, name: str, *, quota: float | None = None, admin: bool = False) -> str:
        """Register an analyst with a new bearer token for the HTTP service and return
        it (shown once: the ledger keeps only its hash). An analyst who already has a
        token gets a new one; the old one stops working."""
        name = requests.analyst_name(name)
        q = None if quota is None else self.budget.additive(exact_number(quota, "quota"))
        if not isinstance(admin, bool):
            raise InvalidParameter(f"admin must be true or false, got {admin!r}")
        with self._ledger.lock:
            return self._ledger.add_credential(name, quota=q, admin=admin)

    # --- the filter's state ------------------------------------------------------------

    def _sync(self) -> None:
        """Read charges committed by other processes (or before a restart); call it with
        the ledger's lock held."""
        with self._filter.changing:
            for row in self._ledger.charges_after(self._filter.last_id):
                self._filter.add(self._charge_of(row))
            self._filter.synced_at = time.monotonic()

    def _load_checkpoint(self) -> None:
        """Start the filter from the ledger's last checkpoint, if it opened at one."""
        opened = self._ledger.at_checkpoint()
        if opened is None:
            return
        try:
            self._filter.load(
                opened.segments,
                opened.summary,
                opened.upto,
                self._schema,
                lambda schema, coverage: query_of(schema, coverage, ""),
            )
        except (ValueError, TypeError) as err:
            raise LedgerError(
                f"ledger {self._ledger.path}: its last checkpoint does not fit the schemas "
                f"({err}); restore the ledger from a backup"
            ) from None

    def _charge_of(self, row: ChargeRow) -> Charge:
        q = query_of(self._schema(row.table), row.coverage, row.request)
        return Charge(row.id, row.table, row.analyst, q, row.cost, row.level)

    def _known(self, analyst: str | None) -> None:
        """Refuse an unknown analyst before anything else. The quota as last read (no
        wait for a commit being written: the charge's transaction reads it again)."""
        self._quota(analyst, fresh=False)

    def _quota(self, analyst: str | None, *, fresh: bool = True) -> Fraction | None:
        if analyst is None:
            return None
        quota = self._ledger.quota(analyst, fresh=fresh)
        if quota is False:
            raise InvalidParameter(f"unknown analyst {analyst!r}")
        return quota  # type: ignore[return-value]

    def _table(self, table: object) -> str:
        return requests.table_name(table, list(self._backends))

    def _schema(self, table: str) -> Schema:
        be = self._backends.get(table)
        if be is not None:
            return be.schema
        return self._joined_schema(table).schema  # a join on the unit (see sql_requests)

    # --- noise, prepared before anything is charged ------------------------------------

    def _noise(self, cost: Cost, sensitivity: int) -> tuple[Any, int]:
        """Exact noise that never spends more than the exact cost the ledger charges, and
        its 95% half-width; every limit is checked here, before the charge.

        The noise is calibrated to the cost's float (epsilon 0.1 gives scale exactly 10);
        when that float lies above the exact cost (the float 0.1 is 1/10 + 5.5e-18) and
        the exact check cannot confirm the noise, it is recalibrated to the largest float
        below the exact cost, which only adds noise.
        """
        param = float(cost.param)
        noise = noise_for_cost(self.budget.guarantee_of(param), sensitivity)
        if not self._spends_at_most(noise, sensitivity, cost.amount):
            below = param
            if Fraction(below) > cost.param:
                below = math.nextafter(below, 0.0)
            noise = noise_for_cost(self.budget.guarantee_of(below), sensitivity)
        return noise, noise.interval(0.05)

    def _spends_at_most(self, noise: object, sensitivity: int, charged: Fraction) -> bool:
        """Whether the noise's exact privacy cost is within what the ledger charges."""
        cur = self.budget.currency
        if cur == "epsilon" and isinstance(noise, DiscreteLaplaceNoise):
            return Fraction(sensitivity) / noise.scale <= charged
        if cur == "rho" and isinstance(noise, DiscreteGaussianNoise):
            return Fraction(sensitivity * sensitivity) / (2 * noise.sigma**2) <= charged
        return False  # GDP's effective mu is a float: always calibrate from below

    # --- check, charge, count, noise ----------------------------------------------------

    def _charge(
        self,
        table: str,
        batch: Sequence[Request],
        analyst: str | None,
        answers: Callable[[], Sequence[object]] | None = None,
    ) -> list[tuple[int, Decision]]:
        """Check and charge every request of ``batch`` in one committed transaction, or
        none; a refusal raises :class:`BudgetExceeded`, which reads only the public
        queries and costs. ``answers()`` (see :func:`check_and_charge`) makes the
        answers recorded with the charges, once the batch is admitted."""
        try:
            return check_and_charge(
                self._commits,
                self._ledger,
                self._filter,
                self._sync,
                self._quota,
                table,
                batch,
                analyst,
                solver_time_limit=self._time_limit,
                pool=self._pool,
                deadline=deadlines.current(),
                answers=answers,
            )
        except Refused as no:
            raise self._refusal(batch, no, analyst) from None

    def _refusal(
        self, batch: Sequence[Request], no: Refused, analyst: str | None
    ) -> BudgetExceeded:
        d, r = no.decision, batch[no.index]
        cur = self.budget.currency
        what = (
            f"{r.request!r}"
            if len(batch) == 1
            else f"query {no.index + 1} of the batch ({r.request!r})"
        )
        left = self.budget.show(max(Fraction(0), d.limit - d.spent))
        whose = (
            f"the budget {self.budget.describe()}"
            if d.by == "budget"
            else f"analyst {analyst!r}'s quota {self.budget.show(d.limit)}"
        )
        bound = "" if d.exact else " (at most: the exact check did not finish in its time limit)"
        tail = "; nothing in the batch was charged" if len(batch) > 1 else ""
        return BudgetExceeded(
            f"refused: {what} costs {self.budget.show(r.cost)} {cur}, but the points it covers "
            f"have {left}{bound} left of {whose}{tail}"
        )

    def _release(self, p: Prepared, analyst: str | None) -> tuple[int, float, list[Answer]]:
        """Charge one prepared request, then count, add noise and record the answer."""
        self._known(analyst)  # an unknown analyst is an error before anything else
        noise, half = self._noise(p.cost, p.sensitivity * self._k)  # every limit first
        noisy: list[int] = []

        def answer() -> list[object]:
            # counted and noised once admitted; released only once the charge is committed
            be = self._backends[p.table]
            if p.kind == "sum":
                got = be.clipped_sum(p.attribute, p.lower, p.upper, p.covered, unit=p.unit)
                truth = [int(got)]
            else:
                truth = [int(v) for v in be.counts(list(p.cells))]
            drawn = np.atleast_1d(noise.sample(size=len(p.cells), rng=self._rng))
            noisy.extend(t + int(z) for t, z in zip(truth, drawn, strict=True))
            return [dict(zip(p.labels, noisy, strict=True))]

        ((charge_id, _),) = self._charge(
            p.table,
            [Request(p.covered, p.cost.amount, p.kind, p.request, str(noise))],
            analyst,
            answer,
        )
        name, param = _describe(noise)
        left = self._quick_remaining([p.covered], p.table, analyst)[0]
        cost = self.budget.display(p.cost.amount)
        cur = self.budget.currency
        answers = [
            Answer(
                label,
                _in_units(v, p.unit),
                name,
                param * float(p.unit),
                cost,
                cur,
                _in_units(half, p.unit),  # type: ignore[arg-type]
                left.value,
                charge_id,
                left.exact,
            )
            for label, v in zip(p.labels, noisy, strict=True)
        ]
        return charge_id, left, answers

    def _table_answer(self, p: Prepared, analyst: str | None) -> TableAnswer:
        """Disjoint cells of one histogram or marginal: one charge on their union."""
        charge_id, left, answers = self._release(p, analyst)
        return TableAnswer(
            p.request,
            tuple(answers),
            self.budget.display(p.cost.amount),
            self.budget.currency,
            left.value,
            charge_id,
            left.exact,
        )

    # --- the analyst's requests ---------------------------------------------------------

    @_timed
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
        p = self._prepare_count(query, epsilon=epsilon, rho=rho, mu=mu, table=table)
        return self._release(p, _analyst)[2][0]

    @_timed
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
        covers (Smith et al. 2022, Thm 5), not once per bin.
        """
        p = self._prepare_histogram(
            attribute, bins, where=where, epsilon=epsilon, rho=rho, mu=mu, table=table
        )
        return self._table_answer(p, _analyst)

    @_timed
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
        p = self._prepare_marginal(
            attributes, where=where, epsilon=epsilon, rho=rho, mu=mu, table=table
        )
        return self._table_answer(p, _analyst)

    @_timed
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
        p = self._prepare_sum(
            attribute, lower, upper, where, epsilon=epsilon, rho=rho, mu=mu, table=table
        )
        return self._release(p, _analyst)[2][0]

    @_timed
    def estimate(self, kind: str, _analyst: str | None = None, **args: Any) -> Estimate:
        """What a request would cost and how accurate it would be, and whether it would
        be admitted now; charges nothing and reads no data.

        ``kind`` is ``count``, ``histogram``, ``marginal``, ``sum``, ``mean``,
        ``variance``, ``stdev``, ``quantile``, ``quantiles``, ``median`` or ``units``; ``args`` are
        that method's keyword arguments (``estimate("count", query="age < 30",
        epsilon=0.1)``).
        """
        if kind in STATISTICS:
            return self._estimate_statistic(kind, args, _analyst)
        if kind == "units":
            return self._estimate_units(args, _analyst)
        if kind not in _COUNTING_KINDS:
            kinds = ", ".join((*_COUNTING_KINDS, *STATISTICS, "units"))
            raise InvalidParameter(f"kind must be one of {kinds}, got {kind!r}")
        p = self._prepare(kind, args)
        self._known(_analyst)
        noise, half = self._noise(p.cost, p.sensitivity * self._k)
        d = self._decide(p.table, p.covered, p.cost.amount, _analyst)
        name, param = _describe(noise)
        return Estimate(
            kind=p.kind,
            request=p.request,
            cells=len(p.cells),
            cost=self.budget.display(p.cost.amount),
            currency=self.budget.currency,
            noise=name,
            noise_parameter=param * float(p.unit),
            expected_abs_error=noise.expected_abs() * float(p.unit),
            half_width=_in_units(half, p.unit),
            admitted=d.admitted,
            exact=d.exact,
        )

    def _decide(
        self, table: str, covered: Query | BooleanQuery, amount: Fraction, analyst: str | None
    ) -> Decision:
        """Whether the filter (and the analyst's quota) would admit ``amount`` on the
        points of ``covered`` now: by the bounds, or else the exact check in the pool."""
        with self._ledger.lock:
            self._sync()
            quota = self._quota(analyst)
            fork = self._filter.fork()

        def decide(deadline: float | None) -> Decision | None:
            return fork.decide(
                table, covered, amount, analyst=analyst, quota=quota, deadline=deadline
            )

        d = decide(None)
        if d is None:
            d = self._pool.run(
                lambda: decide(time.monotonic() + self._time_limit), analyst, deadlines.current()
            )
        assert d is not None
        return d

    @_timed
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
        all or nothing: either every query passes the filter (and the analyst's quota)
        and is charged, in one committed transaction, or none is (:class:`BudgetExceeded`
        names the first that does not fit). All counts are then taken in one scan."""
        t = self._table(table)
        schema = self._schema(t)
        if not isinstance(kind, str) or not kind.isidentifier():
            raise InvalidParameter(f"kind must be a short identifier, got {kind!r}")
        raw_queries = requests.bounded_list(
            queries, self.limits.max_queries, "queries", "max_queries"
        )
        raw_costs = requests.bounded_list(costs, self.limits.max_queries, "costs", "max_queries")
        if len(raw_queries) > self.limits.max_charges:
            raise TooLarge(
                f"a batch of {len(raw_queries)} queries would write as many ledger rows, over "
                f"the limit max_charges = {self.limits.max_charges}"
            )
        self.limits.check_request(len(raw_queries), f"a batch of {len(raw_queries)} queries")
        if len(raw_costs) != len(raw_queries):
            raise InvalidParameter(f"got {len(raw_costs)} costs for {len(raw_queries)} queries")
        if not raw_queries:
            raise InvalidParameter("a release needs at least one query")
        qs = [requests.canonical_query(q, schema) for q in raw_queries]
        cur = self.budget.currency
        priced = [self.budget.cost(**{cur: c}) for c in raw_costs]
        self._known(_analyst)
        prepared: dict[Fraction, tuple[Any, int]] = {}
        for c in priced:  # every noise and its limits before the charge
            if c.param not in prepared:
                prepared[c.param] = self._noise(c, self._k)
        batch = [
            Request(q, c.amount, kind, q.text or "total", str(prepared[c.param][0]))
            for q, c in zip(qs, priced, strict=True)
        ]
        noisy: list[int] = []

        def answers() -> list[object]:
            # counted (one scan) and noised once admitted; released once committed
            noisy.extend(int(v) for v in self._backends[t].counts(qs))
            by_noise: dict[Fraction, list[int]] = {}
            for i, c in enumerate(priced):
                by_noise.setdefault(c.param, []).append(i)
            for param, idx in by_noise.items():  # one vectorised draw per distinct noise
                draws = np.atleast_1d(prepared[param][0].sample(size=len(idx), rng=self._rng))
                for i, z in zip(idx, draws, strict=True):
                    noisy[i] += int(z)
            return [{q.text or "total": noisy[i]} for i, q in enumerate(qs)]

        charged = self._charge(t, batch, _analyst, answers)
        remaining = self._quick_remaining(qs, t, _analyst)
        answers = []
        for i, (q, c, (charge_id, _)) in enumerate(zip(qs, priced, charged, strict=True)):
            noise, half = prepared[c.param]
            name, param = _describe(noise)
            answers.append(
                Answer(
                    q.text or "total",
                    noisy[i],
                    name,
                    param,
                    self.budget.display(c.amount),
                    cur,
                    half,
                    remaining[i].value,
                    charge_id,
                    remaining[i].exact,
                )
            )
        return answers

    def analyst(self, name: str, quota: float | None = None) -> AnalystSession:
        """A session whose spending counts against its own quota (in the budget's
        currency, overlap-aware like the budget) and the global budget.

        A new analyst gets ``quota`` (None: no quota of her own). For a known analyst,
        ``quota=None`` (or her quota itself) keeps the quota the ledger holds, and another
        quota is refused: a quota, once set, holds until :meth:`set_quota` changes it.
        """
        name = requests.analyst_name(name)
        q = None if quota is None else self.budget.additive(exact_number(quota, "quota"))
        with self._ledger.lock:
            self._ledger.register_analyst(name, q)
        return AnalystSession(self, name)

    def set_quota(self, name: str, quota: float | None) -> None:
        """Set (or with None, remove) an analyst's quota, registering her if new."""
        name = requests.analyst_name(name)
        q = None if quota is None else self.budget.additive(exact_number(quota, "quota"))
        with self._ledger.lock:
            self._ledger.set_quota(name, q)


class AnalystSession(SessionStatistics, SessionUnits):
    """The curator seen by one analyst: same requests, charged to the analyst's quota too."""

    def __init__(self, curator: Curator, name: str) -> None:
        self._c = curator
        self.name = name

    def count(self, query: str | Query | None = None, **kw: Any) -> Answer:
        return self._c.count(query, _analyst=self.name, **kw)

    def sql(self, query: str) -> SqlResult:
        return self._c.sql(query, _analyst=self.name)

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

    def release(
        self, queries: Sequence[str | Query], costs: Sequence[float], **kw: Any
    ) -> list[Answer]:
        return self._c.release(queries, costs, _analyst=self.name, **kw)

    def estimate(self, kind: str, **args: Any) -> Estimate:
        return self._c.estimate(kind, _analyst=self.name, **args)

    def release_workload(
        self, workload: str | Workload, **kw: Any
    ) -> tuple[Plan, list[Answer] | list[DerivedAnswer]]:
        return self._c.release_workload(workload, _analyst=self.name, **kw)

    def remaining(self, query: str | Query | None = None, **kw: Any) -> float:
        return self._c.remaining(query, _analyst=self.name, **kw)

    def remaining_detail(self, query: str | Query | None = None, **kw: Any) -> Remaining:
        return self._c.remaining_detail(query, _analyst=self.name, **kw)

    def history(self) -> list[HistoryEntry]:
        return self._c.history(_analyst=self.name)
