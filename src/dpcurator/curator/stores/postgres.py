"""A ledger several servers share: one schema of a PostgreSQL database (psycopg 3).

``postgresql://user@host:port/dbname?schema=NAME`` or libpq's
``postgresql:///dbname?host=/run/postgresql&port=5433`` (the schema defaults to
``dpcurator``; every other parameter is libpq's). No secret of the URL (its password,
``password=``, ``sslpassword=``) is ever shown, nor any text of the driver's errors that
could hold one (:mod:`.postgres_text`). The three tables are those of the
SQLite ledger, with the same CHECK constraints, so rows, hashes and chains are the
same in both stores.

Serialising check-and-charge across hosts. Every write transaction starts with
``pg_advisory_xact_lock(key)`` (a lock of this ledger alone, released by the commit, the
rollback, or the end of the session: a replica killed mid-transaction frees it), under
the default READ COMMITTED isolation: once the lock is held, every later statement sees
every charge any replica committed, and no other replica can commit until this one is
done. That is exactly the guarantee SQLite's ``BEGIN IMMEDIATE`` gives on one host, so
the curator's check (decided without a lock on a fork, re-validated in the transaction
against the charges committed since) is unchanged. Readers (verification, the filter's
sync, authentication) never take the lock: they read one REPEATABLE READ snapshot each.
A transaction the database aborts (a serialisation failure or deadlock, SQLSTATE class
40, or a connection lost before COMMIT was sent) wrote nothing and may be tried again;
an error during COMMIT is never retried, since the charge may have been committed (the
answer is then withheld: budget wasted, nothing released uncharged).

Every session sets ``synchronous_commit=on`` (a commit returns once it is durable on the
server), ``extra_float_digits=3`` (floats round-trip exactly, so the chain's times
hash the same), ``lock_timeout`` (a writer waits at most 60 s for the lock, as SQLite's
busy timeout) and ``idle_in_transaction_session_timeout`` (a stopped replica cannot keep
the lock for more than 60 s).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dpcurator.curator.stores.postgres_rate import SharedBuckets
from dpcurator.curator.stores.postgres_text import LedgerURL, is_url, read_url, reword, with_schema
from dpcurator.curator.stores.protocol import Busy
from dpcurator.curator.stores.rows import Dump, Rows
from dpcurator.errors import LedgerError, LedgerMissing

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_LEDGER_TABLES = frozenset({"meta", "analysts", "charges", "checkpoints"})
#: The table a ledger made before checkpoints lacks (see :meth:`PostgresStore.upgrade`).
_CHECKPOINTS = "checkpoints"

#: libpq parameters dpcurator sets unless the URL gives them.
_DEFAULTS = {
    "connect_timeout": "10",
    "application_name": "dpcurator",
    "client_encoding": "UTF8",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}
_SESSION = (
    "SET synchronous_commit = on; SET extra_float_digits = 3; SET lock_timeout = '60s'; "
    "SET idle_in_transaction_session_timeout = '60s'"
)

_POSITIVE = "'^[1-9][0-9]*(/[1-9][0-9]*)?$'"
_FINITE = "CHECK (created > '-Infinity' AND created < 'Infinity')"
_TABLES = (
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    f"""CREATE TABLE analysts (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    created double precision NOT NULL {_FINITE},
    name text NOT NULL CHECK (length(name) > 0),
    quota text CHECK (quota IS NULL OR quota ~ {_POSITIVE}),
    admin smallint NOT NULL CHECK (admin IN (0, 1)),
    token_key text CHECK (token_key IS NULL OR length(token_key) = 16),
    token_hash text CHECK (
        (token_key IS NULL) = (token_hash IS NULL)
        AND (token_hash IS NULL OR length(token_hash) = 64)
    ),
    hash text NOT NULL CHECK (length(hash) = 64)
)""",
    f"""CREATE TABLE charges (
    id bigint PRIMARY KEY CHECK (id >= 1),
    created double precision NOT NULL {_FINITE},
    analyst text CHECK (analyst IS NULL OR length(analyst) > 0),
    table_name text NOT NULL,
    kind text NOT NULL,
    request text NOT NULL,
    coverage text NOT NULL CHECK (coverage LIKE '{{%}}'),
    cost text NOT NULL CHECK (cost ~ {_POSITIVE}),
    level text NOT NULL CHECK (level ~ {_POSITIVE}),
    noise text NOT NULL,
    hash text NOT NULL CHECK (length(hash) = 64),
    answer text,
    answer_hash text CHECK ((answer IS NULL) = (answer_hash IS NULL))
)""",
    f"""CREATE TABLE checkpoints (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    upto bigint NOT NULL CHECK (upto >= 1),
    created double precision NOT NULL {_FINITE},
    charge_hash text NOT NULL CHECK (length(charge_hash) = 64),
    summary text NOT NULL,
    segment_hash text NOT NULL CHECK (length(segment_hash) = 64),
    hash text NOT NULL CHECK (length(hash) = 64),
    segment bytea NOT NULL
)""",
)

# Everything in a schema that could change what the ledger's tables hold or return:
# relations, columns, constraints, defaults, indexes, triggers, rules, row security
# policies, functions and inheritance.
_FINGERPRINT = """
SELECT 'relation', c.relname, c.relkind::text,
       concat_ws(' ', c.relrowsecurity, c.relforcerowsecurity, c.relhasrules, c.relhastriggers)
