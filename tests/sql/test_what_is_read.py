"""Nothing written in a DP SELECT is dropped unread: every clause and argument sqlglot
keeps is either read (``IN UNNEST([...])``, a GROUP BY alias, an alias in any case) or
refused in one line before anything is charged (``TABLESAMPLE``, ``FOR SYSTEM_TIME AS
OF``, ``SELECT AS STRUCT``, COUNT's extra arguments, a bound given twice, colliding
answer columns, a position that is not a whole number). Answers are checked exactly, at
an epsilon whose noise is zero, against counts made by hand."""

from __future__ import annotations

import pandas as pd
import pytest
from sqlglot import exp

from dpcurator import Curator
from dpcurator.errors import QueryError
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema
from dpcurator.sql import parse_select
from dpcurator.sql.output import compile_having
from dpcurator.sql.unread import READ

ROWS = pd.DataFrame(
    {
        "species": ["Adelie", "Adelie", "Adelie", "Gentoo", "Gentoo", "Chinstrap", "Adelie", "Gentoo"],
        "select": [True, False, True, True, False, True, False, True],
        "my col": [0, 2, 3, 5, 1, 2, 9, 4],
    }
)  # fmt: skip
SCHEMA = {
    "attributes": [
        {"name": "species", "type": "categorical", "values": ["Adelie", "Chinstrap", "Gentoo"]},
        {"name": "select", "type": "boolean"},
        {"name": "my col", "type": "integer", "min": 0, "max": 9},
    ]
}
BUDGET = 10**7
#: noise of scale 1e-6 rounds to zero: the answers are the exact counts
DP = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1000000)"


@pytest.fixture
def curator(tmp_path):
    ROWS.to_csv(tmp_path / "p.csv", index=False)
    c = Curator.open(
        tmp_path / "p.csv",
        SCHEMA,
        budget=PureDP(BUDGET),
        rng=SeededRandomSource(5),
        allow_insecure=True,
    )
    yield c
    c.close()


def answers(c: Curator, text: str) -> list[tuple]:
    """The answer's rows, each without its intervals' ends."""
    r = c.sql(text)
    keep = [i for i, name in enumerate(r.columns) if not name.endswith(("_low", "_high"))]
    return [tuple(row[i] for i in keep) for row in r.rows]


# --- read, and answered as written ---------------------------------------------------------


def test_in_unnest_is_read_as_the_same_in_list(curator):
    """sqlglot keeps ``IN UNNEST([...])``'s array apart from ``IN (...)``'s values: read
    as an empty IN, it counted nothing (and NOT IN every row)."""
    schemas = {"p": Schema.from_dict(SCHEMA)}
    unnest = parse_select(
        f"{DP} COUNT(*) AS n FROM p WHERE species IN UNNEST(['Adelie', 'Gentoo'])", schemas
    )
    listed = parse_select(
        f"{DP} COUNT(*) AS n FROM p WHERE species IN ('Adelie', 'Gentoo')", schemas
    )
    assert unnest.where == listed.where == "species IN ('Adelie', 'Gentoo')"
    assert answers(
        curator, f"{DP} COUNT(*) AS n FROM p WHERE species IN UNNEST(['Adelie', 'Gentoo'])"
    ) == [(7,)]
    assert answers(
        curator, f"{DP} COUNT(*) AS n FROM p WHERE species NOT IN UNNEST(['Adelie'])"
    ) == [(4,)]
    assert answers(
        curator,
        f"{DP} species, COUNT(*) AS n FROM p GROUP BY species HAVING n IN UNNEST([1, 3])",
    ) == [("Chinstrap", 1), ("Gentoo", 3)]  # fmt: skip


def test_group_by_an_alias_of_a_column_and_aliases_in_any_case(curator):
    """docs/sql.md: GROUP BY takes an alias of the SELECT list; BigQuery's aliases are
    compared without case in GROUP BY, HAVING and ORDER BY."""
    got = answers(
        curator,
        f"{DP} species AS s, COUNT(*) AS n FROM p GROUP BY S HAVING N > 1 ORDER BY N DESC",
    )
    assert got == [("Adelie", 4), ("Gentoo", 3)]


def test_a_backticked_column_named_select_is_a_column(curator):
    """The query language read ``(select = TRUE AND ...`` (the WHERE re-written) as the
    start of a sub-query; the name is now written in quotes there."""
    text = f"{DP} COUNT(*) AS n FROM p WHERE `select` AND `my col` > 1"
    assert (
        parse_select(text, {"p": Schema.from_dict(SCHEMA)}).where
        == '("select" = TRUE AND "my col" > 1)'
    )
    assert answers(curator, text) == [(4,)]


