"""Planning a batch release: maximum overlap, allocation, final guarantee (docs/design.md §8).

Pure mathematics: no I/O, no randomness, no data. :func:`make_plan` decides every cost
before the data is touched; :meth:`dpcurator.curator.Curator.release` then charges,
counts and adds the noise. :func:`consistent` is free post-processing.
"""

from dpcurator.planner.allocation import (
    ALLOCATIONS,
    Allocation,
    allocate,
    groups_of,
    optimal,
    sequential,
    uniform,
)
from dpcurator.planner.budget import PlanBudget, round_down
from dpcurator.planner.comparison import (
    Errors,
    allocation_errors,
    compare_objectives,
    objective_values,
    strategy_errors,
)
from dpcurator.planner.consistency import consistent
from dpcurator.planner.plan import (
    OBJECTIVES,
    FinalGuarantee,
    Plan,
    laplace_alternative,
    make_plan,
    objective_weights,
)

__all__ = [
    "ALLOCATIONS",
    "OBJECTIVES",
    "Allocation",
    "Errors",
    "FinalGuarantee",
    "Plan",
    "PlanBudget",
    "allocate",
    "allocation_errors",
    "compare_objectives",
    "consistent",
    "groups_of",
    "laplace_alternative",
    "make_plan",
    "objective_values",
    "objective_weights",
    "optimal",
    "round_down",
    "sequential",
    "strategy_errors",
    "uniform",
]
