"""Floats, timestamps, dates and booleans: every value read exactly, every range and part
of a time equal to brute force over the domain."""

from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.errors import QueryError, SchemaError
from dpcurator.queries import Attribute, Schema, parse_query, parse_workload_text
from dpcurator.queries.parts import group_term, part_of
from dpcurator.queries.values import (
    as_decimal,
    decimal_text,
    parse_date,
    parse_instant,
    parse_number,
)

ZONE = "America/New_York"


def schema(*attrs: dict) -> Schema:
    return Schema.from_dict({"attributes": list(attrs)})


FLOAT = {"name": "x", "type": "float", "min": -60.5, "max": 80, "step": 0.5, "missing": "NA"}
HOURS = {
    "name": "t",
    "type": "timestamp",
    "min": "2013-03-08T00:00:00Z",
    "max": "2013-03-12T23:00:00Z",
    "unit": "hour",
    "timezone": ZONE,
}
DAYS = {"name": "d", "type": "date", "min": "2012-02-25", "max": "2012-03-05"}
S = schema(FLOAT, HOURS, DAYS, {"name": "b", "type": "boolean", "missing": "NA"})


# --- reading numbers and times ----------------------------------------------------------


@given(
    st.decimals(
        allow_nan=False, allow_infinity=False, places=6, min_value=-(10**9), max_value=10**9
    )
)
def test_a_decimal_is_read_as_written(d):
    assert parse_number(str(d)) == Fraction(d)
    assert parse_number(format(d, "e")) == Fraction(d)
    assert Fraction(decimal_text(Fraction(d))) == Fraction(d)


def test_huge_and_tiny_exponents_are_bounded_not_built():
    assert parse_number("1e999999999999999999") == Fraction(10) ** 1001
    assert parse_number("-1e-999999999999999999") == -Fraction(1, 10**1001)
    assert parse_number("1" * 1001) is None
    for bad in ("", ".", "1e", "1.2.3", "nan", "inf", "0x10", "1_000", " 1"):
        assert parse_number(bad) is None


@given(
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2100, 1, 1)),
    st.sampled_from(["UTC", ZONE, "Asia/Kolkata", "Australia/Lord_Howe"]),
)
def test_a_local_time_is_read_in_its_zone(local, zone):
    local = local.replace(microsecond=0)
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    expected = local.replace(tzinfo=ZoneInfo(zone)).timestamp()  # fold=0, as documented
    assert parse_instant(text, zone) == Fraction(int(expected))
    offset = local.replace(tzinfo=dt.UTC).timestamp()
    assert parse_instant(text + "Z", zone) == Fraction(int(offset))
    assert parse_instant(text + "+05:30", zone) == Fraction(int(offset) - 5 * 3600 - 1800)


def test_dates_and_bad_times():
    assert parse_date("1970-01-02") == 1
    assert parse_date("2012-02-29") is not None
    for bad in ("2013-02-29", "2013-13-01", "13-01-01", "2013-1-1", "2013-01-01T00:00"):
        assert parse_date(bad) is None
    for bad in ("2013-01-01T25:00", "2013-01-01T10:00:60", "2013-01-01T10:00+24:00", "yesterday"):
        assert parse_instant(bad) is None


# --- positions: rounding, truncation, exact bounds ---------------------------------------


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-70, max_value=90))
def test_a_float_rounds_to_its_step_ties_to_even(d):
    a = S.attribute("x")
    k = Fraction(d) / Fraction(1, 2)
    expected = round(k) + 121  # -60.5 is 121 steps below 0
    got = a.read(str(d))
    assert got == (expected if 0 <= expected < a.value_count else None)
    if got is not None:
        assert a.value(got) == float(as_decimal(a.number(got)))


@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-100, max_value=100),
    st.sampled_from(["<", "<=", ">", ">="]),
)
def test_a_decimal_range_is_exact_on_the_grid(d, op):
    a = S.attribute("x")
    q = parse_query(f"x {op} {d}", S)
    brute = [
        p
        for p in range(a.value_count)
        if {
            "<": a.number(p) < Fraction(d),
            "<=": a.number(p) <= Fraction(d),
            ">": a.number(p) > Fraction(d),
            ">=": a.number(p) >= Fraction(d),
        }[op]
    ]
    got = [p for s, e in q.coverage("x") for p in range(s, e)] if not q.is_empty else []
    assert got == brute


