"""What happened: descriptions of released mechanisms, separate from how to account for them.

Modelled on dp-accounting's ``DpEvent``: an event records a mechanism and how many
times it ran; :mod:`dpcurator.privacy.composition` decides which theorems apply.
All concrete mechanisms act on a query of sensitivity 1 under add/remove-one neighbours
(a count; scale a sum's noise by its clip width before describing it here).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpcurator.privacy import _validate
from dpcurator.privacy.guarantees import Guarantee


@dataclass(frozen=True)
class Laplace:
    """Continuous Laplace noise with this scale on a sensitivity-1 query: (1/scale)-DP."""

    scale: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _validate.positive("scale", self.scale))
        object.__setattr__(self, "count", _validate.count("count", self.count))


@dataclass(frozen=True)
class DiscreteLaplace:
    """Discrete Laplace, P(z) ∝ exp(-|z|/scale), on a sensitivity-1 count: (1/scale)-DP."""

    scale: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _validate.positive("scale", self.scale))
        object.__setattr__(self, "count", _validate.count("count", self.count))


@dataclass(frozen=True)
class Gaussian:
    """Continuous Gaussian noise N(0, sigma^2) on a sensitivity-1 query: exactly (1/sigma)-GDP."""

    sigma: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _validate.positive("sigma", self.sigma))
        object.__setattr__(self, "count", _validate.count("count", self.count))


@dataclass(frozen=True)
class DiscreteGaussian:
    """Discrete Gaussian N_Z(0, sigma^2) on a sensitivity-1 count (Canonne, Kamath & Steinke 2020)."""

    sigma: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _validate.positive("sigma", self.sigma))
        object.__setattr__(self, "count", _validate.count("count", self.count))


@dataclass(frozen=True)
class Guaranteed:
    """A mechanism known only through its guarantee, run ``count`` times."""

    guarantee: Guarantee
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", _validate.count("count", self.count))


Event = Laplace | DiscreteLaplace | Gaussian | DiscreteGaussian | Guaranteed
