"""``grouped_counts``: rows, condition counts and clipped moments per group cell from one
``GROUP BY``, exact, whichever form the SQL takes (conditions and clip buckets as group
columns beside the keys, or each sum under a ``FILTER``; the second past
``BUCKETS``). Oracle: Python integers over the rows, with missing values outside and
inside an integer's range."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.backends import duckdb_grouped, load_table
from dpcurator.queries import Schema, parse_query

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "x", "type": "integer", "min": 0, "max": 9, "missing": -1},
            {"name": "y", "type": "integer", "min": -5, "max": 5, "missing": 0},
            {"name": "g", "type": "categorical", "values": ["a", "b", "c"]},
            {"name": "h", "type": "categorical", "values": ["u", "v"]},
        ]
    }
)
#: (text, the rows it holds for) over rows (x, y, g, h); a missing x is None, a missing
#: y is 0; "!=" and NOT include missing values, as the workload language says.
CONDITIONS = {
    "x < 5": lambda x, y, g, h: x is not None and x < 5,
    "y >= 2 OR g = 'b'": lambda x, y, g, h: (y != 0 and y >= 2) or g == "b",
    "NOT (h = 'u' AND x BETWEEN 2 AND 7)": lambda x, y, g, h: (
        not (h == "u" and x is not None and 2 <= x <= 7)
    ),
    "FALSE": lambda x, y, g, h: False,
    "x IS NULL": lambda x, y, g, h: x is None,
}
WHERES = {
    None: lambda x, y, g, h: True,
    "g != 'c'": lambda x, y, g, h: g != "c",
    "y < 0 OR x IS NULL": lambda x, y, g, h: (y != 0 and y < 0) or x is None,
    "FALSE": lambda x, y, g, h: False,
}
BYS = [[], ["g"], ["h", "g"]]

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 9)),
        st.integers(-5, 5),
        st.sampled_from("abc"),
        st.sampled_from("uv"),
    ),
    min_size=1,
    max_size=40,
)
bounds = st.tuples(st.integers(-8, 12), st.integers(-8, 12)).map(sorted).map(tuple)
clips = st.lists(
    st.tuples(st.sampled_from(["x", "y"]), bounds, st.booleans()), min_size=0, max_size=3
)


def oracle(data, where, by, conditions, moments):
    keep = WHERES[where]
    sizes = [SCHEMA.attribute(n).size for n in by]
    cells = int(np.prod(sizes)) if by else 1
    n = [0] * cells
    held = [[0] * cells for _ in conditions]
    mom = [([0] * cells, [0] * cells, [0] * cells) for _ in moments]
    for r in data:
        if not keep(*r):
            continue
        named = dict(zip("xygh", r, strict=True))
        c = 0
        for name, size in zip(by, sizes, strict=True):
            c = c * size + SCHEMA.attribute(name).values.index(named[name])
        n[c] += 1
        for i, text in enumerate(conditions):
            held[i][c] += CONDITIONS[text](*r)
        for j, (attr, lo, hi, _unit, _sq) in enumerate(moments):
            v = named[attr]
            if v is None or (attr == "y" and v == 0):
                continue
            clipped = min(max(v, lo), hi)
            mom[j][0][c] += 1
            mom[j][1][c] += clipped
            mom[j][2][c] += clipped * clipped
    return n, held, mom


def check(data, where, by, conditions, clip_list):
    df = pd.DataFrame(
        {
            "x": pd.array([r[0] for r in data], dtype="Int64"),
            "y": [r[1] for r in data],
            "g": [r[2] for r in data],
            "h": [r[3] for r in data],
        }
    )
    moments = [(a, lo, hi, 1, sq) for a, (lo, hi), sq in clip_list]
    q = None if where is None else parse_query(where, SCHEMA)
    want_n, want_held, want_mom = oracle(data, where, by, conditions, moments)
    with load_table(df, SCHEMA) as b:
        got = b.grouped_counts(q, by, [parse_query(t, SCHEMA) for t in conditions], moments)
    assert got.rows.tolist() == want_n
    assert [h.tolist() for h in got.held] == want_held
    for (n, s1, s2), (wn, ws1, ws2), m in zip(got.moments, want_mom, moments, strict=True):
        assert (n.tolist(), s1.tolist()) == (wn, ws1)
        assert s2.tolist() == ws2 if m[4] else s2 is None


@pytest.mark.parametrize("form", ["buckets", "filters"])
@settings(max_examples=60)
@given(
    data=rows,
    where=st.sampled_from(list(WHERES)),
    by=st.sampled_from(BYS),
    conditions=st.lists(st.sampled_from(sorted(CONDITIONS)), max_size=3),
    clip_list=clips,
)
def test_grouped_counts_are_exact_in_either_form(form, data, where, by, conditions, clip_list):
    with pytest.MonkeyPatch.context() as mp:
        if form == "filters":
            mp.setattr(duckdb_grouped, "BUCKETS", 0)
        check(data, where, by, conditions, clip_list)


def test_many_conditions_and_clips_take_the_filter_form():
    # 2^4 condition flags x 4 buckets of x's clip x 4 of y's = 256 > BUCKETS
    data = [(None, 0, "a", "u"), (3, -2, "b", "v"), (9, 5, "c", "u"), (0, 3, "a", "v")] * 5
    check(
        data,
        "g != 'c'",
        ["h", "g"],
        ["x < 5", "y >= 2 OR g = 'b'", "NOT (h = 'u' AND x BETWEEN 2 AND 7)", "x IS NULL"],
        [("x", (2, 7), True), ("y", (-3, 3), True)],
    )
