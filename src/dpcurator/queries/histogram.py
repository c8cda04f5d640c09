"""The cells of a histogram: one rule, wherever a histogram is written.

A workload line ``histogram(age, bins=[0, 30, 120])``, ``curator.histogram("age",
bins=[0, 30, 120])``, the same over HTTP or through the client, and the dashboard's
binned axes all come here, so the same bins always mean the same cells:

* without bins, a cell per value of the attribute's domain;
* with bins (integer attributes only): at least two strictly increasing integer edges,
  half-open bins ``[a, b)``. **The bins must cover the whole range** ``[min, max]``: the
  first edge at most ``min``, the last above ``max``. Edges beyond the domain are fine
  and clamped to it, as SQL ranges are (``age < 120`` is every age), so
  ``bins=[0, 30, 120]`` over ages 17..90 is the cells 17..29 and 30..90. A bin left with
  no value of the domain (``[0, 10)`` over ages from 17) is refused: it can only be a
  mistake in the bins, and a cell that holds nothing should not be counted;
* an attribute that may be missing gets one more cell, its missing value (``IS NULL``),
  after the bins, unless the missing value is one of the declared values (then it is
  in its bin like any other value).

So a histogram counts every row exactly once: its cells partition the domain, and its
counts add up to the rows it is asked about. Nothing is left out silently (a histogram
of part of a range is a count, or a histogram under a condition), and nothing is
charged that the request did not name: a clamped bin covers exactly the points the bin
as written covers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from dpcurator.errors import QueryError
from dpcurator.queries.predicates import IntervalSet
from dpcurator.queries.schema import Attribute


def cell_count(attr: Attribute, edges: Sequence[int] | None) -> int:
    """How many cells :func:`histogram_cells` makes (counted before any is built)."""
    if edges is None:
        return attr.size
    return max(0, len(edges) - 1) + (1 if attr.missing_cell else 0)


def histogram_cells(attr: Attribute, edges: Sequence[int] | None = None) -> list[IntervalSet]:
    """The coverage on ``attr`` of each cell of its histogram (see the module docstring);
    ``edges`` are integers already (callers convert and bound what they were sent)."""
    if edges is None:
        return [((p, p + 1),) for p in range(attr.size)]
    if attr.type != "integer":
        raise QueryError(
            f"bins need an integer attribute; {attr.name!r} is categorical (its histogram "
            "has a cell per value: leave bins out)"
        )
    edges = list(edges)
    if len(edges) < 2 or any(b <= a for a, b in itertools.pairwise(edges)):
        shown = edges if len(edges) <= 8 else [*edges[:7], "..."]
        raise QueryError(f"bins must be at least two strictly increasing edges, got {shown}")
    lo, hi = attr.min, attr.max
    if edges[0] > lo or edges[-1] <= hi:
        raise QueryError(
            f"bins {edges[0]}..{edges[-1]} do not cover {attr.name!r} [{lo}, {hi}]: the "
            f"first edge must be at most {lo} and the last above {hi} (edges beyond the "
            "domain are fine: bins are clamped to it), so that every row is in one bin"
        )
    cells: list[IntervalSet] = []
    for a, b in itertools.pairwise(edges):
        s, e = max(a, lo) - lo, min(b, hi + 1) - lo
        if s >= e:  # wholly below min or above max
            if b <= lo:
                fix = f"start the bins at {max(x for x in edges if x <= lo)}"
            else:
                fix = f"end the bins at {min(x for x in edges if x > hi)}"
            raise QueryError(f"bin [{a}, {b}) holds no value of {attr.name!r} [{lo}, {hi}]: {fix}")
        cells.append(((s, e),))
    if attr.missing_cell:
        m = attr.value_count
        cells.append(((m, m + 1),))
    return cells
