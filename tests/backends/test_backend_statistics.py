"""Grouped clipped moments and binned counts: exact, and the same from DuckDB and Spark.

Oracle: Python integers over the rows of a pandas frame (no float anywhere), for random
conditions (boxes, unions, negations), groupings, clip bounds (inside, across and outside
the domain, near +-2^62) and bin edges."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dpcurator.backends import DuckDBBackend, load_table
from dpcurator.errors import InvalidParameter
from dpcurator.queries import Attribute, Schema, parse_query

SCHEMA = Schema(
    (
        Attribute("v", "integer", min=-40, max=60),
        Attribute("big", "integer", min=2**62 - 5000, max=2**62),
        Attribute("g", "categorical", values=("a", "b", "c")),
        Attribute("h", "categorical", values=("x", "y")),
        Attribute("lvl", "categorical", values=("lo", "mid", "hi"), ordered=True),
    )
)
N = 3000
WHERES = [
    None,
    "v < 10",
    "g = 'b'",
    "v BETWEEN -5 AND 5 OR h = 'y'",
    "NOT (g = 'a' AND v > 0)",
    "FALSE",
    "lvl >= 'mid' AND big > 4611686018427386000",
]
BOUNDS = [(0, 10), (-40, 60), (-100, 100), (5, 5), (70, 90), (-90, -50), (-3, 200)]
BYS = [[], ["g"], ["h", "g"], ["lvl"]]


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(9)
    return pd.DataFrame(
        {
            "v": rng.integers(-40, 61, N),
            "big": rng.integers(2**62 - 5000, 2**62, N, endpoint=True),
            "g": rng.choice(["a", "b", "c"], N),
            "h": rng.choice(["x", "y"], N),
            "lvl": rng.choice(["lo", "mid", "hi"], N),
        }
    )


@pytest.fixture(scope="module")
def duck():
    df = frame()
    with load_table(df, SCHEMA) as b:
        yield b, df


def mask(df: pd.DataFrame, where: str | None) -> np.ndarray:
    if where is None:
        return np.ones(len(df), bool)
    q = parse_query(where, SCHEMA)
    keep = np.zeros(len(df), bool)
    boxes = q.boxes if hasattr(q, "boxes") else (q,)
    for box in boxes:
        m = np.ones(len(df), bool)
        for p in box.predicates:
            a = p.attribute
            pos = (
                (df[a.name] - a.min).to_numpy()
                if a.type == "integer"
                else df[a.name].map({v: i for i, v in enumerate(a.values)}).to_numpy()
            )
            inside = np.zeros(len(df), bool)
            for s, e in p.coverage:
                inside |= (pos >= s) & (pos < e)
            m &= inside
        keep |= m
    return keep


def cells_of(df: pd.DataFrame, by: list[str]) -> tuple[int, np.ndarray]:
    sizes = [SCHEMA.attribute(n).size for n in by]
    if not by:
        return 1, np.zeros(len(df), int)
    codes = [
        df[n].map({v: i for i, v in enumerate(SCHEMA.attribute(n).values)}).to_numpy() for n in by
    ]
    return int(np.prod(sizes)), np.ravel_multi_index(codes, sizes)


def oracle_moments(df, attr, lo, hi, where, by):
    m = mask(df, where)
    cells, cell = cells_of(df, by)
    n, s1, s2 = [0] * cells, [0] * cells, [0] * cells
    for c, v, keep in zip(cell.tolist(), df[attr].tolist(), m.tolist(), strict=True):
        if keep:
            x = min(max(int(v), lo), hi)
            n[c] += 1
            s1[c] += x
            s2[c] += x * x
    return n, s1, s2


@pytest.mark.parametrize("where", WHERES)
@pytest.mark.parametrize("by", BYS)
def test_moments_are_exact(duck, where, by):
    b, df = duck
    q = None if where is None else parse_query(where, SCHEMA)
    for lo, hi in BOUNDS:
        n, s1, s2 = b.clipped_moments("v", lo, hi, q, by)
        want = oracle_moments(df, "v", lo, hi, where, by)
        assert (n.tolist(), s1.tolist(), s2.tolist()) == want
        assert all(type(x) is int for x in (*n, *s1, *s2))


def test_moments_near_two_to_the_62(duck):
    b, df = duck
    lo, hi = 2**62 - 3000, 2**62 - 10
    n, s1, s2 = b.clipped_moments("big", lo, hi, None, ["g"])
    assert (n.tolist(), s1.tolist(), s2.tolist()) == oracle_moments(df, "big", lo, hi, None, ["g"])
    n, s1, s2 = b.clipped_moments("big", lo, hi, None, [], squares=False)
    assert s2 is None and s1.tolist() == oracle_moments(df, "big", lo, hi, None, [])[1]


@pytest.mark.parametrize("where", WHERES)
@pytest.mark.parametrize("by", BYS)
def test_binned_counts_are_exact(duck, where, by):
    b, df = duck
    q = None if where is None else parse_query(where, SCHEMA)
    m = mask(df, where)
    cells, cell = cells_of(df, by)
    pos = (df.v - SCHEMA.attribute("v").min).to_numpy()
    for edges in ([0, 101], [0, 1, 2, 50, 101], [10, 11, 12, 13], list(range(0, 102, 7))):
        got = b.binned_counts("v", edges, q, by)
        want = np.zeros((cells, len(edges) - 1), int)
        for j, (s, e) in enumerate(itertools.pairwise(edges)):
            inside = m & (pos >= s) & (pos < e)
            np.add.at(want[:, j], cell[inside], 1)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
    lvl = b.binned_counts("lvl", [0, 1, 2, 3], q, by)  # an ordered categorical's positions
    assert lvl.sum() == m.sum()


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.clipped_moments("v", 0, 10, None, "g"),
        lambda b: b.clipped_moments("v", 0, 10, None, ["g", "g"]),
        lambda b: b.clipped_moments("v", 0, 10, None, ["nope"]),
        lambda b: b.clipped_moments("g", 0, 10),
        lambda b: b.clipped_moments("v", 0.5, 10),
        lambda b: b.clipped_moments("v", 10, 0),
        lambda b: b.binned_counts("v", [0]),
        lambda b: b.binned_counts("v", [3, 3]),
        lambda b: b.binned_counts("v", [-1, 5]),
        lambda b: b.binned_counts("v", [0, 102]),
        lambda b: b.binned_counts("v", [0, 1.5]),
        lambda b: b.binned_counts("v", "0,1"),
        lambda b: b.binned_counts("nope", [0, 1]),
    ],
)
def test_bad_arguments_are_refused(duck, call):
    with pytest.raises(InvalidParameter):
        call(duck[0])


def test_moments_of_a_wide_domain_are_summed_by_the_engine():
    # more values than a count per value is worth: 128-bit sums in SQL, the same numbers
    s = Schema(
        (
            Attribute("w", "integer", min=-(10**7), max=10**7),
            Attribute("g", "categorical", values=("a", "b")),
        )
    )
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"w": rng.integers(-(10**7), 10**7, 5000), "g": rng.choice(["a", "b"], 5000)})
    with load_table(df, s) as b:
        for lo, hi in ((-(10**6), 10**6), (0, 3 * 10**6), (2 * 10**7, 3 * 10**7)):
            n, s1, s2 = b.clipped_moments("w", lo, hi, parse_query("g = 'a' OR w < 0", s), ["g"])
            for k, name in enumerate("ab"):
                x = [
                    min(max(int(v), lo), hi)
                    for v, gg in zip(df.w, df.g, strict=True)
                    if gg == name and (gg == "a" or v < 0)
                ]
                assert (n[k], s1[k], s2[k]) == (len(x), sum(x), sum(v * v for v in x))


def test_squares_of_a_wide_span_are_refused():
    s = Schema((Attribute("w", "integer", min=0, max=2**40),))
    with load_table(pd.DataFrame({"w": [0, 2**40]}), s) as b:
        assert b.clipped_moments("w", 0, 2**40, squares=False)[1].tolist() == [2**40]
        with pytest.raises(InvalidParameter, match="squares"):
            b.clipped_moments("w", 0, 2**40)


# --------------------------------------------------------------------- Spark twin


@pytest.fixture(scope="module")
def twins(spark):
    from dpcurator.backends import SparkBackend

    df = frame()
    duck = DuckDBBackend.load(df, SCHEMA)
    spk = SparkBackend.load(df, SCHEMA, spark=spark)
    yield duck, spk
    duck.close()
    spk.close()


@pytest.mark.xdist_group("spark")
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
def test_spark_gives_duckdbs_numbers(twins):
    duck, spk = twins
    for where, by in [(None, []), (WHERES[3], ["h", "g"]), (WHERES[4], ["lvl"]), ("FALSE", ["g"])]:
        q = None if where is None else parse_query(where, SCHEMA)
        for lo, hi in (BOUNDS[0], BOUNDS[4]):
            want = duck.clipped_moments("v", lo, hi, q, by)
            got = spk.clipped_moments("v", lo, hi, q, by)
            assert [x.tolist() for x in got] == [x.tolist() for x in want]
            assert all(type(x) is int for x in got[1])
        edges = [0, 1, 2, 50, 101]
        assert (
            spk.binned_counts("v", edges, q, by).tolist()
            == duck.binned_counts("v", edges, q, by).tolist()
        )
    big = (2**62 - 3000, 2**62 - 10)
    assert [x.tolist() for x in spk.clipped_moments("big", *big, None, ["g"])] == [
        x.tolist() for x in duck.clipped_moments("big", *big, None, ["g"])
    ]
