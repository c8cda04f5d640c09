"""What the maximum-overlap solver returns.

:class:`OverlapResult` carries gamma (or a safe upper bound), the witness point and the
name of the strategy that decided (``method``, one of :data:`METHODS`);
:class:`ColouringResult` carries the colouring bound of Smith et al. (PoPETs 2022).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: The strategies that can decide a result, cheapest first. With several components,
#: ``method`` names the most expensive strategy any of them needed; ``"bound"`` means a
#: time limit stopped the search and ``value`` is a safe upper bound.
METHODS = (
    "empty",
    "atoms",
    "dense",
    "boxes",
    "eliminate",
    "search",
    "lagrangian",
    "milp",
    "bound",
)


@dataclass(frozen=True)
class OverlapResult:
    """The maximum (weighted) overlap of a set of queries.

    ``value`` is what to charge: gamma itself when ``exact``, otherwise a safe upper
    bound (equal to ``upper_bound``). ``witness`` is a point of the domain (attribute ->
    value) covered by exactly the queries ``witness_queries`` (0-based), whose total
    weight is ``lower_bound`` (equal to ``value`` when exact). ``method`` names the
    strategy that decided (see :data:`METHODS`): ``"empty"`` (no queries), ``"atoms"``
    (a point read off the atoms: shared values, lone queries, one attribute),
    ``"dense"`` (prefix sums on a small segment grid), ``"boxes"`` (slab sweep),
    ``"eliminate"`` (variable elimination), ``"search"`` (branch and bound with the
    families bound), ``"lagrangian"`` (branch and bound with a Lagrangian bound), ``"milp"``
    (the 0/1 program) or ``"bound"`` (time limit reached: an upper bound).
    """

    value: float
    exact: bool
    upper_bound: float
    lower_bound: float
    witness: Mapping[str, int | float | str] = field(hash=False)
    witness_queries: tuple[int, ...]
    method: str = ""


@dataclass(frozen=True)
class ColouringResult:
    """The colouring bound of Smith et al. (PoPETs 2022): a greedy colouring of the pairwise-overlap graph.

    Each colour class is a set of pairwise-disjoint queries, so a point is covered by at
    most one query of each class: gamma_w <= sum over classes of the largest weight
    (``value``; the number of ``colours`` when unweighted).
    """

    value: float
    colours: int


def as_number(x: float, integral: bool) -> float:
    """A total of weights as reported: an int when all weights are integers."""
    return round(x) if integral else float(x)


def hardest(methods: Iterable[str]) -> str:
    """The most expensive of the strategies that decided the components ("atoms" if none)."""
    return max(methods, key=METHODS.index, default="atoms")