FROM pg_class c WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'column', c.relname, a.attname,
       concat_ws(' ', a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                 a.atthasdef, a.attgenerated, a.attidentity)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = %(ns)s AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint', c.relname, o.conname, pg_get_constraintdef(o.oid)
FROM pg_constraint o JOIN pg_class c ON c.oid = o.conrelid WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'default', c.relname, d.adnum::text, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'index', c.relname, i.relname, pg_get_indexdef(i.oid)
FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'trigger', c.relname, t.tgname, t.tgenabled::text
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(ns)s AND NOT t.tgisinternal
UNION ALL
SELECT 'rule', c.relname, r.rulename, r.ev_type::text
FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'policy', c.relname, p.polname, p.polcmd::text
FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = %(ns)s
UNION ALL
SELECT 'function', p.proname, p.oid::regprocedure::text, ''
FROM pg_proc p WHERE p.pronamespace = %(ns)s
UNION ALL
SELECT 'inherits', c.relname, h.inhseqno::text, ''
FROM pg_inherits h JOIN pg_class c ON c.oid IN (h.inhrelid, h.inhparent)
WHERE c.relnamespace = %(ns)s
ORDER BY 1, 2, 3, 4
"""

#: The fingerprint of a ledger's tables as this server prints them, per server version.
_REFERENCE: dict[int, list[tuple]] = {}


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError(
            "a PostgreSQL ledger needs psycopg: pip install 'dpcurator[postgres]'"
        ) from None
    return psycopg


def parse(url: str) -> tuple[str, LedgerURL]:
    """(libpq connection string with dpcurator's defaults, the URL read: its schema and
    the form messages show, without any secret; see :mod:`.postgres_text`)."""
    psycopg = _driver()
    read = read_url(url)
    shown = read.shown
    if not _SCHEMA_NAME.fullmatch(read.schema):
        raise LedgerError(
            f"ledger {shown}: schema={read.schema!r} must be 1 to 63 lower-case letters, "
            "digits and _, not starting with a digit"
        )
    try:
        params = psycopg.conninfo.conninfo_to_dict(read.public)
    except psycopg.Error as err:
        if read.query_secret:
            # an & written unencoded in a password parameter makes its tail a parameter
            # of its own, which libpq would name: then neither its words nor the
            # parameters are shown
            raise LedgerError(
                f"ledger {shown.partition('?')[0]}: not a valid URL: libpq cannot read its "
                "hosts, ports or parameters (write & in a password as %26)"
            ) from None
        raise LedgerError(f"ledger {shown}: not a valid URL: {reword(err, read)}") from None
    params.update(read.secret_params)
    for k, v in _DEFAULTS.items():
        params.setdefault(k, v)
    try:
        return psycopg.conninfo.make_conninfo("", **params), read
    except psycopg.Error as err:
        raise LedgerError(f"ledger {shown}: not a valid URL: {reword(err, read)}") from None


def _key(schema: str) -> int:
    """The advisory lock of the ledger in ``schema`` (a signed 64-bit integer)."""
    digest = hashlib.sha256(b"dpcurator ledger lock\x00" + schema.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresStore:
    """The ledger in ``schema`` of the database ``url`` names. ``initial_meta``: the
    meta rows of a new ledger, created (schema and tables, in one transaction) if the
    schema is absent or holds no relation at all; None never creates one."""

    kind = "postgresql"
    durable = True

    def __init__(self, url: str, initial_meta: Sequence[tuple[str, str]] | None) -> None:
        self._psycopg = _driver()
        self.errors: tuple[type[BaseException], ...] = (self._psycopg.Error,)
        self._conninfo, self._url = parse(url)
        self.schema, self.location = self._url.schema, self._url.shown
        self._key = _key(self.schema)
        self._auth: Any = None
        try:
            self._conn = self._connect()
            try:
                self._ensure(initial_meta)
                self._reference = _reference(self._conn)
            except BaseException:
                self._conn.close()
                raise
        except self._psycopg.Error as err:
            raise LedgerError(f"ledger {self.location}: cannot be used: {self.say(err)}") from None

    def say(self, err: BaseException) -> str:
        """The driver's error ``err`` in a message's words: never any secret of the URL."""
        return reword(err, self._url)

    def _connect(self) -> Any:
        conn = self._psycopg.connect(self._conninfo, autocommit=True)
        sql = self._psycopg.sql
        conn.execute(_SESSION)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        return conn

    def _namespace(self) -> int | None:
        r = self._conn.execute(
            "SELECT oid FROM pg_namespace WHERE nspname = %s", (self.schema,)
        ).fetchone()
        return None if r is None else int(r[0])

    def _ensure(self, initial_meta: Sequence[tuple[str, str]] | None) -> None:
        sql = self._psycopg.sql
        conn = self._conn
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
            ns = self._namespace()
            if ns is None and initial_meta is None:
                raise LedgerMissing(
                    f"ledger {self.location}: no ledger there (the database has no schema "
                    f"{self.schema})"
                )
            empty = (
                ns is None
                or not conn.execute(
                    "SELECT 1 FROM pg_class WHERE relnamespace = %s LIMIT 1", (ns,)
                ).fetchone()
            )
            if empty and initial_meta is not None:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                for statement in _TABLES:
                    conn.execute(statement)
                Rows(conn, "%s").load(Dump(tuple(initial_meta), (), ()))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(self._psycopg.Error):
                conn.execute("ROLLBACK")
            raise

    # --- what is there ---------------------------------------------------------------

    def tables(self) -> list[str]:
        return [
            r[0]
            for r in self._conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1",
                (self.schema,),
            )
        ]

    def foreign(self, tables: list[str]) -> str:
        what = f"tables {', '.join(tables)}" if tables else "no tables"
        return f"its schema {self.schema} holds {what}"

    def altered(self) -> bool:
        ns = self._namespace()
        if ns is None:
            return True
        found = _fingerprint(self._conn, ns, self.schema)
        older = [r for r in self._reference if r[1] not in (_CHECKPOINTS, f"{_CHECKPOINTS}_pkey")]
        return found not in (self._reference, older)

    def upgrade(self) -> bool:
        """Add the checkpoints table to a ledger an older dpcurator made, under the
        ledger's lock (nothing else changes); whether the ledger has it now."""
        if _CHECKPOINTS in self.tables():
            return True
        conn = self._conn
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
            if _CHECKPOINTS not in self.tables():
                conn.execute(next(t for t in _TABLES if f"TABLE {_CHECKPOINTS}" in t))
            conn.execute("COMMIT")
        except self._psycopg.Error:
            self.rollback()
            return False
        return True

    def prepare(self) -> None:
        """Nothing to set on a ledger PostgreSQL already keeps durable."""

    # --- transactions ----------------------------------------------------------------

    def _start(self, conn: Any, statement: str) -> Any:
        """``conn`` (or a new connection, if it is gone) with ``statement`` run on it; a
        session that ended while idle (a restarted server, a terminated backend) is
        opened again, once."""
        if conn is None or conn.closed or conn.broken:
            conn = self._connect()
        try:
            conn.execute(statement)
        except self._psycopg.OperationalError:
            if not conn.broken:
                raise
            conn = self._connect()
            conn.execute(statement)
        return conn

    def _begin(self, statement: str) -> Rows:
        self._conn = self._start(self._conn, statement)
        return Rows(self._conn, "%s")

    def begin_read(self) -> Rows:
        return self._begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def end_read(self) -> None:
        self._conn.execute("COMMIT")

    def begin_write(self) -> Rows:
        # one round trip: the key is this store's own integer, not text from outside
        try:
            return self._begin(
                "BEGIN ISOLATION LEVEL READ COMMITTED; "
                f"SELECT pg_advisory_xact_lock({int(self._key)})"
            )
        except BaseException:
            self.rollback()
            raise

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        conn = self._conn
        if conn.closed or conn.broken:
            return
        with contextlib.suppress(self._psycopg.Error):
            conn.execute("ROLLBACK")

    def retryable(self, err: BaseException, *, committing: bool) -> bool:
        """Whether the database surely wrote nothing of the failed transaction and it may
        be run again: it aborted it (SQLSTATE class 40), or the connection was lost
        before COMMIT was sent."""
        state = getattr(getattr(err, "diag", None), "sqlstate", None) or ""
        if state.startswith("40"):
            return True
        return (
            not committing
            and isinstance(err, self._psycopg.OperationalError)
            and (self._conn.closed or self._conn.broken)
        )

    def read_now(self, read: Callable[[Rows], T]) -> T:
        """``read`` in a snapshot of a connection of its own: readers never wait for the
        writers' lock."""
        self._auth = conn = self._start(
            self._auth, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        )
        try:
            return read(Rows(conn, "%s"))
        finally:
            if not conn.broken:
                conn.execute("COMMIT")

    def read_at_once(self, read: Callable[[Rows], T]) -> T:
        """Never: a read is a round trip to the server, which the event loop must not
        wait for (:class:`Busy`; :meth:`read_now` reads)."""
        raise Busy

    def meta_at_once(self, key: str) -> object:
        """Never, as :meth:`read_at_once`."""
        raise Busy

    def close(self) -> None:
        self._conn.close()
        if self._auth is not None:
            self._auth.close()

    def buckets(self) -> SharedBuckets:
        """Request-rate buckets that every server on this ledger shares
        (:mod:`.postgres_rate`), on a connection of their own."""
        return SharedBuckets(self._connect, self.schema, self.say, self.errors)

    # --- copies ----------------------------------------------------------------------

    def same_place(self, target: str) -> bool:
        if not is_url(target):
            return False
        conninfo, theirs_url = parse(target)
        schema = theirs_url.schema
        mine = self._psycopg.conninfo.conninfo_to_dict(self._conninfo)
        theirs = self._psycopg.conninfo.conninfo_to_dict(conninfo)
        keys = ("host", "hostaddr", "port", "dbname")
        return schema == self.schema and all(mine.get(k) == theirs.get(k) for k in keys)


