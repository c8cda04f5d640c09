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


@dataclass(frozen=True)
class Statistic:
    """One released statistic of one group (and, for quantiles, one q).

    ``group`` is the group's condition (``"sex = 'F'"``; empty without ``by=``).
    ``interval`` (means, variances, standard deviations) covers the group's statistic of
    the *clipped* values with probability at least 95%: rigorous, from the exact noise
    distributions and the union bound, not an approximation. ``rank_error``
    (quantiles): with probability at least 95% the value's rank is within this many rows
    of the q-th quantile's (beyond the best candidate's, 0 when every domain value is a
    candidate): rigorous too. ``std_error`` is the first-order (delta-method) standard
    error at the released values: an approximation. ``count`` is the group's noisy row
    count (released with the mean or variance, free to use). ``small_group``: the
    group's noisy count is too small to carry information (its interval is the
    statistic's whole range, :meth:`~dpcurator.mechanisms.moments.MomentsMechanism.informative`):
    ``value`` and ``std_error`` are then None, never a clip bound shown as an estimate.
    """

    group: str
    value: float | int | str | None
    q: float | None = None
    interval: tuple[float, float] | None = None
    rank_error: int | None = None
    std_error: float | None = None
    count: int | None = None
    small_group: bool = False


@dataclass(frozen=True)
class StatisticAnswer:
    """A mean, variance, standard deviation or quantile(s), one result per group (and
    q): charged once on the points its ``where`` covers, since the groups are disjoint
    (Smith et al. 2022, Thm 5). ``mechanism`` names the exact noise or selection."""

    request: str
    statistic: str
    results: tuple[Statistic, ...]
    mechanism: str
    cost: float
    currency: str
    remaining: float
    charge_id: int
    remaining_exact: bool = True

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, i: int) -> Statistic:
        return self.results[i]

    def values(self) -> list[float | int | str]:
        return [r.value for r in self.results]

    @property
    def value(self) -> float | int | str:
        """The value, when there is one result (no ``by=``, one q)."""
        if len(self.results) != 1:
            raise ValueError(f"{len(self.results)} results: use .results or .values()")
        return self.results[0].value

    @property
    def interval(self) -> tuple[float, float] | None:
        """The interval, when there is one result."""
        if len(self.results) != 1:
            raise ValueError(f"{len(self.results)} results: use .results")
        return self.results[0].interval


@dataclass(frozen=True)
class Estimate:
    """What a request would cost and how accurate it would be, before asking it.

    ``expected_abs_error`` is E|noise| of each released value and ``half_width`` its
    exact 95% half-width, from the discrete distribution; ``admitted`` says whether the
    budget (and the analyst's quota) would admit it now (``exact`` False: the decision
    used a safe bound because the exact check ran out of time).

    For a mean, variance or standard deviation the noise is the centred sum's
    (``noise``, ``expected_abs_error``, ``half_width``), and ``error_scale`` bounds the
    statistic's first-order standard error in a group of n rows by ``error_scale / n``.
    For quantiles, ``noise`` names the selection, ``noise_parameter`` is its epsilon,
    ``half_width`` the 95% rank-error bound in rows (rigorous) and ``expected_abs_error``
    a bound on the expected rank error. ``error`` says it in words."""

    kind: str
    request: str
    cells: int
    cost: float
    currency: str
    noise: str
    noise_parameter: float
    expected_abs_error: float
    half_width: int
    admitted: bool
    exact: bool
    error_scale: float | None = None
    error: str = ""
