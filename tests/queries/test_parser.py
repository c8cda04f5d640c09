"""Schema, query language and workload format: round-trips and every error message."""

from __future__ import annotations

import json
import math
import pickle
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcurator.errors import QueryError, SchemaError, WorkloadError
from dpcurator.queries import Attribute, Query, Schema, parse_query, parse_workload
from dpcurator.queries.predicates import normalize

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "integer", "min": 17, "max": 90},
            {"name": "sex", "type": "categorical", "values": ["Female", "Male"]},
            {
                "name": "education",
                "type": "categorical",
                "ordered": True,
                "values": ["Preschool", "1st-4th", "HS-grad", "Bachelors", "Masters"],
            },
            {"name": "native-country", "type": "categorical", "values": ["US", "Côte d'Ivoire"]},
        ]
    }
)


def cov(text: str, name: str) -> tuple[tuple[int, int], ...]:
    return parse_query(text, SCHEMA).coverage(name)


def test_operators() -> None:
    assert cov("age = 17", "age") == ((0, 1),)
    assert cov("age != 18", "age") == ((0, 1), (2, 74))
    assert cov("age <> 18", "age") == cov("age != 18", "age")
    assert cov("age < 20", "age") == ((0, 3),)
    assert cov("age <= 20", "age") == ((0, 4),)
    assert cov("age > 88", "age") == ((72, 74),)
    assert cov("age >= 88", "age") == ((71, 74),)
    assert cov("age BETWEEN 30 AND 39", "age") == ((13, 23),)
    assert cov("age NOT BETWEEN 18 AND 89", "age") == ((0, 1), (73, 74))
    assert cov("age IN (20, 22, 21)", "age") == ((3, 6),)
    assert cov("age NOT IN (17)", "age") == ((1, 74),)
    assert cov("education BETWEEN 'HS-grad' AND 'Masters'", "education") == ((2, 5),)
    assert cov("education < 'HS-grad'", "education") == ((0, 2),)
    assert cov("sex = 'Male'", "sex") == ((1, 2),)
    assert cov("native-country = 'Côte d''Ivoire'", "native-country") == ((1, 2),)
    assert cov("\"native-country\" = 'US'", "native-country") == ((0, 1),)


