"""Statistic lines in a workload: parsed and checked against the schema, each one query
(the points it reads) with its line; errors name the line."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator.errors import QueryError, WorkloadError
from dpcurator.queries import Schema, parse_query, parse_workload_text
from dpcurator.queries.statistics import StatisticSpec, split_arguments

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema.load(ROOT / "examples" / "adult" / "schema.json")


def test_every_form():
    w = parse_workload_text(
        "\n".join(
            [
                "age < 30",
                "mean(hours-per-week, 0, 100, where=age < 30) @ 2",
                "variance(age, 17, 90, by=sex)",
                "stdev(age, 17, 90, by=[sex, race], where=sex = 'Female' OR age IN (20, 30))",
                "quantile(age, 0.9)",
                "quantiles(education, [0.25, 0.5, 0.75], candidates=['HS-grad', 'Bachelors'])",
                "MEDIAN(age, where=age > 40, candidates=[41, 50, 60])",
                "histogram(sex)",
            ]
        ),
        SCHEMA,
    )
    assert len(w) == 9 and len(w.statistics) == 9
    assert w.statistics[0] is None and w.statistics[-1] is None
    m = w.statistics[1]
    assert m == StatisticSpec("mean", "hours-per-week", 0, 100, where="age < 30")
    assert m.args() == {
        "attribute": "hours-per-week",
        "lower": 0,
        "upper": 100,
        "where": "age < 30",
    }
    assert w.weights[1] == 2.0 and w.queries[1].line == 2
    assert w.queries[1] == parse_query("age < 30", SCHEMA)  # the points it reads
    assert w.queries[1].text == "mean(hours-per-week, 0, 100, where=age < 30)"
    assert w.statistics[3].by == ("sex", "race")
    assert w.queries[3] == parse_query("sex = 'Female' OR age IN (20, 30)", SCHEMA)
    assert w.statistics[4].args() == {"attribute": "age", "q": Fraction(9, 10)}
    q = w.statistics[5]
    assert q.qs == (Fraction(1, 4), Fraction(1, 2), Fraction(3, 4))
    assert q.candidates == ("HS-grad", "Bachelors")
    assert w.statistics[6].kind == "median" and w.statistics[6].candidates == (41, 50, 60)


def test_a_count_workload_is_unchanged():
    w = parse_workload_text("age < 30\nhistogram(sex)", SCHEMA)
    assert w.statistics == ()


def test_missing_values_are_not_read():
    # workclass declares "?" as its missing marker: a quantile of it reads the others
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "h", "type": "integer", "min": 0, "max": 9, "missing": 0},
                {"name": "g", "type": "categorical", "values": ["a", "b"]},
            ]
        }
    )
    w = parse_workload_text("median(h, by=g)\nmean(h, 0, 9, where=g = 'a')", s)
    assert w.queries[0] == parse_query("h IS NOT NULL", s)
    assert w.queries[1] == parse_query("h IS NOT NULL AND g = 'a'", s)


@pytest.mark.parametrize(
    "line, message",
    [
        ("mean(age, 0)", "takes mean(attribute, lower, upper"),
        ("mean(sex, 0, 1)", "integer or float attribute"),
        ("mean(age, 5, 5)", "lower < upper"),
        ("mean(age, 0, x)", "upper must be a number"),
        ("mean(nope, 0, 1)", "unknown attribute"),
        ("mean(age, 0, 10, candidates=[1])", "no candidates"),
        ("quantile(age, 1.5)", "[0, 1]"),
        ("quantile(age, 0.1234567)", "six decimal"),
        ("quantile(age, -0.5)", "number in [0, 1]"),
        ("quantile(sex, 0.5)", "ordered attribute"),
        ("quantiles(age, 0.5)", "bracketed list"),
        ("quantiles(age, [])", "at least one"),
        ("median(age, by=age)", "distinct attributes"),
        ("median(age, by=[sex, sex])", "distinct attributes"),
        ("median(age, by=[])", "distinct attributes"),
        ("median(age, candidates=[1000])", "outside"),
        ("median(education, candidates=[Bachelors])", "quoted value"),
        ("median(education, candidates=['PhD'])", "not a value"),
        ("median(age, where=)", "needs a condition"),
        ("median(age, where=age <)", "syntax error"),
        ("median(age, by=sex, by=race)", "given twice"),
        ("median(age, by=sex, 3)", "after a keyword"),
        ("median(age, (1)", "unbalanced"),
        ("median(age, where=sex = 'F)", "unterminated string"),
    ],
)
def test_errors_name_the_line(line, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(f"age < 30\n{line}", SCHEMA)
    assert str(err.value).startswith("<workload>:2: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_json_workloads_take_statistics_too():
    w = parse_workload_text('[{"query": "median(age, by=sex)", "weight": 3}, "age < 30"]', SCHEMA)
    assert w.statistics[0].kind == "median" and w.weights[0] == 3 and w.statistics[1] is None


def test_split_arguments():
    assert split_arguments("a, f(b, c), [d, e], 'x, y', g") == [
        "a",
        "f(b, c)",
        "[d, e]",
        "'x, y'",
        "g",
    ]
    for bad in ("a)", "(a", "'a"):
        with pytest.raises(QueryError):
            split_arguments(bad)


def test_histograms_and_marginals_take_where():
    w = parse_workload_text(
        "histogram(sex, where=age < 30)\n"
        "histogram(age, bins=[17, 40, 91], where=sex = 'Female' OR age > 80)\n"
        "marginal(sex, race, where=age >= 30) @ 2",
        SCHEMA,
    )
    assert w.queries[0].text == "sex = 'Female' AND (age < 30)" and w.queries[0].line == 1
    assert w.queries[0] == parse_query("sex = 'Female' AND age < 30", SCHEMA)
    assert w.queries[3] == parse_query("age >= 40 AND (sex = 'Female' OR age > 80)", SCHEMA)
    assert len(w.queries) == 2 + 2 + 2 * len(SCHEMA.attribute("race").values)
    assert all(q.line == 3 and w.weights[i] == 2.0 for i, q in enumerate(w.queries) if i >= 4)
    for line, message in [
        ("histogram(sex, where=)", "needs a condition"),
        ("histogram(sex, where=age < 3, bins=[1, 2])", "last argument"),
        ("marginal(sex, where=age <)", "syntax error"),
    ]:
        with pytest.raises(WorkloadError, match=message):
            parse_workload_text(line, SCHEMA)


def test_share_lines():
    w = parse_workload_text(
        "share(age > 40 AND sex IN ('Male', 'Female'), by=[sex, race], where=age < 60) @ 2",
        SCHEMA,
    )
    (s,) = w.statistics
    assert s.kind == "share" and s.by == ("sex", "race")
    assert s.args() == {
        "condition": "age > 40 AND sex IN ('Male', 'Female')",
        "where": "age < 60",
        "by": ["sex", "race"],
    }
    assert w.queries[0] == parse_query("age < 60", SCHEMA)  # every row where= covers
    assert s.cells(SCHEMA) == 2 * len(SCHEMA.attribute("race").values)
    for line, message in [
        ("share(age >, by=sex)", "syntax error"),
        ("share(age > 3, sex = 'Male')", "share takes"),
        ("share(age > 3, candidates=[1])", "no candidates"),
        ("share(age > 3, by=nope)", "unknown attribute"),
    ]:
        with pytest.raises(WorkloadError, match=message):
            parse_workload_text(line, SCHEMA)
