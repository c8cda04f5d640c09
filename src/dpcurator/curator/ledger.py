"""The durable ledger: every charge is on disk before its answer exists.

SQLite in WAL mode with ``synchronous=FULL``: a committed charge survives a crash or a
power cut. The check and the charge happen inside one ``BEGIN IMMEDIATE`` transaction,
which takes SQLite's write lock, so concurrent threads and processes are serialised and
never overspend together; a process first reads the charges other processes committed
since it last looked. The noisy answer is computed only after the commit, and recorded
in a second transaction: a crash in between wastes budget but never releases an
uncharged answer (DESIGN.md §7).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpcurator.errors import LedgerError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS analysts (name TEXT PRIMARY KEY, quota TEXT);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    analyst TEXT,
    table_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    request TEXT NOT NULL,
    coverage TEXT NOT NULL,
    cost TEXT NOT NULL,
    level TEXT NOT NULL,
    noise TEXT NOT NULL,
    answer TEXT
);
"""


@dataclass(frozen=True)
class ChargeRow:
    """A charge as stored: coverage as ``{attribute: [[start, end], ...]}`` positions."""

    id: int
    created: float
    analyst: str | None
    table: str
    kind: str
    request: str
    coverage: dict[str, list[list[int]]]
    cost: Fraction
    level: Fraction
    noise: str
    answer: object | None


def _row(r: tuple) -> ChargeRow:
    return ChargeRow(
        id=r[0],
        created=r[1],
        analyst=r[2],
        table=r[3],
        kind=r[4],
        request=r[5],
        coverage=json.loads(r[6]),
        cost=Fraction(r[7]),
        level=Fraction(r[8]),
        noise=r[9],
        answer=None if r[10] is None else json.loads(r[10]),
    )


class Ledger:
    """One SQLite file shared by every curator process that serves the same data."""

    def __init__(self, path: str | Path | None, identity: dict[str, object]) -> None:
        self.path = ":memory:" if path is None else str(path)
        try:
            self._db = sqlite3.connect(
                self.path, timeout=60.0, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=60000")
            with self.transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._check_identity(identity)
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"cannot use ledger {self.path}: {err}") from None
        self._lock = threading.RLock()

    def _check_identity(self, identity: dict[str, object]) -> None:
        """A ledger records one budget over one set of schemas; refuse any other."""
        want = json.dumps(identity, sort_keys=True)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('identity', ?)", (want,))
        elif row[0] != want:
            have = json.loads(row[0])
            raise LedgerError(
                f"ledger {self.path} belongs to another curator (budget {have.get('budget')}, "
                f"tables {sorted(have.get('tables', {}))}); open it with the same budget and "
                "schemas, or use a new ledger file"
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: the write lock is held for the whole block."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def charges_after(self, last_id: int) -> list[ChargeRow]:
        rows = self._db.execute(
            "SELECT id, created, analyst, table_name, kind, request, coverage, cost, level, noise, "
            "answer FROM charges WHERE id > ? ORDER BY id",
            (last_id,),
        ).fetchall()
        return [_row(r) for r in rows]

    def insert_charge(
        self,
        *,
        analyst: str | None,
        table: str,
        kind: str,
        request: str,
        coverage: dict[str, list[list[int]]],
        cost: Fraction,
        level: Fraction,
        noise: str,
    ) -> int:
        cur = self._db.execute(
            "INSERT INTO charges (created, analyst, table_name, kind, request, coverage, cost, "
            "level, noise) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(),
                analyst,
                table,
                kind,
                request,
                json.dumps(coverage),
                str(cost),
                str(level),
                noise,
            ),
        )
        return int(cur.lastrowid)

    def record_answer(self, charge_id: int, answer: object) -> None:
        self.record_answers([(charge_id, answer)])

    def record_answers(self, answers: list[tuple[int, object]]) -> None:
        with self._lock, self.transaction() as db:
            db.executemany(
                "UPDATE charges SET answer = ? WHERE id = ?",
                [(json.dumps(a), charge_id) for charge_id, a in answers],
            )

    def quota(self, analyst: str) -> Fraction | bool | None:
        """The analyst's quota; None for no quota; False if the analyst is unknown."""
        row = self._db.execute("SELECT quota FROM analysts WHERE name = ?", (analyst,)).fetchone()
        if row is None:
            return False
        return None if row[0] is None else Fraction(row[0])

    def set_quota(self, analyst: str, quota: Fraction | None) -> None:
        with self._lock, self.transaction() as db:
            db.execute(
                "INSERT INTO analysts VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET quota = excluded.quota",
                (analyst, None if quota is None else str(quota)),
            )

    def close(self) -> None:
        self._db.close()