def test_values_that_are_not_in_the_domain_are_errors():
    with pytest.raises(QueryError, match="not a value of 'x'"):
        parse_query("x = 1.25", S)
    with pytest.raises(QueryError, match="outside the domain of 'x'"):
        parse_query("x = 100", S)
    with pytest.raises(QueryError, match="not a value of 't'"):
        parse_query("t = '2013-03-09T10:30:00Z'", S)
    with pytest.raises(QueryError, match="boolean: write TRUE or FALSE"):
        parse_query("b = 'yes'", S)
    with pytest.raises(QueryError, match="quote its values"):
        parse_query("d = 2012", S)
    assert parse_query("x IS NULL", S).coverage("x") == ((282, 283),)


def test_a_timestamp_is_truncated_to_its_unit():
    a = S.attribute("t")
    assert a.read("2013-03-08T00:59:59Z") == 0
    assert a.read("2013-03-08T01:00:00Z") == 1
    assert a.read("2013-03-07T23:59:59Z") is None
    assert a.read("2013-03-08 00:30") == 5  # local: 05:30Z
    assert a.value(5) == "2013-03-08T05:00:00Z"


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"name": "x", "type": "float", "min": 0, "max": 1, "step": 0}, "step must be positive"),
        (
            {"name": "x", "type": "float", "min": 0.25, "max": 1, "step": 0.5},
            "not a multiple of step",
        ),
        (
            {"name": "x", "type": "float", "min": 0, "max": 1e20, "step": 0.1},
            r"below 10\^15 in magnitude",
        ),
        ({"name": "x", "type": "float", "min": 0, "max": 1e10, "step": 1e-9}, "significant digits"),
        ({"name": "x", "type": "float", "min": "0", "max": 1, "step": 0.1}, "finite number"),
        ({"name": "t", "type": "timestamp", "min": "2013", "max": "2014-01-01"}, "ISO 8601"),
        (
            {
                "name": "t",
                "type": "timestamp",
                "min": "2013-01-01T00:30:00Z",
                "max": "2014-01-01",
                "unit": "hour",
            },
            "is not a whole hour",
        ),
        (
            {
                "name": "t",
                "type": "timestamp",
                "min": "2013-01-01",
                "max": "2014-01-01",
                "unit": "day",
            },
            "unit must be",
        ),
        (
            {
                "name": "t",
                "type": "timestamp",
                "min": "2013-01-01",
                "max": "2014-01-01",
                "timezone": "Mars/Olympus",
            },
            "unknown time zone",
        ),
        (
            {"name": "t", "type": "timestamp", "min": "2014-01-01", "max": "2013-01-01"},
            "later than",
        ),
        ({"name": "d", "type": "date", "min": "2013-02-30", "max": "2014-01-01"}, "YYYY-MM-DD"),
        ({"name": "b", "type": "boolean", "values": ["no", "yes"]}, "unknown key 'values'"),
        ({"name": "b", "type": "boolean", "missing": 0}, "must be text"),
        (
            {"name": "x", "type": "integer", "min": 0, "max": 9, "step": 1},
            "only a float takes 'step'",
        ),
        ({"name": "c", "type": "categorical", "values_file": "v.txt"}, "read from a schema file"),
    ],
)
def test_schema_errors_for_the_new_types(d, message):
    with pytest.raises(SchemaError, match=message):
        schema(d)


def test_schemas_round_trip_canonically():
    again = Schema.from_dict(S.to_dict())
    assert again == S
    assert again.to_dict() == S.to_dict()
    t = S.attribute("t").to_dict()
    assert t["min"] == "2013-03-08T00:00:00Z" and t["timezone"] == ZONE
    assert S.attribute("x").to_dict()["min"] == -60.5


def test_a_values_file_beside_the_schema(tmp_path):
    (tmp_path / "codes.txt").write_text("JFK\nLGA\nEWR\n")
    (tmp_path / "s.json").write_text(
        '{"attributes": [{"name": "a", "type": "categorical", "values_file": "codes.txt"}]}'
    )
    s = Schema.load(tmp_path / "s.json")
    assert s.attribute("a").values == ("JFK", "LGA", "EWR")
    assert s.to_dict()["attributes"][0]["values"] == ["JFK", "LGA", "EWR"]


