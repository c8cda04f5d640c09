"""Private quantiles: a rank score over ordered candidates, selected exactly.

**The score.** For candidates c_1 < ... < c_M of an ordered attribute (by default every
value of its public domain), L_i rows lie below c_i and E_i equal it, n in all. The q-th
quantile's rank is qn; c_i is exactly right when qn lies in [L_i, L_i + E_i] (ties
included), and its *rank error* is the distance from qn to that interval, in rows. With
q = a/b the score is b times that distance, an integer:

    s_i = max(0, a n - b (L_i + E_i), b L_i - a n).

Adding or removing one row moves qn by q and the interval's ends by 0 or 1 (a row below
c_i shifts both ends, a row at c_i the upper end only), so every s_i moves by at most
max(a, b - a): the score's sensitivity under add/remove, k times that for a privacy unit
of k rows (the triangle inequality). It is the tie-aware form of the rank utility of
Smith (STOC 2011, Sec. 3); the score |(1 - q) L_i - q (n - L_i - E_i)| of OpenDP's
quantile has the same sensitivity and is never smaller (docs/aggregations.md).

**The selection.** Lower scores are better; the gaps g_i = s_i - min s are selected with
rate eta = epsilon / (2 Delta) by :mod:`dpcurator.mechanisms.selection`:

* a pure-DP cost epsilon: permute-and-flip, epsilon-DP (McKenna & Sheldon 2020, Thm 1);
* a zCDP cost rho: the exponential mechanism at epsilon = sqrt(8 rho) (rounded down):
  epsilon-bounded range (Dong, Durfee & Rogers 2020, Prop. 2), so epsilon^2/8 <= rho
  -zCDP (Cesar & Rogers 2021, Lemma 3.2);
* a Gaussian-DP cost mu: permute-and-flip at the largest epsilon whose epsilon-DP implies
  mu-GDP, mu >= -2 Phi^-1(1/(1 + e^epsilon)) (docs/design.md §3), certified.

**Accuracy.** Either selection outputs candidate i with probability at most
exp(-eta g_i) (for permute-and-flip its coin must succeed; for the exponential mechanism
its weight over the best one's), so P(gap >= g) <= M e^{-eta g}: with probability at least
1 - beta the rank error exceeds the best candidate's by at most
ln(M / beta) / (eta b) rows (the exponential mechanism's utility theorem, Dwork & Roth
2014, Thm 3.11). With every domain value a candidate the best candidate's rank error is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpcurator import deadlines
from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.noisy import MAX_NOISE_PARAMETER, scientific
from dpcurator.mechanisms.randomness import INT64_LIMIT, RandomSource
from dpcurator.mechanisms.selection import exponential_mechanism, permute_and_flip
from dpcurator.queries.statistics import MAX_Q_DENOMINATOR, quantile_fraction

__all__ = [
    "MAX_Q_DENOMINATOR",
    "QuantileMechanism",
    "quantile_fraction",
    "quantile_mechanism",
    "quantile_sensitivity",
    "rank_scores",
]

#: Bits of a rational epsilon derived from rho or mu (rounded down on this grid).
_EPS_BITS = 30


def quantile_sensitivity(q: Fraction, k: int = 1) -> int:
    """max(a, b - a) for q = a/b, times the privacy unit k: the score's sensitivity."""
    return k * max(q.numerator, q.denominator - q.numerator)


def rank_scores(below: np.ndarray, equal: np.ndarray, n: int, q: Fraction) -> np.ndarray:
    """b times the distance from qn to [L_i, L_i + E_i], q = a/b (integers)."""
    a, b = q.numerator, q.denominator
    big = (n + 1) * b >= INT64_LIMIT
    lo = np.asarray(below, dtype=object if big else np.int64)
    hi = lo + np.asarray(equal, dtype=object if big else np.int64)
    target = a * n
    return np.maximum(np.maximum(target - b * hi, b * lo - target), 0)


@dataclass(frozen=True)
class QuantileMechanism:
    """One exact selection among a quantile's candidates: ``name`` is
    ``permute_and_flip`` or ``exponential_mechanism``, ``epsilon`` the selection's
    parameter, ``sensitivity`` the score's (integer units of 1/b rows)."""

    name: str
    epsilon: Fraction
    sensitivity: int

    @property
    def rate(self) -> Fraction:
        """eta = epsilon / (2 Delta): candidate i's weight is exp(-eta g_i)."""
        return self.epsilon / (2 * self.sensitivity)

    def select(self, scores: np.ndarray, rng: RandomSource) -> int:
        """The index of the chosen candidate (lower scores are better)."""
        s = np.asarray(scores)
        gaps = s - s.min()
        if self.name == "exponential_mechanism":
            return exponential_mechanism(gaps, self.rate, rng)
        return permute_and_flip(gaps, self.rate, rng)

    def rank_error_bound(self, candidates: int, q: Fraction, beta: Fraction) -> int:
        """The smallest t found with M e^{-eta b t} <= beta, certified in exact rational
        arithmetic: with probability at least 1 - beta the rank error is at most the best
        candidate's plus t rows."""
        return _rank_bound(self.rate * q.denominator, Fraction(candidates) / beta)

    def expected_rank_error(self, candidates: int, q: Fraction) -> float:
        """An upper bound on the expected rank error beyond the best candidate's, in rows:
        E gap <= (ln M + 1) / eta + 1, from P(gap >= g) <= min(1, M e^{-eta g})."""
        r = float(self.rate)
        return ((math.log(candidates) + 1) / r + 1) / q.denominator

    def __str__(self) -> str:
        kind = "PermuteAndFlip" if self.name == "permute_and_flip" else "ExponentialMechanism"
        return f"{kind}(epsilon={self.epsilon}, sensitivity={self.sensitivity})"


