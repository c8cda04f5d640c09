"""Range strategies on one ordered attribute: the histogram (identity) and b-ary trees.

The workload's ranges cut the attribute into D *segments* (:mod:`.domain`, in order).
A strategy is a list of *levels*, each a partition of the segments into consecutive
nodes: the identity has one level (every segment); a b-ary tree (Hay, Rastogi, Miklau &
Suciu, VLDB 2010) has the root, its b children, theirs, ... down to the segments. Every
point of the domain is in one node of each level, so level l costs c_l once at every
point and the filter's constraint is sum_l c_l <= B (the per-level costs are optimised,
unlike the uniform split of the paper).

Reconstruction is the generalised least-squares estimate from all levels (Li, Miklau,
Hay, McGregor & Rastogi, VLDB J. 2015): x = S sum_l w_l A_l^T y_l with
S = (sum_l w_l A_l^T A_l)^-1, w_l the precision of level l's noise, and a query w has
variance w^T S w. Hay et al. give a linear-time estimator for trees; the segments are
few here (at most :data:`MAX_SEGMENTS`), so the dense solve is exact and fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.planner.strategies.costs import (
    minimise_max,
    minimise_weighted,
    precision,
    precision_slope,
)
from dpcurator.planner.strategies.domain import AtomDomain

#: The most segments a range strategy works on (dense D x D solves).
MAX_SEGMENTS = 512
#: The branchings a tree strategy tries.
BRANCHINGS = (2, 4, 6, 8, 16)

Level = tuple[tuple[int, int], ...]  # nodes as [start, end) segment indices


def tree_levels(n: int, b: int) -> tuple[Level, ...]:
    """The levels of a b-ary tree over n segments: the root, then each node cut into b
    consecutive children as equal as can be, down to single segments (a node already
    single is kept on the next level, so every level partitions the segments)."""
    levels: list[Level] = [((0, n),)]
    while any(e - s > 1 for s, e in levels[-1]):
        nxt: list[tuple[int, int]] = []
        for s, e in levels[-1]:
            m = e - s
            k = min(b, m)
            cuts = [s + (m * i) // k for i in range(k + 1)]
            nxt.extend((cuts[i], cuts[i + 1]) for i in range(k))
        levels.append(tuple(nxt))
    return tuple(levels)


def identity_levels(n: int) -> tuple[Level, ...]:
    return (tuple((i, i + 1) for i in range(n)),)


def _quadratic(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """q_k^T S q_k for every row of ``q``."""
    return ((q @ s) * q).sum(axis=1)


def _matrix(level: Sequence[tuple[int, int]], n: int) -> np.ndarray:
    a = np.zeros((len(level), n))
    for k, (s, e) in enumerate(level):
        a[k, s:e] = 1.0
    return a


@dataclass(frozen=True)
class RangeModel:
    """The workload's queries over the segments of one attribute, and a set of levels."""

    domain: AtomDomain
    queries: np.ndarray  # distinct query vectors over the segments (K x D)
    profile_of: np.ndarray  # query -> row of ``queries`` (-1: empty, exactly 0)
    levels: tuple[Level, ...]
    grams: tuple[np.ndarray, ...]  # A_l^T A_l

    def covariance(self, w: np.ndarray) -> np.ndarray:
        g = sum(wi * gl for wi, gl in zip(w, self.grams, strict=True))
        return np.linalg.inv(g)

    def variances(self, w: np.ndarray) -> np.ndarray:
        return _quadratic(self.queries, self.covariance(w))

    def with_levels(self, levels: Sequence[Level]) -> RangeModel:
        """The same queries with other levels."""
        n = self.queries.shape[1]
        grams = tuple(_matrix(lv, n).T @ _matrix(lv, n) for lv in levels)
        return RangeModel(self.domain, self.queries, self.profile_of, tuple(levels), grams)

    def fn(self, currency: str):
        """Per distinct query: variance and its gradient in the level costs."""
        mats = [_matrix(lv, self.queries.shape[1]) for lv in self.levels]

        def f(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            try:
                s = self.covariance(precision(c, currency))
            except np.linalg.LinAlgError:
                return np.full(len(self.queries), np.inf), np.zeros((len(self.queries), len(c)))
            y = self.queries @ s
            v = (y * self.queries).sum(axis=1)
            slope = precision_slope(c, currency)
            jac = np.column_stack(
                [-slope[k] * np.sum((y @ m.T) ** 2, axis=1) for k, m in enumerate(mats)]
            )
            return v, jac

        return f

    def weighted_fn(self, big: np.ndarray, currency: str):
        """sum_k omega_k v_k as one value: tr(Omega S), ``big`` = Omega = W^T diag(omega) W
        (:func:`workload_gram`)."""

        def f(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            try:
                s = self.covariance(precision(c, currency))
            except np.linalg.LinAlgError:
                return np.array([np.inf]), np.zeros((1, len(c)))
            m = s @ big @ s
            slope = precision_slope(c, currency)
            g = np.array([-slope[k] * float(np.sum(m * gl)) for k, gl in enumerate(self.grams)])
            return np.array([float(np.sum(big * s))]), g[None, :]

        return f


def one_attribute(d: int) -> None:
    """Raise unless the workload constrains exactly one attribute (``d`` of them)."""
    if d != 1:
        raise InvalidParameter(
            f"range strategies need queries on one attribute; these constrain {d}"
        )


def range_domain_check(domain: AtomDomain, ordered: bool) -> None:
    """Raise unless the workload constrains one ordered attribute cut into at most
    :data:`MAX_SEGMENTS` segments."""
    one_attribute(domain.d)
    if not ordered:
        raise InvalidParameter(f"attribute {domain.names[0]!r} is not ordered")
    if domain.sizes[0] > MAX_SEGMENTS:
        raise InvalidParameter(
            f"the workload cuts {domain.names[0]!r} into {domain.sizes[0]:,} segments, more "
            f"than {MAX_SEGMENTS}"
        )


def range_model(domain: AtomDomain, levels: Sequence[Level]) -> RangeModel:
    n = domain.sizes[0]
    keys: dict[bytes, int] = {}
    rows: list[np.ndarray] = []
    profile_of = np.full(len(domain.boxes), -1, np.int64)
    for q, boxes in enumerate(domain.boxes):
        if not boxes:
            continue
        v = sum((domain.vector(0, b[0]) for b in boxes), np.zeros(n))
        key = v.tobytes()
        if key not in keys:
            keys[key] = len(rows)
            rows.append(v)
        profile_of[q] = keys[key]
    grams = tuple(_matrix(lv, n).T @ _matrix(lv, n) for lv in levels)
    return RangeModel(domain, np.array(rows), profile_of, tuple(levels), grams)


def optimise(
    model: RangeModel,
    omega: np.ndarray | None,
    budget: float,
    currency: str,
    big: np.ndarray | None = None,
) -> np.ndarray:
    """Level costs summing to at most ``budget`` for the weighted objective ``omega``
    (per distinct query) or, when None, the largest variance (``big``: the workload's
    Gram matrix for ``omega``, or for equal weights when None, if already computed)."""
    k = len(model.levels)
    starts = [np.ones(k), np.r_[np.ones(k - 1), float(k)]]
    starts = starts[:1] if k == 1 else starts
    if big is None:
        big = workload_gram(model, np.ones(len(model.queries)) if omega is None else omega)
    c, _ = minimise_weighted(model.weighted_fn(big, currency), np.ones(1), budget, starts)
    if omega is None:
        c, _ = minimise_max(model.fn(currency), budget, c)
    return c


def reconstruct(model: RangeModel, measured: Sequence[np.ndarray], w: np.ndarray) -> np.ndarray:
    """Least-squares answers of every query from the noisy levels (precisions ``w``)."""
    n = model.queries.shape[1]
    rhs = np.zeros(n)
    for lv, y, wl in zip(model.levels, measured, w, strict=True):
        rhs += wl * (_matrix(lv, n).T @ np.asarray(y, float))
    x = model.covariance(w) @ rhs
    out = np.zeros(len(model.profile_of))
    live = model.profile_of >= 0
    out[live] = model.queries[model.profile_of[live]] @ x
    return out


def level_cells(domain: AtomDomain, level: Level) -> list[dict[str, tuple]]:
    """Each node of a level as a coverage: the interval its segments span."""
    segs = domain.pieces[0]
    return [{domain.names[0]: ((segs[s][0][0], segs[e - 1][-1][1]),)} for s, e in level]


def workload_gram(model: RangeModel, omega: np.ndarray) -> np.ndarray:
    """Omega = W^T diag(omega) W over the segments (``omega`` per distinct query), so
    that sum_k omega_k Var_k = tr(Omega X^-1) for measurements of Gram matrix X."""
    return (model.queries * omega[:, None]).T @ model.queries


@dataclass(frozen=True)
class NodeEstimate:
    """Least squares from measured nodes (intervals of segments, any overlap) with
    precisions ``w``: x = S A^T diag(w) y, S = (A^T diag(w) A)^-1 (Li et al. 2015)."""

    model: RangeModel
    nodes: tuple[tuple[int, int], ...]
    w: np.ndarray
    covariance: np.ndarray

    @classmethod
    def of(cls, model: RangeModel, nodes, w: np.ndarray) -> NodeEstimate:
        a = _matrix(nodes, model.queries.shape[1])
        return cls(model, tuple(nodes), np.asarray(w, float), np.linalg.inv((a.T * w) @ a))

    def variances(self) -> np.ndarray:
        """Per distinct query."""
        return _quadratic(self.model.queries, self.covariance)

    def answers(self, y: np.ndarray) -> np.ndarray:
        """Every workload query's estimate from the noisy node counts ``y``."""
        a = _matrix(self.nodes, self.model.queries.shape[1])
        x = self.covariance @ (a.T @ (self.w * np.asarray(y, float)))
        out = np.zeros(len(self.model.profile_of))
        live = self.model.profile_of >= 0
        out[live] = self.model.queries[self.model.profile_of[live]] @ x
        return out
