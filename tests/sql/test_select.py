"""The SQL front end: sqlglot's two traps, every refusal (one line, nothing charged), and
WHERE in SQL's three-valued logic against DuckDB on a table with missing values."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp
from sqlglot.errors import ParseError

from dpcurator import Curator
from dpcurator.backends.duckdb_backend import DuckDBBackend
from dpcurator.errors import BudgetExceeded, DpCuratorError, QueryError
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_query
from dpcurator.sql import parse_select
from dpcurator.sql.output import compile_having
from dpcurator.sql.text import pre_parse

SCHEMA = Schema.from_dict(
    {
        "attributes": [
            {"name": "age", "type": "integer", "min": 0, "max": 99, "missing": "NA"},
            {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": "NA"},
            {"name": "hours-per-week", "type": "integer", "min": 0, "max": 99},
            {"name": "paid", "type": "boolean", "missing": "NA"},
            {
                "name": "t",
                "type": "timestamp",
                "min": "2020-01-01T00:00:00Z",
                "max": "2020-12-31T23:00:00Z",
                "unit": "hour",
            },
        ]
    }
)
DP = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1)"


def parse(text: str, **kw):
    return parse_select(text, {"adult": SCHEMA}, having=compile_having, **kw)


# --- sqlglot's traps (its version is pinned in pyproject.toml) ----------------------------


def test_sqlglot_refuses_a_dp_aggregate_with_bounds_as_its_builtin():
    with pytest.raises(ParseError):
        sqlglot.parse_one(
            "SELECT AVG(x, contribution_bounds_per_group => (0, 100)) FROM t", read="bigquery"
        )
    pre = pre_parse(f"{DP} AVG(x, contribution_bounds_per_group => (0, 100)) FROM t")
    tree = sqlglot.parse_one(pre.text, read="bigquery")
    avg = tree.expressions[0]
    assert isinstance(avg, exp.Anonymous) and avg.name == "DP_AVG"
    assert isinstance(avg.expressions[1], exp.Kwarg)  # the bounds are kept


def test_sqlglot_does_not_read_the_dp_clause_and_the_pre_pass_takes_it_out():
    with pytest.raises(ParseError):
        sqlglot.parse_one(f"{DP} COUNT(*) FROM t", read="bigquery")
    pre = pre_parse(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1e-3, delta=1e-6, "
        "privacy_unit_column=id, max_rows_per_unit=5) COUNT(*) FROM t"
    )
    assert pre.options == (
        ("epsilon", "1e-3"),
        ("delta", "1e-6"),
        ("privacy_unit_column", "id"),
        ("max_rows_per_unit", "5"),
    )
    assert sqlglot.parse_one(pre.text, read="bigquery").find(exp.Count) is not None


def test_the_pre_pass_leaves_strings_and_quoted_names_alone():
    text = f"{DP} COUNT(*) FROM t WHERE s = 'AVG(x) WITH DIFFERENTIAL_PRIVACY' AND `SUM` = 1"
    pre = pre_parse(text)
    assert "'AVG(x) WITH DIFFERENTIAL_PRIVACY'" in pre.text and "`SUM`" in pre.text


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT COUNT(*) FROM adult", "without WITH DIFFERENTIAL_PRIVACY"),
        (
            f"{DP} sex, COUNT(*) FROM adult",
            "column sex is neither grouped nor aggregated: add it to GROUP BY",
        ),
        (
            f"{DP} AVG(age) FROM adult",
            "AVG(age) needs bounds: write AVG(age, contribution_bounds_per_group => (lower, upper))",
        ),
        (f"{DP} COUNT(*) FROM (SELECT * FROM adult)", "subqueries are not supported"),
        (f"{DP} COUNT(*) FROM adult WHERE age IN (SELECT 1)", "subqueries are not supported"),
        (
            f"{DP} COUNT(*) FROM adult WHERE hours-per-week > 40",
            "hours-per-week reads as a subtraction; write `hours-per-week` in backticks",
        ),
        (
            f"{DP} AVG(hours-per-week, contribution_bounds_per_group => (0, 99)) FROM adult",
            "write `hours-per-week` in backticks",
        ),
        (f"{DP} * FROM adult", "SELECT * would return rows"),
        (f"{DP} sex FROM adult GROUP BY sex", "a DP SELECT answers aggregates"),
        (
            f"{DP} SUM(age, contribution_bounds_per_group => (0, 99)) / COUNT(*) FROM adult",
            "arithmetic on them",
        ),
        (f"{DP} COUNT(*) FROM adult WHERE age > sex", "compares two columns"),
        (f"{DP} COUNT(*) FROM adult WHERE sex LIKE 'F%'", "LIKE is not supported"),
        (f"{DP} COUNT(*) FROM adult WHERE age = NULL", "write IS NULL"),
        (f"{DP} COUNT(*) AS n FROM adult HAVING COUNT(age) > 3", "name an output of the SELECT"),
        (f"{DP} COUNT(*) FROM adult LIMIT -1", "LIMIT takes a whole number"),
        (f"{DP} COUNT(*) FROM adult WHERE EXTRACT(DAYOFWEEK FROM t) = 1", "write weekday(t)"),
        (f"{DP} COUNT(DISTINCT sex) FROM adult", "counts privacy units"),
        (f"{DP} PERCENTILE_CONT(sex, 0.5) FROM adult", "needs an ordered column"),
        (f"{DP} VAR_POP(age) FROM adult", "contribution_bounds_per_row => (lower, upper)"),
        (f"{DP} COUNT(*) FROM nowhere JOIN adult USING (id)", "unknown table 'nowhere'"),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(delta=1e-6) COUNT(*) FROM adult",
            "needs the SELECT's cost",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, bogus=2) COUNT(*) FROM adult",
            "unknown option bogus",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=-1) COUNT(*) FROM adult",
            "must be positive",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, confidence=2) COUNT(*) FROM adult",
            "confidence must be in (0, 1)",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, privacy_unit_column=id) COUNT(*) FROM adult",
            "has no privacy unit",
        ),
        (f"{DP} COUNT(*) FROM adult WHERE nope = 1", "unknown column nope"),
        (
            f"{DP} COUNT(*) FROM adult WHERE s = 'a''b'",
            "two strings side by side; write a quote inside a string as \\'",
        ),
        ("DELETE FROM adult", "expected SELECT WITH DIFFERENTIAL_PRIVACY"),
        (f"{DP} COUNT(*) FROM adult; DROP TABLE adult", "give one SELECT"),
    ],
)
def test_refusals_are_one_line_and_name_the_fix(text, message):
    with pytest.raises(QueryError) as err:
        parse(text)
    assert message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


@pytest.fixture
def two_tables(tmp_path):
    f = pd.DataFrame({"id": [1, 1, 2, 3], "age": [30, 40, 50, 60], "sex": ["F", "M", "F", "M"]})
    g = pd.DataFrame({"id": [1, 2, 3], "age": [1, 2, 3], "kind": ["a", "b", "a"]})
    f.to_csv(tmp_path / "f.csv", index=False)
    g.to_csv(tmp_path / "g.csv", index=False)
    s = {"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 99},
                        {"name": "sex", "type": "categorical", "values": ["F", "M"]}]}  # fmt: skip
    t = {"attributes": [{"name": "age", "type": "integer", "min": 0, "max": 9},
                        {"name": "kind", "type": "categorical", "values": ["a", "b"]}]}  # fmt: skip
    c = Curator.open(
        tables={"f": (tmp_path / "f.csv", s), "g": (tmp_path / "g.csv", t)},
        privacy_unit=("id", 2),
        budget=PureDP(10),
    )
    yield c
    c.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"{DP} COUNT(*) FROM f JOIN g USING (age)",
            "joins are on the privacy unit only: USING (id)",
        ),
        (f"{DP} COUNT(*) FROM f JOIN g ON f.age = g.age", "joins are on the privacy unit only"),
        (f"{DP} COUNT(*) FROM f CROSS JOIN g", "only an inner JOIN on the privacy unit"),
        (f"{DP} COUNT(*) FROM f, g", "only an inner JOIN on the privacy unit"),
        (f"{DP} COUNT(*) FROM f LEFT JOIN g USING (id)", "LEFT JOIN: only an inner JOIN"),
        (
            f"{DP} COUNT(*) FROM f JOIN g USING (id) WHERE age > 3",
            "column 'age' is in both tables: write f.age or g.age",
        ),
        (f"{DP} COUNT(*) FROM f JOIN f USING (id)", "joined with itself"),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, max_rows_per_unit=3) COUNT(*) FROM f",
            "keeps 2 rows per unit",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(rho=1) COUNT(*) FROM f",
            "give the cost as epsilon=",
        ),
        (f"{DP} COUNT(DISTINCT age) FROM f", "only the privacy unit's column (id)"),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=11) COUNT(*) FROM f",
            "more than the whole budget",
        ),
    ],
)
def test_refusals_charge_nothing(two_tables, text, message):
    c = two_tables
    with pytest.raises(DpCuratorError) as err:
        c.sql(text)
    assert message in str(err.value), str(err.value)
    assert c.ledger.charges_after(0) == []
    assert c.remaining() == 10


@pytest.mark.parametrize(
    "alias", ['"\ud800"', "`a\udfff`", "n -- \ud83d", "n /* \udc00 */"], ids=range(4)
)
def test_half_a_surrogate_pair_anywhere_is_refused_and_charges_nothing(two_tables, alias):
    """JSON can send ``"\\ud800"`` alone: no UTF-8 encodes it, so the ledger could not
    record it (before, its charge failed in the group's commit, and with it every request
    committed alongside: 500s for other analysts)."""
    c = two_tables
    with pytest.raises(QueryError, match=r"^SQL: column \d+: U\+D[89A-F][0-9A-F]{2} is half of a"):
        c.sql(f"{DP} COUNT(*) AS {alias} FROM f")
    assert c.ledger.charges_after(0) == []
    r = c.sql(f'{DP} COUNT(*) AS "\U0001f600" FROM f')  # a whole pair: a character
    assert r.columns[0] == "\U0001f600"


def test_a_join_answers_and_explain_charges_nothing(two_tables):
    c = two_tables
    e = c.sql(f"EXPLAIN {DP} COUNT(*) AS n FROM f JOIN g USING (id) WHERE kind = 'a'")
    assert e.explain and e.admitted and e.charge_id is None
    assert c.ledger.charges_after(0) == []
    r = c.sql(
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=9, confidence=0.999999) g.kind, "
        "COUNT(*) AS n, COUNT(DISTINCT id) AS ids FROM f JOIN g USING (id) GROUP BY kind"
    )
    assert r.columns == ("kind", "n", "n_low", "n_high", "ids", "ids_low", "ids_high")
    assert [row[0] for row in r.rows] == ["a", "b"]
    assert r.rows[0][2] <= 3 <= r.rows[0][3] and r.rows[1][2] <= 1 <= r.rows[1][3]
    assert [(ch.kind, ch.table) for ch in c.ledger.charges_after(0)] == [("sql", "f JOIN g")]
    # the join is a table of its own: its charge composes with the others sequentially
    with pytest.raises(BudgetExceeded):
        c.count(epsilon=1.5, table="f")
    assert r.to_pandas().shape == (2, 7) and r.to_arrow().num_rows == 2


# --- WHERE: SQL's three-valued logic, against DuckDB --------------------------------------

ROWS = pd.DataFrame(
    {
        "age": [None, 5, 17, 30, 30, None, 64, 99, 0, 45],
        "sex": ["F", None, "M", "F", "M", "M", None, "F", "M", "F"],
        "hours-per-week": [40, 20, 0, 99, 45, 40, 12, 60, 38, 40],
        "paid": [True, None, False, True, False, None, True, False, True, None],
        "t": [
            "2020-01-01T00:00:00Z",
            "2020-03-05T10:00:00Z",
            "2020-06-01T23:00:00Z",
            "2020-06-15T04:00:00Z",
            "2020-07-04T12:00:00Z",
            "2020-09-09T09:00:00Z",
            "2020-12-31T23:00:00Z",
            "2020-02-29T00:00:00Z",
            "2020-06-01T00:00:00Z",
            "2020-11-11T11:00:00Z",
        ],
    }
)

leaves = st.sampled_from(
    [
        "age > 30", "age <= 17", "age = 30", "age != 30", "age BETWEEN 10 AND 50",
        "age IN (5, 30, 99)", "age IS NULL", "age IS NOT NULL", "sex = 'F'", "sex != 'M'",
        "sex IN ('M')", "sex IS NULL", "paid", "paid = FALSE", "`hours-per-week` >= 40",
        "month(t) = 6", "t >= '2020-06-01'", "hour(t) < 10", "TRUE", "FALSE",
    ]
)  # fmt: skip


def _trees(children):
    return st.one_of(
        st.tuples(st.just("NOT"), children).map(lambda p: f"NOT ({p[1]})"),
        st.tuples(children, st.sampled_from(["AND", "OR"]), children).map(
            lambda p: f"({p[0]} {p[1]} {p[2]})"
        ),
        st.tuples(children).map(lambda p: f"NOT {p[0]}" if " " not in p[0] else p[0]),
    )


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tvl")
    ROWS.to_csv(folder / "d.csv", index=False)
    be = DuckDBBackend.load(folder / "d.csv", SCHEMA)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("rows_df", ROWS.assign(t=pd.to_datetime(ROWS.t, utc=True)))
    yield be, con
    be.close()
    con.close()


@settings(max_examples=150, deadline=None)
@given(st.recursive(leaves, _trees, max_leaves=6))
def test_where_counts_what_sql_counts(engines, predicate):
    be, con = engines
    req = parse(f"{DP} COUNT(*) FROM adult WHERE {predicate}")
    ours = int(be.counts([parse_query(req.where, SCHEMA)])[0])
    sql = (
        predicate.replace("`", '"')
        .replace("month(t)", "month(t)")
        .replace("t >= '2020-06-01'", "t >= TIMESTAMPTZ '2020-06-01 00:00:00+00'")
    )
    theirs = con.execute(f"SELECT count(*) FROM rows_df WHERE {sql}").fetchall()[0][0]
    assert ours == theirs, (predicate, req.where)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("(" * 40 + "age > 3" + ")" * 40, "nested more than 32 deep"),
        ("NOT " * 40 + "age > 3", "nested more than 32 deep"),
        (
            " OR ".join(f"age = {i}" for i in range(300)),
            "299 AND, OR and NOT in one SELECT, over 256",
        ),
    ],
)
def test_deep_or_long_conditions_are_refused_before_any_parser_recurses(where, message):
    with pytest.raises(QueryError, match=message):
        parse(f"{DP} COUNT(*) FROM adult WHERE {where}")


def test_conditions_at_the_limits_are_read():
    chain = " OR ".join(f"age = {i % 100}" for i in range(257))  # 256 ORs, read flat
    nested = "(" * 31 + "age > 3" + ")" * 31
    for where in (chain, nested, "NOT (" * 15 + "age > 3" + ")" * 15):
        req = parse(f"{DP} COUNT(*) FROM adult WHERE {where}")
        parse_query(req.where, SCHEMA)  # the query language reads it too


def test_answers_as_dataframes_and_arrow_are_typed_by_their_values():
    """Counts int64; a column of numbers with a fraction or a null (a mean, a percentile
    and its interval's ends, which may be null) float64, a null as NaN (Arrow: null); a
    boolean group with a null pandas' nullable boolean; text as given."""
    import math

    from dpcurator.sql.result import SqlResult

    r = SqlResult(
        query="q",
        columns=("g", "b", "n", "m", "p", "p_low", "big"),
        rows=(
            ("a", True, 3, 1.5, 50, None, 2**70),
            ("b", None, -2, None, 49.6, None, 1),
        ),
        cost=1.0,
        currency="epsilon",
        remaining=0.0,
    )
    df = r.to_pandas()
    assert [str(t) for t in df.dtypes[["n", "m", "p", "p_low"]]] == ["int64"] + ["float64"] * 3
    assert str(df.dtypes["b"]) == "boolean" and df["b"].isna().tolist() == [False, True]
    assert df["p"].tolist() == [50.0, 49.6] and math.isnan(df["m"][1])
    assert df["big"].tolist() == [2**70, 1]  # beyond int64: left to pandas, exact
    assert df["g"].tolist() == ["a", "b"]
    t = r.to_arrow()
    assert [str(t.schema.field(c).type) for c in ("g", "b", "n", "m", "p", "p_low")] == [
        "string",
        "bool",
        "int64",
        "double",
        "double",
        "double",
    ]
    assert t.column("m").to_pylist() == [1.5, None] and t.column("p_low").null_count == 2
    assert str(t.schema.field("big").type) == "decimal128(38, 0)"
    assert [int(v) for v in t.column("big").to_pylist()] == [2**70, 1]