def write_copy(
    target: str, dump: Dump, *, force: bool, verify: Callable[[str], None], label: str
) -> None:
    """Write ``dump`` as the ledger of ``target``'s schema: built in a scratch schema,
    ``verify(url)``-ed there, then its tables moved into the target schema in one
    transaction under the ledger's lock. A target schema that holds a ledger is replaced
    only if ``force``; one that holds other relations is never touched."""
    psycopg = _driver()
    sql = psycopg.sql
    conninfo, url = parse(target)
    schema, location = url.schema, url.shown
    scratch = f"dpcurator_copy_{secrets.token_hex(6)}"
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.Error as err:
        raise LedgerError(f"{label} {location}: cannot connect: {reword(err, url)}") from None
    try:
        conn.execute(_SESSION)
        _refuse_occupied(conn, schema, location, force=force, label=label)
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(scratch)))
            for statement in _TABLES:
                conn.execute(statement)
            Rows(conn, "%s").load(dump)
        verify(with_schema(target, scratch))
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_key(schema),))
            old = _refuse_occupied(conn, schema, location, force=force, label=label)
            if old:
                conn.execute(
                    sql.SQL("DROP TABLE {}").format(
                        sql.SQL(", ").join(sql.Identifier(schema, t) for t in sorted(old))
                    )
                )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            for t in sorted(_LEDGER_TABLES):
                conn.execute(
                    sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                        sql.Identifier(scratch, t), sql.Identifier(schema)
                    )
                )
    except psycopg.Error as err:
        raise LedgerError(f"{label} {location}: cannot write it: {reword(err, url)}") from None
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(scratch))
            )
        conn.close()


