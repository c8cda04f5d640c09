"""Strategies: what to measure for a workload, and how to answer it from the measurements.

The matrix mechanism (Li, Miklau, Hay, McGregor & Rastogi, VLDB J. 2015): measure a set
of counting queries A (the *strategy*) with independent exact noise, estimate the
data by generalised least squares, and answer every query of the workload from that
estimate. Answering is post-processing and costs no privacy (Dwork & Roth 2014,
Prop. 2.1); the error depends only on the strategy, its costs and the workload, never on
the data, so the planner chooses before any count is taken.

Candidates (:data:`STRATEGIES`):

* ``direct``: measure the asked queries themselves, with the overlap-optimal split
  (:mod:`dpcurator.planner.allocation`); the answers are the noisy counts;
* ``marginals``: weighted marginal tables on the atom domain, any attribute subsets,
  including ones no query asks (:mod:`.marginals`; McKenna et al. VLDB 2018; Xiao et
  al. NeurIPS 2023);
* ``identity`` and ``tree``: the histogram and b-ary hierarchies of one ordered
  attribute, for range workloads (:mod:`.ranges`; Hay et al. VLDB 2010).

Every measured table partitions the domain, so each is one histogram-like charge at its
cost on every point, charged by the curator's filter like any other (docs/design.md §7).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import marginals as mg
from dpcurator.planner.strategies import ranges as rg
from dpcurator.planner.strategies.domain import atom_domain
from dpcurator.privacy.filters import exact
from dpcurator.queries import Query

#: Strategy names: ``auto`` picks the candidate with the least expected error.
STRATEGIES = ("auto", "direct", "marginals", "identity", "tree")

#: Costs are scaled to (1 - SAFETY) of the budget before rounding down.
SAFETY = 1e-9


@dataclass(frozen=True)
class Measurement:
    """One measured table: cells that partition the domain, charged once at ``value``
    (the cost handed to the curator, in the budget's unit) with exact ``noise``."""

    label: str
    cells: tuple[dict[str, tuple], ...]
    value: float
    noise: Any


@dataclass(frozen=True)
class StrategyPlan:
    """A chosen strategy: its measurements, the exact variance of every answer it gives,
    and the least-squares reconstruction (measured noisy cells -> answers)."""

    name: str
    detail: str
    measurements: tuple[Measurement, ...]
    variances: np.ndarray  # per workload query (0 for an empty query)
    rebuild: Callable[[Sequence[np.ndarray]], np.ndarray] = field(compare=False, repr=False)

    def reconstruct(self, noisy: Sequence[Sequence[int]]) -> np.ndarray:
        """The answers of every workload query from the noisy cells of every
        measurement (in order): the generalised least-squares estimate."""
        if len(noisy) != len(self.measurements):
            raise InvalidParameter("one list of noisy cells per measurement")
        arrays = []
        for m, y in zip(self.measurements, noisy, strict=True):
            a = np.asarray(y, float)
            if a.shape != (len(m.cells),) or not np.isfinite(a).all():
                raise InvalidParameter(f"{m.label}: one finite value per cell")
            arrays.append(a)
        return self.rebuild(arrays)


@dataclass(frozen=True)
class Candidate:
    """One strategy's figures for the workload: the objective's value and the total,
    largest and per-table expected squared errors of the answers (exact discrete
    variances at the costs as charged). ``bound``: the figures are lower bounds (the
    direct split was not solved, being provably worse than the chosen strategy)."""

    name: str
    detail: str
    objective: float | None
    total: float | None
    worst: float | None
    per_table: float | None
    seconds: float
    bound: bool = False
    note: str = ""

    @property
    def applicable(self) -> bool:
        return self.objective is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.name,
            "detail": self.detail,
            "objective_value": self.objective,
            "total_squared_error": self.total,
            "worst_answer_squared_error": self.worst,
            "per_table_squared_error": self.per_table,
            "lower_bound": self.bound,
            "seconds": round(self.seconds, 4),
            "note": self.note,
        }


