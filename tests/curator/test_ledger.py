"""The ledger: tamper evidence, refusal of what is not a ledger, live copies, quotas and
revocation, on both stores.

The tests that take ``place`` run once on a real SQLite file and once on a schema of a
real PostgreSQL server (see tests/conftest.py); the ones about live copies run a real
writer process. A few are about SQLite files only (empty files, random bytes, the
journal), or about PostgreSQL schemas only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_places import Place

from dpcurator import Curator
from dpcurator.curator.credentials import Credential, Principal
from dpcurator.curator.ledger import Ledger, backup_ledger
from dpcurator.errors import InvalidParameter, LedgerError
from dpcurator.privacy import PureDP

IDENTITY = {"budget": "PureDP(1)", "currency": "epsilon", "amount": "1", "tables": {"t": {}}}


def charge(led: Ledger, i: int, *, analyst: str | None = None, cost: str = "1/20") -> int:
    with led.transaction():
        cid = led.insert_charge(
            analyst=analyst,
            table="t",
            kind="count",
            request=f"a < {i + 1}",
            coverage={"a": [[0, i + 1]]},
            cost=Fraction(cost),
            level=Fraction(cost) * (i + 1),
            noise="discrete_laplace(20)",
        )
    led.record_answer(cid, {f"a < {i + 1}": 100 + i})
    return cid


def make(place: Place | Path, n: int = 5) -> Place | Path:
    led = Ledger(target(place), IDENTITY)
    for i in range(n):
        charge(led, i)
    led.close()
    return place


def target(place: Place | Path) -> str:
    return place.target if isinstance(place, Place) else str(place)


def tamper(path: Path, *statements: str, checks: bool = True) -> None:
    """Edit the file behind dpcurator's back, as anyone with sqlite3 could."""
    Place("sqlite", str(path), str(path)).tamper(*statements, checks=checks)


def refused(place: Place | Path, match: str) -> None:
    with pytest.raises(LedgerError, match=match) as info:
        Ledger(target(place), IDENTITY).close()
    msg = str(info.value)
    shown = place.shown if isinstance(place, Place) else str(place)
    assert "\n" not in msg and shown in msg


# --- a sound ledger ----------------------------------------------------------------------


def test_a_ledger_round_trips_and_verifies(place):
    path = make(place, 5).target
    led = Ledger(path, IDENTITY)
    rows = led.charges_after(0)
    assert [r.id for r in rows] == [1, 2, 3, 4, 5]
    assert rows[2].cost == Fraction(1, 20) and rows[2].level == Fraction(3, 20)
    assert rows[2].answer == {"a < 3": 102} and len(rows[2].hash) == 64
    assert led.head == (5, rows[-1].hash)
    assert led.verify() == 5 and led.durable and led.identity == IDENTITY
    assert led.kind == place.kind and led.path == place.shown
    assert charge(led, 5) == 6
    led.close()
    assert [r.id for r in Ledger(path, IDENTITY).charges_after(4)] == [5, 6]


def test_in_memory_ledger_says_it_is_not_durable(tmp_path):
    assert Ledger(None, IDENTITY).durable is False
    assert Ledger(":memory:", IDENTITY).durable is False
    assert Ledger(tmp_path / "l.db", IDENTITY).durable is True
    led = Ledger(None, IDENTITY)
    charge(led, 0)
    assert [r.id for r in led.charges_after(0)] == [1]


def test_the_main_file_alone_is_the_whole_ledger(tmp_path):
    """No write-ahead log: every commit is in the .db file when it returns."""
    path = tmp_path / "l.db"
    led = Ledger(path, IDENTITY)
    charge(led, 0)
    assert not Path(f"{path}-wal").exists()
    assert led._store._db.execute("PRAGMA journal_mode").fetchone()[0] == "truncate"
    led.close()


def test_a_rolled_back_charge_leaves_the_chain_whole(place):
    path = place.target
    led = Ledger(path, IDENTITY)
    charge(led, 0)
    with pytest.raises(RuntimeError), led.transaction():
        led.insert_charge(
            analyst=None,
            table="t",
            kind="count",
            request="x",
            coverage={},
            cost=Fraction(1, 10),
            level=Fraction(1, 10),
            noise="n",
        )
        raise RuntimeError("refused later in the batch")
    assert charge(led, 1) == 2
    led.close()
    assert Ledger(path, IDENTITY).verify() == 2


def test_a_nonpositive_cost_is_never_recorded(place):
    led = Ledger(place.target, IDENTITY)
    with pytest.raises(LedgerError, match="cost"), led.transaction():
        led.insert_charge(
            analyst=None,
            table="t",
            kind="count",
            request="x",
            coverage={},
            cost=Fraction(-5),
            level=Fraction(1),
            noise="n",
        )
    assert led.charges_after(0) == []


