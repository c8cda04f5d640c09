"""Privacy guarantees as immutable, validated values, with their valid conversions.

Neighbouring tables differ by adding or removing one row. Every
conversion cites the theorem that makes it valid; none is an approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpcurator.errors import InvalidParameter
from dpcurator.privacy import _validate
from dpcurator.privacy.gaussian import gdp_delta, gdp_epsilon, mu_from_pure
from dpcurator.privacy.zcdp import zcdp_delta, zcdp_epsilon


def _group_size(k: object) -> int:
    return _validate.count("group size k", k)


@dataclass(frozen=True)
class PureDP:
    """epsilon-DP (Dwork, McSherry, Nissim & Smith 2006)."""

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.nonnegative("epsilon", self.epsilon))

    def to_approx(self) -> ApproxDP:
        """eps-DP is (eps, 0)-DP, by definition."""
        return ApproxDP(self.epsilon, 0.0)

    def to_zcdp(self) -> ZCDP:
        """eps-DP implies (eps^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return ZCDP(self.epsilon**2 / 2)

    def to_gdp(self) -> GDP:
        """eps-DP implies mu-GDP with mu = -2 Phi^{-1}(1/(1+e^eps)).

        G_mu is convex and f_{eps,0} is made of its two chords through the symmetric
        point (Dong, Roth & Su 2022, §2.2), hence G_mu <= f_{eps,0}.
        """
        return GDP(mu_from_pure(self.epsilon))

    def group(self, k: int) -> PureDP:
        """Groups of k rows: (k eps)-DP (Dwork & Roth 2014, Lemma 2.8)."""
        return PureDP(_group_size(k) * self.epsilon)


@dataclass(frozen=True)
class ApproxDP:
    """(epsilon, delta)-DP with 0 <= delta < 1 (Dwork, Kenthapadi et al. 2006)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.nonnegative("epsilon", self.epsilon))
        object.__setattr__(self, "delta", _validate.probability("delta", self.delta))

    def group(self, k: int) -> ApproxDP:
        """Groups of k rows: (k eps, k e^{(k-1) eps} delta)-DP (Dwork & Roth 2014, Thm 2.2 / Lemma 2.8).

        Raises if the group delta reaches 1, where the guarantee says nothing.
        """
        k = _group_size(k)
        delta = k * math.exp((k - 1) * self.epsilon) * self.delta if self.delta else 0.0
        if not delta < 1:
            raise InvalidParameter(
                f"group privacy for k={k} gives delta >= 1: (eps={self.epsilon}, "
                f"delta={self.delta}) protects no group of that size"
            )
        return ApproxDP(k * self.epsilon, delta)


@dataclass(frozen=True)
class ZCDP:
    """rho-zero-concentrated DP (Bun & Steinke 2016, Def. 1.1)."""

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _validate.nonnegative("rho", self.rho))

    def delta_at(self, epsilon: float) -> float:
        """delta(eps): the tighter of Bun & Steinke Prop. 1.3 and Canonne, Kamath & Steinke Cor. 13."""
        return zcdp_delta(self.rho, _validate.nonnegative("epsilon", epsilon))

    def epsilon_at(self, delta: float) -> float:
        """The smallest eps at which :meth:`delta_at` is <= delta."""
        return zcdp_epsilon(self.rho, _validate.open_probability("delta", delta))

    def to_approx(self, delta: float) -> ApproxDP:
        """rho-zCDP implies (epsilon_at(delta), delta)-DP."""
        return ApproxDP(self.epsilon_at(delta), delta)

    def group(self, k: int) -> ZCDP:
        """Groups of k rows: (k^2 rho)-zCDP (Bun & Steinke 2016, Prop. 1.9)."""
        return ZCDP(_group_size(k) ** 2 * self.rho)


@dataclass(frozen=True)
class GDP:
    """mu-Gaussian DP (Dong, Roth & Su 2022, Def. 2.7)."""

    mu: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _validate.nonnegative("mu", self.mu))

    def delta_at(self, epsilon: float) -> float:
        """Exact delta(eps) (Dong, Roth & Su 2022, Cor. 2.13)."""
        return gdp_delta(self.mu, _validate.nonnegative("epsilon", epsilon))

    def epsilon_at(self, delta: float) -> float:
        """The smallest eps with delta(eps) <= delta (exact up to root-finding, on the safe side)."""
        return gdp_epsilon(self.mu, _validate.open_probability("delta", delta))

    def to_approx(self, delta: float) -> ApproxDP:
        """mu-GDP implies (epsilon_at(delta), delta)-DP, exactly (Cor. 2.13)."""
        return ApproxDP(self.epsilon_at(delta), delta)

    def to_zcdp(self) -> ZCDP:
        """mu-GDP implies (mu^2/2)-zCDP: G_mu is the trade-off of N(0,1) vs N(mu,1),
        whose Renyi divergence of every order alpha is alpha mu^2 / 2, and post-processing
        cannot increase a Renyi divergence (Bun & Steinke 2016, Prop. 1.6 and Lemma 2.2)."""
        return ZCDP(self.mu**2 / 2)

    def group(self, k: int) -> GDP:
        """Groups of k rows: (k mu)-GDP (Dong, Roth & Su 2022, Thm 2.14)."""
        return GDP(_group_size(k) * self.mu)


Guarantee = PureDP | ApproxDP | ZCDP | GDP
