"""Privacy of the discrete Gaussian N_Z(0, sigma^2) on a sensitivity-1 count.

Canonne, Kamath & Steinke, *The Discrete Gaussian for Differential Privacy*
(NeurIPS 2020): it is (1/(2 sigma^2))-zCDP (Thm 4) and (eps, delta(eps))-DP with
delta(eps) = P[Y > eps sigma^2 - 1/2] - e^eps P[Y > eps sigma^2 + 1/2] (Thm 7).

It is *not* exactly (1/sigma)-GDP: its trade-off curve dips below G_{1/sigma}
(at sigma = 2, eps = 1 its delta is 0.00725 against 0.00683 for G_{1/2}, by Thm 7
and Dong, Roth & Su 2022, Cor. 2.13). :func:`effective_gdp_mu` returns the smallest mu such that G_mu lies
below it, checked at the vertices of the (piecewise linear) curve; since G_mu is
convex, it then lies below every segment between them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import ndtri

from dpcurator.errors import InvalidParameter

#: Tail mass beyond this many standard deviations is below 1e-300 and is ignored;
#: the vertices there need mu -> 1/sigma (the tails are Gaussian), never more.
_WINDOW_SIGMAS = 38.0
#: Beyond this sigma the tables below would need too much memory.
MAX_SIGMA = 2.0e5
#: Below this sigma the distribution is a point mass in double precision.
MIN_SIGMA = 0.03
#: Relative safety margin on the effective mu, for the float error of ndtri.
_MARGIN = 1e-9


@lru_cache(maxsize=64)
def _tails(sigma: float) -> tuple[int, np.ndarray, np.ndarray]:
    """(lo, L, R) with L[i] = P[Y <= lo + i] and R[i] = P[Y >= lo + i].

    Both tails are cumulative sums of positive terms from their small end, so
    each is accurate to a few ulps relative, even far out in the tail.
    """
    if not MIN_SIGMA <= sigma <= MAX_SIGMA:
        raise InvalidParameter(
            f"discrete Gaussian sigma must be in [{MIN_SIGMA:g}, {MAX_SIGMA:g}], got {sigma}"
        )
    half = math.ceil(_WINDOW_SIGMAS * sigma) + 2
    k = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(k**2) / (2.0 * sigma**2))
    z = w.sum()
    left = np.cumsum(w) / z
    right = np.cumsum(w[::-1])[::-1] / z
    return -half, left, right


def dgauss_delta(sigma: float, epsilon: float) -> float:
    """Exact delta(eps) of the discrete Gaussian (Canonne, Kamath & Steinke 2020, Thm 7)."""
    lo, _, right = _tails(sigma)

    def tail_gt(x: float) -> float:  # P[Y > x] for real x
        i = math.floor(x) + 1 - lo
        if i <= 0:
            return 1.0
        return float(right[i]) if i < len(right) else 0.0

    a = tail_gt(epsilon * sigma**2 - 0.5)
    b = tail_gt(epsilon * sigma**2 + 0.5)
    second = math.exp(epsilon + math.log(b)) if b > 0 else 0.0
    return max(0.0, a - second)


@lru_cache(maxsize=64)
def effective_gdp_mu(sigma: float) -> float:
    """The smallest mu with G_mu <= the discrete Gaussian's trade-off curve.

    The test "output >= k" between Y and Y + 1 has type-I error alpha_k = P[Y >= k]
    and type-II error beta_k = P[Y <= k - 2]; these are the curve's vertices.
    G_mu(alpha) <= beta iff mu >= Phi^{-1}(1 - alpha) - Phi^{-1}(beta) (Dong, Roth &
    Su 2022, Def. 2.7), so the answer is the maximum of that over all vertices,
    rounded up by a relative 1e-9 for floating-point error. Always >= 1/sigma.
    """
    sigma = float(sigma)
    _, left, right = _tails(sigma)
    n = len(left)
    i = np.arange(2, n)  # vertex index k = lo + i; needs L[i-2], R[i-1], R[i], L[i-1]
    alpha, alpha_c = right[i], left[i - 1]  # alpha_k and 1 - alpha_k
    beta, beta_c = left[i - 2], right[i - 1]  # beta_k and 1 - beta_k
    keep = (alpha > 1e-300) & (beta > 1e-300) & (alpha_c > 1e-300) & (beta_c > 1e-300)
    alpha, alpha_c, beta, beta_c = alpha[keep], alpha_c[keep], beta[keep], beta_c[keep]
    # Phi^{-1}(1 - alpha) and Phi^{-1}(beta), each from the more accurate tail.
    q_alpha = np.where(alpha < 0.5, -ndtri(alpha), ndtri(alpha_c))
    q_beta = np.where(beta < 0.5, ndtri(beta), -ndtri(beta_c))
    mu = float(np.max(q_alpha - q_beta))
    return max(mu, 1.0 / sigma) * (1 + _MARGIN)