# --- edits, deletions, reorders -----------------------------------------------------------


@pytest.mark.parametrize("value", ["-5", "0", "1/0", "0.5", "1e3", "/3", "3/", "1/2/3"])
def test_the_schema_itself_refuses_a_malformed_cost(place, value):
    make(place)
    with pytest.raises(place.integrity_error, match=r"(?i)check"):
        place.tamper(f"UPDATE charges SET cost = '{value}' WHERE id = 2")


def test_the_review_case_a_cost_of_minus_5_is_refused_by_the_curator(people, place):
    """Was: 6.0 remaining on a budget of 1 after editing one charge to cost -5."""
    data, schema, _ = people
    path = place.target
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=path) as c:
        c.count("age < 50", epsilon=0.1)
        c.count("age >= 50", epsilon=0.1)
    place.tamper("UPDATE charges SET cost = '-5' WHERE id = 1", checks=False)
    with pytest.raises(LedgerError, match=place.unchecked("charge 1 has an invalid cost")):
        Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=path)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("cost", "'1/100'"),
        ("cost", "'-5'"),
        ("level", "'1/20'"),  # a lowered level would let the fast path admit overspending
        ("analyst", "'mallory'"),
        ("table_name", "'other'"),
        ("kind", "'histogram'"),
        ("request", "'a < 1'"),
        ("coverage", "'{\"a\": [[0, 1]]}'"),
        ("created", "0.5"),
        ("noise", "'discrete_laplace(1)'"),
    ],
)
def test_an_edited_charge_is_refused(place, column, value):
    make(place)
    place.tamper(f"UPDATE charges SET {column} = {value} WHERE id = 3", checks=value != "'-5'")
    refused(place, "charge 3" if value != "'-5'" else place.unchecked("charge 3"))


def test_the_review_case_level_lowered_with_a_valid_value(place):
    make(place)
    place.tamper("UPDATE charges SET level = '1/20' WHERE id = 5")
    refused(place, r"charge 5 was altered or removed \(hash chain broken\); restore")


def test_a_deleted_charge_is_refused(place):
    make(place)
    place.tamper("DELETE FROM charges WHERE id = 2")
    refused(place, "charge 2 was removed")


def test_a_deleted_last_charge_is_refused(place):
    make(place)
    place.tamper("DELETE FROM charges WHERE id = 5")
    refused(place, "charge 5 was removed")


def test_every_charge_deleted_is_refused(place):
    make(place)
    place.tamper("DELETE FROM charges")
    refused(place, "charge 1 was removed")


def test_swapped_charges_are_refused(place):
    make(place)
    cols = "created, analyst, table_name, kind, request, coverage, cost, level, noise, hash"
    place.tamper(
        f"CREATE TEMP TABLE two AS SELECT id, {cols} FROM charges WHERE id IN (2, 4)",
        *(
            f"UPDATE charges SET ({cols}) = (SELECT {cols} FROM two WHERE id = {b}), "
            f"answer = NULL, answer_hash = NULL WHERE id = {a}"
            for a, b in ((2, 4), (4, 2))
        ),
    )
    refused(place, "charge 2 was altered")


def test_a_forged_charge_is_refused(place):
    make(place)
    place.tamper(
        "INSERT INTO charges SELECT 6, created, analyst, table_name, kind, request, coverage, "
        "cost, level, noise, hash, NULL, NULL FROM charges WHERE id = 5",
    )
    refused(place, "charge 6 was added outside dpcurator")


def test_an_edited_answer_is_refused(place):
    make(place)
    place.tamper("""UPDATE charges SET answer = '{"a < 2": 7}' WHERE id = 2""")
    refused(place, "the answer of charge 2 was altered")


def test_an_edited_head_is_refused(place):
    make(place)
    place.tamper("UPDATE meta SET value = '4 ' || substr(value, 3) WHERE key = 'charges_head'")
    refused(place, "hash chain broken")


# --- the identity (budget and schemas) --------------------------------------------------


def test_an_edited_identity_is_refused(place):
    make(place)
    bigger = json.dumps({**IDENTITY, "amount": "6"}, sort_keys=True)
    place.tamper(f"UPDATE meta SET value = '{bigger}' WHERE key = 'identity'")
    refused(place, "its identity .* was altered")


def test_an_identity_edited_with_its_genesis_is_refused(stores):
    from dpcurator.curator.ledger_chain import FORMAT, genesis

    for n in (0, 3):
        place = make(stores.new(f"l{n}"), n)
        bigger = json.dumps({**IDENTITY, "amount": "6"}, sort_keys=True)
        place.tamper(
            f"UPDATE meta SET value = '{bigger}' WHERE key = 'identity'",
            f"UPDATE meta SET value = '{genesis(FORMAT, bigger).hex()}' WHERE key = 'genesis'",
        )
        with pytest.raises(LedgerError, match="hash chain broken"):
            Ledger(place.target, None)


