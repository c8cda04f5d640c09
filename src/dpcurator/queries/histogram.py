"""The cells of a histogram: one rule, wherever a histogram is written.

A workload line ``histogram(age, bins=[0, 30, 120])``, ``curator.histogram("age",
bins=[0, 30, 120])``, the same over HTTP or through the client, and the dashboard's
binned axes all come here, so the same bins always mean the same cells:

* without bins, a cell per value of the attribute's domain (of a part of a time,
  ``histogram(hour(time_hour))``, a cell per value of the part: see
  :mod:`dpcurator.queries.parts`);
* with bins (integer, float, timestamp and date attributes): at least two strictly
  increasing edges, half-open bins ``[a, b)``, written as the attribute's values are
  (numbers; ISO 8601 text for times and dates). **The bins must cover the whole range**
  ``[min, max]``: the first edge at most ``min``, the last above ``max``. Edges beyond
  the domain are fine and clamped to it, as SQL ranges are (``age < 120`` is every age),
  so ``bins=[0, 30, 120]`` over ages 17..90 is the cells 17..29 and 30..90. A bin left
  with no value of the domain (``[0, 10)`` over ages from 17) is refused: it can only
  be a mistake in the bins, and a cell that holds nothing should not be counted;
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
from fractions import Fraction

from dpcurator.errors import QueryError
from dpcurator.queries import values
from dpcurator.queries.predicates import IntervalSet
from dpcurator.queries.schema import Attribute


def cell_count(attr: Attribute, edges: Sequence[object] | None) -> int:
    """How many cells :func:`histogram_cells` makes (counted before any is built)."""
    if edges is None:
        return attr.size
    return max(0, len(edges) - 1) + (1 if attr.missing_cell else 0)


def edge_number(attr: Attribute, edge: object) -> Fraction:
    """A bin edge written as ``attr``'s values are, as its grid number (see
    :attr:`~dpcurator.queries.schema.Attribute.grid`)."""
    x = attr.grid_number(edge)
    if x is None:
        kind = {"timestamp": "ISO 8601 times", "date": "dates 'YYYY-MM-DD'"}.get(
            attr.type, "numbers"
        )
        raise QueryError(f"bins of {attr.name!r} are {kind}, got {edge!r}")
    return x


def grid_text(attr: Attribute, x: Fraction) -> str:
    """A grid number written as ``attr``'s values are (``30``, ``39.1``,
    ``2013-06-01T00:00:00Z``, ``2013-06-01``)."""
    if attr.type == "timestamp" and x.denominator == 1:
        return values.instant_text(int(x))
    if attr.type == "date" and x.denominator == 1:
        return values.date_text(int(x))
    try:
        return values.decimal_text(x)
    except ValueError:
        return str(x)


def histogram_cells(attr: Attribute, edges: Sequence[object] | None = None) -> list[IntervalSet]:
    """The coverage on ``attr`` of each cell of its histogram (see the module docstring);
    ``edges`` as ``attr``'s values are written (callers bound how many they read)."""
    if edges is None:
        return [((p, p + 1),) for p in range(attr.size)]
    if attr.grid is None:
        raise QueryError(
            f"bins need an integer, float, timestamp or date attribute; {attr.name!r} is "
            f"{attr.type} (its histogram has a cell per value: leave bins out)"
        )
    raw = list(edges)
    xs = [edge_number(attr, e) for e in raw]
    shown = [grid_text(attr, x) for x in xs]
    if len(xs) < 2 or any(b <= a for a, b in itertools.pairwise(xs)):
        listed = shown if len(shown) <= 8 else [*shown[:7], "..."]
        raise QueryError(
            f"bins must be at least two strictly increasing edges, got [{', '.join(listed)}]"
        )
    lo, hi = attr.number(0), attr.number(attr.value_count - 1)
    lo_t, hi_t = grid_text(attr, lo), grid_text(attr, hi)
    if xs[0] > lo or xs[-1] <= hi:
        raise QueryError(
            f"bins {shown[0]}..{shown[-1]} do not cover {attr.name!r} [{lo_t}, {hi_t}]: the "
            f"first edge must be at most {lo_t} and the last above {hi_t} (edges beyond the "
            "domain are fine: bins are clamped to it), so that every row is in one bin"
        )
    cells: list[IntervalSet] = []
    for (a, b), (ta, tb) in zip(itertools.pairwise(xs), itertools.pairwise(shown), strict=True):
        s, e = attr.boundary(a, after=False), attr.boundary(b, after=False)
        if s >= e:  # holds no value of the domain
            if b <= lo:
                fix = (
                    f"start the bins at {max(t for x, t in zip(xs, shown, strict=True) if x <= lo)}"
                )
            elif a > hi:
                fix = f"end the bins at {min(t for x, t in zip(xs, shown, strict=True) if x > hi)}"
            else:
                fix = "widen it (it lies between two values of the domain)"
            raise QueryError(
                f"bin [{ta}, {tb}) holds no value of {attr.name!r} [{lo_t}, {hi_t}]: {fix}"
            )
        cells.append(((s, e),))
    if attr.missing_cell:
        m = attr.value_count
        cells.append(((m, m + 1),))
    return cells