@pytest.mark.parametrize("comment", ["-- monthly report\n", "/* c */ ", "# note\n  "])
def test_explain_after_a_leading_comment(curator, comment):
    e = curator.sql(f"{comment}EXPLAIN {DP} COUNT(*) AS n FROM p")
    assert e.explain and e.admitted and e.charge_id is None
    assert curator.ledger.charges_after(0) == []


# --- refused, in one line, before anything is charged ----------------------------------------

REFUSED = [
    (
        f"{DP} COUNT(*) AS n FROM p WHERE species IN ()",
        "SQL: species IN (): IN needs at least one value",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p WHERE species IN UNNEST([])",
        "SQL: species IN UNNEST([]): IN needs at least one value",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p WHERE species IN UNNEST(species)",
        "SQL: UNNEST(species): IN UNNEST takes an array of values written out, such as "
        "UNNEST(['a', 'b'])",
    ),
    (
        f"{DP} COUNT(*) AS n, AVG(`my col`, contribution_bounds_per_group => (0, 9)) AS n_low FROM p",
        "SQL: the answer would have two columns named n_low (an aggregate AS n also answers "
        "n_low and n_high): rename one output (AS ...)",
    ),
    (
        f"{DP} COUNT(*) AS n, COUNT(species) AS N FROM p",
        "SQL: two outputs are named N: give one an alias (AS ...)",
    ),
    (
        f"{DP} species, COUNT(*) AS n FROM p GROUP BY 1.5",
        "SQL: GROUP BY 1.5: a position is a whole number, 1 for the first output",
    ),
    (
        f"{DP} species, COUNT(*) AS n FROM p GROUP BY species ORDER BY 1.5",
        "SQL: ORDER BY 1.5: a position is a whole number, 1 for the first output",
    ),
    (
        f"{DP} species, COUNT(*) AS n FROM p GROUP BY species ORDER BY 1e0",
        "SQL: ORDER BY 1e0: a position is a whole number, 1 for the first output",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p TABLESAMPLE SYSTEM (10 PERCENT)",
        "SQL: TABLESAMPLE is not supported in a DP SELECT",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p FOR SYSTEM_TIME AS OF '2020-01-01'",
        "SQL: FOR SYSTEM_TIME AS OF is not supported in a DP SELECT",
    ),
    (
        f"{DP} AS STRUCT COUNT(*) AS n FROM p",
        "SQL: SELECT AS STRUCT is not supported in a DP SELECT",
    ),
    (f"{DP} AS VALUE COUNT(*) AS n FROM p", "SQL: SELECT AS VALUE is not supported in a DP SELECT"),
    (
        f"{DP} COUNT(*, contribution_bounds_per_group => (0, 5)) AS n FROM p",
        "SQL: COUNT takes no contribution_bounds_per_group: each privacy unit adds at most its "
        "max_rows_per_unit kept rows (1 per row without a unit); leave it out",
    ),
    (f"{DP} COUNT(*, bogus => 7) AS n FROM p", "SQL: COUNT: unknown argument bogus => ..."),
    (
        f"{DP} COUNT(species, `select`) AS n FROM p",
        "SQL: COUNT takes one argument (*, a column or DISTINCT <unit>), got "
        "COUNT(species, `select`)",
    ),
    (
        f"{DP} AVG(`my col`, contribution_bounds_per_group => (0, 1), "
        "contribution_bounds_per_group => (0, 9)) AS m FROM p",
        "SQL: AVG: bounds given twice; give contribution_bounds_per_group => (lower, upper) once",
    ),
    (
        f"{DP} SUM(`my col`, contribution_bounds_per_row => (0, 1), "
        "contribution_bounds_per_group => (0, 9)) AS m FROM p",
        "SQL: SUM: bounds given twice; give contribution_bounds_per_group => (lower, upper) once",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p GROUP BY ALL",
        "SQL: GROUP BY ALL is not supported in a DP SELECT",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p WHERE x.p.species = 'Adelie'",
        "SQL: a column named with more than its table (a.b.c) is not supported in a DP SELECT",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p AS q(a, b)",
        "SQL: naming a table's columns in its alias (AS t(a, b)) is not supported in a DP SELECT",
    ),
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, max_groups_contributed=1) "
        "COUNT(*) AS n FROM p",
        "SQL: OPTIONS max_groups_contributed: a unit here adds at most its max_rows_per_unit "
        "kept rows to all groups together (the ledger's k); leave it out",
    ),
    (
        "SELECT WITH ANONYMIZATION OPTIONS(epsilon=1) ANON_COUNT(*) AS n FROM p",
        "SQL: WITH ANONYMIZATION is BigQuery's old syntax: write SELECT WITH "
        "DIFFERENTIAL_PRIVACY OPTIONS(epsilon=...) with COUNT, SUM, AVG (not ANON_COUNT ...)",
    ),
    (
        f"{DP} ANON_COUNT(*) AS n FROM p",
        "SQL: ANON_COUNT is BigQuery's old syntax: write COUNT(...) in a SELECT WITH "
        "DIFFERENTIAL_PRIVACY",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p LIMIT 0",
        "SQL: LIMIT 0 answers no row; nothing is charged for it",
    ),
    (
        f"{DP} COUNT(*) AS n FROM p WHERE `select` IS NOT TRUE",
        "SQL: NOT `select` IS TRUE: only IS NULL and IS NOT NULL are supported",
    ),
]