def test_another_curators_ledger_is_refused(place):
    make(place)
    with pytest.raises(LedgerError, match="belongs to another curator"):
        Ledger(place.target, {**IDENTITY, "amount": "2"})


# --- files that are not ledgers -----------------------------------------------------------


def test_an_empty_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "l.db"
    path.write_bytes(b"")
    refused(path, r"empty \(0 bytes\)")
    assert path.stat().st_size == 0


def test_an_empty_file_is_refused_by_the_curator(people, tmp_path):
    data, schema, _ = people
    path = tmp_path / "l.db"
    path.write_bytes(b"")
    with pytest.raises(LedgerError, match="empty"):
        Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=path)


def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "l.db"
    for n in (1, 99, 100, 8192):
        path.write_bytes(os.urandom(n))
        refused(path, "not an SQLite database")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "l.db"
    os.mkfifo(path)
    refused(path, "not a regular file")


def test_a_damaged_sqlite_file_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    raw = bytearray(path.read_bytes())
    raw[100:] = os.urandom(len(raw) - 100)
    path.write_bytes(bytes(raw))
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path, IDENTITY)


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "people.db"
    tamper(path, "CREATE TABLE people (name TEXT)", "INSERT INTO people VALUES ('x')")
    before = path.read_bytes()
    refused(path, "not a dpcurator ledger .*tables people")
    assert path.read_bytes() == before


def test_an_sqlite_database_without_tables_is_refused(tmp_path):
    path = tmp_path / "l.db"
    tamper(path, "PRAGMA user_version = 1")
    assert path.stat().st_size > 0
    refused(path, "not a dpcurator ledger .*no tables")


def empty(place: Place) -> Place:
    """``place`` made to exist with nothing in it: an empty SQLite database, or an empty
    schema."""
    if place.kind == "sqlite":
        place.tamper("PRAGMA user_version = 1")
    else:
        Place("postgresql", place.server, place.server, place.server, "public").tamper(
            f'CREATE SCHEMA "{place.schema}"'
        )
    return place


def test_a_foreign_meta_table_is_refused(place):
    empty(place).tamper("CREATE TABLE meta (x INTEGER)")
    refused(place, "not a dpcurator ledger .*meta table is foreign")


def test_a_format_1_ledger_is_refused(place):
    empty(place).tamper(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE analysts (name TEXT PRIMARY KEY, quota TEXT)",
        "INSERT INTO meta VALUES ('identity', '{}')",
    )
    refused(place, "ledger format 1")


def test_another_format_is_refused(place):
    make(place)
    place.tamper("UPDATE meta SET value = '3' WHERE key = 'format'")
    refused(place, "format '3'")


@pytest.mark.parametrize("what", ["table", "index", "trigger", "check", "column"])
def test_altered_table_definitions_are_refused(place, what):
    make(place)
    drop_check = [
        "PRAGMA writable_schema=ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'CHECK (id >= 1)', '') WHERE name = 'charges'",
    ]
    statements = {
        "table": ["CREATE TABLE extra (x INTEGER)"],
        "index": ["CREATE INDEX by_cost ON charges(cost)"],
        "trigger": place.trigger,
        "check": drop_check if place.kind == "sqlite" else [],  # PostgreSQL: checks=False
        "column": ["ALTER TABLE charges ADD COLUMN extra TEXT"],
    }[what]
    place.tamper(*statements, checks=what != "check" or place.kind == "sqlite")
    refused(place, "table definitions were altered")


def test_a_missing_ledger_is_not_created_when_only_verifying(place):
    with pytest.raises(LedgerError, match=r"no such file|no ledger there") as info:
        Ledger(place.target, None)
    assert place.shown in str(info.value)
    if place.kind == "sqlite":
        assert not Path(place.target).exists()
    else:
        assert not place.query(f"SELECT 1 FROM pg_namespace WHERE nspname = '{place.schema}'")


def test_a_schema_of_other_tables_is_refused_and_left_alone(postgres_stores):
    place = empty(postgres_stores.new())
    place.tamper("CREATE TABLE people (name TEXT)", "INSERT INTO people VALUES ('x')")
    refused(place, "not a dpcurator ledger .*schema t_l_[0-9a-f]+ holds tables people")
    assert place.query("SELECT name FROM people") == [("x",)]


