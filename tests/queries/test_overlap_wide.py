"""Maximum overlap with integer weights wider than float64's 53 bits (rational costs of
large denominators times their common denominator), against brute force over every
point of a small domain: the figure must be the exact maximum, and said to be exact."""

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.queries import Query, Schema
from dpcurator.queries.boolean import BooleanQuery
from dpcurator.queries.overlap import wide
from dpcurator.queries.overlap.dense import dense_max_overlap

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "a", "type": "integer", "min": 0, "max": 7},
            {"name": "b", "type": "integer", "min": 0, "max": 5},
            {"name": "c", "type": "categorical", "values": ["p", "q", "r"]},
            {"name": "d", "type": "integer", "min": 0, "max": 4},
        ]
    }
)
SIZES = {"a": 8, "b": 6, "c": 3, "d": 5}
POINTS = [
    {a.name: a.value(p) for a, p in zip(SCHEMA.attributes, pos, strict=True)}
    for pos in itertools.product(*(range(n) for n in SIZES.values()))
]
#: Denominators that make the common denominator pass 2^53 after two or three costs.
DENOMINATORS = [3, 7, 11, 13, 10**9, 10**12 + 39, 999_983 * 1_000_003, 2**61 - 1, 10**18]


def coverage(size: int):
    """A range, or a set of values (several intervals)."""
    rng = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).map(
        lambda t: ((min(t), max(t) + 1),)
    )
    values = st.sets(st.integers(0, size - 1), min_size=1, max_size=size).map(
        lambda vs: tuple((v, v + 1) for v in sorted(vs))
    )
    return st.one_of(rng, rng, values)


@st.composite
def boxes(draw, box_only: bool = False):
    """A query on some attributes: one box, or (unless ``box_only``) a union of disjoint boxes."""
    if not box_only and draw(st.integers(0, 4)) == 0:
        lo, mid = sorted(draw(st.lists(st.integers(0, 6), min_size=2, max_size=2)))
        parts = (
            Query.from_coverages(SCHEMA, {"a": ((lo, mid + 1),), "b": draw(coverage(6))}),
            Query.from_coverages(SCHEMA, {"a": ((mid + 1, 8),), "c": draw(coverage(3))}),
        )
        return BooleanQuery(SCHEMA, parts)
    names = draw(st.sets(st.sampled_from(list(SIZES)), min_size=1, max_size=3))
    return Query.from_coverages(SCHEMA, {n: draw(coverage(SIZES[n])) for n in sorted(names)})


costs = st.builds(
    lambda d, k: Fraction(k % d or 1, d),
    st.sampled_from(DENOMINATORS),
    st.integers(1, 2**64),
)


