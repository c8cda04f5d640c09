"""The ledger file: tamper evidence, refusal of files that are not ledgers, live copies.

Every test works on real files; the ones about live copies run a real writer process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest

from dpcurator import Curator
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


def make(path: Path, n: int = 5) -> Path:
    led = Ledger(path, IDENTITY)
    for i in range(n):
        charge(led, i)
    led.close()
    return path


def tamper(path: Path, *statements: str, checks: bool = True) -> None:
    """Edit the file behind dpcurator's back, as anyone with sqlite3 could."""
    con = sqlite3.connect(path, isolation_level=None)
    if not checks:
        con.execute("PRAGMA ignore_check_constraints=ON")
    for s in statements:
        con.execute(s)
    con.close()


def refused(path: Path, match: str) -> None:
    with pytest.raises(LedgerError, match=match) as info:
        Ledger(path, IDENTITY).close()
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg


# --- a sound ledger ----------------------------------------------------------------------


def test_a_ledger_round_trips_and_verifies(tmp_path):
    path = make(tmp_path / "l.db", 5)
    led = Ledger(path, IDENTITY)
    rows = led.charges_after(0)
    assert [r.id for r in rows] == [1, 2, 3, 4, 5]
    assert rows[2].cost == Fraction(1, 20) and rows[2].level == Fraction(3, 20)
    assert rows[2].answer == {"a < 3": 102} and len(rows[2].hash) == 64
    assert led.head == (5, rows[-1].hash)
    assert led.verify() == 5 and led.durable and led.identity == IDENTITY
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


def test_a_rolled_back_charge_leaves_the_chain_whole(tmp_path):
    path = tmp_path / "l.db"
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


def test_a_nonpositive_cost_is_never_recorded(tmp_path):
    led = Ledger(tmp_path / "l.db", IDENTITY)
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


def test_the_schema_itself_refuses_a_negative_cost(tmp_path):
    path = make(tmp_path / "l.db")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        tamper(path, "UPDATE charges SET cost = '-5' WHERE id = 2")


def test_the_review_case_a_cost_of_minus_5_is_refused_by_the_curator(people, tmp_path):
    """Was: 6.0 remaining on a budget of 1 after editing one charge to cost -5."""
    data, schema, _ = people
    path = tmp_path / "l.db"
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=path) as c:
        c.count("age < 50", epsilon=0.1)
        c.count("age >= 50", epsilon=0.1)
    tamper(path, "UPDATE charges SET cost = '-5' WHERE id = 1", checks=False)
    with pytest.raises(LedgerError, match="charge 1 has an invalid cost"):
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
def test_an_edited_charge_is_refused(tmp_path, column, value):
    path = make(tmp_path / "l.db")
    tamper(path, f"UPDATE charges SET {column} = {value} WHERE id = 3", checks=False)
    refused(path, "charge 3")


def test_the_review_case_level_lowered_with_a_valid_value(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "UPDATE charges SET level = '1/20' WHERE id = 5")
    refused(path, r"charge 5 was altered or removed \(hash chain broken\); restore")


def test_a_deleted_charge_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "DELETE FROM charges WHERE id = 2")
    refused(path, "charge 2 was removed")


def test_a_deleted_last_charge_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "DELETE FROM charges WHERE id = 5")
    refused(path, "charge 5 was removed")


def test_every_charge_deleted_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "DELETE FROM charges")
    refused(path, "charge 1 was removed")


def test_swapped_charges_are_refused(tmp_path):
    path = make(tmp_path / "l.db")
    cols = "created, analyst, table_name, kind, request, coverage, cost, level, noise, hash"
    con = sqlite3.connect(path, isolation_level=None)
    a = con.execute(f"SELECT {cols} FROM charges WHERE id = 2").fetchone()
    b = con.execute(f"SELECT {cols} FROM charges WHERE id = 4").fetchone()
    sets = ", ".join(f"{c.strip()} = ?" for c in cols.split(","))
    con.execute("BEGIN")
    con.execute(f"UPDATE charges SET {sets}, answer = NULL, answer_hash = NULL WHERE id = 2", b)
    con.execute(f"UPDATE charges SET {sets}, answer = NULL, answer_hash = NULL WHERE id = 4", a)
    con.execute("COMMIT")
    con.close()
    refused(path, "charge 2 was altered")