# --- parts of times: brute force over every position -------------------------------------


def _local(a: Attribute, p: int) -> dt.datetime:
    seconds = int(a.number(p))
    return dt.datetime.fromtimestamp(seconds, ZoneInfo(a.timezone or "UTC"))


@pytest.mark.parametrize("part", ["year", "month", "day", "weekday", "hour"])
def test_parts_equal_brute_force_across_a_change_of_clocks(part):
    a = S.attribute("t")  # 2013-03-10 02:00 does not exist in New York
    pt = part_of(a, part)
    for value in range(pt.lo, pt.hi + 1):
        got = [p for s, e in pt.coverage([value]) for p in range(s, e)]
        local = [_local(a, p) for p in range(a.value_count)]
        want = [
            p
            for p, t in enumerate(local)
            if {
                "year": t.year,
                "month": t.month,
                "day": t.day,
                "weekday": t.isoweekday(),
                "hour": t.hour,
            }[part]
            == value
        ]
        assert got == want, (part, value)


@pytest.mark.parametrize("part", ["year", "month", "day", "weekday"])
def test_parts_of_dates_across_a_leap_day(part):
    a = S.attribute("d")
    pt = part_of(a, part)
    for value in range(pt.lo, pt.hi + 1):
        got = [p for s, e in pt.coverage([value]) for p in range(s, e)]
        days = [dt.date(2012, 2, 25) + dt.timedelta(days=p) for p in range(a.value_count)]
        want = [
            p
            for p, d in enumerate(days)
            if {"year": d.year, "month": d.month, "day": d.day, "weekday": d.isoweekday()}[part]
            == value
        ]
        assert got == want


@settings(max_examples=40)
@given(st.integers(0, 23), st.integers(0, 23), st.sampled_from(["BETWEEN", "IN", "!=", "<", ">="]))
def test_part_predicates_equal_brute_force(a_, b_, op):
    a = S.attribute("t")
    lo, hi = min(a_, b_), max(a_, b_)
    text = {
        "BETWEEN": f"hour(t) BETWEEN {lo} AND {hi}",
        "IN": f"hour(t) IN ({lo}, {hi})",
        "!=": f"hour(t) != {lo}",
        "<": f"hour(t) < {hi}",
        ">=": f"hour(t) >= {lo}",
    }[op]
    keep = {
        "BETWEEN": lambda h: lo <= h <= hi,
        "IN": lambda h: h in (lo, hi),
        "!=": lambda h: h != lo,
        "<": lambda h: h < hi,
        ">=": lambda h: h >= lo,
    }[op]
    q = parse_query(text, S)
    got = set() if q.is_empty else {p for s, e in q.coverage("t") for p in range(s, e)}
    want = {p for p in range(a.value_count) if keep(_local(a, p).hour)}
    assert got == want


def test_group_terms_and_macros():
    term = group_term(S, "weekday(d)")
    assert term.groups == 7 and term.label(0) == "weekday(d) = 1"
    assert group_term(S, "x").groups == S.attribute("x").size
    w = parse_workload_text(
        "histogram(month(t))\nmarginal(day(d), b)\nhistogram(x, bins=[-61, 0, 80.5])", S
    )
    assert [q.text for q in w.queries[:2]] == ["month(t) = 1", "month(t) = 2"]
    assert sum(1 for q in w.queries if q.text.startswith("day(d)")) == 31 * 3
    with pytest.raises(QueryError, match="hour\\(d\\): a date has no hours"):
        group_term(S, "hour(d)")
    with pytest.raises(QueryError, match="unknown attribute"):
        group_term(S, "quarter(t)")


def test_a_literal_matches_the_attribute_type():
    assert not math.isnan(0)  # keeps math imported for the brute forces above
    assert parse_query("b", S).coverage("b") == ((1, 2),)
    assert parse_query("NOT b", S).coverage("b") == ((0, 1), (2, 3))  # the missing value too
    assert parse_query("d BETWEEN '2012-02-28' AND '2012-03-01'", S).coverage("d") == ((3, 6),)
    assert parse_query("x > 1e1", S).coverage("x") == parse_query("x > 10", S).coverage("x")
