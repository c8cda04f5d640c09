"""The expected errors of a plan's answers under each allocation, side by side.

Pure: costs in, the exact variances of their discrete noise out (no data). What the
summaries of ``dpcurator answer`` and ``dpcurator demo`` and the demo's plot compare:
each allocation judged on each objective's own measure, so that the allocation that was
optimal for one objective is never shown as if it were best on another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.allocation import Allocation, allocate, uniform
from dpcurator.planner.budget import PlanBudget
from dpcurator.planner.plan import (
    OBJECTIVES,
    Plan,
    _noises,
    _optimal_for,
    _values,
    objective_weights,
)


@dataclass(frozen=True)
class Errors:
    """The expected squared errors of one allocation's answers: the exact variances of
    the discrete noise at the costs as charged, unweighted."""

    allocation: str  # sequential, uniform or optimal
    objective: str | None  # what an optimal allocation minimised
    variances: np.ndarray  # one per query
    groups: np.ndarray  # the workload line (group) of each query
    lines: tuple[int | None, ...]  # each query's workload line number
    gap: float | None  # relative optimality gap for its objective (0: proven optimal)

    @property
    def label(self) -> str:
        if self.objective is None:
            return self.allocation
        if self.allocation in ("sequential", "uniform", "optimal"):
            return f"optimal ({self.objective})"
        return f"{self.allocation} ({self.objective})"  # a strategy's least-squares answers

    @property
    def total(self) -> float:
        """The total expected squared error over all answers."""
        return float(self.variances.sum())

    @property
    def worst(self) -> float:
        """The largest expected squared error of any answer."""
        return float(self.variances.max())

    @property
    def per_table(self) -> float:
        """The mean over workload lines of a line's mean expected squared error."""
        n = np.bincount(self.groups)
        return float(np.mean(np.bincount(self.groups, weights=self.variances) / n))

    def line(self, line: int) -> float:
        """The mean expected squared error of the answers of workload line ``line``."""
        v = [x for x, ln in zip(self.variances, self.lines, strict=True) if ln == line]
        if not v:
            raise InvalidParameter(f"no query comes from line {line}")
        return float(np.mean(v))

    def to_dict(self, line: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "allocation": self.allocation,
            "objective": self.objective,
            "total_squared_error": self.total,
            "worst_answer_squared_error": self.worst,
            "per_table_squared_error": self.per_table,
            "optimality_gap": self.gap,
        }
        if line is not None:
            d["line"] = line
            d["line_squared_error"] = self.line(line)
        return d


def _errors(a: Allocation, objective: str | None, budget: PlanBudget, groups, lines) -> Errors:
    """The expected squared errors of allocation ``a``'s answers (``objective``: what it
    minimised, None for sequential and uniform)."""
    cache: dict[int, float] = {}
    var = np.array(
        [
            cache.setdefault(id(n), n.variance()) if id(n) not in cache else cache[id(n)]
            for n in _noises(budget, _values(budget, a.costs))
        ]
    )
    gap = None
    if objective == "max":
        gap = 0.0  # the equal split is optimal for the largest error (make_plan)
    elif objective is not None and a.lower_bound:
        gap = max(0.0, a.objective / a.lower_bound - 1)
    return Errors(a.name, objective, var, groups, lines, gap)


def allocation_errors(plan: Plan) -> dict[str, Errors]:
    """The expected errors of each allocation the plan computed (sequential, uniform and,
    when computed, optimal for the plan's objective), by name: nothing is solved again."""
    from dpcurator.planner.allocation import groups_of

    groups, lines = groups_of(plan.queries), tuple(q.line for q in plan.queries)
    return {
        name: _errors(a, plan.objective if name == "optimal" else None, plan.budget, groups, lines)
        for name, a in plan.allocations.items()
    }


def objective_values(plan: Plan) -> dict[str, float]:
    """The plan's objective under each allocation it computed: the figure its optimal
    allocation minimised, as the strategies report theirs (the objective's weights times
    the variances; ``max``: the largest variance), so that one figure reads the same
    wherever it is shown."""
    omega = objective_weights(plan.queries, plan.weights, plan.objective)
    return {
        name: e.worst if omega is None else float(omega @ e.variances)
        for name, e in allocation_errors(plan).items()
    }


def compare_objectives(plan: Plan, *, time_limit: float = 30.0) -> list[Errors]:
    """The expected errors of ``plan``'s queries under the sequential and uniform
    allocations and the optimal one for each objective (in :data:`OBJECTIVES` order),
    on the plan's budget. Reuses what the plan computed; solves the other objectives."""
    from dpcurator.planner.allocation import groups_of

    qs, w, budget = plan.queries, plan.weights, plan.budget
    allocs = dict(plan.allocations)
    if "uniform" not in allocs:
        allocs["uniform"] = uniform(qs, w, budget, time_limit=time_limit, unweighted=plan.overlap)
    if "sequential" not in allocs:
        allocs["sequential"] = allocate("sequential", qs, w, budget)
    groups = groups_of(qs)
    lines = tuple(q.line for q in qs)
    out = [
        _errors(allocs["sequential"], None, budget, groups, lines),
        _errors(allocs["uniform"], None, budget, groups, lines),
    ]
    for o in OBJECTIVES:
        if o == plan.objective and "optimal" in allocs:
            a = allocs["optimal"]
        else:
            a = _optimal_for(o, qs, w, budget, allocs["uniform"], time_limit, plan.overlap)
        out.append(_errors(a, o, budget, groups, lines))
    return out


def strategy_errors(plan: Plan) -> list[Errors]:
    """The chosen strategy's answers' expected errors, as :class:`Errors` (allocation:
    the strategy's name; objective: the plan's), or [] when the strategy is direct."""
    from dpcurator.planner.allocation import groups_of

    if plan.strategy is None:
        return []
    lines = tuple(q.line for q in plan.queries)
    return [
        Errors(
            plan.strategy.name,
            plan.objective,
            plan.strategy.variances.copy(),
            groups_of(plan.queries),
            lines,
            None,
        )
    ]
