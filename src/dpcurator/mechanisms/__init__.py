"""Exact noise: samplers, noise descriptions with their accuracy, noisy counts and sums.

Everything here releases integers with exactly distributed noise (docs/design.md §9):
the discrete Laplace and discrete Gaussian samplers of Canonne, Kamath & Steinke (2020),
in integer arithmetic, vectorised with numpy, from the operating system's CSPRNG by
default. See docs/noise.md.
"""

from dpcurator.mechanisms.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise, Noise
from dpcurator.mechanisms.noisy import (
    gaussian_sigma_for_gdp,
    gaussian_sigma_for_zcdp,
    laplace_scale_for,
    noise_for_cost,
    noisy_count,
    noisy_sum,
)
from dpcurator.mechanisms.randomness import (
    RandomSource,
    SeededRandomSource,
    SystemRandomSource,
    ensure_secure,
)
from dpcurator.mechanisms.samplers import bernoulli_exp, discrete_gaussian, discrete_laplace

__all__ = [
    "DiscreteGaussianNoise",
    "DiscreteLaplaceNoise",
    "Noise",
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "ensure_secure",
    "gaussian_sigma_for_gdp",
    "gaussian_sigma_for_zcdp",
    "laplace_scale_for",
    "noise_for_cost",
    "noisy_count",
    "noisy_sum",
]
