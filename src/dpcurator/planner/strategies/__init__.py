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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.allocation import _limits
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.strategies import blocks as bl
from dpcurator.planner.strategies import marginals as mg
from dpcurator.planner.strategies import ranges as rg
from dpcurator.planner.strategies.costs import PRUNE, precision
from dpcurator.planner.strategies.domain import AtomDomain, atom_domain
from dpcurator.planner.strategies.measurements import (
    Measurement,
    Piece,
    StrategyPlan,
    per_profile,
    priced,
)
from dpcurator.planner.strategies.products import plan_products
from dpcurator.planner.strategies.weights import Centred, KroneckerWeights
from dpcurator.queries import Query

#: Strategy names: ``auto`` picks the candidate with the least expected error.
STRATEGIES = ("auto", "direct", "marginals", "identity", "tree", "p-identity")


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


def shared_atoms(queries: Sequence[Query], memo: dict[str, Any] | None) -> AtomDomain:
    """The workload's atom domain (:func:`.domain.atom_domain`, merged), computed once per
    workload for the candidates that share it (``memo``)."""
    if memo is None:
        return atom_domain(queries, merge=True)
    if "atoms" not in memo:
        memo["atoms"] = atom_domain(queries, merge=True)
    return memo["atoms"]


def plan_marginals(
    queries: Sequence[Query],
    omega: np.ndarray | None,
    budget: PlanBudget,
    memo: dict[str, Any] | None = None,
) -> StrategyPlan:
    """The marginals strategy with costs optimised for ``omega`` (None: the largest
    variance): marginal tables and, under zCDP and GDP, residual measurements
    (:func:`.marginals.marginals_model`). Raises :class:`InvalidParameter` when it does
    not apply."""
    dom = shared_atoms(queries, memo)
    if dom.d == 0:
        raise InvalidParameter("no query constrains any attribute")
    model = mg.marginals_model(dom, currency=budget.currency)
    om = per_profile(omega, model.profile_of, len(model.profiles))
    tables, residuals, costs = mg.optimise(model, om, budget.amount, budget.currency)
    sub = mg.restricted(model, tables, residuals)
    fac = sub.factors
    try:
        values, noises = priced(budget, costs / fac, fac.astype(np.int64)[:, None])
    except InvalidParameter:
        if not residuals:
            raise
        # a residual's rows need more noise than the discrete Gaussian's GDP figure is
        # certified for (sigma > MAX_SIGMA): plan with the tables alone
        model = mg.marginals_model(dom)
        tables, residuals, costs = mg.optimise(model, om, budget.amount, budget.currency)
        sub = mg.restricted(model, tables, residuals)
        fac = sub.factors
        values, noises = priced(budget, costs / fac, fac.astype(np.int64)[:, None])
    w = np.array([1.0 / n.variance() for n in noises])
    by_profile = sub.variances(w)
    var = np.where(model.profile_of >= 0, by_profile[np.maximum(model.profile_of, 0)], 0.0)
    shapes = [mg.table_shape(dom, t) for t in tables + residuals]
    n = len(tables)

    def rebuild(arrays: Sequence[np.ndarray]) -> np.ndarray:
        ys = [a.reshape(s) for a, s in zip(arrays, shapes, strict=True)]
        return mg.reconstruct(
            sub,
            dict(zip(tables, ys[:n], strict=True)),
            dict(zip(tables, w[:n], strict=True)),
            dict(zip(residuals, ys[n:], strict=True)),
            dict(zip(residuals, w[n:], strict=True)),
        )

    ms = [
        Measurement(mg.table_name(dom, t), tuple(mg.table_cells(dom, t)), v, x)
        for t, v, x in zip(tables, values, noises, strict=False)
    ]
    for t, v, x in zip(residuals, values[n:], noises[n:], strict=True):
        kw = KroneckerWeights(tuple(Centred(dom.sizes[i]) for i in mg.attributes_of(t, dom.d)))
        ms.append(
            Measurement(
                mg.table_name(dom, t).replace("marginal", "residual", 1),
                tuple(mg.table_cells(dom, t)),
                v,
                x,
                {},
                kw,
            )
        )
    atoms = " x ".join(f"{n} {s}" for n, s in zip(dom.names, dom.sizes, strict=True))
    parts = [f"{len(tables)} table{'s' if len(tables) != 1 else ''}"]
    if residuals:
        parts.append(f"{len(residuals)} residual measurement{'s' if len(residuals) != 1 else ''}")
    detail = f"{' and '.join(parts)} over the atoms ({atoms})"
    return StrategyPlan("marginals", detail, tuple(ms), var, rebuild)