def test_a_forged_charge_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(
        path,
        "INSERT INTO charges SELECT 6, created, analyst, table_name, kind, request, coverage, "
        "cost, level, noise, hash, NULL, NULL FROM charges WHERE id = 5",
    )
    refused(path, "charge 6 was added outside dpcurator")


def test_an_edited_answer_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, """UPDATE charges SET answer = '{"a < 2": 7}' WHERE id = 2""")
    refused(path, "the answer of charge 2 was altered")


def test_an_edited_head_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "UPDATE meta SET value = '4 ' || substr(value, 3) WHERE key = 'charges_head'")
    refused(path, "hash chain broken")


# --- the identity (budget and schemas) --------------------------------------------------


def test_an_edited_identity_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    bigger = json.dumps({**IDENTITY, "amount": "6"}, sort_keys=True)
    tamper(path, f"UPDATE meta SET value = '{bigger}' WHERE key = 'identity'")
    refused(path, "its identity .* was altered")


def test_an_identity_edited_with_its_genesis_is_refused(tmp_path):
    from dpcurator.curator.ledger import FORMAT, _genesis

    for n in (0, 3):
        path = make(tmp_path / f"l{n}.db", n)
        bigger = json.dumps({**IDENTITY, "amount": "6"}, sort_keys=True)
        tamper(
            path,
            f"UPDATE meta SET value = '{bigger}' WHERE key = 'identity'",
            f"UPDATE meta SET value = '{_genesis(FORMAT, bigger).hex()}' WHERE key = 'genesis'",
        )
        with pytest.raises(LedgerError, match="hash chain broken"):
            Ledger(path, None)


def test_another_curators_ledger_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    with pytest.raises(LedgerError, match="belongs to another curator"):
        Ledger(path, {**IDENTITY, "amount": "2"})


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
    path.write_bytes(os.urandom(8192))
    refused(path, "not an SQLite database")


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


def test_a_foreign_meta_table_is_refused(tmp_path):
    path = tmp_path / "l.db"
    tamper(path, "CREATE TABLE meta (x INTEGER)")
    refused(path, "not a dpcurator ledger")


def test_a_format_1_ledger_is_refused(tmp_path):
    path = tmp_path / "old.db"
    tamper(
        path,
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE analysts (name TEXT PRIMARY KEY, quota TEXT)",
        "INSERT INTO meta VALUES ('identity', '{}')",
    )
    refused(path, "ledger format 1")


def test_another_format_is_refused(tmp_path):
    path = make(tmp_path / "l.db")
    tamper(path, "UPDATE meta SET value = '3' WHERE key = 'format'")
    refused(path, "format '3'")


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE extra (x)",
        "CREATE INDEX by_cost ON charges(cost)",
        "CREATE TRIGGER t AFTER INSERT ON charges BEGIN SELECT 1; END",
    ],
)
def test_altered_table_definitions_are_refused(tmp_path, statement):
    path = make(tmp_path / "l.db")
    tamper(path, statement)
    refused(path, "table definitions were altered")


def test_a_missing_ledger_is_not_created_when_only_verifying(tmp_path):
    with pytest.raises(LedgerError, match="no such file"):
        Ledger(tmp_path / "absent.db", None)
    assert not (tmp_path / "absent.db").exists()


# --- analysts and quotas ----------------------------------------------------------------


def test_a_quota_survives_re_registration(tmp_path):
    path = tmp_path / "l.db"
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


def test_set_quota_is_the_explicit_change(tmp_path):
    path = tmp_path / "l.db"
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


def test_a_quota_seen_by_another_process_is_current(tmp_path):
    path = tmp_path / "l.db"
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
def test_an_edited_quota_is_refused(tmp_path, statement):
    path = tmp_path / "l.db"
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    led.register_analyst("carol", Fraction(1, 10))
    led.close()
    tamper(path, statement)
    refused(path, "analyst")


