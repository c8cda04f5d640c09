"""Closed-form composition bounds for (eps_i, delta_i)-DP mechanisms, parameters fixed in advance.

Each function takes the sufficient statistics of all runs (:class:`Sums`, exact
rationals) and returns either the eps for a target total delta or the total delta at a
target eps, rounded outward to a float and certified: the sums are exact, and every
transcendental step is evaluated in interval arithmetic (:mod:`dpcurator.privacy._rigor`).
None means the theorem cannot certify the target at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from mpmath import iv
from mpmath.libmp import (
    fone,
    from_int,
    from_rational,
    fzero,
    mpf_add,
    mpf_div,
    mpf_exp,
    mpf_mul,
    mpf_pow_int,
    mpf_sub,
    round_ceiling,
    round_floor,
    to_rational,
)

from dpcurator.privacy import _rigor

#: Working precision (bits) of the per-mechanism sums.
_SUM_PREC = 128

#: Beyond this exponent e^x is replaced by a bound (its value no longer matters).
_EXP_CAP = 2000


def _exp(x: Fraction):  # type: ignore[no-untyped-def]
    """e^x enclosed, for x <= _EXP_CAP (inside a _rigor.precision() block)."""
    if x < -_EXP_CAP:
        return iv.mpf([0, 1]) * iv.exp(iv.mpf(-_EXP_CAP))
    return iv.exp(_rigor.q(x))


@dataclass(frozen=True)
class Sums:
    """The sufficient statistics the closed forms need, over all runs, exactly.

    ``runs`` holds (eps, delta, count) with eps and delta exact rationals (the worse of a
    float's binary and decimal readings); the transcendental sums are proven bounds.
    """

    runs: tuple[tuple[Fraction, Fraction, int], ...]
    n: int = field(init=False)  # number of runs
    eps: Fraction = field(init=False)  # sum eps_i
    eps_sq: Fraction = field(init=False)  # sum eps_i^2
    delta: Fraction = field(init=False)  # sum delta_i

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", sum(c for _, _, c in self.runs))
        object.__setattr__(self, "eps", sum((c * e for e, _, c in self.runs), Fraction(0)))
        object.__setattr__(self, "eps_sq", sum((c * e * e for e, _, c in self.runs), Fraction(0)))
        object.__setattr__(self, "delta", sum((c * d for _, d, c in self.runs), Fraction(0)))

    @staticmethod
    def of(runs: Iterable[tuple[float | Fraction, float | Fraction, int]]) -> Sums:
        """From (eps, delta, count) triples; floats are read pessimistically (the larger reading)."""
        merged: dict[tuple[Fraction, Fraction], int] = {}
        for e, d, c in runs:
            key = (_rigor.worst_high(e), _rigor.worst_high(d))
            merged[key] = merged.get(key, 0) + c
        return Sums(tuple((e, d, c) for (e, d), c in merged.items()))

    # The three sums below run once per distinct mechanism (10^4 of them is common), so
    # they use mpmath's directed-rounding primitives directly: the same outward rounding
    # as mpmath.iv, without its per-operation conversions. Each step rounds towards the
    # bound it serves (ceiling for an upper, floor for a lower bound).

    @cached_property
    def eps_drift_hi(self) -> Fraction | None:
        """Upper bound on sum eps_i (e^eps_i - 1) (advanced composition); None if huge."""
        if any(e > 700 for e, _, _ in self.runs):
            return None
        total = fzero
        for e, _, c in self.runs:
            x = from_rational(e.numerator, e.denominator, _SUM_PREC, round_ceiling)
            growth = mpf_sub(mpf_exp(x, _SUM_PREC, round_ceiling), fone, _SUM_PREC, round_ceiling)
            term = mpf_mul(
                mpf_mul(x, growth, _SUM_PREC, round_ceiling), from_int(c), _SUM_PREC, round_ceiling
            )
            total = mpf_add(total, term, _SUM_PREC, round_ceiling)
        return Fraction(*to_rational(total))

    @cached_property
    def eps_tanh_hi(self) -> Fraction:
        """Upper bound on sum eps_i tanh(eps_i / 2) = sum eps_i (1 - 2/(e^eps_i + 1)) (KOV)."""
        total = fzero
        two = from_int(2)
        for e, _, c in self.runs:
            x = from_rational(e.numerator, e.denominator, _SUM_PREC, round_ceiling)
            if e > _EXP_CAP:
                tanh = fone  # tanh <= 1
            else:
                big = mpf_add(mpf_exp(x, _SUM_PREC, round_ceiling), fone, _SUM_PREC, round_ceiling)
                small = mpf_div(two, big, _SUM_PREC, round_floor)  # 2/(e^x + 1), from below
                tanh = mpf_sub(fone, small, _SUM_PREC, round_ceiling)
            term = mpf_mul(
                mpf_mul(x, tanh, _SUM_PREC, round_ceiling), from_int(c), _SUM_PREC, round_ceiling
            )
            total = mpf_add(total, term, _SUM_PREC, round_ceiling)
        return Fraction(*to_rational(total))

    @cached_property
    def keep_lo(self) -> Fraction:
        """Lower bound on prod (1 - delta_i): the product itself when it is small enough
        to hold exactly (so that a target equal to 1 - prod(1 - delta_i) is met)."""
        exact = _rigor.exact_powers((1 - d, c) for _, d, c in self.runs if d)
        if exact is not None:
            return exact
        total = fone
        for _, d, c in self.runs:
            if d:
                k = 1 - d
                base = from_rational(k.numerator, k.denominator, _SUM_PREC, round_floor)
                power = mpf_pow_int(base, c, _SUM_PREC, round_floor)
                total = mpf_mul(total, power, _SUM_PREC, round_floor)
        return max(Fraction(0), Fraction(*to_rational(total)))


def approx_profile(epsilon: float, delta: float, at: float) -> float:
    """delta at ``at`` implied by a single (epsilon, delta)-DP guarantee, in floats.

    f_{eps,delta} has its vertex at alpha* = (1 - delta)/(1 + e^eps); its privacy profile
    (Dong, Roth & Su 2022, Prop. 2.12: delta(E) = 1 + f*(-e^E)) is
    delta + (1 - delta)(e^eps - e^E)/(1 + e^eps) for E <= eps, and delta beyond.
    """
    if at >= epsilon:
        return delta
    return delta + (1 - delta) * -math.expm1(at - epsilon) / (1 + math.exp(-epsilon))


def _profile_upper(epsilon: Fraction, delta: Fraction, at: Fraction) -> Fraction:
    """Proven upper bound on :func:`approx_profile` for exact arguments."""
    if at >= epsilon:
        return delta
    with _rigor.precision():
        v = _rigor.q(delta) + _rigor.q(1 - delta) * (1 - _exp(at - epsilon)) / (1 + _exp(-epsilon))
        return _rigor.hi(v)


def _up(x: Fraction) -> float:
    """A certified total delta as a float: rounded up, at most 1."""
    return min(1.0, _rigor.float_up(x))


def _finite_up(x: Fraction) -> float | None:
    """A certified epsilon as a float: rounded up; None if it is not a finite float."""
    f = _rigor.float_up(x)
    return f if math.isfinite(f) else None


# --- basic composition (Dwork & Roth 2014, Thm 3.16) -------------------------------


def basic_epsilon(s: Sums, target_delta: float) -> float | None:
    """(sum eps_i, sum delta_i)-DP, which implies (sum eps_i, target)-DP if sum delta_i <= target."""
    if s.delta > _rigor.worst_low(target_delta):
        return None
    return _finite_up(s.eps)


def basic_delta(s: Sums, target_eps: float) -> float:
    """The delta of the composed (sum eps, sum delta) guarantee at ``target_eps``."""
    if s.delta >= 1:
        return 1.0
    return _up(_profile_upper(s.eps, s.delta, _rigor.worst_low(target_eps)))


# --- advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork & Roth 2014, Thm 3.20) ---


def advanced_epsilon(s: Sums, target_delta: float) -> float | None:
    """eps' = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), delta' = target - sum delta_i.

    Homogeneous: eps sqrt(2 n ln(1/delta')) + n eps (e^eps - 1) (Dwork & Roth 2014,
    Thm 3.20). The heterogeneous form is the same proof: the privacy loss is a martingale
    with drift sum eps_i (e^eps_i - 1) (Dwork & Roth 2014, Lemma 3.18) and increments
    bounded by eps_i, so Azuma's inequality bounds its excess by
    sqrt(2 ln(1/delta') sum eps_i^2).
    """
    slack = _rigor.worst_low(target_delta) - s.delta
    drift = s.eps_drift_hi
    if slack <= 0 or drift is None:
        return None
    with _rigor.precision():
        v = iv.sqrt(2 * iv.log(1 / _rigor.q(slack)) * _rigor.q(s.eps_sq)) + _rigor.q(drift)
        return _finite_up(_rigor.hi(v)) if _rigor.finite(v) else None


def advanced_delta(s: Sums, target_eps: float) -> float:
    """Total delta = sum delta_i + delta', with the smallest delta' the theorem allows at eps."""
    if s.eps_sq == 0:
        return _up(s.delta)
    drift = s.eps_drift_hi
    if drift is None:
        return 1.0
    excess = _rigor.worst_low(target_eps) - drift
    if excess <= 0:
        return 1.0
    with _rigor.precision():
        v = _rigor.q(s.delta) + _exp(-(excess**2) / (2 * s.eps_sq))
        return _up(_rigor.hi(v))


# --- Kairouz, Oh & Viswanath 2017, Thm 3.5 ---------------------------------------------


def _kov_slack(s: Sums, target_delta: float) -> Fraction:
    """A delta~ with 1 - (1 - delta~) prod(1 - delta_i) <= target (rounded down)."""
    keep = s.keep_lo
    if keep <= 0:
        return Fraction(-1)  # none
    return 1 - (1 - _rigor.worst_low(target_delta)) / keep


def kov_epsilon(s: Sums, target_delta: float) -> float | None:
    """min{ sum eps, sum eps tanh(eps/2) + sqrt(2 S ln(e + sqrt(S)/d~)),
    sum eps tanh(eps/2) + sqrt(2 S ln(1/d~)) } with S = sum eps_i^2 and total
    delta 1 - (1 - d~) prod(1 - delta_i) (Kairouz, Oh & Viswanath 2017, Thm 3.5).

    With d~ = 0 (a target of exactly 1 - prod(1 - delta_i)) only the first form holds:
    the privacy loss of the dominating randomized responses never exceeds sum eps
    (their privacy profile is 0 there, KOV Thm 3.3), so sum eps is certified."""
    slack = _kov_slack(s, target_delta)
    if slack < 0:
        return None
    best = s.eps
    if slack == 0:
        return _finite_up(best)
    with _rigor.precision():
        S = _rigor.q(s.eps_sq)
        drift = _rigor.q(s.eps_tanh_hi)
        d = _rigor.q(slack)
        for v in (
            drift + iv.sqrt(2 * S * iv.log(iv.e + iv.sqrt(S) / d)),
            drift + iv.sqrt(2 * S * iv.log(1 / d)),
        ):
            if _rigor.finite(v):
                best = min(best, _rigor.hi(v))
    return _finite_up(best)


def kov_delta(s: Sums, target_eps: float) -> float:
    """The smallest total delta for which :func:`kov_epsilon` is <= target_eps."""
    at = _rigor.worst_low(target_eps)
    keep = s.keep_lo
    if at >= s.eps or s.eps_sq == 0:
        return _up(1 - keep)
    excess = at - s.eps_tanh_hi
    if excess <= 0:
        return 1.0
    level = excess**2 / (2 * s.eps_sq)  # the log term must be <= level
    with _rigor.precision():
        slack = _rigor.hi(_exp(-level))  # third form
        if level > 1 and level <= _EXP_CAP:  # second form: e + sqrt(S)/d <= e^level
            v = iv.sqrt(_rigor.q(s.eps_sq)) / (_exp(level) - iv.e)
            if _rigor.finite(v) and v.a > 0:
                slack = min(slack, _rigor.hi(v))
    slack = min(slack, Fraction(1))
    return _up(1 - (1 - slack) * keep)