def test_a_ledger_is_made_in_an_empty_schema_and_only_there(postgres_stores):
    """An administrator may make the schema (and grant it) first; an empty schema is not
    a ledger when only verifying."""
    place = empty(postgres_stores.new())
    with pytest.raises(LedgerError, match="holds no tables"):
        Ledger(place.target, None)
    make(place, 2)
    assert Ledger(place.target, None).verify() == 2


# --- analysts and quotas ----------------------------------------------------------------


def test_a_quota_survives_re_registration(place):
    path = place.target
    led = Ledger(path, IDENTITY)
    assert led.quota("alice") is False
    assert led.register_analyst("alice", Fraction(3, 10)) == Fraction(3, 10)
    assert led.register_analyst("alice") == Fraction(3, 10)  # no quota given: kept
    assert led.register_analyst("alice", Fraction(3, 10)) == Fraction(3, 10)
    with pytest.raises(InvalidParameter, match="set_quota"):
        led.register_analyst("alice", Fraction(1, 2))
    assert led.register_analyst("bob") is None
    with pytest.raises(InvalidParameter, match="has no quota"):
        led.register_analyst("bob", Fraction(1, 10))
    led.close()
    led = Ledger(path, IDENTITY)
    assert led.quota("alice") == Fraction(3, 10) and led.quota("bob") is None
    assert led.analysts() == {"alice": Fraction(3, 10), "bob": None}


def test_set_quota_is_the_explicit_change(place):
    path = place.target
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    led.set_quota("alice", Fraction(1, 2))
    assert led.quota("alice") == Fraction(1, 2)
    led.set_quota("alice", None)
    assert led.quota("alice") is None
    led.set_quota("carol", Fraction(1, 5))  # registers too
    led.close()
    led = Ledger(path, IDENTITY)
    assert led.analysts() == {"alice": None, "carol": Fraction(1, 5)}


def test_a_quota_seen_by_another_process_is_current(place):
    path = place.target
    a, b = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    a.register_analyst("alice", Fraction(3, 10))
    assert b.quota("alice") == Fraction(3, 10)
    assert b.register_analyst("alice") == Fraction(3, 10)
    with pytest.raises(InvalidParameter):
        b.register_analyst("alice", Fraction(1))


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE analysts SET quota = '1' WHERE name = 'alice'",
        "UPDATE analysts SET quota = NULL WHERE name = 'alice'",
        "DELETE FROM analysts WHERE name = 'alice'",
        "UPDATE analysts SET name = 'bob' WHERE name = 'alice'",
    ],
)
def test_an_edited_quota_is_refused(place, statement):
    path = place.target
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    led.register_analyst("carol", Fraction(1, 10))
    led.close()
    place.tamper(statement)
    refused(place, "analyst")


def test_a_running_ledger_keeps_the_quota_it_verified(place):
    path = place.target
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    led.set_quota("alice", Fraction(1, 5))
    place.tamper("DELETE FROM analysts WHERE seq = 2")
    assert led.quota("alice") == Fraction(1, 5)
    with pytest.raises(LedgerError, match="analyst entry 2 was altered or removed"):
        led.register_analyst("bob")  # never extends a chain it could not verify
    led.close()
    refused(place, "analyst entries were removed")


# --- several processes ------------------------------------------------------------------


def test_rows_appended_by_another_process_are_verified_on_read(place):
    path = make(place, 2).target
    reader, writer = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    assert len(reader.charges_after(0)) == 2
    charge(writer, 2)
    charge(writer, 3)
    assert [r.id for r in reader.charges_after(2)] == [3, 4]
    charge(writer, 4)
    place.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 5")
    with pytest.raises(LedgerError, match="charge 5 was altered"):
        reader.charges_after(4)
    with pytest.raises(LedgerError, match="charge 5 was altered"):
        charge(reader, 5)  # never extends a chain it could not verify


WRITER = textwrap.dedent(
    """
    import json, sys
    from fractions import Fraction
    from dpcurator.curator.ledger import Ledger
    path, identity, n, wait = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    led = Ledger(path, identity)
    for i in range(n):
        with led.transaction():
            cid = led.insert_charge(analyst=None, table="t", kind="count", request="a < 1",
                coverage={"a": [[0, 1]]}, cost=Fraction(1, 10**6), level=Fraction(i + 1, 10**6),
                noise="discrete_laplace(1)")
        led.record_answer(cid, {"a < 1": i})
        print(cid, flush=True)
    print("done", flush=True)
    if wait == "wait":
        sys.stdin.readline()  # stay alive, the ledger open, until told
    led.close()
    """
)


