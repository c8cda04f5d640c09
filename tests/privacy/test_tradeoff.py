"""Trade-off functions and parallel composition (Smith et al., PoPETs 2022, Thm 5)."""

import numpy as np
import pytest

from dpcurator.privacy import GDP
from dpcurator.privacy.tradeoff import (
    f_eps_delta,
    from_profile,
    gaussian,
    grid,
    lower_convex_envelope,
)


def test_envelope_of_gaussians_is_the_largest_mu():
    # Seed 002, Cor. 2: parallel composition of mu_i-GDP mechanisms is max mu_i-GDP.
    env = lower_convex_envelope([gaussian(0.5), gaussian(2.0), gaussian(1.0)])
    assert np.max(np.abs(env.beta - gaussian(2.0).beta)) < 1e-12


def test_envelope_is_convex_and_below_each_curve():
    curves = [f_eps_delta(1.0, 0.0), f_eps_delta(0.3, 0.05), gaussian(1.2)]
    env = lower_convex_envelope(curves)
    for c in curves:
        assert c.dominates(env)
    slopes = np.diff(env.beta) / np.diff(env.alpha)
    assert np.all(np.diff(slopes) >= -1e-7)
    # Strictly below the pointwise minimum somewhere: the min of these is not convex.
    low = np.min([c.beta for c in curves], axis=0)
    assert np.any(env.beta < low - 1e-4)


def test_profile_recovers_gaussian_curve():
    mu = 1.0
    eps = np.linspace(0, 6, 400)
    f = from_profile(GDP(mu).delta_at, eps)
    g = gaussian(mu)
    assert g.dominates(f, tol=1e-12)  # a finite eps grid can only be pessimistic
    assert np.max(g.beta - f.beta) < 5e-3


def test_dominance_orders_guarantees():
    assert f_eps_delta(0.5, 0).dominates(f_eps_delta(1.0, 0))
    assert not f_eps_delta(1.0, 0).dominates(f_eps_delta(0.5, 0))
    a = grid(101)
    assert a[0] == 0 and a[-1] == 1 and np.all(np.diff(a) > 0)
    with pytest.raises(ValueError):
        grid(2)
