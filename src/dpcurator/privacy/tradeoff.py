"""Trade-off functions (f-DP) on a grid of type-I errors.

A trade-off function f(alpha) is the smallest type-II error of any test at type-I error
alpha (Dong, Roth & Su 2022, Def. 2.1): convex, continuous, non-increasing, f <= 1 - alpha.
Larger is more private. We represent one by its values on a grid of alpha in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.privacy.gaussian import gaussian_tradeoff


def grid(points: int = 2001) -> np.ndarray:
    """A grid on [0, 1], denser near 0 where the curves of tight guarantees bend."""
    if points < 3:
        raise InvalidParameter(f"a grid needs at least 3 points, got {points}")
    u = np.linspace(0.0, 1.0, points)
    a = np.unique(np.round(np.concatenate([u, u**2]), 14))  # round: merge near-duplicates
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class TradeOff:
    """A trade-off function sampled at ``alpha`` (sorted, from 0 to 1)."""

    alpha: np.ndarray
    beta: np.ndarray
    label: str = ""

    def __post_init__(self) -> None:
        if self.alpha.shape != self.beta.shape or self.alpha.ndim != 1:
            raise InvalidParameter("alpha and beta must be 1-d arrays of the same length")

    def __call__(self, a: float | np.ndarray) -> np.ndarray:
        """Linear interpolation between grid points (an upper bound for a convex curve)."""
        return np.interp(a, self.alpha, self.beta)

    def dominates(self, other: TradeOff, tol: float = 1e-12) -> bool:
        """True if self >= other on the grid: self is at least as private as other."""
        return bool(np.all(self.beta >= other(self.alpha) - tol))


def f_eps_delta(epsilon: float, delta: float, alpha: np.ndarray | None = None) -> TradeOff:
    """f_{eps,delta}(alpha) = max{0, 1 - delta - e^eps alpha, e^-eps (1 - delta - alpha)}
    (Wasserman & Zhou 2010; Dong, Roth & Su 2022, Prop. 2.5)."""
    a = grid() if alpha is None else alpha
    beta = np.maximum.reduce(
        [np.zeros_like(a), 1 - delta - math.exp(epsilon) * a, math.exp(-epsilon) * (1 - delta - a)]
    )
    return TradeOff(a, beta, f"f(eps={epsilon:g}, delta={delta:g})")


def gaussian(mu: float, alpha: np.ndarray | None = None) -> TradeOff:
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu) (Dong, Roth & Su 2022, Def. 2.7)."""
    a = grid() if alpha is None else alpha
    return TradeOff(a, np.asarray(gaussian_tradeoff(mu, a), dtype=float), f"G(mu={mu:g})")


def from_profile(
    delta_of_eps: Callable[[float], float],
    epsilons: Iterable[float],
    alpha: np.ndarray | None = None,
    label: str = "",
) -> TradeOff:
    """The trade-off implied by a privacy profile: sup over eps of f_{eps, delta(eps)}.

    A mechanism that is (eps, delta(eps))-DP for every eps is f-DP with this supremum
    (Dong, Roth & Su 2022, Prop. 2.12; exact when the profile is the mechanism's own and
    the eps grid is fine). On a finite eps grid the result is smaller, i.e. still valid.
    """
    a = grid() if alpha is None else alpha
    beta = np.zeros_like(a)
    for eps in epsilons:
        d = min(1.0, max(0.0, delta_of_eps(eps)))
        beta = np.maximum(beta, f_eps_delta(eps, d, a).beta)
    return TradeOff(a, beta, label)


def lower_convex_envelope(curves: Iterable[TradeOff], label: str = "") -> TradeOff:
    """lce{f_1, ..., f_k}: the parallel composition of mechanisms on disjoint parts of the
    domain (Smith et al., PoPETs 2022, Thm 5).

    Computed as the lower convex hull (Andrew's monotone chain) of the pointwise minimum.
    """
    curves = list(curves)
    if not curves:
        raise InvalidParameter("the envelope of no curves is undefined")
    a = curves[0].alpha
    low = np.min([c(a) for c in curves], axis=0)
    hull: list[int] = []
    for i in range(len(a)):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            cross = (a[i1] - a[i0]) * (low[i] - low[i0]) - (low[i1] - low[i0]) * (a[i] - a[i0])
            if cross <= 0:
                hull.pop()
            else:
                break
        hull.append(i)
    beta = np.interp(a, a[hull], low[hull])
    return TradeOff(a, beta, label)