def writer(path: Path | str, n: int, wait: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), json.dumps(IDENTITY), str(n), "wait" * wait],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_copy_of_only_the_db_file_of_a_live_ledger_holds_every_charge(tmp_path):
    path = tmp_path / "l.db"
    p = writer(path, 25, wait=True)
    lines = [p.stdout.readline().strip() for _ in range(26)]
    assert lines[-1] == "done", p.stderr.read()
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)  # only the .db, while the writer keeps it open
    p.stdin.write("\n")
    p.stdin.flush()
    assert p.wait(timeout=60) == 0
    led = Ledger(copy, IDENTITY)
    rows = led.charges_after(0)
    assert len(rows) == 25 and rows[-1].answer == {"a < 1": 24}


def test_a_backup_of_a_live_ledger_holds_every_charge_committed_before_it(place, tmp_path):
    path = place.target
    p = writer(path, 100_000, wait=False)
    committed = 0
    deadline = time.monotonic() + 60
    while committed < 50 and time.monotonic() < deadline:
        committed = int(p.stdout.readline())
    reports = []
    try:
        for k in range(3):  # back up while the writer keeps committing
            reports.append(backup_ledger(path, tmp_path / f"b{k}.db"))
            committed_before = committed
            committed = int(p.stdout.readline())
            assert reports[-1].charges >= committed_before
    finally:
        p.kill()
        p.wait(timeout=30)
    for k, rep in enumerate(reports):
        led = Ledger(tmp_path / f"b{k}.db", IDENTITY)
        assert led.verify() == rep.charges and led.head[1] == rep.head
        led.close()
    assert Ledger(path, IDENTITY).verify() >= reports[-1].charges


def test_a_backup_refuses_to_overwrite_and_to_copy_a_tampered_ledger(place, tmp_path):
    path = make(place, 3).target
    dst = tmp_path / "b.db"
    dst.write_text("precious")
    with pytest.raises(LedgerError, match="exists"):
        backup_ledger(path, dst)
    assert dst.read_text() == "precious"
    assert backup_ledger(path, dst, force=True).charges == 3
    assert Ledger(dst, IDENTITY).verify() == 3
    place.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 2")
    with pytest.raises(LedgerError, match="charge 2 was altered"):
        backup_ledger(path, tmp_path / "c.db")
    assert not (tmp_path / "c.db").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_processes_creating_one_new_ledger_agree(place, tmp_path):
    path = place.target
    procs = [writer(path, 3, wait=False) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert Ledger(path, IDENTITY).verify() == 12
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".new", ".tmp"))]


def test_ten_thousand_charges_verify_on_open(place):
    """(How long verification takes is measured in benchmarks/curator.py, not here.)"""
    path = place.target
    led = Ledger(path, IDENTITY)
    with led.transaction():
        for i in range(10_000):
            led.insert_charge(
                analyst=None,
                table="t",
                kind="count",
                request=f"a < {i % 90 + 1}",
                coverage={"a": [[0, i % 90 + 1]], "b": [[0, 1], [2, 3]]},
                cost=Fraction(1, 10**5),
                level=Fraction(i + 1, 10**5),
                noise="discrete_laplace(100000)",
            )
    led.close()
    led = Ledger(path, IDENTITY)
    assert led.head[0] == 10_000
    assert len(led.charges_after(9_990)) == 10
    led.close()


def test_a_running_ledger_backs_up_and_names_itself_when_tampered(place, tmp_path):
    path = make(place, 3).target
    led = Ledger(path, IDENTITY)
    assert led.backup(tmp_path / "b.db").charges == 3
    place.tamper("UPDATE charges SET request = 'x' WHERE id = 1")
    with pytest.raises(LedgerError, match=f"ledger {re.escape(place.shown)}: charge 1 was altered"):
        led.backup(tmp_path / "c.db")
    assert not (tmp_path / "c.db").exists()


def test_an_in_memory_ledger_can_be_saved_by_backup(tmp_path):
    led = Ledger(None, IDENTITY)
    charge(led, 0)
    led.register_analyst("alice", Fraction(1, 3))
    rep = led.backup(tmp_path / "saved.db")
    assert (rep.charges, rep.analysts) == (1, 1)
    saved = Ledger(tmp_path / "saved.db", IDENTITY)
    assert saved.durable and saved.quota("alice") == Fraction(1, 3)


def test_the_first_read_after_opening_includes_later_charges(place):
    path = make(place, 3).target
    reader, writer = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    charge(writer, 3)
    assert [r.id for r in reader.charges_after(1)] == [2, 3, 4]
    assert [r.id for r in reader.charges_after(0)] == [1, 2, 3, 4]
    again = Ledger(path, IDENTITY)
    place.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 4")
    with pytest.raises(LedgerError, match="charge 4 was altered"):
        charge(again, 4)