def plan_ranges(
    queries: Sequence[Query],
    omega: np.ndarray | None,
    budget: PlanBudget,
    name: str,
    memo: dict[str, Any],
) -> StrategyPlan:
    """``identity``, or the best ``tree``: b-ary trees (:data:`ranges.BRANCHINGS`) with
    per-level costs, and the optimal two-level hierarchy with per-node costs
    (:mod:`.blocks`), compared on the model's figure for the objective."""
    attrs = {n for q in queries if not q.is_empty for b in q.boxes for n in b.attributes}
    rg.one_attribute(len(attrs))  # before cutting the domain, which costs far more
    if "segments" not in memo:
        memo["segments"] = atom_domain(queries, merge=False)
    dom = memo["segments"]
    if dom.d == 0:
        raise InvalidParameter("no query constrains any attribute")
    schema = next(q for q in queries if not q.is_empty).schema
    rg.range_domain_check(dom, schema.attribute(dom.names[0]).ordered)
    n = dom.sizes[0]
    if "range model" not in memo:
        memo["range model"] = rg.range_model(dom, ())
    model = memo["range model"]
    om = per_profile(omega, model.profile_of, len(model.queries))
    options: list[_Hierarchy] = []
    if name == "identity":
        options.append(_Hierarchy.of_levels("", rg.identity_levels(n), [budget.amount]))
    else:
        gram = rg.workload_gram(model, np.ones(len(model.queries)) if om is None else om)
        for b in (b for b in rg.BRANCHINGS if b < n):
            levels = rg.tree_levels(n, b)
            tree = model.with_levels(levels)
            costs = rg.optimise(tree, om, budget.amount, budget.currency, gram)
            options.append(_Hierarchy.of_levels(f"b = {b}", levels, costs))
        if n > 2:
            two = bl.optimal_two_level(gram, budget.amount, budget.currency)
            if two.blocks:
                options.append(_Hierarchy.two_level(n, two, budget.amount))
    if not options:
        raise InvalidParameter(f"{dom.names[0]!r} has too few segments for a tree")
    best = min(options, key=lambda h: h.score(model, om, budget.currency))
    cover = np.array([[any(s <= x < e for s, e in part) for x in range(n)] for part in best.parts])
    values, noises = priced(budget, np.asarray(best.costs), cover.astype(np.int64))
    nodes = [node for part in best.parts for node in part]
    w = np.array(
        [1.0 / x.variance() for x, part in zip(noises, best.parts, strict=True) for _ in part]
    )
    est = rg.NodeEstimate.of(model, nodes, w)
    per_query = est.variances()
    var = np.where(model.profile_of >= 0, per_query[np.maximum(model.profile_of, 0)], 0.0)

    def rebuild(arrays: Sequence[np.ndarray]) -> np.ndarray:
        return est.answers(np.concatenate([np.asarray(a, float) for a in arrays]))

    attr = dom.names[0]
    ms = []
    labels = best.labels(dom, schema.attribute(attr))
    for label, part, v, x in zip(labels, best.parts, values, noises, strict=True):
        cells = tuple(rg.level_cells(dom, part))
        region = {} if sum(e - s for s, e in part) == n else {attr: _union(cells, attr)}
        ms.append(Measurement(label, cells, v, x, region))
    detail = f"{attr}, {n} segments" + (f", {best.shape}" if best.shape else "")
    return StrategyPlan(name, detail, tuple(ms), var, rebuild)


def _union(cells: Sequence[dict[str, tuple]], attr: str) -> tuple:
    """The union of disjoint single-interval cells on ``attr``, adjacent ones merged."""
    out: list[list[int]] = []
    for lo, hi in sorted(c[attr][0] for c in cells):
        if out and out[-1][1] == lo:
            out[-1][1] = hi
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


