"""grid_max_loss: every cell's largest loss, checked against brute force, the filter's
own per-cell maximum, and the curator's remaining_detail on small random cases."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.curator.cell_loss import Axis, grid_max_loss
from dpcurator.curator.landscape import snapshot
from dpcurator.curator.overlap_filter import Charge, OverlapFilter
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 6},
            {"name": "b", "type": "categorical", "values": ["p", "q", "r", "s"]},
            {"name": "c", "type": "integer", "min": 10, "max": 14},
            {"name": "d", "type": "categorical", "values": ["x", "y", "z"]},
        ]
    }
)


def random_coverage(rng: np.random.Generator, size: int) -> tuple[tuple[int, int], ...]:
    """One or two intervals of positions (sometimes the whole domain)."""
    if rng.random() < 0.3:
        return ((0, size),)
    cuts = sorted(rng.choice(np.arange(size + 1), size=rng.choice([2, 4]), replace=False))
    return tuple((int(s), int(e)) for s, e in zip(cuts[::2], cuts[1::2], strict=True))


def random_box(rng: np.random.Generator) -> dict[str, tuple[tuple[int, int], ...]]:
    names = [n for n in SCHEMA.names if rng.random() < 0.6]
    return {n: random_coverage(rng, SCHEMA.attribute(n).size) for n in names}


def random_query(rng: np.random.Generator) -> Query | BooleanQuery:
    if rng.random() < 0.25:
        return BooleanQuery.from_boxes(SCHEMA, [random_box(rng) for _ in range(rng.integers(2, 4))])
    return Query.from_coverages(SCHEMA, random_box(rng))


def random_axis(rng: np.random.Generator, name: str) -> Axis:
    size = SCHEMA.attribute(name).size
    k = int(rng.integers(1, size + 1))
    inner = sorted(rng.choice(np.arange(size + 1), size=k + 1, replace=False).tolist())
    if rng.random() < 0.5:  # the usual case: bins cover the whole domain
        inner = sorted({0, size, *inner[1:-1]})
    return Axis(name, tuple(inner))


def brute_force(queries, weights, rows: Axis, cols: Axis) -> np.ndarray:
    out = np.zeros((rows.bins, cols.bins), dtype=np.int64)
    ranges = [range(a.size) for a in SCHEMA.attributes]
    for pos in itertools.product(*ranges):
        point = {a.name: a.value(p) for a, p in zip(SCHEMA.attributes, pos, strict=True)}
        loss = sum(w for q, w in zip(queries, weights, strict=True) if q.covers(point))
        r = pos[SCHEMA.index(rows.attribute)]
        c = pos[SCHEMA.index(cols.attribute)]
        for i, (s, e) in enumerate(rows.spans()):
            if s <= r < e:
                for j, (s2, e2) in enumerate(cols.spans()):
                    if s2 <= c < e2:
                        out[i, j] = max(out[i, j], loss)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 25))
    queries = [random_query(rng) for _ in range(n)]
    weights = [int(w) for w in rng.integers(0, 20, size=n)]
    rname, cname = rng.choice(SCHEMA.names, size=2, replace=False).tolist()
    rows, cols = random_axis(rng, rname), random_axis(rng, cname)
    want = brute_force(queries, weights, rows, cols)
    got = grid_max_loss(queries, weights, rows, cols)
    assert got is not None
    assert got.dtype == np.int64
    assert np.array_equal(got, want)
    # Small blocks force the split along the rows, down to single bins.
    for limit in (12, 30, 60):
        split = grid_max_loss(queries, weights, rows, cols, block_limit=limit)
        if split is not None:
            assert np.array_equal(split, want)


def test_limits_give_none() -> None:
    rng = np.random.default_rng(1)
    queries = [random_query(rng) for _ in range(30)]
    weights = [1] * 30
    rows, cols = Axis("a", tuple(range(8))), Axis("b", (0, 1, 2, 3, 4))
    assert grid_max_loss(queries, weights, rows, cols, block_limit=1) is None
    assert grid_max_loss(queries, weights, rows, cols, total_limit=1) is None
    assert grid_max_loss(queries, weights, rows, cols, deadline=0.0) is None
    assert grid_max_loss(queries, [2**61, 2**61] + [0] * 28, rows, cols) is None


def test_bad_arguments() -> None:
    q = Query.from_coverages(SCHEMA, {"a": ((0, 3),)})
    with pytest.raises(ValueError, match="two different"):
        grid_max_loss([q], [1], Axis("a", (0, 7)), Axis("a", (0, 7)))
    with pytest.raises(ValueError, match="non-negative"):
        grid_max_loss([q], [-1], Axis("a", (0, 7)), Axis("b", (0, 4)))
    with pytest.raises(ValueError, match="leave"):
        grid_max_loss([q], [1], Axis("a", (0, 8)), Axis("b", (0, 4)))
    with pytest.raises(ValueError, match="increasing"):
        Axis("a", (3, 3))
    empty = grid_max_loss([], [], Axis("a", (0, 7)), Axis("b", (0, 4)))
    assert empty is not None and not empty.any()


def cell_query(rows: Axis, i: int, cols: Axis, j: int) -> Query:
    return Query.from_coverages(
        SCHEMA, {rows.attribute: (rows.spans()[i],), cols.attribute: (cols.spans()[j],)}
    )


@pytest.mark.parametrize("seed", range(10))
def test_matches_the_filters_per_cell_maximum(seed: int) -> None:
    """Exact fractions: the grid (over the common denominator) is OverlapFilter.local."""
    rng = np.random.default_rng(100 + seed)
    filt = OverlapFilter(Fraction(10**6), "epsilon")
    charges = []
    for i in range(int(rng.integers(1, 30))):
        cost = Fraction(int(rng.integers(1, 9)), int(rng.choice([3, 7, 10, 100])))
        charges.append(Charge(i + 1, "t", "x", random_query(rng), cost, Fraction(10**6)))
        filt.add(charges[-1])
    scale = math.lcm(*(c.cost.denominator for c in charges))
    weights = [c.cost.numerator * (scale // c.cost.denominator) for c in charges]
    rname, cname = rng.choice(SCHEMA.names, size=2, replace=False).tolist()
    rows, cols = random_axis(rng, rname), random_axis(rng, cname)
    got = grid_max_loss([c.query for c in charges], weights, rows, cols)
    assert got is not None
    for i in range(rows.bins):
        for j in range(cols.bins):
            want = filt.local("t", cell_query(rows, i, cols, j))
            assert want.exact
            assert Fraction(int(got[i, j]), scale) == want.value


def test_matches_remaining_detail() -> None:
    """The remaining budget of every cell, as the curator reports it per query."""
    rng = np.random.default_rng(7)
    frame = pd.DataFrame(
        {
            "a": rng.integers(0, 7, 50),
            "b": rng.choice(["p", "q", "r", "s"], 50),
            "c": rng.integers(10, 15, 50),
            "d": rng.choice(["x", "y", "z"], 50),
        }
    )
    with Curator.open(
        frame, SCHEMA, budget=PureDP(5.0), rng=SeededRandomSource(3), allow_insecure=True
    ) as cur:
        for _ in range(25):
            q = random_query(rng)
            cost = float(rng.choice([0.1, 0.25, 0.3, 0.5]))
            try:
                cur.count(q, epsilon=cost)
            except Exception as err:  # refusals are fine: the budget is small
                assert type(err).__name__ == "BudgetExceeded"
        fork = snapshot(cur)
        charges = fork.charges("data")
        scale = math.lcm(*(c.cost.denominator for c in charges))
        weights = [c.cost.numerator * (scale // c.cost.denominator) for c in charges]
        rows, cols = Axis("a", tuple(range(8))), Axis("c", tuple(range(6)))
        got = grid_max_loss([c.query for c in charges], weights, rows, cols)
        assert got is not None
        budget = cur.budget
        for i in range(rows.bins):
            for j in range(cols.bins):
                want = cur.remaining_detail(cell_query(rows, i, cols, j))
                assert want.exact
                left = budget.amount - Fraction(int(got[i, j]), scale)
                assert budget.display(left) == want.value


@pytest.mark.parametrize("budget", ["zcdp", "gdp"])
def test_remaining_grid_in_other_currencies(budget: str) -> None:
    """The landscape's figures are remaining_detail's, also where costs are rho or mu
    (mu adds up as mu squared) and for an analyst's quota."""
    from dpcurator.curator.landscape import grid_axis, remaining_grid
    from dpcurator.privacy import GDP, ZCDP

    rng = np.random.default_rng(11)
    frame = pd.DataFrame(
        {
            "a": rng.integers(0, 7, 40),
            "b": rng.choice(["p", "q", "r", "s"], 40),
            "c": rng.integers(10, 15, 40),
            "d": rng.choice(["x", "y", "z"], 40),
        }
    )
    total, key = (ZCDP(2.0), "rho") if budget == "zcdp" else (GDP(2.0), "mu")
    with Curator.open(
        frame, SCHEMA, budget=total, rng=SeededRandomSource(4), allow_insecure=True
    ) as cur:
        ann = cur.analyst("ann", quota=1.0)
        for k in range(12):
            q = random_query(rng)
            cost = float(rng.choice([0.1, 0.2, 0.3]))
            try:
                (ann if k % 2 else cur).count(q, **{key: cost})
            except Exception as err:
                assert type(err).__name__ == "BudgetExceeded"
        schema = cur.schema()
        rows, cols = grid_axis(schema, "b"), grid_axis(schema, "d")
        grid = remaining_grid(cur, "data", rows, cols, analyst="ann")
        assert all(all(r) for r in grid.exact)
        for i in range(rows.axis.bins):
            for j in range(cols.axis.bins):
                want = ann.remaining_detail(cell_query(rows.axis, i, cols.axis, j))
                assert grid.remaining[i][j] == want.value
                assert grid.remaining_budget[i][j] == want.budget
                assert grid.quota_remaining is not None
                assert grid.quota_remaining[i][j] == want.quota
