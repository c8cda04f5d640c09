"""Sources of random bytes, and exact uniform integers drawn from them.

Every random decision in :mod:`dpcurator.mechanisms` is made from *uniform integers*
produced here, never from floating point. A :class:`RandomSource` only has to supply
independent uniform bytes; everything else (uniform integers below a bound, fair bits)
is derived from those bytes by exact rejection sampling, so that no value is ever more
likely than another because of a modulo bias.

Two sources are provided:

* :class:`SystemRandomSource` (the default): the operating system's CSPRNG through
  :func:`os.urandom`, read in bulk. ``secure`` is ``True``.
* :class:`SeededRandomSource`: a deterministic PCG64 stream for reproducible tests and
  examples. It is **not** cryptographically secure, and says so (``secure`` is
  ``False``); the curator refuses it unless it is told that the release is insecure.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod

import numpy as np

from dpcurator.errors import InvalidParameter

__all__ = [
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "default_source",
    "ensure_secure",
    "random_bits",
    "uniform_below",
]

#: Integers strictly below this bound are stored in ``int64`` arrays; larger ones in
#: ``object`` arrays of Python integers.
INT64_LIMIT = 1 << 63

_WORD_DTYPES = (
    (8, np.dtype(np.uint8)),
    (16, np.dtype("<u2")),
    (32, np.dtype("<u4")),
    (64, np.dtype("<u8")),
)


class RandomSource(ABC):
    """A source of independent, uniformly distributed random bytes.

    Subclasses implement :meth:`random_bytes`. ``secure`` tells whether the bytes come
    from a cryptographically secure generator; only a secure source may be used for a
    release unless the caller explicitly accepts an insecure one.
    """

    #: ``True`` when the bytes come from a CSPRNG.
    secure: bool = False

    @abstractmethod
    def random_bytes(self, n: int) -> bytes:
        """Return ``n`` independent uniform random bytes."""

    def words(self, count: int, dtype: np.dtype) -> np.ndarray:
        """Return ``count`` independent uniform unsigned words of ``dtype``."""
        dtype = np.dtype(dtype)
        if count <= 0:
            return np.zeros(0, dtype=dtype)
        return np.frombuffer(self.random_bytes(count * dtype.itemsize), dtype=dtype)


class SystemRandomSource(RandomSource):
    """The operating system's CSPRNG (:func:`os.urandom`), read in bulk. Secure."""

    secure = True

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def __repr__(self) -> str:
        return "SystemRandomSource()"


class SeededRandomSource(RandomSource):
    """A reproducible PCG64 byte stream. **Not secure**: for tests and examples only.

    Two sources built with the same seed produce the same samples when they are asked
    for the same things in the same order.
    """

    secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise InvalidParameter(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        self._generator = np.random.Generator(np.random.PCG64(self.seed))

    def random_bytes(self, n: int) -> bytes:
        return self._generator.bytes(n)

    def __repr__(self) -> str:
        return f"SeededRandomSource(seed={self.seed})"


_DEFAULT_SOURCE = SystemRandomSource()


def default_source(rng: RandomSource | None = None) -> RandomSource:
    """Return ``rng``, or the shared :class:`SystemRandomSource` when it is ``None``."""
    if rng is None:
        return _DEFAULT_SOURCE
    if not isinstance(rng, RandomSource):
        raise InvalidParameter(
            f"rng must be a RandomSource (e.g. SeededRandomSource(0)), got {type(rng).__name__}"
        )
    return rng


def ensure_secure(rng: RandomSource | None, *, allow_insecure: bool = False) -> RandomSource:
    """Return the source to use for a release, refusing an insecure one.

    An insecure source (such as :class:`SeededRandomSource`) is accepted only when
    ``allow_insecure`` is true, i.e. when the caller has said the release is insecure.
    """
    source = default_source(rng)
    if not source.secure and not allow_insecure:
        raise InvalidParameter(
            f"{source!r} is not a secure random source; pass allow_insecure=True "
            "only for a release that is explicitly insecure (tests, demos)"
        )
    return source


def _choose_word(bound: int) -> tuple[np.dtype, int]:
    """The word type that needs the fewest expected bytes per accepted draw below ``bound``."""
    bits = (bound - 1).bit_length()
    best: tuple[float, np.dtype, int] | None = None
    for width, dtype in _WORD_DTYPES:
        if width < bits:
            continue
        span = 1 << width
        limit = span - span % bound
        cost = dtype.itemsize * span / limit
        if best is None or cost < best[0]:
            best = (cost, dtype, limit)
    assert best is not None
    return best[1], best[2]


def uniform_below(rng: RandomSource, bound: int, size: int) -> np.ndarray:
    """``size`` independent integers, each exactly uniform on ``{0, ..., bound - 1}``.

    Words of the smallest suitable width are drawn and those at or above the largest
    multiple of ``bound`` are rejected, so the result has no modulo bias. The result is
    an ``int64`` array when ``bound <= 2**63`` and an ``object`` array of Python
    integers otherwise.
    """
    bound = int(bound)
    if bound < 1:
        raise InvalidParameter(f"bound must be a positive integer, got {bound}")
    size = int(size)
    if bound == 1 or size == 0:
        return np.zeros(size, dtype=np.int64)
    if bound > INT64_LIMIT:
        return _uniform_below_big(rng, bound, size)
    dtype, limit = _choose_word(bound)
    span = 1 << (8 * dtype.itemsize)
    if limit == span:  # bound is a power of two dividing the word: no rejection
        words = rng.words(size, dtype)
        if bound != span:
            words = words & dtype.type(bound - 1)
        return words.astype(np.int64)
    acceptance = limit / span
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        draw = math.ceil(need / acceptance * 1.02) + 8
        words = rng.words(draw, dtype)
        words = words[words < limit][:need]
        out[filled : filled + words.size] = words % dtype.type(bound)
        filled += words.size
    return out


def _uniform_below_big(rng: RandomSource, bound: int, size: int) -> np.ndarray:
    """Uniform integers below a bound above ``2**63``, as an ``object`` array."""
    bits = (bound - 1).bit_length()
    nwords = -(-bits // 64)
    excess = 64 * nwords - bits
    out = np.empty(size, dtype=object)
    filled = 0
    while filled < size:
        need = size - filled
        draw = 2 * need + 8  # acceptance is at least one half
        words = rng.words(draw * nwords, np.dtype("<u8")).reshape(draw, nwords)
        values = np.zeros(draw, dtype=object)
        for i in range(nwords):
            values = values * (1 << 64) + words[:, i].astype(object)
        if excess:
            values = values // (1 << excess)
        values = values[values < bound][:need]
        out[filled : filled + values.size] = values
        filled += values.size
    return out


def random_bits(rng: RandomSource, size: int) -> np.ndarray:
    """``size`` independent fair bits as a boolean array."""
    size = int(size)
    if size == 0:
        return np.zeros(0, dtype=bool)
    raw = rng.words(-(-size // 8), np.dtype(np.uint8))
    return np.unpackbits(raw)[:size].astype(bool)