def test_a_running_ledger_keeps_the_quota_it_verified(tmp_path):
    path = tmp_path / "l.db"
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    led.set_quota("alice", Fraction(1, 5))
    tamper(path, "DELETE FROM analysts WHERE seq = 2")
    assert led.quota("alice") == Fraction(1, 5)
    with pytest.raises(LedgerError, match="analyst entry 2 was altered or removed"):
        led.register_analyst("bob")  # never extends a chain it could not verify
    led.close()
    refused(path, "analyst entries were removed")


# --- several processes ------------------------------------------------------------------


def test_rows_appended_by_another_process_are_verified_on_read(tmp_path):
    path = make(tmp_path / "l.db", 2)
    reader, writer = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    assert len(reader.charges_after(0)) == 2
    charge(writer, 2)
    charge(writer, 3)
    assert [r.id for r in reader.charges_after(2)] == [3, 4]
    charge(writer, 4)
    tamper(path, "UPDATE charges SET cost = '1/1000' WHERE id = 5")
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


def writer(path: Path, n: int, wait: bool) -> subprocess.Popen:
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


def test_a_backup_of_a_live_ledger_holds_every_charge_committed_before_it(tmp_path):
    path = tmp_path / "l.db"
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


def test_a_backup_refuses_to_overwrite_and_to_copy_a_tampered_ledger(tmp_path):
    path = make(tmp_path / "l.db", 3)
    dst = tmp_path / "b.db"
    dst.write_text("precious")
    with pytest.raises(LedgerError, match="exists"):
        backup_ledger(path, dst)
    assert dst.read_text() == "precious"
    assert backup_ledger(path, dst, force=True).charges == 3
    assert Ledger(dst, IDENTITY).verify() == 3
    tamper(path, "UPDATE charges SET cost = '1/1000' WHERE id = 2")
    with pytest.raises(LedgerError, match="charge 2 was altered"):
        backup_ledger(path, tmp_path / "c.db")
    assert not (tmp_path / "c.db").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_processes_creating_one_new_ledger_agree(tmp_path):
    path = tmp_path / "l.db"
    procs = [writer(path, 3, wait=False) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert Ledger(path, IDENTITY).verify() == 12
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".new", ".tmp"))]


def test_verifying_ten_thousand_charges_is_fast(tmp_path):
    path = tmp_path / "l.db"
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
    t = time.perf_counter()
    led = Ledger(path, IDENTITY)
    elapsed = time.perf_counter() - t
    assert led.head[0] == 10_000
    assert elapsed < 2.0  # about 0.1 s on a laptop core; lenient for loaded CI machines


def test_a_running_ledger_backs_up_and_names_itself_when_tampered(tmp_path):
    path = make(tmp_path / "l.db", 3)
    led = Ledger(path, IDENTITY)
    assert led.backup(tmp_path / "b.db").charges == 3
    tamper(path, "UPDATE charges SET request = 'x' WHERE id = 1")
    with pytest.raises(LedgerError, match=f"ledger {path}: charge 1 was altered"):
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


def test_the_first_read_after_opening_includes_later_charges(tmp_path):
    path = make(tmp_path / "l.db", 3)
    reader, writer = Ledger(path, IDENTITY), Ledger(path, IDENTITY)
    charge(writer, 3)
    assert [r.id for r in reader.charges_after(1)] == [2, 3, 4]
    assert [r.id for r in reader.charges_after(0)] == [1, 2, 3, 4]
    again = Ledger(path, IDENTITY)
    tamper(path, "UPDATE charges SET cost = '1/1000' WHERE id = 4")
    with pytest.raises(LedgerError, match="charge 4 was altered"):
        charge(again, 4)


def test_a_running_ledger_never_extends_an_edited_tail(tmp_path):
    path = tmp_path / "l.db"
    led = Ledger(path, IDENTITY)
    led.register_analyst("alice", Fraction(3, 10))
    charge(led, 0)
    tamper(path, "UPDATE analysts SET quota = '1' WHERE seq = 1")
    with pytest.raises(LedgerError, match="analyst entry 1 was altered"):
        led.register_analyst("bob")
    tamper(path, "UPDATE charges SET level = '1/10' WHERE id = 1")
    with pytest.raises(LedgerError, match="charge 1 was altered"):
        charge(led, 1)