@pytest.mark.parametrize(("text", "message"), REFUSED, ids=[m[5:45] for _, m in REFUSED])
def test_refused_in_one_line_and_nothing_charged(curator, text, message):
    with pytest.raises(QueryError) as err:
        curator.sql(text)
    assert str(err.value) == message
    with pytest.raises(QueryError):
        curator.sql(f"EXPLAIN {text}")  # EXPLAIN refuses it alike
    assert curator.ledger.charges_after(0) == []
    assert curator.remaining() == BUDGET


def test_every_argument_read_is_one_sqlglot_has():
    """The arguments :data:`READ` lets through are sqlglot's own names (pinned with its
    version): a renamed one would be refused everywhere, not silently read as absent."""
    for kind, read in READ.items():
        assert read <= set(kind.arg_types), (kind.__name__, read - set(kind.arg_types))
    assert exp.Select in READ and exp.Count in READ


def test_what_the_front_end_reads_needs_nothing_else():
    """Every clause and argument of the grammar in docs/sql.md passes :data:`READ`."""
    text = (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1, confidence=0.9) q.species AS s, "
        "COUNT(*) AS n, COUNT(`my col`) AS c, "
        "AVG(`my col`, contribution_bounds_per_group => (0, 9)) AS m, "
        "AVG(CASE WHEN `my col` > 2 THEN 1 ELSE 0 END) AS share, "
        "AVG(IF(`select`, 1, 0)) AS sel, PERCENTILE_CONT(`my col`, 0.5) AS med "
        "FROM p AS q WHERE (species IN UNNEST(['Adelie']) OR NOT `select`) "
        "AND `my col` BETWEEN -1 AND 9 AND `my col` IS NOT NULL AND TRUE "
        "GROUP BY 1 HAVING n > 0 AND s IN ('Adelie') ORDER BY n DESC NULLS LAST, 1 LIMIT 2"
    )
    req = parse_select(text, {"p": Schema.from_dict(SCHEMA)}, having=compile_having)
    assert req.columns[:2] == ("s", "n") and req.limit == 2


def test_groups_the_where_excludes_are_left_out(curator):
    """A group with a value the WHERE excludes reads no row: it is not shown (which
    groups those are follows from the query alone). Empty groups the WHERE reaches stay
    (Chinstrap with `my col` above 3 has no row, and is shown as 0)."""
    assert answers(
        curator, f"{DP} species, COUNT(*) AS n FROM t WHERE species = 'Gentoo' GROUP BY species"
    ) == [("Gentoo", 3)]
    assert answers(
        curator, f"{DP} species, COUNT(*) AS n FROM t WHERE `my col` > 3 GROUP BY species"
    ) == [("Adelie", 1), ("Chinstrap", 0), ("Gentoo", 2)]
    got = answers(curator, f"{DP} `my col`, COUNT(*) AS n FROM t WHERE `my col` >= 7 GROUP BY 1")
    assert got == [(7, 0), (8, 0), (9, 1)]
    # each column's values on their own: the combination (Adelie, false) is not reached,
    # but Adelie and false each are, so the group stays
    got = answers(
        curator,
        f"{DP} species, `select`, COUNT(*) AS n FROM t WHERE (species = 'Adelie' AND `select`) "
        "OR species = 'Gentoo' GROUP BY species, `select`",
    )
    assert got == [
        ("Adelie", False, 0),
        ("Adelie", True, 2),
        ("Gentoo", False, 1),
        ("Gentoo", True, 2),
    ]