def _refuse_occupied(conn: Any, schema: str, location: str, *, force: bool, label: str) -> set[str]:
    """The ledger tables in ``schema`` (to replace, if ``force``); refuses a schema that
    holds a ledger (without ``force``) or anything else."""
    have = {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind NOT IN ('i', 'c')",
            (schema,),
        )
    }
    other = sorted(have - _LEDGER_TABLES)
    if other:
        raise LedgerError(
            f"{label} {location}: schema {schema} holds other tables ({', '.join(other)}); "
            "refusing to write a ledger there"
        )
    if have and not force:
        raise LedgerError(
            f"{label} {location}: schema {schema} holds a ledger; refusing to overwrite it"
        )
    return have


def _fingerprint(conn: Any, ns: int, name: str) -> list[tuple]:
    """What :data:`_FINGERPRINT` finds in the namespace ``ns`` (called ``name``), with
    names qualified by it unqualified."""
    qualified = re.compile(rf"\b(?:{re.escape(name)}|pg_temp(?:_[0-9]+)?)\.")
    rows = conn.execute(_FINGERPRINT, {"ns": ns}).fetchall()
    return [tuple(qualified.sub("", str(v)) for v in r) for r in rows]


def _reference(conn: Any) -> list[tuple]:
    """The fingerprint of a ledger's tables freshly made on this server: made as
    temporary tables in a transaction that is rolled back."""
    version = conn.info.server_version
    if version not in _REFERENCE:
        conn.execute("BEGIN")
        try:
            for statement in _TABLES:
                conn.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
            ns, name = conn.execute(
                "SELECT oid, nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()"
            ).fetchone()
            _REFERENCE[version] = _fingerprint(conn, ns, name)
        finally:
            conn.execute("ROLLBACK")
    return _REFERENCE[version]
