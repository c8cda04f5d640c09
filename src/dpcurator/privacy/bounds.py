"""Closed-form composition bounds for (eps_i, delta_i)-DP mechanisms, parameters fixed in advance.

Each function takes the per-run parameters as arrays ``eps``, ``delta`` (one entry per
run, i.e. a mechanism run k times appears k times, or use the weighted sums below) and
returns either the eps for a target total delta or the total delta at a target eps.
None means the theorem cannot certify the target at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Sums:
    """The sufficient statistics the closed forms need, over all runs."""

    n: int  # number of runs
    eps: float  # sum eps_i
    eps_sq: float  # sum eps_i^2
    eps_drift: float  # sum eps_i (e^eps_i - 1)   (advanced composition)
    eps_tanh: float  # sum eps_i tanh(eps_i / 2) (KOV)
    delta: float  # sum delta_i
    log_keep: float  # sum log(1 - delta_i)

    @staticmethod
    def of(runs: list[tuple[float, float, int]]) -> Sums:
        """From (eps, delta, count) triples."""
        return Sums(
            n=sum(c for _, _, c in runs),
            eps=math.fsum(c * e for e, _, c in runs),
            eps_sq=math.fsum(c * e * e for e, _, c in runs),
            eps_drift=math.fsum(c * e * math.expm1(e) for e, _, c in runs),
            eps_tanh=math.fsum(c * e * math.tanh(e / 2) for e, _, c in runs),
            delta=math.fsum(c * d for _, d, c in runs),
            log_keep=math.fsum(c * math.log1p(-d) for _, d, c in runs),
        )


def approx_profile(epsilon: float, delta: float, at: float) -> float:
    """delta at ``at`` implied by a single (epsilon, delta)-DP guarantee.

    f_{eps,delta} has its vertex at alpha* = (1 - delta)/(1 + e^eps); its privacy profile
    (Dong, Roth & Su 2022, Prop. 2.12: delta(E) = 1 + f*(-e^E)) is
    delta + (1 - delta)(e^eps - e^E)/(1 + e^eps) for E <= eps, and delta beyond.
    """
    if at >= epsilon:
        return delta
    return delta + (1 - delta) * (math.exp(epsilon) - math.exp(at)) / (1 + math.exp(epsilon))


# --- basic composition (Dwork & Roth 2014, Thm 3.16) -------------------------------


def basic_epsilon(s: Sums, target_delta: float) -> float | None:
    """(sum eps_i, sum delta_i)-DP, which implies (sum eps_i, target)-DP if sum delta_i <= target."""
    return s.eps if s.delta <= target_delta else None


def basic_delta(s: Sums, target_eps: float) -> float:
    """The delta of the composed (sum eps, sum delta) guarantee at ``target_eps``."""
    return min(1.0, approx_profile(s.eps, min(s.delta, 1.0), target_eps))


# --- advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm 3.20) ---


def advanced_epsilon(s: Sums, target_delta: float) -> float | None:
    """eps' = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), delta' = target - sum delta_i.

    Homogeneous: eps sqrt(2 n ln(1/delta')) + n eps (e^eps - 1) (seed 000; DR Thm 3.20).
    The heterogeneous form is the same proof: the privacy loss is a martingale with
    drift sum eps_i (e^eps_i - 1) (DR Lemma 3.18) and increments bounded by eps_i, so
    Azuma's inequality bounds its excess by sqrt(2 ln(1/delta') sum eps_i^2).
    """
    slack = target_delta - s.delta
    if slack <= 0:
        return None
    return math.sqrt(2 * math.log(1 / slack) * s.eps_sq) + s.eps_drift


def advanced_delta(s: Sums, target_eps: float) -> float:
    """Total delta = sum delta_i + delta', with the smallest delta' the theorem allows at eps."""
    excess = target_eps - s.eps_drift
    if s.eps_sq == 0:
        return min(1.0, s.delta)
    if excess <= 0:
        return 1.0
    return min(1.0, s.delta + math.exp(-(excess**2) / (2 * s.eps_sq)))


# --- Kairouz, Oh & Viswanath 2017, Thm 3.5 ---------------------------------------------


def _kov_slack(s: Sums, target_delta: float) -> float:
    """delta~ such that 1 - (1 - delta~) prod(1 - delta_i) = target."""
    return -math.expm1(math.log1p(-target_delta) - s.log_keep)


def kov_epsilon(s: Sums, target_delta: float) -> float | None:
    """min{ sum eps, sum eps tanh(eps/2) + sqrt(2 S ln(e + sqrt(S)/d~)),
    sum eps tanh(eps/2) + sqrt(2 S ln(1/d~)) } with S = sum eps_i^2 and total
    delta 1 - (1 - d~) prod(1 - delta_i) (Kairouz, Oh & Viswanath 2017, Thm 3.5)."""
    slack = _kov_slack(s, target_delta)
    if slack <= 0:
        return None
    second = s.eps_tanh + math.sqrt(2 * s.eps_sq * math.log(math.e + math.sqrt(s.eps_sq) / slack))
    third = s.eps_tanh + math.sqrt(2 * s.eps_sq * math.log(1 / slack))
    return min(s.eps, second, third)


def kov_delta(s: Sums, target_eps: float) -> float:
    """The smallest total delta for which :func:`kov_epsilon` is <= target_eps."""
    keep = math.exp(s.log_keep)
    if target_eps >= s.eps or s.eps_sq == 0:
        return min(1.0, 1 - keep)
    excess = target_eps - s.eps_tanh
    if excess <= 0:
        return 1.0
    level = excess**2 / (2 * s.eps_sq)  # the log term must be <= level
    slack = math.exp(-level)  # third form
    if level > 1:  # second form: e + sqrt(S)/d <= e^level
        slack = min(slack, math.sqrt(s.eps_sq) / (math.exp(level) - math.e))
    slack = min(slack, 1.0)
    return min(1.0, 1 - (1 - slack) * keep)
