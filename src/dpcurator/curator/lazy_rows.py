"""A list whose first items are made when first read: the filter's charges after a
checkpoint is loaded (:mod:`dpcurator.curator.checkpoint`).

Why. A checkpoint hands the filter a million charges as arrays and text; building a
:class:`~dpcurator.curator.table_index.Charge` (a parsed query, exact fractions) for each
would take tens of seconds and gigabytes, and the filter reads only the few near an
exact check. So the first ``base`` items are made by ``make(i)`` on first read and kept
(in a cache the copies share: made items never change), items past ``base`` are a plain
list, and a copy (:meth:`head`) costs O(tail), not O(items).

Values written over base items (a level lowered: :meth:`__setitem__`) are kept apart
from the cache, and each copy takes its own, as a list's slice would. A *cap* lowers
every base item below a position at once (:meth:`cap`): the caps are shared by the
copies, which is what the filter's levels need (a bound proven on a fork holds for the
filter it came from, see :class:`~dpcurator.curator.overlap_filter.OverlapFilter`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class LazyRows(Generic[T]):
    """``base`` items made by ``make(i)`` on first use, then appended ones."""

    def __init__(
        self,
        base: int = 0,
        make: Callable[[int], T] | None = None,
        *,
        lower: Callable[[T, T], T] | None = None,
    ) -> None:
        self._base = base
        self._make = make
        self._made: dict[int, T] = {}  # shared by copies: made items never change
        self._set: dict[int, T] = {}  # base items written over (each copy its own)
        self._caps: list[tuple[int, T]] = []  # (positions below, value), shared by copies
        self._lower = lower
        self._tail: list[T] = []

    @property
    def loaded(self) -> int:
        """How many items are made on first use (the rest were appended)."""
        return self._base

    def __len__(self) -> int:
        return self._base + len(self._tail)

    def __getitem__(self, i: int) -> T:
        if i < 0:
            i += len(self)
        if i >= self._base:
            return self._tail[i - self._base]
        if i < 0:
            raise IndexError(i)
        v = self._set.get(i)
        if v is None:
            v = self._made.get(i)
            if v is None:
                assert self._make is not None
                v = self._made[i] = self._make(i)
        for below, cap in self._caps:
            if i < below and self._lower is not None:
                v = self._lower(v, cap)
        return v

    def __setitem__(self, i: int, value: T) -> None:
        if i >= self._base:
            self._tail[i - self._base] = value
        else:
            self._set[i] = value

    def __iter__(self) -> Iterator[T]:
        return (self[i] for i in range(len(self)))

    def append(self, value: T) -> None:
        self._tail.append(value)

    def range(self, start: int, stop: int) -> list[T]:
        """Items ``start`` to ``stop`` (a list)."""
        return [self[i] for i in range(max(0, start), min(stop, len(self)))]

    def head(self, n: int) -> LazyRows[T]:
        """A copy of the first ``n`` items (the made ones shared, the written ones its own)."""
        new: LazyRows[T] = LazyRows.__new__(LazyRows)
        new.__dict__.update(self.__dict__)
        new._base = min(self._base, n)
        new._set = {i: v for i, v in self._set.items() if i < n}
        new._tail = self._tail[: max(0, n - self._base)]
        return new

    def truncate(self, n: int) -> None:
        """Forget the items from ``n`` on."""
        if n < self._base:
            self._base = n
            self._set = {i: v for i, v in self._set.items() if i < n}
            self._tail = []
        else:
            del self._tail[n - self._base :]

    def cap(self, below: int, value: T) -> None:
        """Lower every base item before ``below`` to at most ``value`` (for every copy
        sharing this list's base)."""
        below = min(below, self._base)
        if below <= 0 or self._lower is None:
            return
        low = self._lower
        # a cap at least as wide and as low makes the others moot
        kept = [(b, v) for b, v in self._caps if not (b <= below and low(value, v) == value)]
        self._caps[:] = [*kept, (below, value)]