def test_conjunction_intersects_and_or_within_attribute() -> None:
    q = parse_query("age >= 30 and (age < 40) AND sex = 'Female' AND age != 35", SCHEMA)
    assert q.coverage("age") == ((13, 18), (19, 23))
    assert q.attributes == ("age", "sex")
    q = parse_query("(age < 20 OR age > 80) AND sex = 'Male'", SCHEMA)
    assert q.coverage("age") == ((0, 3), (64, 74))
    assert parse_query("age BETWEEN 17 AND 90", SCHEMA).predicates == ()
    assert parse_query("age BETWEEN 40 AND 30", SCHEMA).is_empty
    assert parse_query("sex IN ()", SCHEMA).is_empty


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agee = 30", "column 1: unknown attribute 'agee'"),
        ("age = 200", "column 7: value 200 is outside the domain of 'age' [17, 90]"),
        ("sex = 'Other'", "column 7: value 'Other' is not in the domain of 'sex'"),
        ("sex < 'Male'", "column 5: range < on unordered categorical 'sex'"),
        ("sex BETWEEN 'Female' AND 'Male'", "range BETWEEN on unordered categorical 'sex'"),
        ('sex = "Male"', "column 7: use single quotes for values: 'Male'"),
        ("sex = 'Mael'", "value 'Mael' is not in the domain of 'sex'; did you mean 'Male'?"),
        ("agee = 30", "did you mean 'age'?"),
        ("sex LIKE 'M%'", "LIKE is not a predicate over single columns"),
        ("lower(sex) = 'male'", "functions are not predicates over single columns"),
        ("age IN (SELECT 1)", "column 9: syntax error"),
        ("(SELECT age) = 1", "sub-queries are not predicates over single columns"),
        ("age = sex", "comparing two columns is not a predicate over single columns"),
        ("sex IS NULL", "attribute 'sex' may not be missing, so IS NULL means nothing here"),
        ("age = 30.5", "value 30.5 is not a value of 'age' [17, 90]"),
        ("(" * 101 + "age = 30" + ")" * 101, "nested more than 100 deep"),
        ("NOT " * 101 + "age = 30", "nested more than 100 deep"),
        ("age = 'x'", "column 7: attribute 'age' is integer, got string 'x'"),
        ("sex = 1", "attribute 'sex' is categorical, got number 1"),
        ("age = ", "column 7: syntax error: expected a value, got 'end of query'"),
        ("age 30", "column 5: syntax error: expected a comparison, IN, BETWEEN or IS NULL"),
        ("age = 30 sex = 'Male'", "column 10: syntax error: expected AND, OR or end of query"),
        ("(age = 30", "column 10: syntax error: expected ')'"),
        ("age = 30 AND", "column 13: syntax error: expected a column name, a value, NOT or '('"),
        ("sex = 'Male", "column 7: unterminated string"),
        ("age = 3$", "column 8: syntax error at '$'"),
        # a bare name is ASCII: one with other letters is told how to write it
        ("Ünï > 1", 'column 1: a name with letters beyond A-Z is written in double quotes: "Ünï"'),
        ("age = 3 AND ñame-x = 2", 'column 13: a name with letters beyond A-Z is written in double quotes: "ñame-x"'),
        ("age IN (20 21)", "column 12: syntax error: expected ',' or ')'"),
        ("age NOT = 3", "expected IN or BETWEEN after NOT"),
        ("", "column 1: syntax error: expected a predicate"),
        # text that stops early (these raised IndexError: a 500 over HTTP)
        ("age BETWEEN", "column 12: syntax error: expected a value after BETWEEN"),
        ("age BETWEEN 20", "column 15: syntax error: expected AND in BETWEEN"),
        ("age NOT BETWEEN 20 AND", "column 23: syntax error: expected a value"),
        ("age IN (20,", "column 12: syntax error: expected a value"),
        ("  age = 30 ;  ", None),
        ("age\u2003=\t30", None),
        ("age = 30 \x1c", None),
        ('"age" = "', "column 9: unterminated quoted name"),
        ("age = 30 AND sex = ''Male'", "column 26: unterminated string"),
    ],
)
def test_query_errors(text: str, message: str | None) -> None:
    if message is None:  # whitespace of every kind, and a closing semicolon, are fine
        assert parse_query(text, SCHEMA) == parse_query("age = 30", SCHEMA)
        return
    with pytest.raises(QueryError) as err:
        parse_query(text, SCHEMA)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "age = 30" + " " * 1_000_000,
        " " * 1_000_000,
        "age" + "\u2003" * 1_000_000 + "= 30",
        "age = 30" + "\t\n\x1c\x1f\x85\u2028" * 100_000 + ";" + " " * 100_000,
    ],
    ids=["trailing", "only", "inside", "mixed"],
)
def test_a_million_whitespace_characters_parse_at_once(text: str) -> None:
    """Whitespace anywhere costs linear time. A tokenizer that searched through
    trailing whitespace tried its pattern at every position of it: 20,000 spaces after
    a count (the longest query text a request may send) took 35 s, the interpreter lock
    held all along, every other request of the server waiting. A hang guard, not a
    speed test: linear is milliseconds here, the bug was hours."""
    t0 = time.monotonic()
    try:
        assert parse_query(text, SCHEMA) == parse_query("age = 30", SCHEMA)
    except QueryError as err:
        assert "expected a predicate" in str(err)
    assert time.monotonic() - t0 < 10


