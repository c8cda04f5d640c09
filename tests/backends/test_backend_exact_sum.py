"""clipped_sum is Python's exact integer sum, for any integer bounds, with no rounding."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.backends import load_table
from dpcurator.errors import DataError, InvalidParameter
from dpcurator.queries import Attribute, Query, Schema

I64 = 2**63
SCHEMA = Schema(
    (
        # size 2^63 - 1, the widest integer domain a table holds
        Attribute("wide", "integer", min=-(2**62) + 1, max=2**62 - 1),
        Attribute("top", "integer", min=I64 - 1_000, max=I64 - 1),
        Attribute("bottom", "integer", min=-I64, max=-I64 + 1_000),
        Attribute("small", "integer", min=-3, max=6),
        Attribute("key", "categorical", values=("x", "y", "z")),
    )
)
INTS = [a for a in SCHEMA.attributes if a.type == "integer"]
N = 20_000


def column(attr: Attribute, rng: np.random.Generator) -> list[int]:
    # Uniform over the domain, with the extremes (and values next to them) planted.
    values = [int(v) for v in rng.integers(attr.min, attr.max, N, endpoint=True)]
    for k, v in enumerate((attr.min, attr.max, attr.min + 1, attr.max - 1, 0)):
        if attr.min <= v <= attr.max:
            values[k * 7 : k * 7 + 5] = [v] * 5
    return values


@pytest.fixture(scope="module")
def loaded():
    rng = np.random.default_rng(5)
    data = {a.name: column(a, rng) for a in INTS}
    data["key"] = [("x", "y", "z")[int(i)] for i in rng.integers(0, 3, N)]
    frame = pd.DataFrame(data)
    with load_table(frame, SCHEMA) as backend:
        yield backend, data


EDGES = [
    0, 1, -1, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, -(2**62), 2**62 - 1, -(2**62) + 1,
    I64 - 1, -I64, I64, -I64 - 1, 2**64, -(2**64), 2**127, -(2**127), 10**30, -(10**30),
    I64 - 1_000, I64 - 500, -I64 + 1_000, -I64 + 17, -3, 6, 7, -4,
]  # fmt: skip
bound = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(10**30), 10**30),
    st.integers(-(2**64), 2**64),
    st.integers(-I64, I64 - 1),
    st.integers(-10, 10),
    st.sampled_from(EDGES).flatmap(lambda e: st.integers(e - 3, e + 3)),
)


@st.composite
def cases(draw):
    attr = draw(st.sampled_from(INTS))
    a, b = draw(bound), draw(bound)
    lower, upper = min(a, b), max(a, b)
    keys = draw(st.one_of(st.none(), st.lists(st.integers(0, 2), max_size=3, unique=True)))
    return attr.name, lower, upper, keys


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_clipped_sum_is_pythons_exact_sum(loaded, case):
    backend, data = loaded
    name, lower, upper, keys = case
    where = None
    rows = range(N)
    if keys is not None:
        where = Query.from_coverages(SCHEMA, {"key": tuple((k, k + 1) for k in sorted(keys))})
        chosen = {("x", "y", "z")[k] for k in keys}
        rows = [i for i in range(N) if data["key"][i] in chosen]
    want = sum(min(max(data[name][i], lower), upper) for i in rows)
    got = backend.clipped_sum(name, lower, upper, where=where)
    assert type(got) is int
    assert got == want


def test_sums_beyond_float_precision(loaded):
    backend, data = loaded
    # Each of these is far above 2^53 (and above 2^64): a float would round it.
    for name in ("wide", "top", "bottom"):
        want = sum(data[name])
        got = backend.clipped_sum(name, -(10**30), 10**30)
        assert type(got) is int and got == want
        assert abs(want) > 2**64 or name == "wide"
    # Every value clipped to a huge bound: count * bound, exactly.
    assert backend.clipped_sum("small", 10**30, 10**30 + 1) == N * 10**30
    assert backend.clipped_sum("small", -(2**127) - 5, -(2**127)) == -N * 2**127
    assert backend.clipped_sum("top", I64 - 1, I64 + 1) == N * (I64 - 1)


def test_numpy_integer_bounds_and_empty_results(loaded):
    backend, data = loaded
    want = sum(min(max(v, -2), 3) for v in data["small"])
    assert backend.clipped_sum("small", np.int64(-2), np.int8(3)) == want
    assert type(backend.clipped_sum("small", np.int64(-2), np.int8(3))) is int
    nothing = Query.from_coverages(SCHEMA, {"key": ()})
    assert backend.clipped_sum("wide", -5, 5, where=nothing) == 0
    assert type(backend.clipped_sum("wide", -5, 5, where=nothing)) is int


@pytest.mark.parametrize(
    "bad", [0.5, 1.0, 2.0**70, float("nan"), float("inf"), True, False, np.bool_(True), "1", None]
)
def test_bounds_must_be_integers(loaded, bad):
    backend, _ = loaded
    with pytest.raises(InvalidParameter, match="clipping bound must be an integer"):
        backend.clipped_sum("small", bad, 10**6)
    with pytest.raises(InvalidParameter, match="clipping bound must be an integer"):
        backend.clipped_sum("small", -(10**6), bad)


# --------------------------------------------------------------------- extreme values load


EXTREME = Schema(
    (
        Attribute("v", "integer", min=-I64, max=-I64 + 10),
        Attribute("w", "integer", min=I64 - 10, max=I64 - 1),
        Attribute("m", "integer", min=0, max=2**62 + 5),
    )
)
EXTREME_ROWS = [
    (-I64, I64 - 1, 2**62 + 1),
    (-I64 + 3, I64 - 10, 2**53 + 1),
    (-I64 + 10, I64 - 2, 7),
]


def extreme_data(fmt: str, tmp_path, rows=EXTREME_ROWS):
    import decimal

    if fmt in ("csv", "csv-signs-zeros"):
        p = tmp_path / "x.csv"
        if fmt == "csv":
            body = "".join(f"{a},{b},{c}\n" for a, b, c in rows)
        else:
            body = "".join(f" {a} ,+{b},{'0' * 30}{c}\n" for a, b, c in rows)
        p.write_text("v,w,m\n" + body, encoding="utf-8")
        return p
    if fmt == "pandas":
        return pd.DataFrame(rows, columns=["v", "w", "m"])
    scale = {"decimal0": 0, "decimal2": 2}[fmt]
    table = pa.table(
        {
            k: pa.array([decimal.Decimal(r[i]) for r in rows], pa.decimal128(38, scale))
            for i, k in enumerate("vwm")
        }
    )
    p = tmp_path / "x.parquet"
    pq.write_table(table, p)
    return p


@pytest.mark.parametrize("fmt", ["csv", "csv-signs-zeros", "pandas", "decimal0", "decimal2"])
def test_extreme_values_load_exactly(tmp_path, fmt):
    # 2^62 + 1 and 2^53 + 1 have 19 and 16 digits and are not doubles; +-2^63 edges.
    with load_table(extreme_data(fmt, tmp_path), EXTREME) as b:
        for k, name in enumerate("vwm"):
            want = sum(r[k] for r in EXTREME_ROWS)
            got = b.clipped_sum(name, -(10**40), 10**40)
            assert type(got) is int and got == want
        exact = Query.from_coverages(EXTREME, {"m": ((2**53 + 1, 2**53 + 2),)})
        assert b.counts([exact]).tolist() == [1]


@pytest.mark.parametrize(
    ("fmt", "bad", "shown"),
    [
        ("csv", str(I64 - 1), f"'{I64 - 1}'"),  # one past the domain
        ("csv", str(I64), f"'{I64}'"),  # past int64
        ("csv", "9" * 39, repr("9" * 39)),  # 39 digits: beyond what HUGEINT holds
        ("csv", "1" + "0" * 60, repr("1" + "0" * 36 + "...")),
        ("csv", "+-5", "'+-5'"),
        ("decimal2", "2.5", None),
        ("float", "1e300", None),
        ("float", "2.5", None),
    ],
)
def test_extreme_values_out_of_domain(tmp_path, fmt, bad, shown):
    schema = Schema((Attribute("m", "integer", min=0, max=I64 - 2),))  # the widest from 0
    if fmt == "csv":
        p = tmp_path / "x.csv"
        p.write_text(f"m\n5\n{bad}\n", encoding="utf-8")
        data = p
    elif fmt == "float":
        data = pd.DataFrame({"m": [5.0, float(bad)]})
    else:
        import decimal

        data = tmp_path / "x.parquet"
        pq.write_table(
            pa.table(
                {"m": pa.array([decimal.Decimal(5), decimal.Decimal(bad)], pa.decimal128(38, 2))}
            ),
            data,
        )
    fractional = bad == "2.5"  # not an integer at all: said so, with its row and value
    want = (
        r"'m': row 2, value '2\.50?' is not an integer"
        if fractional
        else r"'m': 1 row has a value outside the domain .*first: row 2"
    )
    with pytest.raises(DataError, match=want) as err:
        load_table(data, schema)
    if shown is not None:
        assert f"value {shown}" in str(err.value)
