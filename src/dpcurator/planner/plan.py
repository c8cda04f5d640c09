"""A release plan: costs, noise, expected errors and the final guarantee (docs/design.md §8).

Pure: queries and a budget in, numbers out. The release itself (charging, counting,
noise) is :meth:`dpcurator.curator.Curator.release`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.allocation import ALLOCATIONS, Allocation, allocate
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import (
    STRATEGIES,
    Candidate,
    StrategyPlan,
    direct_lower_bound,
    evaluate,
    figures,
)
from dpcurator.privacy import GDP, ZCDP, ApproxDP, PureDP
from dpcurator.privacy.filters import exact
from dpcurator.queries import OverlapResult, Query, max_overlap
from dpcurator.queries.workload import WEIGHT_RANGE

#: What the optimal allocation may minimise (see :func:`make_plan`).
OBJECTIVES = ("total", "per-table", "max")


@dataclass(frozen=True)
class FinalGuarantee:
    """The privacy of the whole release, with all parameters fixed in advance.

    ``epsilon``/``delta`` (pure or approximate DP), ``rho`` (zCDP) or ``mu`` (GDP) as the
    budget's kind; ``worst_point`` is a point whose queries' costs add up to the most
    (``worst_queries`` of them); ``theorem`` names what proves it. ``total`` is that
    point's total in the budget's additive currency (epsilon, rho or mu^2), exactly: the
    sum of the exact costs the ledger charges, so that the guarantee a summary prints and
    what the ledger says was spent are one figure, rounded one way.
    """

    kind: str  # "pure", "approx", "zcdp", "gdp"
    epsilon: float | None
    delta: float | None
    rho: float | None
    mu: float | None
    theorem: str
    worst_point: dict[str, Any]
    worst_queries: int
    certified: bool  # the worst point's total came from the exact overlap solver
    within_budget: bool
    total: Fraction | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind,
            "theorem": self.theorem,
            "worst_point": self.worst_point,
            "worst_point_queries": self.worst_queries,
            "certified": self.certified,
            "within_budget": self.within_budget,
        }
        for k in ("epsilon", "delta", "rho", "mu"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.total is not None:
            d["total_exact"] = str(self.total)
        return d

    def describe(self) -> str:
        if self.kind == "pure":
            return f"{self.epsilon:.6g}-DP"
        if self.kind == "approx":
            return f"({self.epsilon:.6g}, {self.delta:g})-DP"
        if self.kind == "zcdp":
            return f"{self.rho:.6g}-zCDP"
        return f"{self.mu:.6g}-GDP"


@dataclass(frozen=True)
class Plan:
    """Everything decided before the data is touched."""

    queries: tuple[Query, ...]
    weights: tuple[float, ...]
    budget: PlanBudget
    allocation: Allocation
    values: tuple[float, ...]  # per-query cost in the budget's currency (mu, not mu^2)
    noises: tuple[Any, ...]  # the exact noise each answer gets (at budget.sensitivity)
    gamma: float  # unweighted maximum overlap
    gamma_exact: bool
    gamma_witness: dict[str, Any]
    expected_abs: dict[str, float]  # total expected |noise| per allocation, as added
    expected_sq: dict[str, float]  # total variance per allocation, as added
    guarantee: FinalGuarantee
    alternative: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())
    objective: str = "per-table"  # what the optimal allocation minimised
    #: every allocation computed (sequential, uniform, and optimal when computed)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    #: the chosen strategy when it is not ``direct`` (None: the asked queries are
    #: measured at ``values``), and every candidate's figures
    strategy: StrategyPlan | None = None
    candidates: tuple[Candidate, ...] = ()
    #: the queries' unit-weight maximum overlap (``gamma`` and its witness), kept so that
    #: other allocations of the same queries need not solve it again
    overlap: OverlapResult | None = field(default=None, compare=False, repr=False)

    @property
    def strategy_name(self) -> str:
        return "direct" if self.strategy is None else self.strategy.name

    def answer_variances(self) -> np.ndarray:
        """The exact variance of every released answer (the noisy count's for direct,
        the least-squares estimate's for another strategy)."""
        if self.strategy is not None:
            return self.strategy.variances.copy()
        cache: dict[int, float] = {}
        return np.array(
            [
                cache.setdefault(id(n), n.variance()) if id(n) not in cache else cache[id(n)]
                for n in self.noises
            ]
        )

    @property
    def utility_gain(self) -> float:
        """U = 1 - E_plan / E_sequential (Smith et al. 2022), E = expected total |noise|."""
        seq = self.expected_abs["sequential"]
        return 1.0 - self.expected_abs[self.allocation.name] / seq if seq > 0 else 0.0

    def additive_costs(self) -> np.ndarray:
        return np.array([self.budget.additive(v) for v in self.values])


def _values(budget: PlanBudget, costs: np.ndarray) -> tuple[float, ...]:
    """Each cost as charged (rounded down in the budget's unit); a table's cells share
    one cost, so each distinct cost is rounded once."""
    distinct, where = np.unique(np.asarray(costs, float), return_inverse=True)
    rounded = [budget.value(float(c)) for c in distinct]
    return tuple(rounded[i] for i in np.ravel(where))


def _noises(budget: PlanBudget, values: Sequence[float]) -> tuple[Any, ...]:
    cache: dict[float, Any] = {}
    return tuple(
        cache.setdefault(v, budget.noise(v)) if v not in cache else cache[v] for v in values
    )


def _totals(noises: Sequence[Any]) -> tuple[float, float]:
    abs_cache: dict[int, tuple[float, float]] = {}
    ea = ev = 0.0
    for n in noises:
        k = id(n)
        if k not in abs_cache:
            abs_cache[k] = (n.expected_abs(), n.variance())
        a, v = abs_cache[k]
        ea += a
        ev += v
    return ea, ev


def _exact_additive(budget: PlanBudget, value: float) -> Fraction:
    """The additive amount the curator charges for a planned value, exactly."""
    return exact(value) ** 2 if budget.currency == "mu" else exact(value)


def _guarantee(
    queries: Sequence[Query],
    budget: PlanBudget,
    additive: Sequence[Fraction],
    noises: Sequence[Any] | None,
    time_limit: float | None,
) -> FinalGuarantee:
    """The tightest rigorous statement for the release, over the worst point's queries.

    ``additive``: what each query costs in the additive unit, exactly (the curator
    charges the decimals' exact values); ``noises``: each query's noise, for the (eps,
    delta) accountants that read the mechanisms themselves (None: a count of
    sensitivity 1 is not what every query is, as for weighted measurements' pieces:
    only the additive theorem applies)."""
    res = max_overlap(queries, weights=[float(a) for a in additive], time_limit=time_limit)
    idx = list(res.witness_queries)
    # the worst point's total, exactly
    exact_sum = sum((additive[i] for i in idx), Fraction(0))
    total = float(res.value if res.exact else res.upper_bound)
    # The exact total: the witness's exact costs, unless the solver's figure is above
    # them by more than its own float rounding (an upper bound, not a witness's sum).
    solver = Fraction(total)
    exact_total = exact_sum if solver <= exact_sum * (1 + Fraction(1, 10**12)) else solver
    total = max(total, float(exact_sum))
    within = total <= budget.amount
    point = dict(res.witness)
    cert = bool(res.exact)
    g = budget.guarantee
    parallel = (
        "parallel composition over the maximum overlap (Smith et al. 2022, Thm 5 and the "
        "maximum weighted overlap): only the queries covering one point compose"
    )
    if noises is None:
        parallel += (
            "; a weighted measurement's rows of weight k at a point cost it |k| (pure DP) "
            "or k^2 (zCDP, GDP in mu^2) times their unit, charged per column norm"
        )
    k = budget.sensitivity
    if isinstance(g, PureDP):
        return FinalGuarantee(
            "pure",
            total,
            0.0,
            None,
            None,
            f"{parallel}; basic composition of pure DP at the worst point, eps = sum eps_q "
            "(Dwork & Roth 2014, Thm 3.16); discrete Laplace is "
            + ("(1/scale)-DP" if k == 1 else f"({k}/scale)-DP on a count of sensitivity {k}"),
            point,
            len(idx),
            cert,
            within,
            exact_total,
        )
    if isinstance(g, ZCDP):
        return FinalGuarantee(
            "zcdp",
            None,
            None,
            total,
            None,
            f"{parallel}; zCDP composition at the worst point, rho = sum rho_q (Bun & Steinke "
            "2016, Lemma 1.7); discrete Gaussian is "
            + ("1/(2 sigma^2)" if k == 1 else f"{k * k}/(2 sigma^2)")
            + "-zCDP (Canonne, Kamath & Steinke 2020)"
            + ("" if k == 1 else f" on a count of sensitivity {k}"),
            point,
            len(idx),
            cert,
            within,
            exact_total,
        )
    if isinstance(g, GDP):
        mu = math.sqrt(total)
        return FinalGuarantee(
            "gdp",
            None,
            None,
            None,
            mu,
            f"{parallel}; Gaussian DP composition at the worst point, mu = sqrt(sum mu_q^2) "
            "(Dong, Roth & Su 2022, Cor. 3.3), each discrete Gaussian's effective mu"
            + ("" if k == 1 else f" times its sensitivity {k}")
            + " <= mu_q",
            point,
            len(idx),
            cert,
            within and mu <= g.mu,
            exact_total,
        )
    assert isinstance(g, ApproxDP)
    return replace(
        _approx_guarantee(queries, budget, noises, res, total, cert, time_limit),
        total=exact_total,
    )


def _approx_guarantee(queries, budget, noises, res, rho_total, cert, time_limit):
    """(eps, delta) target planned in zCDP: the tightest of zCDP, GDP and PLD accounting."""
    from dpcurator.privacy.composition import compose
    from dpcurator.privacy.discrete_gaussian import effective_gdp_mu
    from dpcurator.privacy.events import DiscreteGaussian
    from dpcurator.privacy.zcdp import zcdp_epsilon

    g = budget.guarantee
    delta = g.delta
    k = budget.sensitivity
    candidates = [
        (
            zcdp_epsilon(rho_total, delta),
            f"zCDP: rho = {rho_total:.6g} at the worst point (Bun & Steinke 2016, Lemma 1.7), "
            "converted by the tighter of Bun & Steinke Prop. 1.3 and Canonne, Kamath & Steinke "
            "2020, Cor. 13",
        )
    ]
    sigmas = [] if noises is None else sorted({float(n.sigma) for n in noises})
    if noises is None:
        pass  # weighted pieces: zCDP, additive in each point's column norms, is the theorem
    elif len(sigmas) == 1 and k == 1:
        # identical mechanisms: the composition of the worst point's queries is the worst
        # over every point (adding a mechanism never helps), so the tight theorems apply
        n = len(res.witness_queries)
        c = compose([DiscreteGaussian(sigmas[0], n)], delta=delta, methods=["pld", "gdp", "zcdp"])
        best = c.best
        if best is not None:
            candidates.append(
                (
                    best.epsilon,
                    f"{best.method}: {best.theorem} over the {n} queries of the worst point",
                )
            )
    else:
        # heterogeneous, or a count of sensitivity k > 1 (the accountants' discrete
        # Gaussian is a sensitivity-1 count's): GDP is additive in mu^2, so its own worst
        # point is found exactly; a shift of k is k unit shifts, k times the effective mu
        # (Dong, Roth & Su 2022, Thm 2.14), as the noise's own guarantee says
        mus = {s: k * effective_gdp_mu(s) for s in sigmas}
        w = [mus[float(n.sigma)] ** 2 for n in noises]
        r2 = max_overlap(queries, weights=w, time_limit=time_limit)
        mu = math.sqrt(float(r2.value if r2.exact else r2.upper_bound))
        c = compose([GDP(mu)], delta=delta, methods=["gdp"])
        if c.best is not None:
            candidates.append(
                (
                    c.best.epsilon,
                    f"gdp: mu = {mu:.6g} at its worst point ("
                    + ("" if k == 1 else f"{k} times ")
                    + "the effective mu of each discrete Gaussian; Dong, Roth & Su 2022, "
                    + ("Cor. 3.3 and 2.13)" if k == 1 else "Cor. 3.3, 2.13 and Thm 2.14)"),
                )
            )
    eps, how = min(candidates, key=lambda t: t[0])
    parallel = "parallel composition over the maximum overlap (Smith et al. 2022)"
    return FinalGuarantee(
        "approx",
        eps,
        delta,
        rho_total,
        None,
        f"{parallel}; {how}",
        dict(res.witness),
        len(res.witness_queries),
        cert,
        eps <= g.epsilon * (1 + 1e-12),
    )


def laplace_alternative(
    t: int, gamma: int, epsilon: float, delta: float, sensitivity: int = 1
) -> dict[str, Any]:
    """Uniform discrete Laplace under an (eps, delta) target: per-query eps' such that the
    exact optimal composition (Kairouz, Oh & Viswanath 2017, Thm 3.3) of the gamma queries
    of the worst point meets (eps, delta). Not expressible in an additive ledger. Its
    expected error is the noise's at ``sensitivity`` (scale k/eps' under a unit of k
    rows), to compare with the plan's own."""
    from dpcurator.planner.budget import round_down
    from dpcurator.privacy.optimal import optimal_epsilon

    def ok(e: float) -> bool:
        r = optimal_epsilon(e, 0.0, gamma, delta)
        return r is not None and r <= epsilon

    lo, hi = epsilon / gamma, epsilon
    if ok(hi):
        lo = hi
    else:
        for _ in range(100):
            mid = (lo + hi) / 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
    eps_q = round_down(lo)
    noise = PlanBudget.of(PureDP(1.0), sensitivity).noise(eps_q)
    return {
        "noise": "discrete_laplace",
        "epsilon_per_query": eps_q,
        "scale": float(noise.scale),
        "expected_abs_noise": noise.expected_abs() * t,
        "theorem": f"exact optimal composition of {gamma} (eps', 0)-DP mechanisms at the worst "
        "point (Kairouz, Oh & Viswanath 2017, Thm 3.3)",
    }


def objective_weights(
    queries: Sequence[Query], weights: Sequence[float], objective: str
) -> np.ndarray | None:
    """The weights w'_q of ``objective`` written as sum_q w'_q Var_q: the workload's
    weights for ``total``, divided by the cell count of the query's line for ``per-table``
    (so each line's mean expected squared error counts once). None for ``max``, which is
    not a weighted sum."""
    from dpcurator.planner.allocation import groups_of

    if objective == "max":
        return None
    wa = np.asarray(weights, float)
    if objective == "per-table":
        g = groups_of(queries)
        wa = wa / np.bincount(g)[g]
    return wa


def _optimal_for(
    objective: str,
    qs: Sequence[Query],
    w: Sequence[float],
    budget: PlanBudget,
    start: Allocation,
    time_limit: float,
    unweighted: Any = None,
) -> Allocation:
    """The optimal allocation for ``objective`` (``start``: the uniform allocation;
    ``unweighted``: the queries' maximum overlap, if known)."""
    from dpcurator.planner.allocation import optimal, single_constraint, uniform

    wa = objective_weights(qs, w, objective)
    if wa is None:  # max: the equal split (see make_plan)
        if start.name == "uniform" and len(set(w)) == 1:
            return replace(start, name="optimal")  # the same split, already certified
        fair = uniform(qs, np.ones(len(qs)), budget, time_limit=time_limit, unweighted=unweighted)
        return replace(fair, name="optimal")
    closed = single_constraint(qs, wa, budget, time_limit=time_limit, unweighted=unweighted)
    if closed is not None:
        return closed
    return optimal(qs, wa, budget, time_limit=time_limit, start=start)


def make_plan(
    queries: Sequence[Query],
    weights: Sequence[float] | None,
    guarantee: PureDP | ApproxDP | ZCDP | GDP,
    allocation: str = "optimal",
    *,
    available: float | None = None,
    time_limit: float = 30.0,
    compare: bool = True,
    objective: str = "per-table",
    strategy: str = "auto",
    sensitivity: int = 1,
) -> Plan:
    """Plan a release of ``queries`` under ``guarantee``.

    ``strategy`` is what to measure (:mod:`dpcurator.planner.strategies`): ``direct``
    (the asked queries, split by ``allocation``), ``marginals``, ``identity`` or
    ``tree`` (measured tables, every answer their least-squares estimate), or ``auto``
    (the default): the candidate with the least expected error for ``objective``,
    ``direct`` included, so the choice is never worse than it. The sequential and
    uniform allocations are splits of the direct measurement: with them the strategy is
    ``direct``. Every candidate's figures are in ``Plan.candidates``.

    ``objective`` is what the ``optimal`` allocation minimises: ``per-table`` (the
    default: each workload line weighs the same, whatever its number of cells — the sum
    over lines of the line's mean expected squared error, so a small table is not
    starved next to a large one), ``total`` (the total expected squared error over all
    answers, so a table with many cells weighs more) or ``max`` (the largest
    expected error of any answer: the equal split B/gamma is optimal for it — any split
    gives some query of the worst point at most B/gamma, so no answer can be made
    better without making that one worse).

    ``available`` (additive, same currency) caps the budget, for a ledger that has
    already spent some: a plan within what is left at the worst point of the domain is
    admitted by the curator's filter everywhere. ``compare``: also compute the other
    allocations' expected errors (the optimal one included) for the report.

    ``sensitivity``: every count's (k under a privacy unit of k rows; each cost is then
    per unit). The noises, and so every expected error and variance of the plan, are
    those the curator adds at that sensitivity; the split is the same for every k (see
    :attr:`PlanBudget.coefficient`). Only the direct strategy is planned for k > 1
    (``auto`` is then ``direct``): the other strategies' models are a sensitivity-1
    count's.
    """
    if allocation not in ALLOCATIONS:
        raise InvalidParameter(
            f"unknown allocation {allocation!r}; choose one of {', '.join(ALLOCATIONS)}"
        )
    if objective not in OBJECTIVES:
        raise InvalidParameter(
            f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}"
        )
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidParameter(
            f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    if allocation != "optimal" and strategy not in ("auto", "direct"):
        raise InvalidParameter(
            f"the {allocation} allocation splits the direct measurement; it does not "
            f"apply to strategy {strategy!r}"
        )
    budget = PlanBudget.of(guarantee, sensitivity)
    if sensitivity != 1:
        if strategy not in ("auto", "direct"):
            raise InvalidParameter(
                "strategies other than direct are planned for one row per person; this "
                "curator has a privacy unit of several rows"
            )
        strategy = "direct"
    qs = tuple(queries)
    if not qs:
        raise InvalidParameter("the workload has no queries")
    w = tuple(float(x) for x in (weights if weights is not None else [1.0] * len(qs)))
    lo, hi = WEIGHT_RANGE
    if len(w) != len(qs) or not all(lo <= x <= hi for x in w):
        raise InvalidParameter(f"weights must be one number per query, between {lo:g} and {hi:g}")
    notes: list[str] = []
    if available is not None and available < budget.amount:
        if not available > budget.amount * 1e-3:  # less than 0.1%: rounding leftovers
            from dpcurator.errors import BudgetExceeded

            raise BudgetExceeded(
                f"refused: the ledger has spent the budget {budget.describe()} "
                f"({max(available, 0.0):.3g} left at the worst point); nothing was charged"
            )
        notes.append(
            f"the ledger had spent some budget: planned with what is left at the worst point "
            f"({available:.6g} of {budget.amount:.6g} {budget.currency if budget.currency != 'mu' else 'mu^2'})"
        )
        budget = budget.with_amount(available)
    g0 = max_overlap(qs, time_limit=time_limit)
    from dpcurator.planner.allocation import groups_of, uniform

    groups = groups_of(qs)
    omega = objective_weights(qs, w, objective)
    # Structured candidates first (fast): their figures may make the direct split's
    # solve pointless, its lower bound being already worse.
    cands: list[Candidate] = []
    plans: dict[str, StrategyPlan] = {}
    names = (
        [strategy]
        if strategy not in ("auto", "direct")
        else (
            ["marginals", "identity", "tree", "p-identity"]
            if strategy == "auto" and allocation == "optimal"
            else []
        )
    )
    memo: dict[str, Any] = {}
    for name in names:
        cand, sp = evaluate(name, qs, omega, groups, budget, memo)
        cands.append(cand)
        if sp is not None:
            plans[name] = sp
        elif strategy == name:
            raise InvalidParameter(
                f"strategy {name!r} does not apply to this workload: {cand.note}"
            )
    best_structured = min((c.objective for c in cands if c.objective is not None), default=None)
    t_direct = time.monotonic()
    allocs: dict[str, Allocation] = {}
    allocs["sequential"] = allocate("sequential", qs, w, budget)
    allocs["uniform"] = uniform(qs, w, budget, time_limit=time_limit, unweighted=g0)
    skip_direct = False
    direct_bound = None
    if omega is not None and best_structured is not None and strategy != "direct":
        direct_bound = direct_lower_bound(omega, g0.witness_queries, budget)
        skip_direct = direct_bound > best_structured
    if (allocation == "optimal" or compare) and not skip_direct:
        allocs["optimal"] = _optimal_for(
            objective, qs, w, budget, allocs["uniform"], time_limit, g0
        )
        notes.extend(allocs["optimal"].notes)
    direct_name = allocation if allocation in allocs else "uniform"
    if skip_direct:
        notes.append(
            "the direct split was not optimised: its lower bound "
            f"{direct_bound:.6g} already exceeds the chosen strategy's {best_structured:.6g}"
        )
    expected_abs: dict[str, float] = {}
    expected_sq: dict[str, float] = {}
    chosen_values = chosen_noises = None
    for name, a in allocs.items():
        vals = _values(budget, a.costs)
        ns = _noises(budget, vals)
        expected_abs[name], expected_sq[name] = _totals(ns)
        if name == direct_name:
            chosen_values, chosen_noises = vals, ns
    assert chosen_values is not None and chosen_noises is not None
    if strategy in ("auto", "direct"):
        t0 = t_direct
        dvar = np.array([n.variance() for n in chosen_noises])
        obj, total, worst, per_table = figures(dvar, groups, omega)
        if skip_direct:
            assert direct_bound is not None
            cands.insert(
                0,
                Candidate(
                    "direct",
                    "the asked queries, overlap-optimal split (not solved)",
                    direct_bound,
                    None,
                    None,
                    None,
                    time.monotonic() - t0,
                    bound=True,
                    note=f"uniform split: {obj:.6g}",
                ),
            )
        else:
            cands.insert(
                0,
                Candidate(
                    "direct",
                    f"the asked queries, {direct_name} split",
                    obj,
                    total,
                    worst,
                    per_table,
                    time.monotonic() - t0,
                ),
            )
    chosen: StrategyPlan | None = None
    if strategy not in ("auto", "direct"):
        chosen = plans[strategy]
    elif strategy == "auto":
        direct_obj = None if skip_direct else cands[0].objective
        best = min(
            (c for c in cands if c.objective is not None and c.name != "direct"),
            key=lambda c: c.objective,  # type: ignore[arg-type,return-value]
            default=None,
        )
        if best is not None and (direct_obj is None or best.objective < direct_obj):  # type: ignore[operator]
            chosen = plans[best.name]
    if chosen is None:
        fin = _guarantee(
            qs,
            budget,
            [_exact_additive(budget, v) for v in chosen_values],
            chosen_noises,
            time_limit,
        )
    else:
        # each measurement is charged on its pieces: the worst point over them all
        pieces = chosen.charges(qs[0].schema, budget)
        weighted = any(m.weights is not None for m in chosen.measurements)
        fin = _guarantee(
            [p.region for p in pieces],
            budget,
            [p.additive for p in pieces],
            None if weighted else [p.noise for p in pieces],
            time_limit,
        )
    if not fin.within_budget:  # never: costs are scaled to (1 - 1e-9) and rounded down
        raise InvalidParameter(f"internal error: the plan exceeds its budget ({fin.describe()})")
    alt = None
    g = budget.guarantee
    if isinstance(g, ApproxDP) and len(set(w)) == 1:
        alt = laplace_alternative(
            len(qs),
            math.ceil(g0.value if g0.exact else g0.upper_bound),
            g.epsilon,
            g.delta,
            budget.sensitivity,
        )
    return Plan(
        qs,
        w,
        budget,
        allocs[direct_name],
        chosen_values,
        chosen_noises,
        float(g0.value if g0.exact else g0.upper_bound),
        bool(g0.exact),
        dict(g0.witness),
        expected_abs,
        expected_sq,
        fin,
        alt,
        tuple(notes),
        objective,
        allocs,
        chosen,
        tuple(cands),
        g0,
    )