def test_a_number_of_thousands_of_digits_is_a_query_error() -> None:
    """Python reads at most 4,300 digits into an integer (ValueError beyond: a 500)."""
    for text in ("age = " + "9" * 5000, "age < 1." + "5" * 5000, "age IN (" + "1" * 1001 + ")"):
        with pytest.raises(QueryError, match=r"column [0-9]+: a number of more than 1000 digits"):
            parse_query(text, SCHEMA)
    with pytest.raises(QueryError, match="outside the domain"):
        parse_query("age = " + "9" * 1000, SCHEMA)


#: Queries using every construct of the grammar.
EVERY_CONSTRUCT = (
    "age BETWEEN 20 AND 30 AND NOT (sex = 'Male' OR education IN ('Masters', 'HS-grad'))",
    "age NOT BETWEEN 20 AND 30 OR \"native-country\" NOT IN ('Côte d''Ivoire') ;",
    "(age < 20 OR age >= 60) AND education > 'HS-grad' AND sex != 'Female' AND TRUE",
    "age <> 30 OR age <= 18 OR age > 80 OR age == 45 OR FALSE OR total",
)


@pytest.mark.parametrize("text", EVERY_CONSTRUCT)
def test_every_prefix_of_a_query_is_a_query_or_query_error(text: str) -> None:
    """Text cut anywhere (a request sent half-written) parses or is a QueryError: a
    parser that stepped past the end of its tokens raised IndexError on "age BETWEEN"."""
    parse_query(text, SCHEMA)
    for n in range(len(text)):
        try:
            parse_query(text[:n], SCHEMA)
        except QueryError as err:
            assert "\n" not in str(err)


#: Pieces of query text, good and bad, that hostile text is made of.
PIECES = [
    "age", "sex", "education", '"native-country"', "AND", "OR", "NOT", "IN", "BETWEEN",
    "IS", "NULL", "TRUE", "FALSE", "LIKE", "total", "'Male'", "'Côte d''Ivoire'", "'",
    "''", '"', "(", ")", ",", ";", "=", "==", "!=", "<>", "<", "<=", ">", ">=", "17",
    "-1", "30", "1.5", ".5", "1e3", "2e", "1.2.3", "-", " ", "\t", "\n", "\u00a0",
    "\u2003", "\x1c", "é", "$", "SELECT",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14), st.booleans())
def test_any_text_is_a_query_or_one_line_query_error(pieces: list[str], spaced: bool) -> None:
    """Whatever the text, parsing gives a query or a one-line QueryError (never another
    exception: a server answers that with a 500), and an error's column lies within
    the text (or just after its end)."""
    text = (" " if spaced else "").join(pieces)
    try:
        parse_query(text, SCHEMA)
    except QueryError as err:
        message = str(err)
        assert "\n" not in message
        if message.startswith("column "):
            col = int(message.split()[1].rstrip(":"))
            assert 1 <= col <= len(text) + 1


@st.composite
def coverages(draw: st.DrawFn) -> dict[str, tuple[tuple[int, int], ...]]:
    out = {}
    for a in SCHEMA.attributes:
        if draw(st.booleans()):
            members = draw(st.lists(st.booleans(), min_size=a.size, max_size=a.size))
            out[a.name] = normalize((p, p + 1) for p, m in enumerate(members) if m)
    return out


@settings(max_examples=200, deadline=None)
@given(coverages())
def test_round_trip(covs: dict[str, tuple[tuple[int, int], ...]]) -> None:
    q = Query.from_coverages(SCHEMA, covs)
    again = parse_query(q.to_text(), SCHEMA)
    assert again == q
    assert again.to_text() == q.to_text()


