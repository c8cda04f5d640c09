"""What happened: descriptions of released mechanisms, separate from how to account for them.

Modelled on dp-accounting's ``DpEvent``: an event records a mechanism and how many
times it ran; :mod:`dpcurator.privacy.composition` decides which theorems apply.
All concrete mechanisms act on a query of sensitivity 1 under add/remove-one neighbours
(a count; scale a sum's noise by its clip width before describing it here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from dpcurator.privacy import _validate
from dpcurator.privacy.guarantees import Guarantee


class _Noise:
    """Validation shared by the noise events: a positive parameter and a count >= 1."""

    def __post_init__(self) -> None:
        param = fields(self)[0].name  # type: ignore[arg-type]
        object.__setattr__(self, param, _validate.positive(param, getattr(self, param)))
        object.__setattr__(self, "count", _validate.count("count", self.count))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Laplace(_Noise):
    """Continuous Laplace noise with this scale on a sensitivity-1 query: (1/scale)-DP."""

    scale: float
    count: int = 1


@dataclass(frozen=True)
class DiscreteLaplace(_Noise):
    """Discrete Laplace, P(z) ∝ exp(-|z|/scale), on a sensitivity-1 count: (1/scale)-DP."""

    scale: float
    count: int = 1


@dataclass(frozen=True)
class Gaussian(_Noise):
    """Continuous Gaussian noise N(0, sigma^2) on a sensitivity-1 query: exactly (1/sigma)-GDP."""

    sigma: float
    count: int = 1


@dataclass(frozen=True)
class DiscreteGaussian(_Noise):
    """Discrete Gaussian N_Z(0, sigma^2) on a sensitivity-1 count (Canonne, Kamath & Steinke 2020)."""

    sigma: float
    count: int = 1


@dataclass(frozen=True)
class Guaranteed:
    """A mechanism known only through its guarantee, run ``count`` times."""

    guarantee: Guarantee
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", _validate.count("count", self.count))


Event = Laplace | DiscreteLaplace | Gaussian | DiscreteGaussian | Guaranteed