def figures(
    variances: np.ndarray, groups: np.ndarray, omega: np.ndarray | None
) -> tuple[float, float, float, float]:
    """(objective, total, worst, per-table) of answers with ``variances``."""
    total = float(variances.sum())
    worst = float(variances.max())
    n = np.bincount(groups)
    per_table = float(np.mean(np.bincount(groups, weights=variances) / n))
    obj = worst if omega is None else float(omega @ variances)
    return obj, total, worst, per_table


def _priced(budget: PlanBudget, costs: np.ndarray) -> tuple[list[float], list[Any]]:
    """Values to charge (rounded down from (1 - SAFETY) of the additive costs) and their
    exact noises; checks in exact fractions that they sum to at most the budget."""
    c = np.asarray(costs, float) * (1 - SAFETY)
    values = [budget.value(float(x)) for x in c]
    spent = sum(
        (exact(v) ** 2 if budget.currency == "mu" else exact(v) for v in values), Fraction(0)
    )
    if spent > Fraction(budget.amount):
        raise InvalidParameter("internal error: a strategy's costs exceed the budget")
    cache: dict[float, Any] = {}
    noises = [cache.setdefault(v, budget.noise(v)) if v not in cache else cache[v] for v in values]
    return values, noises


def _per_profile(omega: np.ndarray | None, profile_of: np.ndarray, k: int) -> np.ndarray | None:
    if omega is None:
        return None
    live = profile_of >= 0
    return np.bincount(profile_of[live], weights=omega[live], minlength=k)


def plan_marginals(
    queries: Sequence[Query], omega: np.ndarray | None, budget: PlanBudget
) -> StrategyPlan:
    """The marginals strategy with costs optimised for ``omega`` (None: the largest
    variance). Raises :class:`InvalidParameter` when it does not apply."""
    dom = atom_domain(queries, merge=True)
    if dom.d == 0:
        raise InvalidParameter("no query constrains any attribute")
    model = mg.marginals_model(dom)
    om = _per_profile(omega, model.profile_of, len(model.profiles))
    tables, costs = mg.optimise(model, om, budget.amount, budget.currency)
    values, noises = _priced(budget, costs)
    w = np.array([1.0 / n.variance() for n in noises])
    sub = mg.restricted(model, tables)
    per_profile = sub.variances(w)
    var = np.where(model.profile_of >= 0, per_profile[np.maximum(model.profile_of, 0)], 0.0)
    shapes = [mg.table_shape(dom, t) for t in tables]

    def rebuild(arrays: Sequence[np.ndarray]) -> np.ndarray:
        measured = {t: a.reshape(s) for t, a, s in zip(tables, arrays, shapes, strict=True)}
        return mg.reconstruct(sub, measured, dict(zip(tables, w, strict=True)))

    ms = tuple(
        Measurement(mg.table_name(dom, t), tuple(mg.table_cells(dom, t)), v, n)
        for t, v, n in zip(tables, values, noises, strict=True)
    )
    atoms = " x ".join(f"{n} {s}" for n, s in zip(dom.names, dom.sizes, strict=True))
    detail = f"{len(tables)} tables over the atoms ({atoms})"
    return StrategyPlan("marginals", detail, ms, var, rebuild)