def test_schema_round_trip_and_load(tmp_path: Path) -> None:
    assert Schema.from_dict(SCHEMA.to_dict()) == SCHEMA
    p = tmp_path / "s.json"
    p.write_text(json.dumps(SCHEMA.to_dict()))
    assert Schema.load(p) == SCHEMA
    adult = Schema.load(ROOT / "examples" / "adult" / "schema.json")
    assert adult.attribute("age").size == 74
    assert adult.attribute("education").ordered
    assert SCHEMA.log10_size() == pytest.approx(math.log10(74 * 2 * 5 * 2))


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({}, '"attributes" list'),
        ({"attributes": []}, "at least one attribute"),
        ({"attributes": [{"type": "integer"}]}, "attribute 0 needs a non-empty string 'name'"),
        ({"attributes": [{"name": "a", "type": "double"}]}, "unknown type 'double'"),
        (
            {"attributes": [{"name": "a", "type": "float"}]},
            "a float needs 'min' and 'max' and 'step'",
        ),
        ({"attributes": [{"name": "a", "type": "integer", "min": 1}]}, "needs 'min' and 'max'"),
        ({"attributes": [{"name": "a", "type": "integer", "min": 2, "max": 1}]}, "greater than"),
        ({"attributes": [{"name": "a", "type": "integer", "min": 0.5, "max": 1}]}, "integers"),
        ({"attributes": [{"name": "a", "type": "categorical", "values": []}]}, "needs values"),
        (
            {"attributes": [{"name": "a", "type": "categorical", "values": ["x", "x"]}]},
            "duplicate value",
        ),
        ({"attributes": [{"name": "a", "type": "categorical", "values": [1]}]}, "not a string"),
        ({"attributes": [{"name": "a", "type": "categorical", "values": "xy"}]}, "list of strings"),
        (
            {"attributes": [{"name": "a", "type": "integer", "min": 0, "max": 1}] * 2},
            "duplicate attribute name 'a'",
        ),
        (
            {"attributes": [{"name": "a", "type": "integer", "min": 0, "max": 1, "x": 1}]},
            "unknown key 'x'",
        ),
    ],
)
def test_schema_errors(d: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=None) as err:
        Schema.from_dict(d)
    assert message in str(err.value)