def weighted(qs, cs):
    """The integer weights (costs times their common denominator) and that denominator."""
    scale = math.lcm(*(c.denominator for c in cs))
    return [c.numerator * (scale // c.denominator) for c in cs], scale


def brute_force(qs, ws) -> int:
    return max(sum(w for q, w in zip(qs, ws, strict=True) if q.covers(p)) for p in POINTS)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(boxes(), costs), min_size=2, max_size=14),
    st.booleans(),
    st.sampled_from([1, 6, 10**6]),
)
def test_wide_weights_give_the_exact_maximum(pairs, ties, cells) -> None:
    """Random boxes and unions with random costs of large denominators (ties between equal
    costs too, where the rounded weights cannot tell the points apart): the exact
    maximum, exactly, whatever size of grid the search may decide a box on."""
    qs = [q for q, _ in pairs]
    cs = [c for _, c in pairs]
    if ties:
        cs = [cs[i % 2] for i in range(len(cs))]
    ws, _ = weighted(qs, cs)
    truth = brute_force(qs, ws)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wide, "GRID_CELLS", cells)
        got = wide.max_overlap_wide(qs, ws, 60.0, grid_first=cells > 1)
    assert got.exact and got.upper == got.lower == truth
    assert got.witness is not None
    assert sum(w for q, w in zip(qs, ws, strict=True) if q.covers(got.witness)) == truth


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(boxes(), costs), min_size=2, max_size=12),
    st.sampled_from([-1, 0, 1, 2**40]),
    st.sampled_from([-3, 3]),
)
def test_a_threshold_is_settled_by_a_safe_bound_or_a_real_point(pairs, offset, scale) -> None:
    """With ``decide_at``: an inexact answer still settles "at most T?" (a bound within T,
    or a point beyond it), and its bounds enclose the truth."""
    qs = [q for q, _ in pairs]
    ws, _ = weighted(qs, [c for _, c in pairs])
    truth = brute_force(qs, ws)
    at = truth + offset + (truth // scale if offset else 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wide, "GRID_CELLS", 1)
        got = wide.max_overlap_wide(qs, ws, 60.0, decide_at=at, grid_first=False)
    assert got.lower <= truth <= got.upper
    if got.witness is not None:
        assert sum(w for q, w in zip(qs, ws, strict=True) if q.covers(got.witness)) == got.lower
    if not got.exact:
        assert got.upper <= at or got.lower > at


def test_a_time_out_gives_a_bound_never_below_the_truth() -> None:
    """No time at all: the narrow solver's bound, scaled back outward; never below."""
    qs = [
        Query.from_coverages(SCHEMA, {"a": ((0, 5),)}),
        Query.from_coverages(SCHEMA, {"a": ((3, 8),), "b": ((1, 4),)}),
        Query.from_coverages(SCHEMA, {"b": ((2, 6),), "c": ((0, 1), (2, 3))}),
    ]
    ws, _ = weighted(qs, [Fraction(1, 3), Fraction(2, 7), Fraction(10**17 + 3, 10**18)])
    truth = brute_force(qs, ws)
    got = wide.max_overlap_wide(qs, ws, 0.0, grid_first=False)
    assert got.lower <= truth <= got.upper


wide_weights = st.one_of(
    st.integers(0, 2**130),
    st.sampled_from([2**70, 2**70 + 1, 3 * 2**69]),  # ties and near-ties
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(boxes(box_only=True), wide_weights), min_size=1, max_size=20),
    st.one_of(st.none(), boxes(box_only=True)),
)
def test_the_dense_grid_adds_wide_weights_exactly(pairs, within) -> None:
    """The prefix-sum grid on weights of up to 130 bits, over the whole domain or the
    points of a query: exact (float64 would round them), through the top bits and the
    near-tie cells, or in limbs when ties are many."""
    qs = [q for q, _ in pairs]
    ws = [w for _, w in pairs]
    got = dense_max_overlap(qs, ws, within=within)
    assert got is not None
    points = POINTS if within is None else [p for p in POINTS if within.covers(p)]
    assert got[0] == max(sum(w for q, w in zip(qs, ws, strict=True) if q.covers(p)) for p in points)
    assert sum(ws[i] for i in got[2]) == got[0]
    assert within is None or within.covers(got[1])


def test_rounded_weights_cannot_tell_these_points_apart() -> None:
    """Two points whose loads differ by one unit of a 2^70 common scale: float64 (and the
    rounded weights) see a tie, the exact search does not."""
    big = 2**70
    qs = [
        Query.from_coverages(SCHEMA, {"a": ((0, 4),)}),
        Query.from_coverages(SCHEMA, {"a": ((4, 8),)}),
        Query.from_coverages(SCHEMA, {"b": ((0, 3),)}),
    ]
    for heavier in (0, 1):
        ws = [big, big, big]
        ws[heavier] += 1
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(wide, "GRID_CELLS", 1)
            got = wide.max_overlap_wide(qs, ws, 60.0, grid_first=False)
        assert got.exact and got.upper == 2 * big + 1
        assert qs[heavier].covers(got.witness)
