"""A ledger on PostgreSQL: what only a database server adds. Transactions the database
aborts (deadlocks, terminated connections) are decided again and charged once; a
database that cannot be reached refuses to charge (and nothing is answered); copies
between the stores keep the chains, and never overwrite what they should not.

A real server (see tests/conftest.py); each test has its own schema.
"""

from __future__ import annotations

import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_places import Place, with_schema
from tcp_proxy import Proxy

from dpcurator import Curator
from dpcurator.curator.credentials import Principal
from dpcurator.curator.ledger import Ledger, copy_ledger
from dpcurator.curator.stores.postgres import _key
from dpcurator.errors import LedgerError
from dpcurator.privacy import PureDP

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = pytest.mark.usefixtures("postgres_url")

IDENTITY = {"budget": "PureDP(1)", "currency": "epsilon", "amount": "1", "tables": {"t": {}}}


def until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def waiting_for_a_lock(place: Place, pid: int) -> bool:
    return bool(
        place.query(
            f"SELECT 1 FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock'"
        )
    )


def backend(curator: Curator) -> int:
    return int(curator.ledger._store._conn.info.backend_pid)


def counting(curator: Curator, out: dict, query: str) -> threading.Thread:
    def run() -> None:
        try:
            out["answer"] = curator.count(query, epsilon=0.01)
        except Exception as err:  # the test asserts on it
            out["error"] = err

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_deadlocked_charge_is_decided_again_and_charged_once(people, postgres_stores):
    """The database breaks a deadlock by aborting the curator's transaction: nothing of it
    was written, the curator decides again and charges once."""
    data, schema, _ = people
    place = postgres_stores.new()
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=place.target) as c:
        c.count("age < 10", epsilon=0.01)
        other = place.connect()
        other.execute("SET deadlock_timeout = '60s'")  # the curator's side breaks it
        other.execute("BEGIN")
        other.execute("SELECT value FROM meta WHERE key = 'charges_head' FOR UPDATE")
        out: dict = {}
        t = counting(c, out, "age < 20")
        until(lambda: waiting_for_a_lock(place, backend(c)))  # it waits for our row ...
        # ... and we for its lock: only its transaction's abort lets this return
        other.execute("SELECT pg_advisory_xact_lock(%s)", (_key(place.schema),))
        other.execute("COMMIT")
        other.close()
        t.join(60)
        assert "error" not in out, out
        assert out["answer"].charge_id == 2
        assert [(h.charge_id, h.request) for h in c.history()] == [(1, "age < 10"), (2, "age < 20")]


def test_a_connection_terminated_mid_transaction_is_opened_again(people, postgres_stores):
    data, schema, _ = people
    place = postgres_stores.new()
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=place.target) as c:
        c.count("age < 10", epsilon=0.01)
        other = place.connect()
        other.execute("BEGIN")
        other.execute("SELECT value FROM meta WHERE key = 'charges_head' FOR UPDATE")
        out: dict = {}
        t = counting(c, out, "age < 20")
        pid = backend(c)
        until(lambda: waiting_for_a_lock(place, pid))
        place.query(f"SELECT pg_terminate_backend({pid})")
        until(lambda: not place.query(f"SELECT 1 FROM pg_stat_activity WHERE pid = {pid}"))
        other.execute("ROLLBACK")
        other.close()
        t.join(60)
        assert "error" not in out, out
        assert out["answer"].charge_id == 2 and backend(c) != pid
        assert len(c.history()) == 2


def test_idle_connections_terminated_are_opened_again(people, postgres_stores):
    data, schema, _ = people
    place = postgres_stores.new()
    with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=place.target) as c:
        token = c.add_analyst("alice")
        assert c.ledger.authenticate(token) == Principal("alice", False)
        c.count("age < 10", epsilon=0.01)
        place.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = 'dpcurator' AND pid IN ({backend(c)}, "
            f"{c.ledger._store._auth.info.backend_pid})"
        )
        time.sleep(0.2)
        assert c.ledger.authenticate(token) == Principal("alice", False)
        assert c.count("age < 20", epsilon=0.01).charge_id == 2


