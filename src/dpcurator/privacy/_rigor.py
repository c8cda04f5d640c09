"""Certified arithmetic: the tools that turn a float candidate into a figure that holds.

Every figure the accountants call *rigorous* is produced in two steps: a fast float
computation proposes a candidate, and the defining inequality of the theorem is then
checked at that candidate in interval arithmetic (:mod:`mpmath.iv`, whose operations
round outward), stepping the candidate outward (epsilon and delta up, a converted rho
down) until the check passes. Floats never decide anything on their own.

Parameters are read pessimistically: a float such as 0.1 stands for its binary value
0.1000000000000000055... and for the decimal 0.1 the user typed; a certificate must hold
for both, so each check uses the worse of the two (:func:`worst_high`, :func:`worst_low`).
A number read from text (``dpcurator account``'s specs and targets) is a
:class:`Written`: a float that keeps the exact decimal it was written as, and is read
at that value alone, so that a target met with equality is met.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from mpmath import iv
from mpmath.libmp import to_rational

#: Working precision of the interval checks, in bits (about 77 digits).
PREC = 256

_lock = threading.RLock()

Interval = Any  # an mpmath.iv.mpf


@contextmanager
def precision(bits: int = PREC) -> Iterator[None]:
    """Run interval arithmetic at ``bits`` of precision (mpmath's context is global: lock it)."""
    with _lock:
        saved = iv.prec
        iv.prec = bits
        try:
            yield
        finally:
            iv.prec = saved


# --- reading parameters -----------------------------------------------------------------


class Written(float):
    """A float that remembers the exact decimal it was written as (``Written("0.1")`` is
    the float 0.1 whose :attr:`exact` value is 1/10): text says which number it means,
    a float does not. Arithmetic on it gives plain floats."""

    exact: Fraction
    text: str

    def __new__(cls, text: str) -> Written:
        exact = _decimal(text)
        self = super().__new__(cls, float(exact))
        self.exact, self.text = exact, text
        return self

    def __reduce__(self) -> tuple[type[Written], tuple[str]]:
        return (Written, (self.text,))  # copies and pickles keep the decimal


#: The largest decimal exponent and the most digits a :class:`Written` reads: beyond
#: them a number is 0 or infinite as a float anyway, and its exact value would take
#: time and memory that hostile text should not get.
WRITTEN_EXPONENT = 400
WRITTEN_DIGITS = 400


def _decimal(text: str) -> Fraction:
    """The decimal ``text`` exactly (ValueError if it is none, not finite, or beyond
    :data:`WRITTEN_EXPONENT` and :data:`WRITTEN_DIGITS`)."""
    if not isinstance(text, str) or len(text) > 2 * WRITTEN_DIGITS:
        raise ValueError("not a decimal number of reasonable length")
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {text!r}") from None
    if not d.is_finite():
        raise ValueError(f"not a finite number: {text!r}")
    if d.is_zero():
        return Fraction(0)
    if abs(d.adjusted()) > WRITTEN_EXPONENT or len(d.as_tuple().digits) > WRITTEN_DIGITS:
        raise ValueError(f"out of range: {text!r}")
    return Fraction(d)


#: The most bits (numerators' and denominators' together) an exact power may take.
EXACT_POWER_BITS = 1 << 16


def exact_powers(pairs: Iterable[tuple[Fraction, int]]) -> Fraction | None:
    """prod base^n exactly, when the result's numerator and denominator stay within
    about :data:`EXACT_POWER_BITS` bits (1 - delta_i for a few runs of decimal deltas);
    None when they would not (many runs: use intervals)."""
    pairs = list(pairs)
    size = sum(n * (b.numerator.bit_length() + b.denominator.bit_length()) for b, n in pairs)
    if size > EXACT_POWER_BITS:
        return None
    out = Fraction(1)
    for base, n in pairs:
        out *= base**n
    return out


def worst_high(x: float | Fraction | int) -> Fraction:
    """The larger of the float's binary value and its shortest decimal (for a cost: eps, rho, mu, delta)."""
    if isinstance(x, Written):
        return x.exact
    if isinstance(x, Fraction | int):
        return Fraction(x)
    x = float(x)
    return max(Fraction(x), Fraction(repr(x)))


def worst_low(x: float | Fraction | int) -> Fraction:
    """The smaller of the two readings (for a noise scale or a target: smaller is worse)."""
    if isinstance(x, Written):
        return x.exact
    if isinstance(x, Fraction | int):
        return Fraction(x)
    x = float(x)
    return min(Fraction(x), Fraction(repr(x)))


# --- intervals and exact rationals ----------------------------------------------------------


def q(value: Fraction | int | float) -> Interval:
    """An interval enclosing the exact rational ``value`` (at the current precision)."""
    f = Fraction(value)
    if f.denominator == 1:
        return iv.mpf(f.numerator)
    return iv.mpf(f.numerator) / f.denominator


def lo(v: Interval) -> Fraction:
    """The exact lower end of an interval (raises if it is not finite)."""
    return _rational(v._mpi_[0])


def hi(v: Interval) -> Fraction:
    """The exact upper end of an interval (raises if it is not finite)."""
    return _rational(v._mpi_[1])


def _rational(m: tuple) -> Fraction:
    p, r = to_rational(m)  # raises ValueError for inf / nan
    return Fraction(p, r)


def finite(v: Interval) -> bool:
    a, b = v._mpi_
    try:
        to_rational(a)
        to_rational(b)
    except (ValueError, TypeError, ZeroDivisionError):
        return False
    return True


def float_up(x: Fraction) -> float:
    """The smallest float whose binary value and shortest decimal are both >= x (inf if none).

    So the figure holds whether it is read as a float or as the decimal it prints as.
    """
    try:
        f = float(x)  # correctly rounded to nearest
    except OverflowError:
        return math.inf
    while math.isfinite(f) and worst_low(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def float_down(x: Fraction) -> float:
    """The largest float whose binary value and shortest decimal are both <= x."""
    try:
        f = float(x)
    except OverflowError:
        return -math.inf
    while math.isfinite(f) and worst_high(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def at_most(v: Interval, bound: Fraction | float) -> bool:
    """Whether the whole interval lies at or below ``bound`` (False if it is not finite)."""
    return finite(v) and hi(v) <= Fraction(bound)


def fixed(v: Interval, bits: int) -> tuple[int, int]:
    """floor and ceil of v * 2^bits: a fixed-point enclosure of v."""
    a, b = lo(v), hi(v)
    return math.floor(a * 2**bits), math.ceil(b * 2**bits)


# --- the standard normal cdf, enclosed ----------------------------------------------------


def ncdf(x: Fraction, accuracy: int = 128) -> Interval:
    """An interval enclosing Phi(x) for an exact rational x.

    Phi(x) = (1 + sign(x) erf(|x|/sqrt 2)) / 2 with the all-positive series
    erf(z) = 2/sqrt(pi) z e^{-z^2} sum_k (2z^2)^k / (2k+1)!! (Abramowitz & Stegun 7.1.6).
    The sum is carried in integer fixed point, each term rounded down for the lower and
    up for the upper end; once the term ratio 2z^2/(2k+3) is at most 1/2 (and it only
    falls) the rest is at most twice the last term, which is added to the upper end.
    The final 1 - erf runs at a precision grown by the ~1.45 z^2 bits it cancels. Far in
    the lower tail (x <= -40) the Mills-ratio bound 0 <= Phi(x) <= phi(x)/|x| is used.
    ``accuracy`` is the relative accuracy sought, in bits.
    """
    x = Fraction(x)
    if x == 0:
        return iv.mpf(1) / 2
    if x <= -40:
        return iv.mpf([0, 1]) * _phi_over_abs(x)
    if x >= 40:
        return 1 - iv.mpf([0, 1]) * _phi_over_abs(-x)
    z2 = x * x / 2  # z^2, exact
    bits = accuracy + math.ceil(1.45 * float(z2)) + 32
    num, den = 2 * z2.numerator, z2.denominator  # 2 z^2 = num / den
    one = 1 << (bits + 24)  # fixed point, finer than the 2^-bits stopping tolerance
    t_lo = t_hi = one
    s_lo = s_hi = one
    k = 0
    while True:
        d = den * (2 * k + 3)
        t_hi = -((-t_hi * num) // d)
        t_lo = (t_lo * num) // d
        k += 1
        # every later ratio is <= 2z^2/(2k+3); at most 1/2 bounds the rest by 2 t_k
        if 4 * z2 <= 2 * k + 3 and (t_hi << (bits + 1)) <= s_lo:  # 2 t_k <= 2^-bits S
            s_hi += 2 * t_hi
            break
        s_lo += t_lo
        s_hi += t_hi
    saved = iv.prec
    iv.prec = bits + 16
    try:
        total = iv.mpf([s_lo, s_hi]) / one
        zz = q(z2)
        erf = 2 / iv.sqrt(iv.pi) * iv.sqrt(zz) * iv.exp(-zz) * total
        out = (1 + erf) / 2 if x > 0 else (1 - erf) / 2
    finally:
        iv.prec = saved
    return +out


def _phi_over_abs(x: Fraction) -> Interval:
    """phi(x) / |x| enclosed, for the Mills-ratio tail bound."""
    ax = q(abs(x))
    return exp(-x * x / 2) / iv.sqrt(2 * iv.pi) / ax


def phi(x: Fraction) -> Interval:
    """The standard normal density phi(x) = e^{-x^2/2} / sqrt(2 pi), enclosed."""
    return exp(-x * x / 2) / iv.sqrt(2 * iv.pi)


#: e^x for x below -_EXP_FLOOR is only bounded by [0, e^-_EXP_FLOOR]: far below any float.
_EXP_FLOOR = 100_000


def exp(x: Fraction) -> Interval:
    """e^x enclosed for an exact rational x; very negative x gives [0, e^-100000]."""
    if x < -_EXP_FLOOR:
        return iv.mpf([0, 1]) * iv.exp(iv.mpf(-_EXP_FLOOR))
    return iv.exp(q(x))


# --- stepping a candidate outward ----------------------------------------------------------


def step_up(x: float, ok: Callable[[float], bool], limit: float = math.inf) -> float | None:
    """The first of x, x + 1 ulp, x + 2 ulps, x + 4 ulps, ... (relative steps once large)
    at which ``ok`` holds; None if it never does below ``limit``."""
    if ok(x):
        return x
    base = max(abs(x), 1e-300)
    step = math.ulp(base)
    for _ in range(1100):
        y = x + step
        if y > limit or not math.isfinite(y):
            return limit if limit < math.inf and ok(limit) else None
        if ok(y):
            return y
        step *= 2
    return None


def step_down(x: float, ok: Callable[[float], bool], floor: float = 0.0) -> float | None:
    """The first of x, x - 1 ulp, x - 2 ulps, ... (down to ``floor``) at which ``ok`` holds."""
    if ok(x):
        return x
    step = math.ulp(max(abs(x), 1e-300))
    for _ in range(1100):
        y = x - step
        if y <= floor:
            return floor if ok(floor) else None
        if ok(y):
            return y
        step *= 2
    return None


def certify_decreasing(
    cand: float,
    upper: Callable[[float], Fraction],
    target: Fraction,
    log_slope: float,
    limit: float,
) -> float | None:
    """The smallest float x >= cand found with upper(x) <= target, for a decreasing quantity.

    ``upper(x)`` is a proven upper bound (e.g. of delta at epsilon x); ``cand`` a float
    estimate of the crossing and ``log_slope`` an estimate of -d log(quantity)/dx there
    (any positive value works; a good one saves evaluations). If cand fails, x moves up
    by 1.5 times the Newton step on the certified shortfall, doubling until certified;
    two regula-falsi steps on log upper(x) then move it back down towards the crossing.
    Only certified points are ever returned; None if none up to ``limit`` is.
    """
    u = upper(cand)
    if u <= target:
        return cand
    tiny = 4 * math.ulp(max(abs(cand), 1e-300))
    step = tiny
    if log_slope > 0 and target > 0 and math.isfinite(log_slope):
        step = max(step, 1.5 * math.log(u / target) / log_slope)
    bad, u_bad = cand, u
    good, u_good = limit, Fraction(-1)
    for _ in range(1100):
        x = cand + step
        if not x < limit:
            break
        u_x = upper(x)
        if u_x <= target:
            good, u_good = x, u_x
            break
        bad, u_bad = x, u_x
        step *= 2
    if u_good < 0:  # nothing certified below the limit: the limit itself?
        return limit if math.isfinite(limit) and upper(limit) <= target else None
    if u_good > 0:
        for _ in range(3):
            frac = _log_ratio(u_bad, target) / _log_ratio(u_bad, u_good)
            x = bad + (good - bad) * min(1.0, frac * (1 + 1e-3))
            x = max(x, math.nextafter(bad, math.inf))
            if not bad < x < good:
                break
            u_x = upper(x)
            if u_x <= target:
                good, u_good = x, u_x
                if u_x == 0:
                    break
            else:
                bad, u_bad = x, u_x
    return good


def log_slope(f: Callable[[float], float], x: float) -> float:
    """-d log f / dx at x by a forward difference of the float estimate f (0 if unknown)."""
    h = max(abs(x) * 1e-7, 1e-12)
    try:
        a, b = f(x), f(x + h)
    except (OverflowError, ValueError, ZeroDivisionError):
        return 0.0
    if not (0 < b < a) or not math.isfinite(a):
        return 0.0
    return (math.log(a) - math.log(b)) / h


def _log_ratio(a: Fraction, b: Fraction) -> float:
    """log(a / b) for positive rationals, accurate when a / b is close to 1."""
    r = a / b
    return math.log1p(float(r - 1)) if abs(r - 1) < Fraction(1, 2) else math.log(r)
