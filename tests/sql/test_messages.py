"""What a refused SELECT says (the SQL review's findings 8 to 11 and 13): positions in
the SQL as written or none, the comparison at fault quoted as written, sqlglot's parse
errors as one line of ours, BigQuery's other spellings of a value or a count read
exactly (``COUNT(1)``, ``r'...'``, ``NUMERIC '4000'``), edge values named as such, and
the fix spelled in the caller's terms (flags on the command line, keywords in Python).
Every refusal is one line and leaves the ledger as it was; answers are checked exactly,
at an epsilon whose noise is zero."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.cli import main
from dpcurator.errors import DataError, DpCuratorError, QueryError
from dpcurator.mechanisms.randomness import SeededRandomSource
from dpcurator.privacy import ApproxDP, PureDP

ROWS = pd.DataFrame(
    {
        "species": ["Adelie", "Adelie", "Gentoo", "Chinstrap", "Adelie", "Gentoo"],
        "island": ["Dream", "Biscoe", "Biscoe", "Dream", "Dream", "Biscoe"],
        "bill_length_mm": [39.1, 39.5, None, 46.5, 40.3, 50.0],
        "body_mass_g": [3750, 3800, 4500, 3500, 4100, 5000],
        "year": [2007, 2007, 2008, 2009, 2009, 2008],
        "esp\u00e8ce": ["a", "b", "a", "a", "b", "a"],
    }
)
SCHEMA = {
    "attributes": [
        {"name": "species", "type": "categorical", "values": ["Adelie", "Chinstrap", "Gentoo"]},
        {"name": "island", "type": "categorical", "values": ["Biscoe", "Dream", "Torgersen"]},
        {"name": "bill_length_mm", "type": "float", "min": 32, "max": 60, "step": 0.1,
         "missing": "NA"},
        {"name": "body_mass_g", "type": "integer", "min": 2700, "max": 6300},
        {"name": "year", "type": "integer", "min": 2000, "max": 2100},
        {"name": "esp\u00e8ce", "type": "categorical", "values": ["a", "b"]},
    ]
}  # fmt: skip
#: noise of scale 1e-6 rounds to zero: the answers are the exact counts
DP = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1000000)"
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def curator(tmp_path):
    ROWS.to_csv(tmp_path / "p.csv", index=False, na_rep="NA")
    c = Curator.open(
        tmp_path / "p.csv",
        SCHEMA,
        budget=PureDP(10**7),
        rng=SeededRandomSource(5),
        allow_insecure=True,
    )
    yield c
    c.close()


def refused(c: Curator, text: str) -> str:
    """The one-line refusal of ``text``, after checking it charged nothing."""
    before = c.ledger.charges_after(0)
    with pytest.raises(DpCuratorError) as err:
        c.sql(text)
    message = str(err.value)
    assert "\n" not in message and "sqlglot" not in message and "<class" not in message
    assert c.ledger.charges_after(0) == before
    return message


def counts(c: Curator, text: str) -> list[int]:
    return [row[0] for row in c.sql(text).rows]


# --- 8: a WHERE's refusal names the comparison as written, not a rewritten position ---


@pytest.mark.parametrize(
    "where, message",
    [
        (
            "island = 'Dream' AND species = 'adelie'",
            "SQL: species = 'adelie': value 'adelie' is not in the domain of 'species'; "
            "did you mean 'Adelie'?",
        ),
        (
            "year > 2003 OR bill_length_mm = 39.15",
            "SQL: bill_length_mm = 39.15: value 39.15 is not a value of 'bill_length_mm' "
            "[32, 60] in steps of 0.1",
        ),
        (
            "NOT (island = 'Dream') AND 1999.5 = year",
            "SQL: 1999.5 = year: value 1999.5 is outside the domain of 'year' [2000, 2100]",
        ),
    ],
)
def test_a_where_refusal_quotes_the_comparison_without_a_rewritten_position(
    curator, where, message
):
    """Before: ``column 33: value 'adelie' ...``, 33 a position in the WHERE as
    re-written for the query language ("(island = 'Dream' AND species = 'adelie')"),
    nowhere near the value in the SQL."""
    assert refused(curator, f"{DP} COUNT(*) AS n FROM p WHERE {where}") == message


def test_a_shares_condition_refusal_quotes_the_comparison(curator):
    text = f"{DP} AVG(CASE WHEN year = 1999.5 THEN 1 ELSE 0 END) AS s FROM p"
    assert refused(curator, text) == (
        "SQL: year = 1999.5: value 1999.5 is outside the domain of 'year' [2000, 2100]"
    )


# --- 10: BigQuery's spellings, and sqlglot's parse errors as our own lines ---------------


def test_count_1_and_bigquerys_literals_are_read_exactly(curator):
    assert counts(curator, f"{DP} COUNT(1) AS n FROM p") == [6]
    assert counts(curator, f"{DP} COUNT(-1) AS n FROM p") == [6]  # any number is never NULL
    assert counts(curator, f"{DP} COUNT(1) AS n, COUNT(*) AS m FROM p WHERE year = 2007") == [2]
    assert counts(curator, f"{DP} COUNT(*) AS n FROM p WHERE species = r'Adelie'") == [3]
    assert counts(curator, f"{DP} COUNT(*) AS n FROM p WHERE body_mass_g > NUMERIC '4000'") == [3]
    assert counts(
        curator, f"{DP} COUNT(*) AS n FROM p WHERE body_mass_g > CAST('4000' AS INT64)"
    ) == [3]
    assert counts(curator, f"{DP} COUNT(*) AS n FROM p WHERE bill_length_mm < BIGNUMERIC '40'") == [
        2
    ]
    assert len(curator.ledger.charges_after(0)) == 7


@pytest.mark.parametrize(
    "text, message",
    [
        (
            f"{DP} COUNT(*) AS n FROM p WHERE body_mass_g > CAST('4000.5' AS INT64)",
            "SQL: CAST('4000.5' AS INT64): '4000.5' is not a whole number",
        ),
        (
            f"{DP} COUNT(*) AS n FROM p WHERE body_mass_g > NUMERIC 'x'",
            "SQL: CAST('x' AS NUMERIC): 'x' is not a number",
        ),
        (
            f"{DP} COUNT(NULL) AS n FROM p",
            "SQL: COUNT(NULL): COUNT takes *, 1, a column or DISTINCT <unit>",
        ),
        (
            f"{DP}\nCOUNT(*) AS n\nFROM p WHERE year >\n-- one\nAND island = 'Dream'",
            "SQL: line 5, column 1: syntax error at 'AND': an operand is missing; note that "
            "-- starts a comment to the end of the line",
        ),
        (f"{DP} COUNT(*) AS n FRM p", "SQL: column 73: syntax error at 'FRM'"),
        (
            f"{DP} COUNT(*) AS n FROM p WHERE species = 'Adelie",
            "SQL: a string is not closed (no closing ')",
        ),
        (f"{DP} COUNT(*) AS `n FROM p", "SQL: a quoted name is not closed (no closing `)"),
    ],
)
def test_parse_errors_are_one_line_of_ours_at_the_users_position(curator, text, message):
    """Before: ``Required keyword: 'expression' missing for <class
    'sqlglot.expressions.core.GT'>. Line 1, Col: 55.``, its column in the text without
    the DP clause."""
    assert refused(curator, text) == message


def test_the_positions_are_those_of_the_text_as_written(curator):
    """sqlglot reads the text without the DP clause and with AVG renamed DP_AVG: its
    positions, told as they were, pointed 57 and more characters early."""
    text = f"{DP} COUNT(*) AS n FROM p WHERE body_mass_g > --4000"
    assert refused(curator, text) == (
        f"SQL: column {text.index('>') + 1}: syntax error at '>': an operand is missing; "
        "note that -- starts a comment to the end of the line"
    )
    text = (
        f"{DP} AVG(year, contribution_bounds_per_group => (2000, 2100)) AS m, "
        "SUM(year, contribution_bounds_per_group => (2000, 2100)) AS s FROM p WHERE (year > 3"
    )
    assert refused(curator, text) == (
        f"SQL: column {text.rindex('3') + 1}: syntax error at '3': expected ')'"
    )


# --- 11: edge values, bytes, normal forms --------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (
            "epsilon=0.01, confidence=1e-300",
            "SQL: OPTIONS confidence=1e-300 is too close to 0 for a 64-bit float's "
            "1 - confidence; give a confidence in (0, 1) such as 0.95",
        ),
        (
            "epsilon=0.01, confidence=0." + "9" * 400,
            "SQL: OPTIONS confidence=0." + "9" * 400 + " is too close to 1 for a 64-bit "
            "float's 1 - confidence; give a confidence in (0, 1) such as 0.95",
        ),
        (
            "epsilon=1e-5000",
            "SQL: OPTIONS epsilon=1e-5000 is too small: it underflows to 0 as a 64-bit float "
            "(such an answer would be pure noise); spend more epsilon",
        ),
        # (was an OverflowError: a traceback on the command line, HTTP 500 from serve)
        ("epsilon=1e400", "SQL: OPTIONS epsilon=1e400 is too large: beyond a 64-bit float"),
        ("rho=2e308", "SQL: OPTIONS rho=2e308 is too large: beyond a 64-bit float"),
        ("mu=1" + "0" * 400, "SQL: OPTIONS mu=1" + "0" * 400 + " is too large: beyond a 64-bit float"),
    ],
)
def test_values_floats_cannot_hold_are_named(curator, options, message):
    """Before: ``alpha must be in (0, 1), got 1.0`` and ``epsilon = 0 allows no noise``."""
    text = f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS({options}) COUNT(*) AS n FROM p"
    assert refused(curator, text) == message


def test_a_leading_plus_is_the_number_itself(curator):
    text = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=+1000000) COUNT(*) AS n FROM p"
    assert counts(curator, text) == [6]
    assert curator.ledger.charges_after(0)[0].cost == 10**6


def test_a_name_in_another_unicode_normal_form_is_the_same_name(curator):
    nfd = "espe\u0300ce"  # e + COMBINING GRAVE ACCENT: looks like espèce
    text = f"{DP} `{nfd}`, COUNT(*) AS n FROM p WHERE `{nfd}` = 'a' GROUP BY 1"
    assert curator.sql(text).rows == (("a", 4, 4, 4),)
    assert refused(curator, f"{DP} COUNT(*) AS n FROM p WHERE `{nfd}x` = 'a'") == (
        "SQL: unknown column `espe\u0300cex` (written 'espe\\u0300cex': not in Unicode NFC)"
    )


def test_bytes_are_read_strictly_as_utf8():
    from dpcurator.sql.text import decode

    assert decode(b"\xef\xbb\xbfSELECT 1") == "SELECT 1"
    with pytest.raises(QueryError) as err:
        decode(b"SELECT 'Ad" + b"\xffelie'")
    assert str(err.value) == "SQL: invalid UTF-8 byte 0xFF at column 11"
    with pytest.raises(QueryError) as err:
        decode("SELECT\n 'Ad\u00e9".encode() + b"\xc3(")
    assert str(err.value) == "SQL: invalid UTF-8 byte 0xC3 at line 2, column 6"


# --- 9 and 13: the fix in the caller's terms -----------------------------------------


def test_epsilon_on_an_epsilon_delta_ledger_says_what_to_write(tmp_path):
    """Before: ``give the cost as rho=``, on a ledger opened with --epsilon and --delta."""
    ROWS.to_csv(tmp_path / "p.csv", index=False, na_rep="NA")
    budget = ApproxDP(1, 1e-6)
    with Curator.open(tmp_path / "p.csv", SCHEMA, budget=budget, allow_insecure=True) as c:
        for options, said in (
            ("epsilon=0.5", "without delta"),
            ("epsilon=0.3, delta=0", "with delta=0"),
        ):
            eps = options.split(",")[0].split("=")[1]
            rho = {"0.5": "0.125", "0.3": "0.045"}[eps]
            text = f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS({options}) COUNT(*) AS n FROM p"
            assert refused(c, text) == (
                f"SQL: OPTIONS epsilon={eps} {said}: this ledger keeps rho; add delta=... "
                "(the cost is then the largest rho meeting (epsilon, delta)), or give rho= "
                f"(pure epsilon-DP is rho = epsilon^2/2: rho={rho})"
            )
        # what it says to write is read
        r = c.sql("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(rho=0.0125) COUNT(*) AS n FROM p")
        assert r.cost == 0.0125


def test_a_missing_id_names_the_fix_in_python_terms(tmp_path):
    frame = ROWS.assign(uid=["a", None, "b", "c", "d", "e"])
    schema = {"attributes": SCHEMA["attributes"]}
    with pytest.raises(DataError) as err:
        Curator.open(frame, schema, budget=PureDP(1), privacy_unit=("uid", 2))
    assert str(err.value) == (
        "DataFrame: privacy unit column 'uid': 1 rows have a missing id (first: row 2); "
        "on_invalid='drop' leaves them out"
    )


def sql_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["sql", *args])
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    return code, out.err.strip()


def test_the_cli_speaks_flags(tmp_path, capsys):
    frame = ROWS.assign(uid=["a", "", "b", "c", "d", "e"])
    frame.to_csv(tmp_path / "u.csv", index=False, na_rep="NA")
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    code, err = sql_cli(
        capsys,
        "--data", str(tmp_path / "u.csv"), "--schema", str(tmp_path / "s.json"),
        "--epsilon", "1", "--privacy-unit", "uid:2", "--ledger", ":memory:",
        f"{DP} COUNT(*) AS n FROM u",
    )  # fmt: skip
    assert code == 2
    assert err.endswith(
        "--privacy-unit column 'uid': 1 rows have a missing id (first: row 2); "
        "--on-invalid drop leaves them out"
    )


def test_a_renamed_data_file_names_the_table_flag(tmp_path, capsys):
    """Before: only ``belongs to another curator (... tables ['penguins'] ...)``: that a
    table is named after its file, and how to keep the name, went unsaid."""
    ROWS.to_csv(tmp_path / "penguins.csv", index=False, na_rep="NA")
    ROWS.to_csv(tmp_path / "penguins_v2.csv", index=False, na_rep="NA")
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    ledger, schema = str(tmp_path / "l.db"), str(tmp_path / "s.json")
    common = ["--schema", schema, "--epsilon", "1", "--ledger", ledger]
    text = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5) COUNT(*) AS n FROM penguins"
    assert main(["sql", "--data", str(tmp_path / "penguins.csv"), *common, text]) == 0
    capsys.readouterr()
    v2 = str(tmp_path / "penguins_v2.csv")
    code, err = sql_cli(capsys, "--data", v2, *common, text)
    assert code == 2
    assert err == (
        f"dpcurator sql: error: ledger {ledger} belongs to another curator (the ledger's "
        "tables are ['penguins'], not ['penguins_v2']); open it with the same budget, "
        "schemas and privacy unit, or use a new ledger; with --data a table is named after "
        f"its file ('penguins_v2' from penguins_v2.csv): --table penguins {v2} {schema} "
        "keeps the ledger's name"
    )
    kept = ["--table", "penguins", v2, schema, *common[2:]]
    assert main(["sql", *kept, text]) == 0  # as it says
    assert "charge 2;" in capsys.readouterr().err


def test_stdin_and_argv_are_read_as_utf8(tmp_path):
    """A BOM (some editors write one) is taken off; an invalid byte is named, not
    reported as the lone surrogate Python's reading makes of it (U+DCFF)."""
    ROWS.to_csv(tmp_path / "p.csv", index=False, na_rep="NA")
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    cmd = [sys.executable, "-m", "dpcurator.cli", "sql", "--data", str(tmp_path / "p.csv"),
           "--schema", str(tmp_path / "s.json"), "--epsilon", "10000000", "--ledger",
           ":memory:"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": SRC, "LC_ALL": "C"}
    text = f"{DP} COUNT(*) AS n FROM p WHERE species = 'Adelie'".encode()
    run = subprocess.run([*cmd, "-"], input=b"\xef\xbb\xbf" + text, capture_output=True, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode().splitlines()[2].split() == ["3", "3", "3"]
    bad = text.replace(b"Adelie", b"Ad\xffelie")
    at = bad.index(b"\xff") + 1
    for args, given in (([*cmd, "-"], bad), ([*cmd, os.fsdecode(bad)], None)):
        run = subprocess.run(args, input=given, capture_output=True, env=env)
        assert run.returncode == 2
        assert run.stderr.decode() == (
            f"dpcurator sql: error: SQL: invalid UTF-8 byte 0xFF at column {at}\n"
        )
