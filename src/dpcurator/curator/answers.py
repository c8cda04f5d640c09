"""What the curator releases: immutable answers with their noise and error bars."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """One noisy statistic.

    ``value`` is the true statistic plus exact integer noise; ``interval`` is the 95%
    interval ``value ± half_width`` computed from the exact noise distribution;
    ``remaining`` is what is left on the points the request covered right after it (for
    an analyst, the smaller of her quota left and the budget left there): what
    :meth:`Curator.remaining` reports when ``remaining_exact``, else a lower bound that
    a few milliseconds settle (never more than truly remains; ask
    :meth:`Curator.remaining` for the exact figure).
    """

    query: str
    value: int
    noise: str  # "discrete_laplace" or "discrete_gaussian"
    noise_parameter: float  # scale or sigma
    cost: float
    currency: str
    half_width: int
    remaining: float
    charge_id: int
    remaining_exact: bool = True

    @property
    def interval(self) -> tuple[int, int]:
        return (self.value - self.half_width, self.value + self.half_width)


@dataclass(frozen=True)
class DerivedAnswer:
    """An asked query answered from a strategy's measurements, not measured itself: the
    generalised least-squares estimate from every measured table of the release
    (post-processing: Dwork & Roth 2014, Prop. 2.1), so the answers of a release agree.

    ``variance`` is its exact variance (a known linear combination of the independent
    exact noises); ``half_width`` is the normal approximation's 95% half-width from it
    (the error is a sum of many independent discrete noises; the interval is
    approximate). ``charge_ids`` are the ledger charges it was derived from;
    ``remaining`` is what is left at the worst point of the domain right after the
    release (its tables cover every point, so at least this is left on any query's).
    """

    query: str
    value: float
    variance: float
    half_width: float
    strategy: str
    currency: str
    remaining: float
    charge_ids: tuple[int, ...]

    @property
    def interval(self) -> tuple[float, float]:
        return (self.value - self.half_width, self.value + self.half_width)


@dataclass(frozen=True)
class TableAnswer:
    """A histogram or marginal: disjoint cells released together, charged once."""

    request: str
    cells: tuple[Answer, ...]
    cost: float
    currency: str
    remaining: float
    charge_id: int
    remaining_exact: bool = True

    def __len__(self) -> int:
        return len(self.cells)

    def __getitem__(self, i: int) -> Answer:
        return self.cells[i]

    def values(self) -> list[int]:
        return [c.value for c in self.cells]


@dataclass(frozen=True)
class HistoryEntry:
    """One charge in the ledger, with what was released for it (None if the curator
    stopped between the charge and the release)."""

    charge_id: int
    created: float
    analyst: str | None
    table: str
    kind: str
    request: str
    cost: float
    currency: str
    noise: str
    answer: object | None
