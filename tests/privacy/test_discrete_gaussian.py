"""The discrete Gaussian's exact profile and its effective Gaussian-DP mu."""

import math
from fractions import Fraction

import pytest
from scipy.stats import norm

from dpcurator.privacy import GDP
from dpcurator.privacy.discrete_gaussian import dgauss_delta, effective_gdp_mu


def _pmf(sigma, half=400):
    w = {k: math.exp(-k * k / (2 * sigma * sigma)) for k in range(-half, half + 1)}
    z = math.fsum(w.values())
    return {k: v / z for k, v in w.items()}


def test_profile_exceeds_continuous_gaussian_at_sigma_2_eps_1():
    # sigma = 2, eps = 1: 0.00725 (discrete, CKS 2020 Thm 7) vs 0.00683 (G_{1/2}, DRS Cor. 2.13).
    assert round(dgauss_delta(2.0, 1.0), 5) == 0.00725
    assert round(GDP(0.5).delta_at(1.0), 5) == 0.00683


@pytest.mark.parametrize("sigma", [0.7, 2.0, 5.0])
@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0, 2.5])
def test_profile_matches_direct_summation(sigma, eps):
    p = _pmf(sigma)
    # delta(eps) = sum_z max(0, P(z) - e^eps P(z - 1)), the hockey-stick divergence.
    direct = math.fsum(max(0.0, p[z] - math.exp(eps) * p.get(z - 1, 0.0)) for z in p)
    assert dgauss_delta(sigma, eps) == pytest.approx(direct, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 3.7, 10.0])
def test_effective_mu_is_valid_and_minimal(sigma):
    p = _pmf(sigma)
    ks = sorted(p)
    mu = effective_gdp_mu(sigma)
    assert mu >= 1 / sigma
    worst = 0.0
    for k in ks[5:-5]:
        # Each probability and its complement summed separately, so tails keep precision.
        alpha = math.fsum(p[j] for j in ks if j >= k)
        alpha_c = math.fsum(p[j] for j in ks if j < k)
        beta = math.fsum(p[j] for j in ks if j <= k - 2)
        beta_c = math.fsum(p[j] for j in ks if j > k - 2)
        if min(alpha, alpha_c, beta, beta_c) > 1e-250:
            q_alpha = norm.isf(alpha) if alpha < 0.5 else norm.ppf(alpha_c)  # Phi^-1(1 - alpha)
            q_beta = norm.ppf(beta) if beta < 0.5 else -norm.ppf(beta_c)  # Phi^-1(beta)
            # G_mu(alpha) <= beta at every vertex of the discrete curve.
            assert q_alpha - mu <= q_beta + 1e-9
            worst = max(worst, q_alpha - q_beta)
    assert mu == pytest.approx(max(worst, 1 / sigma), rel=1e-6)


def test_sigma_2_needs_more_than_half():
    assert effective_gdp_mu(2.0) > 0.5
    assert effective_gdp_mu(Fraction(2)) == effective_gdp_mu(2.0)