def plan_ranges(
    queries: Sequence[Query], omega: np.ndarray | None, budget: PlanBudget, name: str
) -> StrategyPlan:
    """``identity`` or the best ``tree`` over :data:`ranges.BRANCHINGS`."""
    attrs = {n for q in queries if not q.is_empty for b in q.boxes for n in b.attributes}
    rg.one_attribute(len(attrs))  # before cutting the domain, which costs far more
    dom = atom_domain(queries, merge=False)
    if dom.d == 0:
        raise InvalidParameter("no query constrains any attribute")
    schema = next(q for q in queries if not q.is_empty).schema
    rg.range_domain_check(dom, schema.attribute(dom.names[0]).ordered)
    n = dom.sizes[0]
    options = (
        [("", rg.identity_levels(n))]
        if name == "identity"
        else [(f"b = {b}", rg.tree_levels(n, b)) for b in rg.BRANCHINGS if b < n]
    )
    if not options:
        raise InvalidParameter(f"{dom.names[0]!r} has too few segments for a tree")
    best = None
    for label, levels in options:
        model = rg.range_model(dom, levels)
        om = _per_profile(omega, model.profile_of, len(model.queries))
        costs = rg.optimise(model, om, budget.amount, budget.currency)
        v = model.variances(costs)  # the model's figure, to compare branchings
        score = float(v.max()) if om is None else float(om @ v)
        if best is None or score < best[0]:
            best = (score, label, model, costs)
    assert best is not None
    _, label, model, costs = best
    values, noises = _priced(budget, costs)
    w = np.array([1.0 / x.variance() for x in noises])
    per_query = model.variances(w)
    var = np.where(model.profile_of >= 0, per_query[np.maximum(model.profile_of, 0)], 0.0)

    def rebuild(arrays: Sequence[np.ndarray]) -> np.ndarray:
        return rg.reconstruct(model, arrays, w)

    attr = dom.names[0]
    k = len(model.levels)
    ms = tuple(
        Measurement(
            f"histogram({attr}) over {n} segments"
            if name == "identity"
            else f"{attr}: tree level {i + 1} of {k} ({len(lv)} nodes)",
            tuple(rg.level_cells(dom, lv)),
            v,
            x,
        )
        for i, (lv, v, x) in enumerate(zip(model.levels, values, noises, strict=True))
    )
    detail = f"{attr}, {n} segments" + (f", {label}, {k} levels" if label else "")
    return StrategyPlan(name, detail, ms, var, rebuild)


def structured(
    name: str, queries: Sequence[Query], omega: np.ndarray | None, budget: PlanBudget
) -> StrategyPlan:
    if name == "marginals":
        return plan_marginals(queries, omega, budget)
    if name in ("identity", "tree"):
        return plan_ranges(queries, omega, budget, name)
    raise InvalidParameter(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


def evaluate(
    name: str,
    queries: Sequence[Query],
    omega: np.ndarray | None,
    groups: np.ndarray,
    budget: PlanBudget,
) -> tuple[Candidate, StrategyPlan | None]:
    """A structured candidate's plan and figures (``objective`` None: not applicable,
    with the reason in ``note``)."""
    t0 = time.monotonic()
    try:
        sp = structured(name, queries, omega, budget)
    except InvalidParameter as err:
        return Candidate(
            name, "", None, None, None, None, time.monotonic() - t0, note=str(err)
        ), None
    obj, total, worst, per_table = figures(sp.variances, groups, omega)
    return Candidate(name, sp.detail, obj, total, worst, per_table, time.monotonic() - t0), sp


def direct_lower_bound(omega: np.ndarray, witness: Sequence[int], budget: PlanBudget) -> float:
    """A lower bound on the weighted objective sum_q omega_q Var_q of *any* direct split.

    The queries of the worst point (``witness``) share it, so their costs sum to at most
    B: by Lagrange (Hoelder), sum_{q in it} omega_q a / c_q^p >= a (sum omega_q^(1/(p+1)))^
    (p+1) / B^p; every other query costs at most B. The model variance a / c^p bounds the
    exact one from above; the exact one is at least kappa times it, kappa the ratio at the
    largest cost B (the ratio grows as the cost falls: for the discrete Laplace it is
    (c^2/2) / (cosh c - 1))."""
    p, a, big_b = budget.exponent, budget.coefficient, budget.amount
    idx = np.zeros(len(omega), bool)
    idx[list(witness)] = True
    inside = a * float(np.sum(omega[idx] ** (1.0 / (p + 1)))) ** (p + 1) / big_b**p
    outside = a * float(np.sum(omega[~idx])) / big_b**p
    exact_at_b = budget.noise(budget.value(big_b)).variance()
    kappa = min(1.0, exact_at_b / (a / budget.additive(budget.value(big_b)) ** p))
    return (inside + outside) * kappa * (1 - 1e-9)


__all__ = [
    "STRATEGIES",
    "Candidate",
    "Measurement",
    "StrategyPlan",
    "direct_lower_bound",
    "evaluate",
    "figures",
    "structured",
]