def test_an_unreachable_database_charges_nothing_and_answers_nothing(people, postgres_stores):
    """Cut the network between the curator and the database: every request fails with a
    LedgerError (the service's 503), nothing is answered; mended, it goes on, and the
    ledger holds exactly the answered requests."""
    data, schema, _ = people
    place = postgres_stores.new()
    info = psycopg.conninfo.conninfo_to_dict(place.server)
    proxy = Proxy(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
    far = with_schema(
        f"postgresql://{info['user']}@127.0.0.1:{proxy.port}/{info['dbname']}", place.schema
    )
    try:
        with Curator.open(data=data, schema=schema, budget=PureDP(1.0), ledger=far) as c:
            token = c.add_analyst("alice")
            first = c.count("age < 10", epsilon=0.01)
            proxy.cut()
            for _ in range(3):
                with pytest.raises(LedgerError) as info_:
                    c.count("age < 20", epsilon=0.01)
                assert "\n" not in str(info_.value) and "password" not in str(info_.value)
            with pytest.raises(LedgerError):
                c.ledger.authenticate(token)
            proxy.mend()
            second = c.count("age < 30", epsilon=0.01)
            assert c.ledger.authenticate(token) == Principal("alice", False)
    finally:
        proxy.close()
    led = Ledger(place.target, None)
    rows = led.charges_after(0)
    assert [(r.id, r.request) for r in rows] == [(1, "age < 10"), (2, "age < 30")]
    assert [r.answer for r in rows] == [{"age < 10": first.value}, {"age < 30": second.value}]
    led.close()


def test_no_server_at_the_url_is_one_line(tmp_path):
    with socketless_port() as port:
        url = f"postgresql://dpc:secret@127.0.0.1:{port}/postgres?connect_timeout=3"
        with pytest.raises(LedgerError) as info:
            Ledger(url, IDENTITY)
    msg = str(info.value)
    assert "\n" not in msg and "secret" not in msg and "cannot be used" in msg
    assert msg.startswith(f"ledger postgresql://dpc@127.0.0.1:{port}/postgres")


class socketless_port:
    """A port on 127.0.0.1 that nothing listens on, while the block runs."""

    def __enter__(self) -> int:
        import socket

        self._s = socket.socket()
        self._s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return int(self._s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._s.close()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://dpc@127.0.0.1/postgres?schema=Bad-Name", "schema='Bad-Name' must be"),
        ("postgresql://dpc@127.0.0.1/postgres?nonsense=1", "not a valid URL"),
        ("mysql://dpc@127.0.0.1/db", "unknown kind of ledger 'mysql'"),
        ("sqlite:///", "give a file after sqlite:///"),
    ],
)
def test_bad_urls_are_one_line(url, words):
    with pytest.raises(LedgerError, match=words) as info:
        Ledger(url, IDENTITY)
    assert "\n" not in str(info.value)


# --- copies between the stores ------------------------------------------------------------


def fill(target: str, n: int = 4) -> str:
    led = Ledger(target, IDENTITY)
    led.register_analyst("alice", Fraction(1, 2))
    token = led.add_credential("bob", admin=True)
    for i in range(n):
        with led.transaction():
            cid = led.insert_charge(
                analyst="alice",
                table="t",
                kind="count",
                request=f"a < {i + 1}",
                coverage={"a": [[0, i + 1]]},
                cost=Fraction(1, 10),
                level=Fraction(i + 1, 10),
                noise="discrete_laplace(10)",
            )
        led.record_answer(cid, {f"a < {i + 1}": i, "é": "ü"})
    led.close()
    return token


def contents(target: str) -> tuple:
    led = Ledger(target, IDENTITY)
    try:
        rows = led.charges_after(0)
        return (
            led.head,
            [(r.id, r.created, r.analyst, r.request, r.cost, r.level, r.answer) for r in rows],
            led.credentials(),
        )
    finally:
        led.close()


