"""Places for ledgers in the tests: an SQLite file, or a schema of a PostgreSQL server."""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("sqlite", "postgresql")


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@dataclass
class Place:
    """Where one ledger lives: ``target`` is what ``Ledger`` and the CLI take, ``shown``
    what messages call it; ``tamper`` edits it behind dpcurator's back."""

    kind: str
    target: str
    shown: str
    server: str | None = None  # the PostgreSQL server's URL
    schema: str | None = None

    def connect(self) -> Any:
        if self.kind == "sqlite":
            return sqlite3.connect(self.target, isolation_level=None)
        import psycopg

        conn = psycopg.connect(self.server, autocommit=True)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def tamper(self, *statements: str, checks: bool = True) -> None:
        """Run ``statements`` as anyone who can write the store could. ``checks=False``
        gets past the CHECK constraints: SQLite can ignore them; PostgreSQL cannot, so
        the constraints of the tables are dropped first (as such an editor must)."""
        con = self.connect()
        try:
            if not checks:
                if self.kind == "sqlite":
                    con.execute("PRAGMA ignore_check_constraints=ON")
                else:
                    for table, name in con.execute(
                        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
                        "WHERE contype = 'c' AND connamespace = %s::regnamespace",
                        (self.schema,),
                    ).fetchall():
                        con.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            for s in statements:
                con.execute(s)
        finally:
            con.close()

    def roll_back(self, keep: int) -> None:
        """Delete every charge after ``keep`` and rewrite the head to the last one kept
        (to the genesis for ``keep=0``): a shorter chain that verifies on its own."""
        if keep == 0:
            head = "'0 ' || (SELECT value FROM meta WHERE key = 'genesis')"
        else:
            ((h,),) = self.query(f"SELECT hash FROM charges WHERE id = {keep}")
            head = f"'{keep} {h}'"
        self.tamper(
            f"DELETE FROM charges WHERE id > {keep}",
            f"UPDATE meta SET value = {head} WHERE key = 'charges_head'",
        )

    def query(self, statement: str) -> list[tuple]:
        con = self.connect()
        try:
            return [tuple(r) for r in con.execute(statement).fetchall()]
        finally:
            con.close()

    def unchecked(self, message: str) -> str:
        """What opening says after ``tamper(..., checks=False)``: ``message`` on SQLite,
        the altered definitions on PostgreSQL (where they had to be dropped)."""
        return message if self.kind == "sqlite" else "table definitions were altered"

    @property
    def integrity_error(self) -> type[Exception]:
        if self.kind == "sqlite":
            return sqlite3.IntegrityError
        import psycopg

        return psycopg.errors.IntegrityError

    @property
    def trigger(self) -> list[str]:
        """Statements that add a trigger to the charges table."""
        if self.kind == "sqlite":
            return ["CREATE TRIGGER t AFTER INSERT ON charges BEGIN SELECT 1; END"]
        return [
            "CREATE FUNCTION t() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$",
            "CREATE TRIGGER t AFTER INSERT ON charges FOR EACH ROW EXECUTE FUNCTION t()",
        ]


@dataclass
class Stores:
    """Makes places for ledgers of one kind (``kind``)."""

    kind: str
    directory: Path
    server: str | None
    made: list[Place] = field(default_factory=list)

    def new(self, name: str = "l") -> Place:
        if self.kind == "sqlite":
            path = str(self.directory / f"{name}.db")
            place = Place("sqlite", path, path)
        else:
            assert self.server is not None
            schema = f"t_{name}_{secrets.token_hex(5)}"
            url = with_schema(self.server, schema)
            place = Place("postgresql", url, url, self.server, schema)
        self.made.append(place)
        return place

    def drop(self) -> None:
        if self.kind != "postgresql" or not self.made:
            return
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as con:
            con.execute("SET lock_timeout = '20s'")
            for p in self.made:
                con.execute(f'DROP SCHEMA IF EXISTS "{p.schema}" CASCADE')
                # the shared request-rate buckets beside it (dpcurator.curator.stores.postgres_rate)
                con.execute(f'DROP SCHEMA IF EXISTS "{p.schema[:58]}_rate" CASCADE')
