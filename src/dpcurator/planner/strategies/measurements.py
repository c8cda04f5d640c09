"""What a strategy measures and how it is priced: measurements (counting tables or
weighted rows), the charges they make, and a chosen strategy's plan.

A measurement's rows each get independent exact noise of one kind; a point pays, for
every measurement, its cells' cost factor times the unit cost (:mod:`.weights`), and
the pricing below checks, in exact fractions, that no point pays more than the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.budget import COST_DIGITS, UNIT_DIGITS, PlanBudget
from dpcurator.planner.strategies.weights import KroneckerWeights
from dpcurator.privacy.filters import exact
from dpcurator.queries import BooleanQuery, Query, Schema

#: Costs are scaled to (1 - SAFETY) of the budget before rounding down.
SAFETY = 1e-9


@dataclass(frozen=True)
class Measurement:
    """One measured table: disjoint ``cells`` counted exactly, released as ``rows`` with
    independent exact ``noise`` each (the noise of one count at the unit cost
    ``value``, in the budget's unit), on the points of ``region``, the union of the cells
    (attribute -> intervals; empty: every point, as for a table that partitions the
    domain).

    ``weights`` None: every cell is a row of weight 1, and the table costs ``value`` on
    each of its points. Otherwise the rows are integer combinations of the cells
    (:class:`~dpcurator.planner.strategies.weights.KroneckerWeights`, cells in its
    row-major order) and a point of cell c costs F_c times the unit cost, F_c the
    cell's column norm (:meth:`pieces`)."""

    label: str
    cells: tuple[dict[str, tuple], ...]
    value: float
    noise: Any
    region: dict[str, tuple] = field(default_factory=dict)
    weights: KroneckerWeights | None = None

    @property
    def rows(self) -> int:
        """How many noisy values the measurement releases."""
        return len(self.cells) if self.weights is None else self.weights.rows

    def measure(self, counts: Any) -> np.ndarray:
        """The exact rows from the cells' exact counts (one per cell, in order)."""
        c = np.asarray(counts, np.int64)
        return c if self.weights is None else self.weights.apply(c)

    def factors(self, currency: str) -> np.ndarray:
        """F_c per cell: the cell's cost in units of ``value``'s additive amount."""
        if self.weights is None:
            return np.ones(len(self.cells), np.int64)
        return self.weights.column_factor(currency)

    def pieces(self, currency: str) -> list[tuple[int, tuple[int, ...]]]:
        """(F, the cells costing F times the unit) for every distinct F, largest first:
        the measurement's charges, each on the union of its cells (one charge on the
        whole region when every cell costs the same)."""
        f = self.factors(currency)
        return [(int(v), tuple(np.flatnonzero(f == v).tolist())) for v in np.unique(f)[::-1]]


@dataclass(frozen=True)
class Piece:
    """One charge of a release: the points of ``region`` each pay ``additive`` (exact,
    the additive unit) for measurement ``measurement``, whose cells there cost
    ``factor`` times its unit (1 for a counting table)."""

    measurement: int
    region: Any  # Query | BooleanQuery
    additive: Fraction
    factor: int
    noise: Any
    label: str


@dataclass(frozen=True)
class StrategyPlan:
    """A chosen strategy: its measurements, the exact variance of every answer it gives,
    and the least-squares reconstruction (measured noisy cells -> answers)."""

    name: str
    detail: str
    measurements: tuple[Measurement, ...]
    variances: np.ndarray  # per workload query (0 for an empty query)
    rebuild: Callable[[Sequence[np.ndarray]], np.ndarray] = field(compare=False, repr=False)

    def charges(self, schema: Schema, budget: PlanBudget) -> list[Piece]:
        """Every charge of the release, measurement by measurement: one per distinct cost
        factor of its cells (:meth:`Measurement.pieces`), on their union (on the
        measurement's region when all its cells cost the same)."""
        out: list[Piece] = []
        for j, m in enumerate(self.measurements):
            unit = exact(m.value) ** 2 if budget.currency == "mu" else exact(m.value)
            parts = m.pieces(budget.currency)
            for k, (f, idx) in enumerate(parts):
                if len(parts) == 1:
                    region: Any = Query.from_coverages(schema, dict(m.region))
                    label = m.label
                else:
                    region = BooleanQuery.from_boxes(schema, [m.cells[i] for i in idx])
                    label = f"{m.label} [weight level {k + 1} of {len(parts)}: {f} x the unit]"
                out.append(Piece(j, region, unit * f, f, m.noise, label))
        return out

    def reconstruct(self, noisy: Sequence[Sequence[int]]) -> np.ndarray:
        """The answers of every workload query from the noisy rows of every measurement
        (in order; a table's rows are its cells): the generalised least-squares
        estimate."""
        if len(noisy) != len(self.measurements):
            raise InvalidParameter("one list of noisy rows per measurement")
        arrays = []
        for m, y in zip(self.measurements, noisy, strict=True):
            a = np.asarray(y, float)
            if a.shape != (m.rows,) or not np.isfinite(a).all():
                raise InvalidParameter(f"{m.label}: one finite value per row")
            arrays.append(a)
        return self.rebuild(arrays)


def priced(
    budget: PlanBudget, units: np.ndarray, factor: np.ndarray | None = None
) -> tuple[list[float], list[Any]]:
    """Unit values to charge (rounded down from (1 - SAFETY) of the additive unit costs
    ``units``) and their exact noises; checks in exact fractions that at every piece of
    the domain the measurements sum to at most the budget: measurement j costs F times
    its unit where ``factor[j, piece]`` = F (0: it does not cover the piece; None: every
    measurement costs its unit everywhere)."""
    c = np.asarray(units, float) * (1 - SAFETY)
    over = factor if factor is not None else np.ones((len(c), 1), np.int64)
    weighted = np.asarray(over).max(axis=1) > 1
    values = [
        budget.value(float(x), UNIT_DIGITS if w else COST_DIGITS)
        for x, w in zip(c, weighted, strict=True)
    ]
    additive = [exact(v) ** 2 if budget.currency == "mu" else exact(v) for v in values]
    cap = Fraction(budget.amount)
    for piece in np.asarray(over).T:
        spent = sum((a * int(f) for a, f in zip(additive, piece, strict=True) if f), Fraction(0))
        if spent > cap:
            raise InvalidParameter("internal error: a strategy's costs exceed the budget")
    cache: dict[float, Any] = {}
    noises = [cache.setdefault(v, budget.noise(v)) if v not in cache else cache[v] for v in values]
    return values, noises


def per_profile(omega: np.ndarray | None, profile_of: np.ndarray, k: int) -> np.ndarray | None:
    if omega is None:
        return None
    live = profile_of >= 0
    return np.bincount(profile_of[live], weights=omega[live], minlength=k)
