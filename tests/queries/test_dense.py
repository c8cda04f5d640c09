"""The dense prefix-sum path of maximum overlap, against brute force over every point."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.queries import BooleanQuery, Query, Schema, max_overlap
from dpcurator.queries.overlap.dense import dense_max_overlap, segment_grid

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "categorical", "values": ["x", "y", "z", "w"]},
            {"name": "b", "type": "integer", "min": 0, "max": 5},
            {"name": "c", "type": "categorical", "values": ["p", "q"]},
            {"name": "d", "type": "integer", "min": 10, "max": 13},
        ]
    }
)
NAMES = ("a", "b", "c", "d")
POINTS = list(itertools.product(range(4), range(6), range(2), range(4)))


def covers(q, point):
    return all(any(s <= v < e for s, e in q.coverage(n)) for n, v in zip(NAMES, point, strict=True))


def interval_sets(size):
    return st.lists(st.integers(0, size - 1), max_size=size).map(
        lambda vs: tuple((v, v + 1) for v in sorted(set(vs)))
    )


def ranges(size):
    return st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).map(
        lambda t: ((min(t), max(t) + 1),)
    )


@st.composite
def queries(draw):
    covs = {}
    for name, strat in (
        ("a", interval_sets(4)),
        ("b", ranges(6)),
        ("c", interval_sets(2)),
        ("d", ranges(4)),
    ):
        if draw(st.booleans()):
            covs[name] = draw(strat)
    return Query.from_coverages(SCHEMA, covs)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(queries(), min_size=2, max_size=30),
    st.lists(st.integers(0, 5), min_size=30, max_size=30),
    st.one_of(st.none(), queries()),
)
def test_dense_equals_brute_force(qs, ws, within):
    w = np.array(ws[: len(qs)], dtype=float)
    inside = [x for x in POINTS if within is None or covers(within, x)]
    res = dense_max_overlap(qs, w, within=within)
    if not inside:
        assert res is None
        return
    brute = max(sum(w[i] for i, q in enumerate(qs) if covers(q, x)) for x in inside)
    assert res is not None
    value, witness, covering = res
    assert value == brute
    point = tuple(SCHEMA.attribute(n).position(witness[n]) for n in NAMES)
    assert within is None or covers(within, point)
    assert covering == tuple(i for i, q in enumerate(qs) if not q.is_empty and covers(q, point))
    assert sum(w[i] for i in covering) == value


@settings(max_examples=60, deadline=None)
@given(st.lists(queries(), min_size=2, max_size=20))
def test_max_overlap_uses_the_dense_grid_and_stays_exact(qs):
    res = max_overlap(qs)
    brute = max(sum(1 for q in qs if covers(q, x)) for x in POINTS)
    assert res.exact and res.value == brute
    assert res.method == "dense"


def test_large_grid_declines():
    big = Schema.from_dict(
        {
            "attributes": [
                {"name": f"v{i}", "type": "integer", "min": 0, "max": 999} for i in range(3)
            ]
        }
    )
    qs = [Query.from_coverages(big, {f"v{i}": ((k, k + 1),) for i in range(3)}) for k in range(300)]
    assert dense_max_overlap(qs, np.ones(len(qs))) is None


@st.composite
def unions(draw):
    """A predicate query or the union of a few (a boolean query when they do not merge)."""
    parts = draw(st.lists(queries(), min_size=1, max_size=3))
    return BooleanQuery.from_boxes(SCHEMA, parts)


def cell_of(grid, point):
    """The grid cell holding ``point`` (positions per attribute)."""
    return tuple(
        int(np.searchsorted(grid.cuts[j], point[NAMES.index(n)], side="right")) - 1
        for j, n in enumerate(grid.names)
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(unions(), min_size=1, max_size=12),
    st.lists(st.floats(0.0, 3.0), min_size=12, max_size=12),
)
def test_segment_grid_loads_and_covering_equal_brute_force(qs, ws):
    """Every point's load (float weights) and covering set, read off its grid cell."""
    w = np.array(ws[: len(qs)])
    grid = segment_grid(qs)
    assert grid is not None and grid.queries == len(qs)
    loads = grid.loads(w)
    assert loads.shape == grid.shape
    cells = list(np.ndindex(*grid.shape)) if grid.shape else [()]
    flat = [int(np.ravel_multi_index(c, grid.shape)) if grid.shape else 0 for c in cells]
    covering = grid.covering(np.array(flat))
    by_cell = dict(zip(cells, covering, strict=True))
    for x in POINTS:
        cell = cell_of(grid, x)
        inside = [
            i
            for i, q in enumerate(qs)
            if not q.is_empty
            and q.covers({n: SCHEMA.attribute(n).value(v) for n, v in zip(NAMES, x, strict=True)})
        ]
        assert loads[cell] == pytest.approx(sum(w[i] for i in inside), rel=1e-12, abs=1e-12)
        assert list(np.flatnonzero(by_cell[cell])) == inside
    for c in cells:  # the point named for a cell lies in it
        pos = grid.point(c)
        assert cell_of(grid, [SCHEMA.attribute(n).position(pos[n]) for n in NAMES]) == c


def test_segment_grid_declines_large_grids():
    big = Schema.from_dict(
        {
            "attributes": [
                {"name": f"v{i}", "type": "integer", "min": 0, "max": 999} for i in range(3)
            ]
        }
    )
    qs = [Query.from_coverages(big, {f"v{i}": ((k, k + 1),) for i in range(3)}) for k in range(300)]
    assert segment_grid(qs) is None
    assert segment_grid(qs[:2]) is not None