@lru_cache(maxsize=1024)
def _rank_bound(x_per_row: Fraction, m_over_beta: Fraction) -> int:
    """The smallest t with e^{x t} >= M / beta (as :func:`_exp_at_least` certifies it),
    in O(log t) exact checks: steps that double away from the float guess until one t
    fails and one holds, then bisection. (Stepping by one from the guess never ends when
    x is tiny and the guess a little low: each step adds only x to the exponent.)"""

    def holds(t: int) -> bool:
        return t >= 0 and _exp_at_least(x_per_row * t, m_over_beta)

    if m_over_beta <= 1:
        return 0
    log_bound = math.log(m_over_beta.numerator) - math.log(m_over_beta.denominator)
    guess = max(0, math.ceil(Fraction(log_bound) / x_per_row))  # exact: no float overflow
    step = max(1, guess >> 40)
    lo, hi = guess - step, guess  # wanted: lo fails, hi holds
    while not holds(hi):
        deadlines.check()
        lo, hi, step = hi, hi + step, 2 * step
    while holds(lo):  # t = 0 fails (M / beta > 1), so this ends
        deadlines.check()
        hi, lo, step = lo, max(-1, lo - step), 2 * step
    while hi - lo > 1:
        deadlines.check()
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi


def _exp_at_least(x: Fraction, bound: Fraction) -> bool:
    """Whether e^x >= bound, certified by a partial sum of e^x's series (each a lower
    bound, every term being positive); False when the partial sums do not reach it."""
    if bound <= 1:
        return True
    total, term, k = Fraction(1), Fraction(1), 0
    while total < bound:
        k += 1
        term = term * x / k
        if term * 4 < total * Fraction(1, 10**12) and k > x:  # converged below the bound
            return False
        total += term
    return True


def quantile_mechanism(
    currency: str, amount: Fraction, sensitivity: int, denominator: int = 1
) -> QuantileMechanism:
    """The selection that spends at most ``amount`` (epsilon, rho or mu^2) on a score of
    the given sensitivity, in units of 1/``denominator`` rows (q's denominator b; see the
    module docstring for each currency's theorem).

    Refused, like a count's noise, when its rank error's scale 1/(eta b) rows would pass
    :data:`~dpcurator.mechanisms.noisy.MAX_NOISE_PARAMETER`: such a selection is a
    uniform draw in all but name, and its exact accuracy bound is out of reach."""
    if amount <= 0 or sensitivity < 1 or denominator < 1:
        raise InvalidParameter("a quantile needs a positive cost and sensitivity")
    if currency == "epsilon":
        mech = QuantileMechanism("permute_and_flip", Fraction(amount), sensitivity)
    elif currency == "rho":
        mech = QuantileMechanism("exponential_mechanism", _eps_of_rho(amount), sensitivity)
    elif currency == "mu":
        mech = QuantileMechanism("permute_and_flip", _eps_of_mu_squared(amount), sensitivity)
    else:
        raise InvalidParameter(f"unknown currency {currency!r}")
    scale = 1 / (mech.rate * denominator)
    if scale > MAX_NOISE_PARAMETER:
        shown = Decimal(amount.numerator) / Decimal(amount.denominator)
        given = f"{shown.sqrt() if currency == 'mu' else shown:.3g}"
        raise InvalidParameter(
            f"{currency}={given} makes a quantile's rank error of scale {scientific(scale)} rows, "
            f"beyond the largest supported {scientific(Fraction(MAX_NOISE_PARAMETER))}: such an "
            f"answer would be pure noise; spend more {currency} on it"
        )
    return mech


def _grid_floor(x: float) -> tuple[int, int]:
    """(k, e) with k / 2^e just below x, about _EPS_BITS significant bits."""
    e = max(0, _EPS_BITS - math.frexp(x)[1])
    return math.floor(x * 2**e), e


def _eps_of_rho(rho: Fraction) -> Fraction:
    """The largest epsilon on the grid with epsilon^2 / 8 <= rho (exactly)."""
    eight = 8 * rho
    _, e = _grid_floor(math.sqrt(float(eight)))
    k = math.isqrt(math.floor(eight * 4**e))  # k^2 <= 8 rho 4^e
    eps = Fraction(k, 2**e)
    if eps <= 0:
        raise InvalidParameter(f"rho = {float(rho):.3g} is too small for a quantile")
    assert eps * eps <= eight
    return eps


@lru_cache(maxsize=256)
def _eps_of_mu_squared(mu_sq: Fraction) -> Fraction:
    """The largest epsilon on the grid whose certified GDP parameter mu(epsilon) =
    -2 Phi^-1(1/(1+e^epsilon)) has mu(epsilon)^2 <= mu_sq."""
    from scipy.special import ndtr

    from dpcurator.privacy.gaussian import mu_from_pure_exact

    def ok(eps: Fraction) -> bool:
        m = mu_from_pure_exact(eps)
        return math.isfinite(m) and Fraction(m) ** 2 <= mu_sq

    mu = math.sqrt(float(mu_sq))
    guess = math.log(float(ndtr(mu / 2)) / float(ndtr(-mu / 2))) if mu < 60 else mu * mu / 2
    k, e = _grid_floor(guess)
    step = max(1, k >> 20)
    while k > 0 and not ok(Fraction(k, 2**e)):
        k -= step
        step *= 2
    if k <= 0:
        raise InvalidParameter(f"mu = {mu:.3g} is too small for a quantile")
    return Fraction(k, 2**e)