def test_schema_file_errors(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text("{\n  oops")
    with pytest.raises(SchemaError, match=r"s\.json:2: invalid JSON"):
        Schema.load(p)
    with pytest.raises(SchemaError, match="cannot read schema"):
        Schema.load(tmp_path / "missing.json")


def test_workload_text(tmp_path: Path) -> None:
    text = """# comment
total
histogram(sex)   # trailing comment
histogram(age, bins=[0, 30, 60, 100]) @ 0.5

marginal(sex, education)
education IN ('Masters', 'HS-grad') AND native-country = 'Côte d''Ivoire' @ 2
sex = 'a#b@c' OR sex = 'Male'
"""
    with pytest.raises(WorkloadError, match=r"<workload>:8: column 7: value 'a#b@c'"):
        parse_workload(text, SCHEMA)
    text = text.replace("'a#b@c'", "'Female'")
    wl = parse_workload(text, SCHEMA)
    assert len(wl) == 1 + 2 + 3 + 10 + 1 + 1
    assert [q.line for q in wl][:4] == [2, 3, 3, 4]
    assert wl.weights[3:6] == (0.5, 0.5, 0.5)
    assert wl.weights[-2] == 2.0
    assert wl[3].coverage("age") == ((0, 13),)  # [17, 30) clipped to the domain
    assert wl.total_weight == pytest.approx(1 + 2 + 1.5 + 10 + 2 + 1)
    p = tmp_path / "w.txt"
    p.write_text(text)
    assert parse_workload(p, SCHEMA) == parse_workload(str(p), SCHEMA)
    assert parse_workload(str(p), SCHEMA).source == str(p)


def test_workload_json() -> None:
    text = '[\n  {"query": "age < 30", "weight": 0.5},\n  "marginal(sex)",\n  {"query": "total"}\n]'
    wl = parse_workload(text, SCHEMA)
    assert len(wl) == 4 and wl.weights == (0.5, 1.0, 1.0, 1.0)
    assert [q.line for q in wl] == [2, 3, 3, 4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("total\nagee = 3", "<workload>:2: column 1: unknown attribute 'agee'"),
        ("  age = 3", "<workload>:1: column 9: value 3 is outside the domain of 'age'"),
        ("age = 30 @ -1", "<workload>:1: weight must be a positive number, got '-1'"),
        ("age = 30 @ x", "<workload>:1: weight must be a positive number, got 'x'"),
        ("age = 30 @ 1e308", "<workload>:1: weight must be between 1e-06 and 1e+06, got '1e308'"),
        ("age = 30 @ 5e-324", "weight must be between 1e-06 and 1e+06, got '5e-324'"),
        ("histogram(foo)", "<workload>:1: unknown attribute 'foo'"),
        (
            "histogram(sex, bins=[0, 1])",
            "bins need an integer, float, timestamp or date attribute; 'sex' is categorical",
        ),
        ("histogram(age, bins=[20, 100])", "do not cover 'age' [17, 90]: the first edge must"),
        ("histogram(age, bins=[0, 50, 40, 100])", "at least two strictly increasing edges"),
        ("histogram(age, bins=[0, 10, 50, 100])", "bin [0, 10) holds no value of 'age'"),
        ("histogram(age, bins=[a])", "a bin edge is a number or a quoted time, got 'a'"),
        ("histogram(age, [1])", "histogram(attr, bins=[...])"),
        ("marginal(sex, sex)", "marginal attributes must be distinct"),
        ("marginal(sex, nope)", "unknown attribute 'nope'"),
        ("age = 30 OR sex = 'Mael'", "<workload>:1: column 19: value 'Mael' is not in the domain"),
        ("sex = 'Male", "<workload>:1: column 7: unterminated string"),
        (
            '[{"query": "age = 30", "weight": "x"}]',
            "<workload>:1: weight must be a positive number",
        ),
        ('[\n{"query": 3}]', "<workload>:2: an entry is a string or"),
        ('[\n{"query": "age = 3"}]', "<workload>:2: value 3 is outside"),
        ('[\n{"query": "age = 30", "w": 1}]', "<workload>:2: unknown key 'w'"),
        ('[\n"total",\n', "<workload>:3: invalid JSON"),
        ('["total"] x', "extra data"),
    ],
)
def test_workload_errors(text: str, message: str) -> None:
    with pytest.raises(WorkloadError) as err:
        parse_workload(text, SCHEMA)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_workload_file_errors(tmp_path: Path) -> None:
    p = tmp_path / "w.txt"
    p.write_text("total\n\nage = 10\n")
    with pytest.raises(WorkloadError, match=r"w\.txt:3: column 7: value 10 is outside"):
        parse_workload(p, SCHEMA)
    with pytest.raises(WorkloadError, match="cannot read workload"):
        parse_workload(tmp_path / "nope.txt", SCHEMA)


def test_a_categoricals_literals_are_made_once_and_never_pickled() -> None:
    """Rendering reads a categorical's values as literals, made at the first rendering;
    a pickle (a solver's job carries the schema) leaves them out, and a copy with other
    values renders its own."""
    import dataclasses

    a = SCHEMA.attribute("native-country")
    assert a.literal(1) == "'Côte d''Ivoire'" and a._literals == ("'US'", "'Côte d''Ivoire'")
    again = pickle.loads(pickle.dumps(a))
    assert "_literals" not in again.__dict__ and again == a
    assert again.literal(1) == "'Côte d''Ivoire'"
    other = dataclasses.replace(a, values=("FR", "US"))
    assert other.literal(0) == "'FR'" and other.literal(1) == "'US'"
    with pytest.raises(TypeError):
        Attribute("c", "categorical", values=("x",), _literals=("'y'",))  # type: ignore[call-arg]


def test_attribute_positions() -> None:
    a = Attribute("x", "integer", min=-5, max=5)
    assert a.position(-5) == 0 and a.value(10) == 5
    with pytest.raises(KeyError):
        a.position(6)
    with pytest.raises(KeyError):
        a.position(True)
