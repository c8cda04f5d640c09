"""Exact, vectorised samplers: Bernoulli(exp(-gamma)), discrete Laplace, discrete Gaussian.

These are the algorithms of Canonne, Kamath & Steinke, *The Discrete Gaussian for
Differential Privacy* (NeurIPS 2020, arXiv:2004.00010):

* Algorithm 1, Bernoulli(exp(-gamma)) for rational gamma, by the alternating-series
  (von Neumann) trick: count K, the first k at which a Bernoulli(gamma/k) trial fails,
  and return ``K odd``; for gamma > 1 multiply in floor(gamma) Bernoulli(exp(-1)) trials.
* Algorithm 2, the discrete Laplace with rational scale t = T/S: U uniform on
  {0..T-1} kept with probability exp(-U/T), V ~ Geometric(1 - exp(-1)),
  X = U + T V is geometric with ratio exp(-1/T), Y = floor(X / S) is geometric with
  ratio exp(-1/t); a fair sign, rejecting "-0".
* Algorithm 3, the discrete Gaussian with rational sigma^2 by rejection from a discrete
  Laplace of scale t, accepting Y with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).

Exactness. Every accept/reject decision is a Bernoulli(n/d) with integers n, d,
decided by drawing a uniform integer in [0, d) (:func:`uniform_below`) and comparing it
with n. No floating-point number ever influences which value is returned (floats only
size the batches). Integers live in ``int64`` arrays while a precomputed bound shows
they fit, and in ``object`` arrays of Python integers otherwise, so any rational
parameter is sampled exactly; only the speed depends on its size.

Vectorisation. All elements that are still undecided at the same stage of an algorithm
share the same loop counter (for instance every element still alive in round k of
Algorithm 1 has K = k), so each round is one numpy operation over the survivors.
Bernoulli(exp(-1)), the most frequent trial, is decided with one 32-bit uniform
integer W below 12!: in Algorithm 1 with gamma = 1, P(K > k) = 1/k!, and
P(W < 12!/k!) = 1/k! exactly, so K - 1 = #{k <= 12 : W < 12!/k!}; the rare elements
with K > 12 continue with ordinary rounds.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational

import numpy as np

from dpcurator.errors import InvalidParameter
from dpcurator.mechanisms.randomness import (
    INT64_LIMIT,
    RandomSource,
    default_source,
    random_bits,
    uniform_below,
)

__all__ = [
    "bernoulli_exp",
    "bernoulli_exp_many",
    "discrete_gaussian",
    "discrete_laplace",
    "exact_rational",
]

_FACT_N = 12
_FACT = math.factorial(_FACT_N)
# 12!/k! for k = 12, 11, ..., 1 (ascending); W < 12!/k!  <=>  K > k.
_FACT_THRESHOLDS = np.array(
    [_FACT // math.factorial(k) for k in range(_FACT_N, 0, -1)], dtype=np.int64
)


# --------------------------------------------------------------------------- parameters


def exact_rational(value: object, name: str, *, positive: bool = True) -> Fraction:
    """Convert a parameter to an exact :class:`~fractions.Fraction`.

    Integers and fractions are taken as they are, floats exactly (``Fraction(0.3)`` is
    the binary value of the float ``0.3``, not 3/10). Booleans, strings, NaN and
    infinities are refused.
    """
    if isinstance(value, bool | np.bool_):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    if isinstance(value, int | np.integer):
        result = Fraction(int(value))
    elif isinstance(value, Fraction | Rational):
        result = Fraction(value.numerator, value.denominator)
    elif isinstance(value, float | np.floating):
        if not math.isfinite(value):
            raise InvalidParameter(f"{name} must be finite, got {value!r}")
        result = Fraction(float(value))
    else:
        raise InvalidParameter(
            f"{name} must be an int, Fraction or float, got {type(value).__name__}"
        )
    if positive and result <= 0:
        raise InvalidParameter(f"{name} must be positive, got {value!r}")
    if not positive and result < 0:
        raise InvalidParameter(f"{name} must be non-negative, got {value!r}")
    return result


def _size_count(size: object) -> tuple[int, tuple[int, ...] | None]:
    """Number of draws and output shape (``None`` for a scalar)."""
    if size is None:
        return 1, None
    if isinstance(size, int | np.integer) and not isinstance(size, bool):
        shape: tuple[int, ...] = (int(size),)
    elif isinstance(size, tuple) and all(
        isinstance(s, int | np.integer) and not isinstance(s, bool) for s in size
    ):
        shape = tuple(int(s) for s in size)
    else:
        raise InvalidParameter(f"size must be None, an int or a tuple of ints, got {size!r}")
    if any(s < 0 for s in shape):
        raise InvalidParameter(f"size must not be negative, got {size!r}")
    return math.prod(shape), shape


def _shape_result(values: np.ndarray, shape: tuple[int, ...] | None) -> object:
    if shape is None:
        return int(values[0])
    return values.reshape(shape)


def _as_int64_if_fits(values: np.ndarray) -> np.ndarray:
    """Convert an ``object`` array of Python integers to ``int64`` when every value fits."""
    if values.dtype != object or values.size == 0:
        return values if values.dtype != object else values.astype(np.int64)
    hi = max(values.max(), -values.min())
    if hi < INT64_LIMIT:
        return values.astype(np.int64)
    return values


# --------------------------------------------------------------------------- Bernoulli


def _bernoulli_exp1(rng: RandomSource, size: int) -> np.ndarray:
    """``size`` independent Bernoulli(exp(-1)) trials (CKS Algorithm 1 with gamma = 1)."""
    if size == 0:
        return np.zeros(0, dtype=bool)
    w = uniform_below(rng, _FACT, size)
    # K - 1 = number of k in 1..12 with W < 12!/k!
    k = 1 + _FACT_N - np.searchsorted(_FACT_THRESHOLDS, w, side="right")
    out = (k & 1).astype(bool)
    rest = np.flatnonzero(k > _FACT_N)  # W == 0: K > 12, continue with rounds k = 13, ...
    kk = _FACT_N + 1
    while rest.size:
        cont = uniform_below(rng, kk, rest.size) == 0  # Bernoulli(1/k) succeeds
        out[rest[~cont]] = bool(kk & 1)
        rest = rest[cont]
        kk += 1
    return out


def _geometric_exp1(rng: RandomSource, size: int) -> np.ndarray:
    """Number of Bernoulli(exp(-1)) successes before the first failure, ``size`` times."""
    v = np.zeros(size, dtype=np.int64)
    idx = np.arange(size)
    while idx.size:
        ok = _bernoulli_exp1(rng, idx.size)
        idx = idx[ok]
        v[idx] += 1
    return v


def _bernoulli_exp_fraction(rng: RandomSource, r: np.ndarray, d: int) -> np.ndarray:
    """Bernoulli(exp(-r/d)) elementwise, for integers ``0 <= r <= d`` (CKS Algorithm 1)."""
    out = np.zeros(r.size, dtype=bool)
    idx = np.arange(r.size)
    k = 1
    while idx.size:
        if d * k <= INT64_LIMIT or d > INT64_LIMIT:
            cont = uniform_below(rng, d * k, idx.size) < r
        else:  # Bernoulli(r/(dk)) = Bernoulli(r/d) and Bernoulli(1/k), staying in int64
            cont = (uniform_below(rng, d, idx.size) < r) & (uniform_below(rng, k, idx.size) == 0)
        cont = np.asarray(cont, dtype=bool)
        if k & 1:
            out[idx[~cont]] = True
        idx = idx[cont]
        r = r[cont]
        k += 1
    return out


def _bernoulli_exp_array(rng: RandomSource, n: np.ndarray, d: int) -> np.ndarray:
    """Bernoulli(exp(-n/d)) elementwise for non-negative integers ``n`` and ``d >= 1``."""
    if d >= INT64_LIMIT and n.dtype != object:
        n = n.astype(object)
    q = n // d
    r = n - q * d
    if d <= INT64_LIMIT:
        r = r.astype(np.int64)
    q = _as_int64_if_fits(q)
    alive = np.ones(n.size, dtype=bool)
    # floor(gamma) Bernoulli(exp(-1)) trials, all of which must succeed
    idx = np.flatnonzero(q > 0)
    j = 1
    while idx.size:
        ok = _bernoulli_exp1(rng, idx.size)
        alive[idx[~ok]] = False
        idx = idx[ok]
        idx = idx[np.asarray(q[idx] > j, dtype=bool)]
        j += 1
    live = np.flatnonzero(alive)
    alive[live] = _bernoulli_exp_fraction(rng, r[live], d)
    return alive


def bernoulli_exp(gamma: object, size: object = None, rng: RandomSource | None = None) -> object:
    """Exact Bernoulli(exp(-gamma)) trials for a rational ``gamma >= 0``.

    Returns a bool (``size=None``) or a boolean array of shape ``size``.
    """
    g = exact_rational(gamma, "gamma", positive=False)
    count, shape = _size_count(size)
    source = default_source(rng)
    num, den = g.numerator, g.denominator
    dtype = np.int64 if num < INT64_LIMIT else object
    n = np.full(count, num, dtype=dtype)
    out = _bernoulli_exp_array(source, n, den)
    if shape is None:
        return bool(out[0])
    return out.reshape(shape)


def bernoulli_exp_many(numerators: np.ndarray, denominator: int, rng: RandomSource) -> np.ndarray:
    """Independent exact Bernoulli(exp(-n_i / d)) trials, one per non-negative integer
    ``n_i`` (an ``int64`` array, or an ``object`` array of Python integers), for one
    positive integer ``d``: a boolean array."""
    n = np.asarray(numerators)
    if n.ndim != 1:
        raise InvalidParameter("numerators must be a 1-d array of integers")
    d = int(denominator)
    if d < 1:
        raise InvalidParameter(f"denominator must be a positive integer, got {denominator!r}")
    if n.size == 0:
        return np.zeros(0, dtype=bool)
    if n.dtype != object and not np.issubdtype(n.dtype, np.integer):
        raise InvalidParameter("numerators must be integers")
    if n.min() < 0:
        raise InvalidParameter("numerators must be non-negative")
    return _bernoulli_exp_array(default_source(rng), n.copy(), d)


# --------------------------------------------------------------------------- Laplace


def _discrete_laplace_core(rng: RandomSource, T: int, S: int, size: int) -> np.ndarray:
    """``size`` exact draws with P(z) proportional to exp(-|z| S / T) (CKS Algorithm 2)."""
    # P(keep U) = (1 - e^-1) / (T (1 - e^(-1/T))), P(keep sign) = (1 + e^(-S/T)) / 2;
    # only used to size batches (int / int true division never overflows)
    keep_u = -math.expm1(-1.0) / (-math.expm1(-(1 / T)) * T) if T < 2**60 else 1.0
    accept = max(0.05, keep_u * (1 + math.exp(-(S / T))) / 2)
    parts: list[np.ndarray] = []
    got = 0
    while got < size:
        need = size - got
        m = math.ceil(need / accept * 1.03) + 16
        if T == 1:
            u = np.zeros(m, dtype=np.int64)
        else:
            u = uniform_below(rng, T, m)
            u = u[_bernoulli_exp_fraction(rng, u, T)]
        v = _geometric_exp1(rng, u.size)
        vmax = int(v.max()) if v.size else 0
        if u.dtype != object and T * (vmax + 1) <= INT64_LIMIT:
            x = u + T * v
        else:
            x = u.astype(object) + T * v.astype(object)
        if S >= INT64_LIMIT and x.dtype != object:
            x = x.astype(object)
        y = x // S if S != 1 else x
        y = _as_int64_if_fits(y)
        neg = random_bits(rng, y.size)
        keep = ~(neg & np.asarray(y == 0, dtype=bool))
        z = np.where(neg, -y, y)[keep][:need]
        parts.append(z)
        got += z.size
    if len(parts) <= 1:
        return parts[0] if parts else np.zeros(0, dtype=np.int64)
    if any(p.dtype == object for p in parts):
        return np.concatenate([p.astype(object) for p in parts])
    return np.concatenate(parts)


def discrete_laplace(scale: object, size: object = None, rng: RandomSource | None = None) -> object:
    """Exact discrete Laplace draws: P(z) proportional to exp(-|z| / scale), z an integer.

    ``scale`` is an exact positive rational (int, Fraction, or a float taken exactly).
    Adding this noise to an integer query of sensitivity Delta is (Delta/scale)-DP.
    Returns an int (``size=None``) or an ``int64`` array of shape ``size`` (``object``
    only for astronomically large scales).
    """
    t = exact_rational(scale, "scale")
    count, shape = _size_count(size)
    source = default_source(rng)
    values = _discrete_laplace_core(source, t.numerator, t.denominator, count)
    return _shape_result(values, shape)


# --------------------------------------------------------------------------- Gaussian


def _gaussian_plan(sigma2: Fraction) -> tuple[int, int, int, int, int, int]:
    """Constants for CKS Algorithm 3 with variance parameter ``sigma2``.

    Any Laplace scale t > 0 gives a valid rejection sampler, because
    exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)) = exp(-y^2/(2 sigma^2) + |y|/t - sigma^2/(2t^2))
    is at most 1. CKS take t = floor(sigma) + 1; we take c = sigma^2/t to be a rational
    j/l with a small denominator close to sigma^2/(floor(sigma) + 1), which keeps the
    acceptance probability the same while making the integers small:
    gamma = (l|y| - j)^2 b / (2 a l^2) for sigma^2 = a/b.

    Returns (T, S, j, l, bn, D): Laplace scale T/S, and gamma = (l|y| - j)^2 * bn / D.
    """
    a, b = sigma2.numerator, sigma2.denominator
    floor_sigma = math.isqrt(a * b) // b
    target = sigma2 / (floor_sigma + 1)
    ell = 1
    while target * ell < 16:
        ell *= 2
    c = Fraction(math.floor(target * ell), ell)
    j, ell = c.numerator, c.denominator
    t = sigma2 / c
    g = math.gcd(b, 2 * a * ell * ell)
    return t.numerator, t.denominator, j, ell, b // g, 2 * a * ell * ell // g


def _discrete_gaussian_core(rng: RandomSource, sigma2: Fraction, size: int) -> np.ndarray:
    """``size`` exact draws with P(z) proportional to exp(-z^2 / (2 sigma2)) (CKS Alg. 3)."""
    T, S, j, ell, bn, d = _gaussian_plan(sigma2)
    parts: list[np.ndarray] = []
    got = 0
    accept = 0.5
    while got < size:
        need = size - got
        m = math.ceil(need / accept * 1.03) + 16
        y = _discrete_laplace_core(rng, T, S, m)
        ay = np.abs(y)
        ymax = int(ay.max())
        if y.dtype != object and (ell * ymax + j) ** 2 * bn < INT64_LIMIT:
            e = ell * ay - j
            n = e * e * bn
        else:
            e = ell * ay.astype(object) - j
            n = e * e * bn
        ok = _bernoulli_exp_array(rng, n, d)
        z = y[ok][:need]
        accept = max(0.05, min(1.0, ok.sum() / m))
        parts.append(z)
        got += z.size
    if len(parts) <= 1:
        return parts[0] if parts else np.zeros(0, dtype=np.int64)
    if any(p.dtype == object for p in parts):
        return np.concatenate([p.astype(object) for p in parts])
    return np.concatenate(parts)


def discrete_gaussian(
    sigma: object, size: object = None, rng: RandomSource | None = None
) -> object:
    """Exact discrete Gaussian draws: P(z) proportional to exp(-z^2 / (2 sigma^2)).

    ``sigma`` is an exact positive rational (int, Fraction, or a float taken exactly).
    Adding this noise to an integer query of sensitivity Delta is
    (Delta^2 / (2 sigma^2))-zCDP. Returns an int (``size=None``) or an ``int64`` array.
    Parameters with small numerators and denominators are fastest: a float sigma such
    as 1.1 is a fraction with denominator 2^51, and is sampled exactly but more slowly.
    """
    s = exact_rational(sigma, "sigma")
    count, shape = _size_count(size)
    source = default_source(rng)
    values = _discrete_gaussian_core(source, s * s, count)
    return _shape_result(values, shape)