@dataclass(frozen=True)
class _Hierarchy:
    """A range strategy as measurements (``parts``: each a set of disjoint nodes,
    [start, end) segment indices, sharing one cost) and their costs."""

    shape: str
    parts: tuple[tuple[tuple[int, int], ...], ...]
    costs: tuple[float, ...]
    kinds: tuple[str, ...]

    @classmethod
    def of_levels(cls, shape: str, levels, costs) -> _Hierarchy:
        """Levels that partition the segments, each at one cost; a level left with
        less than :data:`costs.PRUNE` of the budget is not measured, its cost going to
        the last level (the segments: what every point can spend)."""
        c = [float(x) for x in costs]
        keep = [i for i, x in enumerate(c) if x >= PRUNE * sum(c) or i == len(c) - 1]
        c[-1] += sum(x for i, x in enumerate(c) if i not in keep)
        k = len(keep)
        kinds = tuple("identity" if shape == "" else f"tree level {j + 1} of {k}" for j in range(k))
        if not shape:
            label = ""
        elif k > 1:
            label = f"{shape}, {k} levels"
        else:
            label = f"{shape}: only the segments are worth measuring"
        return cls(label, tuple(levels[i] for i in keep), tuple(c[i] for i in keep), kinds)

    @classmethod
    def two_level(cls, n: int, two: bl.TwoLevel, budget: float) -> _Hierarchy:
        """Each block alone; the segments of each block at what the block leaves; the
        segments in no block at the whole budget."""
        parts, costs, kinds = [], [], []
        inside: set[int] = set()
        for i, ((s, e), c) in enumerate(zip(two.blocks, two.costs, strict=True)):
            parts += [((s, e),), tuple((x, x + 1) for x in range(s, e))]
            costs += [c, budget - c]
            kinds += [f"block {i + 1} of {len(two.blocks)}", f"the segments of block {i + 1}"]
            inside.update(range(s, e))
        rest = tuple((x, x + 1) for x in range(n) if x not in inside)
        if rest:
            parts.append(rest)
            costs.append(budget)
            kinds.append("the segments in no block")
        k = len(two.blocks)
        shape = f"two levels: {k} block{'s' if k > 1 else ''}, a cost per node"
        return cls(shape, tuple(parts), tuple(costs), tuple(kinds))

    def score(self, model: rg.RangeModel, om: np.ndarray | None, currency: str) -> float:
        """The objective at the model precisions (to compare shapes before pricing)."""
        nodes = [node for part in self.parts for node in part]
        prec = precision(
            np.array([c for c, p in zip(self.costs, self.parts, strict=True) for _ in p]), currency
        )
        if not np.all(prec > 0):
            prec = np.maximum(prec, 1e-300)
        try:
            v = rg.NodeEstimate.of(model, nodes, prec).variances()
        except np.linalg.LinAlgError:
            return np.inf
        return float(v.max()) if om is None else float(om @ v)

    def labels(self, dom: AtomDomain, attribute: Any) -> list[str]:
        """What each measurement is, in the attribute's values."""
        attr, segs = dom.names[0], dom.pieces[0]
        out = []
        for part, kind in zip(self.parts, self.kinds, strict=True):
            if kind == "identity":
                out.append(f"histogram({attr}) over {dom.sizes[0]} segments")
            elif kind.startswith("tree"):
                out.append(f"{attr}: {kind} ({len(part)} nodes)")
            else:
                lo = attribute.value(segs[part[0][0]][0][0])
                hi = attribute.value(segs[part[-1][1] - 1][-1][1] - 1)
                out.append(f"{attr}: {kind} ({len(part)} nodes, {lo} to {hi})")
        return out


def structured(
    name: str,
    queries: Sequence[Query],
    omega: np.ndarray | None,
    budget: PlanBudget,
    memo: dict[str, Any] | None = None,
) -> StrategyPlan:
    """The strategy ``name``'s plan (``memo``: shared by the candidates of one workload,
    so that what they have in common is computed once)."""
    if name == "marginals":
        return plan_marginals(queries, omega, budget, memo)
    if name in ("identity", "tree"):
        return plan_ranges(queries, omega, budget, name, {} if memo is None else memo)
    if name == "p-identity":
        return plan_products(shared_atoms(queries, memo), omega, budget)
    raise InvalidParameter(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


def evaluate(
    name: str,
    queries: Sequence[Query],
    omega: np.ndarray | None,
    groups: np.ndarray,
    budget: PlanBudget,
    memo: dict[str, Any] | None = None,
) -> tuple[Candidate, StrategyPlan | None]:
    """A structured candidate's plan and figures (``objective`` None: not applicable,
    with the reason in ``note``)."""
    t0 = time.monotonic()
    try:
        with _limits(1):  # small dense algebra: threaded BLAS only adds overhead
            sp = structured(name, queries, omega, budget, memo)
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
    (c^2/2) / (cosh c - 1)). At sensitivity k the model variance is k^2 a / c^p (what
    :attr:`PlanBudget.coefficient` leaves out), as the exact one, from the budget's noise."""
    p, big_b = budget.exponent, budget.amount
    a = budget.coefficient * budget.sensitivity**2
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
    "Piece",
    "StrategyPlan",
    "direct_lower_bound",
    "evaluate",
    "figures",
    "structured",
]