def test_a_running_ledger_never_extends_an_edited_tail(place):
    led = Ledger(place.target, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    charge(led, 0)
    place.tamper("UPDATE analysts SET quota = '1' WHERE seq = 1")
    with pytest.raises(LedgerError, match="analyst entry 1 was altered"):
        led.register_analyst("bob")
    place.tamper("UPDATE charges SET level = '1/10' WHERE id = 1")
    with pytest.raises(LedgerError, match="charge 1 was altered"):
        charge(led, 1)


def test_no_journal_file_is_left_beside_a_closed_ledger(tmp_path):
    path = make(tmp_path / "led.db")
    assert not (tmp_path / "led.db-journal").exists()
    led = Ledger(path, None, create=False)  # reading only (it verifies the whole chain)
    led.close()
    charge(Ledger(path, IDENTITY), 7)  # a second connection, written through and dropped
    led = Ledger(path, IDENTITY)
    charge(led, 8)
    led.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["led.db", "led.db.anchor"]


def test_closing_a_reader_keeps_a_writer_journal(tmp_path):
    """The journal of a connection in the middle of a write transaction is never removed
    by another connection's close (SQLite deletes it only under the write lock)."""
    path = make(tmp_path / "led.db")
    writer = Ledger(path, IDENTITY)
    reader = Ledger(path, None, create=False)
    with writer.transaction():
        writer.insert_charge(
            analyst=None,
            table="t",
            kind="count",
            request="a < 9",
            coverage={"a": [[0, 9]]},
            cost=Fraction(1, 20),
            level=Fraction(1, 2),
            noise="discrete_laplace(20)",
        )
        journal = tmp_path / "led.db-journal"
        assert journal.exists() and journal.stat().st_size > 0
        reader.close()
        assert journal.exists() and journal.stat().st_size > 0
    writer.close()
    Ledger(path, None, create=False).close()  # the whole chain verifies, the charge in it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["led.db", "led.db.anchor"]


# --- tokens and revocation ---------------------------------------------------------------


def test_a_revocation_applies_at_once_in_every_process(place):
    admin, server = Ledger(place.target, IDENTITY), Ledger(place.target, IDENTITY)
    token = admin.add_credential("alice", quota=Fraction(1, 2))
    assert server.authenticate(token) == Principal("alice", False)
    assert server.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    fresh = admin.add_credential("alice")  # a new token: the old one stops working
    assert server.authenticate(token) is None
    assert server.authenticate(fresh) == Principal("alice", False)
    admin.revoke("alice")
    assert server.authenticate(fresh) is None
    assert server.quota("alice") == Fraction(1, 2)  # the quota stays
    admin.close()
    server.close()
    assert Ledger(place.target, IDENTITY).credentials() == [
        Credential("alice", Fraction(1, 2), False, False)
    ]


def test_a_refusal_at_once_is_authenticates_refusal(place):
    """The event loop's check: a token is refused at once only if :meth:`authenticate`
    refuses it, on a view as fresh (what another process made or revoked applies at
    once); a token the last view accepted is left to :meth:`authenticate` without a
    read; on PostgreSQL nothing is refused at once (a read is a round trip)."""
    admin, server = Ledger(place.target, IDENTITY), Ledger(place.target, IDENTITY)
    sqlite = place.kind == "sqlite"

    def check(token: str, expected: Principal | None, *, at_once: bool) -> None:
        assert server.refused_at_once(token) is (at_once and sqlite)
        assert server.authenticate(token) == expected

    try:
        unknown = f"dpc_{'0' * 16}_{'x' * 43}"
        check(unknown, None, at_once=True)
        token = admin.add_credential("alice")  # made by another process: found at once
        check(token, Principal("alice", False), at_once=False)
        check(token[:-1] + ("A" if token[-1] != "A" else "B"), None, at_once=True)
        check(f"dpc_{'0' * 16}_{token[-43:]}", None, at_once=True)
        check("not a token", None, at_once=True)
        fresh = admin.add_credential("alice", admin=True)
        # the view accepted ``token`` last: left to authenticate, which reads and refuses
        check(token, None, at_once=False)
        check(token, None, at_once=True)  # and from then on, at once
        check(fresh, Principal("alice", True), at_once=False)
        admin.revoke("alice")
        check(fresh, None, at_once=False)
        check(fresh, None, at_once=True)
    finally:
        admin.close()
        server.close()


class _Sly(str):
    """A hand-built token: a str whose comparisons and hash lie."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize(
    "token",
    [None, 5e-324, 1e400, float("nan"), -(10**400), b"dpc_0", ["dpc_"] * 3, {"token": 1},
     "", "\x00", "\ud800", "dpc_" + "0" * 16 + "_" + "x" * 1_000_000,
     "[" * 10_000, _Sly("dpc_" + "0" * 16 + "_" + "x" * 43)],
)  # fmt: skip
def test_garbage_tokens_are_refused_at_once_and_change_nothing(tmp_path, token):
    """Anything at all as a token: refused at once by the event loop's check and by
    authenticate, with no error, and the ledger unchanged."""
    path = make(tmp_path / "l.db")
    led = Ledger(path, IDENTITY)
    try:
        led.add_credential("alice")
        before = path.read_bytes()
        assert led.refused_at_once(token) is True
        assert led.authenticate(token) is None
        assert path.read_bytes() == before
    finally:
        led.close()


def test_a_refusal_at_once_never_waits(tmp_path):
    """Not refused (left to authenticate), at once, while another connection writes a
    commit (SQLite's exclusive lock) or another thread is looking a token up; refused
    again after."""
    path = make(tmp_path / "l.db")
    led = Ledger(path, IDENTITY)
    unknown = f"dpc_{'0' * 16}_{'x' * 43}"
    other = sqlite3.connect(path, isolation_level=None)
    try:
        assert led.refused_at_once(unknown)
        other.execute("BEGIN EXCLUSIVE")  # as a commit being written holds the file
        assert not led.refused_at_once(unknown)
        other.execute("COMMIT")
        assert led.refused_at_once(unknown)
        with led._auth_lock:  # a worker thread's lookup in progress
            assert not led.refused_at_once(unknown)
        assert led.refused_at_once(unknown)
    finally:
        other.close()
        led.close()


def test_a_lookup_of_an_unchanged_chain_is_one_statement(tmp_path):
    """While the analysts' chain is as the last lookup left it, a lookup (in a thread,
    or the event loop's check) reads its head in one statement and nothing else; once
    another process changed it, the next lookup reads the change and judges by it."""
    path = make(tmp_path / "l.db")
    admin, server = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    unknown = f"dpc_{'0' * 16}_{'x' * 43}"
    try:
        alice = admin.add_credential("alice")
        assert server.authenticate(alice) == Principal("alice", False)
        seen: list[str] = []
        server._store._auth.set_trace_callback(seen.append)
        assert server.authenticate(alice) == Principal("alice", False)
        assert server.refused_at_once(unknown)
        assert server.authenticate(unknown) is None
        assert len(seen) == 3 and all("FROM meta" in sql for sql in seen), seen
        seen.clear()
        bob = admin.add_credential("bob")  # another process's commit
        assert not server.refused_at_once(bob)
        assert server.authenticate(bob) == Principal("bob", False)
        assert seen[0].startswith("SELECT") and "BEGIN" in seen and "COMMIT" in seen, seen
        admin.revoke("alice")
        seen.clear()
        assert server.refused_at_once(alice) is False  # the view accepted it: a thread's
        assert server.authenticate(alice) is None  # which reads the revocation
        assert "BEGIN" in seen
        assert server.refused_at_once(alice)
    finally:
        admin.close()
        server.close()


def test_a_lookup_waits_for_a_commit_being_written_and_no_longer(tmp_path):
    """:meth:`authenticate` behind SQLite's exclusive lock: it answers once the lock is
    let go (it tries again every half millisecond), and past the wait it allows, it is
    a one-line LedgerError."""
    import threading

    from dpcurator.curator.stores import sqlite as sqlite_store

    path = make(tmp_path / "l.db")
    led = Ledger(path, IDENTITY)
    token = led.add_credential("alice")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN EXCLUSIVE")
        threading.Timer(0.3, other.execute, ("COMMIT",)).start()
        t = time.perf_counter()
        assert led.authenticate(token) == Principal("alice", False)
        assert time.perf_counter() - t >= 0.25  # it did wait for the lock
        other.execute("BEGIN EXCLUSIVE")
        old = sqlite_store.READ_NOW_BUSY_MS
        sqlite_store.READ_NOW_BUSY_MS = 200
        try:
            with pytest.raises(LedgerError) as err:
                led.authenticate(token)
            assert "\n" not in str(err.value) and "locked" in str(err.value)
        finally:
            sqlite_store.READ_NOW_BUSY_MS = old
            other.execute("COMMIT")
        assert led.authenticate(token) == Principal("alice", False)
    finally:
        other.close()
        led.close()


def test_readers_are_let_in_until_a_large_transaction_commits(tmp_path):
    """A write transaction far larger than SQLite's page cache keeps its pages in memory
    until its commit: another connection reads meanwhile without waiting (by default
    SQLite writes them out once its cache fills, locking every reader out until the
    commit)."""
    path = make(tmp_path / "l.db")
    led = Ledger(path, IDENTITY)
    reader = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with led.transaction():
            for i in range(40):  # 20 MB, ten times SQLite's default cache
                led.insert_charge(
                    analyst=None,
                    table="t",
                    kind="count",
                    request=f"a < {i + 1} " + " " * 500_000,
                    coverage={"a": [[0, 1]]},
                    cost=Fraction(1, 10**6),
                    level=Fraction(1, 10**6) * (i + 1),
                    noise="discrete_laplace(20)",
                )
            got = reader.execute("SELECT count(*) FROM charges").fetchone()
            assert got == (5,)  # the committed charges, read at once
    finally:
        reader.close()
        led.close()
    led = Ledger(path, IDENTITY, create=False)
    assert [r.id for r in led.charges_after(5)] == list(range(6, 46))
    led.close()


def test_an_edited_token_hash_is_refused(place):
    led = Ledger(place.target, IDENTITY)
    led.add_credential("alice")
    led.close()
    place.tamper(f"UPDATE analysts SET token_hash = '{'0' * 64}' WHERE name = 'alice'")
    refused(place, "analyst entry 1 .* was altered")


def test_authentication_never_waits_for_the_charge_lock(place):
    """While one process holds the write lock (its check-and-charge in progress), another
    authenticates at once."""
    writer, server = Ledger(place.target, IDENTITY), Ledger(place.target, IDENTITY)
    token = writer.add_credential("alice")
    assert server.authenticate(token) is not None
    with writer.transaction():
        charge_in(writer, 0)
        t = time.perf_counter()
        assert server.authenticate(token) == Principal("alice", False)
        assert time.perf_counter() - t < 1.0  # the lock is held for as long as we like
    writer.close()
    server.close()


def charge_in(led: Ledger, i: int) -> int:
    """A charge in the caller's transaction."""
    return led.insert_charge(
        analyst=None,
        table="t",
        kind="count",
        request=f"a < {i + 1}",
        coverage={"a": [[0, i + 1]]},
        cost=Fraction(1, 20),
        level=Fraction(1, 20) * (i + 1),
        noise="discrete_laplace(20)",
    )


def test_a_valid_token_is_never_refused_while_other_processes_commit(place, tmp_path):
    """Servers that start while other processes keep charging: every one of their first
    authentications (a fresh view, read while commits come and go) finds the token."""
    led = Ledger(place.target, IDENTITY)
    token = led.add_credential("alice")
    led.close()
    writers = [writer(place.target, 100_000, wait=False) for _ in range(2)]
    try:
        for p in writers:
            assert p.stdout.readline().strip().isdigit(), p.stderr.read()
        server = Ledger(place.target, IDENTITY)
        refused = 0
        for _ in range(100):  # before the fix, every one was refused
            server._auth_view = ((0, b""), {}, {})  # as a server that has just started
            refused += server.authenticate(token) is None
        server.close()
    finally:
        for p in writers:
            p.kill()
            p.wait(timeout=30)
    assert refused == 0


WRITE_LOCK = (
    "import sqlite3, sys\n"
    "db = sqlite3.connect(sys.argv[1], timeout=0.3, isolation_level=None)\n"
    "try:\n"
    "    db.execute('BEGIN IMMEDIATE')\n"
    "    print('took the write lock')\n"
    "except sqlite3.OperationalError as err:\n"
    "    print(err)\n"
)


def test_opening_another_store_keeps_this_processs_write_lock(tmp_path):
    """While a transaction holds the ledger's write lock, another store opened and
    closed in the same process (the background verification opens its own) must not
    release it: closing any descriptor of a file drops all of a process's POSIX locks on
    it, and another process then wrote the same charge at the same time."""
    from dpcurator.curator.stores import open_store

    path = make(tmp_path / "l.db")
    led = Ledger(path, IDENTITY)
    try:
        with led.transaction():
            for _ in range(3):
                open_store(str(path), None).close()
            out = subprocess.run(
                [sys.executable, "-c", WRITE_LOCK, str(path)], capture_output=True, text=True
            )
            assert out.stdout.strip() == "database is locked", out.stdout + out.stderr
    finally:
        led.close()


def test_an_anchor_that_is_the_ledger_is_refused_and_changes_nothing(tmp_path):
    """The anchor named as the ledger itself, or a second name of it: refused before
    anything is read or appended (anchor lines would have been written into the ledger,
    and reading it through a descriptor of our own would drop the process's locks)."""
    path = make(tmp_path / "l.db")
    os.link(path, tmp_path / "other-name")
    before = path.read_bytes()
    for anchor in (str(path), str(tmp_path / "." / "l.db"), str(tmp_path / "other-name")):
        with pytest.raises(InvalidParameter, match="is the ledger itself"):
            Ledger(path, IDENTITY, anchor=anchor)
    assert path.read_bytes() == before