def test_sqlite_to_postgresql_and_back_keeps_every_row_and_the_chains(tmp_path, postgres_stores):
    src, back = str(tmp_path / "l.db"), str(tmp_path / "back.db")
    token = fill(src)
    pg = postgres_stores.new()
    there = copy_ledger(src, pg.target)
    assert (there.charges, there.analysts) == (4, 2) and there.target == pg.shown
    again = copy_ledger(pg.target, back)
    assert again.head == there.head == Ledger(src, IDENTITY).head[1]
    assert contents(src) == contents(pg.target) == contents(back)
    led = Ledger(pg.target, IDENTITY)  # the copy serves: tokens, quotas, charges
    assert led.authenticate(token) == Principal("bob", True)
    assert led.quota("alice") == Fraction(1, 2)
    with led.transaction():
        led.insert_charge(
            analyst=None,
            table="t",
            kind="count",
            request="x",
            coverage={},
            cost=Fraction(1, 10),
            level=Fraction(1, 2),
            noise="n",
        )
    assert led.verify() == 5
    led.close()


def test_a_copy_never_overwrites_without_force(tmp_path, postgres_stores):
    src = str(tmp_path / "l.db")
    fill(src, 2)
    pg = postgres_stores.new()
    fill(pg.target, 3)
    with pytest.raises(LedgerError, match="holds a ledger; refusing to overwrite it"):
        copy_ledger(src, pg.target)
    assert Ledger(pg.target, IDENTITY).verify() == 3
    assert copy_ledger(src, pg.target, force=True).charges == 2
    assert contents(pg.target) == contents(src)
    # a file that exists is a ledger's, or someone's: the same
    dst = tmp_path / "precious.db"
    dst.write_text("precious")
    with pytest.raises(LedgerError, match="exists"):
        copy_ledger(pg.target, str(dst))
    assert dst.read_text() == "precious"
    # no scratch schema is left behind
    assert not pg.query("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'dpcurator_copy_%'")


def test_a_schema_with_other_tables_is_never_written(tmp_path, postgres_stores):
    src = str(tmp_path / "l.db")
    fill(src, 2)
    pg = postgres_stores.new()
    Place("postgresql", pg.server, pg.server, pg.server, "public").tamper(
        f'CREATE SCHEMA "{pg.schema}"', f'CREATE TABLE "{pg.schema}".people (name TEXT)'
    )
    for force in (False, True):
        with pytest.raises(LedgerError, match=r"holds other tables \(people\)"):
            copy_ledger(src, pg.target, force=force)
    assert pg.query("SELECT count(*) FROM people") == [(0,)]


def test_a_tampered_source_is_not_copied(tmp_path, postgres_stores):
    pg = postgres_stores.new()
    fill(pg.target, 3)
    pg.tamper("UPDATE charges SET cost = '1/1000' WHERE id = 2")
    dst = tmp_path / "copy.db"
    with pytest.raises(LedgerError, match="charge 2 was altered"):
        copy_ledger(pg.target, str(dst))
    assert not dst.exists() and not list(tmp_path.iterdir())


def test_a_ledger_is_not_copied_onto_itself(tmp_path, postgres_stores):
    pg = postgres_stores.new()
    fill(pg.target, 1)
    with pytest.raises(LedgerError, match="is the ledger itself"):
        copy_ledger(pg.target, pg.target, force=True)
    path = tmp_path / "l.db"
    fill(str(path), 1)
    with pytest.raises(LedgerError, match="is the ledger itself"):
        copy_ledger(str(path), f"sqlite:///{path}", force=True)
    assert Ledger(pg.target, IDENTITY).verify() == 1 and Ledger(str(path), IDENTITY).verify() == 1


def test_a_backup_of_a_postgresql_ledger_is_a_file(postgres_stores, tmp_path: Path):
    pg = postgres_stores.new()
    fill(pg.target, 2)
    other = postgres_stores.new("other")
    led = Ledger(pg.target, IDENTITY)
    with pytest.raises(LedgerError, match="a backup is a file"):
        led.backup(other.target)
    assert led.backup(tmp_path / "b.db").charges == 2
    led.close()
    assert contents(str(tmp_path / "b.db")) == contents(pg.target)
