"""The embedded ledger store: one SQLite file.

``synchronous=FULL`` with a rollback journal in ``TRUNCATE`` mode: when a commit returns,
the charge is in the main database file itself, so that file alone is always the whole
ledger (a WAL database keeps its latest commits in a ``-wal`` file that a plain copy of
the ``.db`` misses). A write transaction is ``BEGIN IMMEDIATE``, which takes SQLite's
write lock: concurrent threads and processes on one host are serialised. A new ledger
is built beside its path and linked into place, so no process ever sees a half-made one,
and a file that is not a ledger is refused before SQLite writes to it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from dpcurator.curator.stores.protocol import Busy
from dpcurator.curator.stores.rows import Dump, Rows
from dpcurator.curator.stores.sqlite_rate import FileBuckets, rate_file
from dpcurator.errors import LedgerError, LedgerMissing

T = TypeVar("T")

#: The bytes of an SQLite database's header: a shorter file is none.
_HEADER_BYTES = 100


#: Milliseconds a read for authentication waits for a commit in progress (the file is
#: locked only while a commit writes; a check-and-charge's write lock lets readers in).
READ_NOW_BUSY_MS = 5_000
#: Seconds between a read's tries while a commit holds the file (see ``read_now``).
READ_NOW_POLL = 0.0005

# A positive fraction as ``str(Fraction)`` prints it: "3" or "3/10", no sign, no zero.
_POSITIVE = (
    "{c} GLOB '[1-9]*' AND {c} NOT GLOB '*[^0-9/]*' AND {c} NOT GLOB '*/*/*' "
    "AND {c} NOT GLOB '*/' AND {c} NOT GLOB '*/0*'"
)

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE analysts (
    seq INTEGER PRIMARY KEY CHECK (seq >= 1),
    created REAL NOT NULL CHECK (typeof(created) = 'real'),
    name TEXT NOT NULL CHECK (typeof(name) = 'text' AND length(name) > 0),
    quota TEXT CHECK (quota IS NULL OR ({_POSITIVE.format(c="quota")})),
    admin INTEGER NOT NULL CHECK (admin IN (0, 1)),
    token_key TEXT CHECK (token_key IS NULL OR length(token_key) = 16),
    token_hash TEXT CHECK (
        (token_key IS NULL) = (token_hash IS NULL)
        AND (token_hash IS NULL OR length(token_hash) = 64)
    ),
    hash TEXT NOT NULL CHECK (length(hash) = 64)
);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY CHECK (id >= 1),
    created REAL NOT NULL CHECK (typeof(created) = 'real'),
    analyst TEXT CHECK (analyst IS NULL OR (typeof(analyst) = 'text' AND length(analyst) > 0)),
    table_name TEXT NOT NULL CHECK (typeof(table_name) = 'text'),
    kind TEXT NOT NULL CHECK (typeof(kind) = 'text'),
    request TEXT NOT NULL CHECK (typeof(request) = 'text'),
    coverage TEXT NOT NULL CHECK (coverage GLOB '{{*}}'),
    cost TEXT NOT NULL CHECK ({_POSITIVE.format(c="cost")}),
    level TEXT NOT NULL CHECK ({_POSITIVE.format(c="level")}),
    noise TEXT NOT NULL CHECK (typeof(noise) = 'text'),
    hash TEXT NOT NULL CHECK (length(hash) = 64),
    answer TEXT,
    answer_hash TEXT CHECK ((answer IS NULL) = (answer_hash IS NULL))
);
CREATE TABLE checkpoints (
    seq INTEGER PRIMARY KEY CHECK (seq >= 1),
    upto INTEGER NOT NULL CHECK (typeof(upto) = 'integer' AND upto >= 1),
    created REAL NOT NULL CHECK (typeof(created) = 'real'),
    charge_hash TEXT NOT NULL CHECK (length(charge_hash) = 64),
    summary TEXT NOT NULL CHECK (typeof(summary) = 'text'),
    segment_hash TEXT NOT NULL CHECK (length(segment_hash) = 64),
    hash TEXT NOT NULL CHECK (length(hash) = 64),
    segment BLOB NOT NULL CHECK (typeof(segment) = 'blob')
);
"""
#: The table a ledger made before checkpoints lacks (see :meth:`SQLiteStore.upgrade`).
CHECKPOINTS = "checkpoints"


class SQLiteStore:
    """A ledger file (or, for ``path=None``, a database in memory that dies with the
    process). ``initial_meta``: the meta rows of a new ledger, created if (and only
    if) no file is at ``path``; None never creates one."""

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    kind = "sqlite"

    def __init__(
        self, path: str | Path | None, initial_meta: Sequence[tuple[str, str]] | None
    ) -> None:
        self.durable = not (path is None or str(path) == ":memory:")
        self.location = str(path) if self.durable else ":memory:"
        self._inode: tuple[int, int] | None = None
        self._auth: sqlite3.Connection | None = None
        try:
            if not self.durable:
                self._db = _connect(":memory:")
                self._db.execute("BEGIN IMMEDIATE")
                _initialise(self._db, initial_meta or ())
                self._db.execute("COMMIT")
                return
            p = Path(self.location)
            if not p.exists():
                if initial_meta is None:
                    raise LedgerMissing(f"ledger {self.location}: no such file")
                _create(p, initial_meta)
            _probe(p)
            self._db = _connect(self.location)
            _check_header(self._db, p)
            self._inode = _inode(p)
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"ledger {self.location}: cannot be used: {err}") from None

    def say(self, err: BaseException) -> str:
        """SQLite's error ``err`` on one line (it names a file, never a secret)."""
        return " ".join(str(err).split())

    def buckets(self) -> FileBuckets | None:
        """Request-rate buckets that every process on this ledger file shares
        (:mod:`.sqlite_rate`), or None for a ledger in memory (one process's)."""
        return FileBuckets(rate_file(self.location)) if self.durable else None

    # --- what is there ---------------------------------------------------------------

    def tables(self) -> list[str]:
        return sorted(
            r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        )

    def foreign(self, tables: list[str]) -> str:
        what = f"tables {', '.join(tables)}" if tables else "no tables"
        return f"an SQLite database with {what}"

    def altered(self) -> bool:
        objects = self._db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        expected = _expected_objects()
        older = [o for o in expected if o[2] != CHECKPOINTS]
        return objects not in (expected, older)

    def upgrade(self) -> bool:
        """Add the checkpoints table to a ledger an older dpcurator made (nothing else
        changes: its chains verify as before); whether the ledger has it now (a file
        that cannot be written keeps working without)."""
        if CHECKPOINTS in self.tables():
            return True
        statement = next(s for s in _SCHEMA.split(";") if f"TABLE {CHECKPOINTS}" in s)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            if CHECKPOINTS not in self.tables():
                self._db.execute(statement)
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self.rollback()
            return False
        return True

    def prepare(self) -> None:
        """Once the file is known to be a ledger: the journal mode and syncs it needs."""
        if not self.durable:
            return
        mode = self._db.execute("PRAGMA journal_mode=TRUNCATE").fetchone()[0]
        if mode != "truncate":
            raise LedgerError(
                f"ledger {self.location}: it is in journal mode {mode!r} and open in another "
                "program; close that program first"
            )
        self._db.execute("PRAGMA synchronous=FULL")
        # Dirty pages stay in memory until the commit. By default SQLite writes them to
        # the file once its 2 MB cache fills, taking the exclusive lock there and then,
        # so that every reader (a token's lookup, another process) waits for the rest of
        # the transaction, not only its commit. Measured with 2,000-charge batches of
        # about 12 KB a charge: a reader in another process waited up to 0.13-0.18 s
        # without this and at most 0.019 s with it. The memory is the transaction's own
        # rows, bounded by the request's ``max_queries`` (its Python objects take more).
        self._db.execute("PRAGMA cache_spill=OFF")

    # --- transactions ----------------------------------------------------------------

    def begin_read(self) -> Rows:
        self._db.execute("BEGIN")
        return Rows(self._db)

    def end_read(self) -> None:
        self._db.execute("COMMIT")

    def begin_write(self) -> Rows:
        if self.durable and _inode(Path(self.location)) != self._inode:
            # a charge written now would go to a file no one will open again
            raise LedgerError(
                f"ledger {self.location}: the file was removed or replaced while open; "
                "restore it from a backup and restart"
            )
        self._db.execute("BEGIN IMMEDIATE")
        return Rows(self._db)

    def commit(self) -> None:
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def retryable(self, err: BaseException, *, committing: bool) -> bool:
        """SQLite serialises writers with its lock (waiting up to 60 s): nothing to retry."""
        return False

    def read_now(self, read: Callable[[Rows], T]) -> T:
        """``read`` in a snapshot of a connection of its own. A writer's lock (``BEGIN
        IMMEDIATE``) lets readers in, so this waits only for a commit being written, at
        most :data:`READ_NOW_BUSY_MS` (then the driver's "database is locked").

        It tries again every :data:`READ_NOW_POLL` seconds rather than through SQLite's
        busy handler, which sleeps 1, 2, 5, 10, 15, 20, then 25 ms and more between
        tries: a read behind a 30 ms commit came out up to 25 ms after it, and every
        read queued behind that one waited as long."""
        until = time.monotonic() + READ_NOW_BUSY_MS / 1000
        while True:
            try:
                return self.read_at_once(read)
            except Busy:
                if time.monotonic() > until:
                    raise sqlite3.OperationalError("database is locked") from None
            time.sleep(READ_NOW_POLL)

    def meta_at_once(self, key: str) -> object:
        """The meta value ``key`` (None if absent) in one statement, a snapshot of its
        own, without waiting (:class:`Busy` while a commit is being written).

        Why. A read in the event loop hands the interpreter lock over at each statement
        (SQLite runs without it), and under load each handover back can take
        milliseconds: a token's lookup that finds the analysts' chain unchanged, the
        common case, needs this one statement rather than a transaction of three."""
        db = self._auth_connection()
        if db.in_transaction:  # (never after read_at_once's COMMIT; if so, no snapshot)
            raise Busy
        try:
            return Rows(db).meta_value(key)
        except sqlite3.OperationalError as err:
            if _busy(err):
                raise Busy from None
            raise

    def _auth_connection(self) -> sqlite3.Connection:
        """The connection of the lookups (:meth:`read_at_once`), made on first use; it
        never waits for a lock."""
        if self._auth is None:
            self._auth = _connect(self.location, busy_ms=0)
        return self._auth

    def read_at_once(self, read: Callable[[Rows], T]) -> T:
        """:meth:`read_now` without waiting: :class:`Busy` while a commit is being
        written. Its statements read a few pages the operating system has in memory
        (microseconds), so the event loop may call it. (After another process died in
        the middle of a commit, the first read rolls its journal back, as long as that
        takes; the server's own open does so before it serves.)"""
        db = self._auth_connection()
        db.execute("BEGIN")
        try:
            return read(Rows(db))
        except sqlite3.OperationalError as err:
            if _busy(err):
                raise Busy from None
            raise
        finally:
            db.execute("COMMIT")

    def close(self) -> None:
        """Close the file. A TRUNCATE journal stays behind, empty, after every commit; on
        the way out the connection switches to DELETE mode, which removes it once SQLite
        holds the write lock (never while another connection writes through it), so no
        empty ``-journal`` file is left beside the ledger."""
        if self.durable:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.close()
        if self._auth is not None:
            self._auth.close()

    # --- copies ----------------------------------------------------------------------

    def same_place(self, target: str) -> bool:
        return self.durable and os.path.exists(target) and os.path.samefile(target, self.location)


def write_copy(
    target: str, dump: Dump, *, force: bool, verify: Callable[[str], None], label: str
) -> None:
    """Write ``dump`` as a new ledger file at ``target``: built beside it, synced,
    ``verify(path)``-ed, and only then moved into place (an existing ``target`` is
    replaced only if ``force``). ``label`` starts every error message ("backup")."""
    dst = Path(target)
    if dst.exists() and not force:
        raise LedgerError(f"{label} {dst}: the file exists; refusing to overwrite it")
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=DELETE")
                db.execute("PRAGMA synchronous=FULL")
                db.execute("BEGIN IMMEDIATE")
                _initialise(db, ())
                Rows(db).load(dump)
                db.execute("COMMIT")
            finally:
                db.close()
            _fsync(tmp)
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"{label} {dst}: cannot write it: {err}") from None
        verify(str(tmp))
        _remove_sidecars(tmp)
        if force:
            os.replace(tmp, dst)
        else:
            try:
                os.link(tmp, dst)
            except FileExistsError:
                raise LedgerError(
                    f"{label} {dst}: the file exists; refusing to overwrite it"
                ) from None
        fsync_dir(dst.parent)
    except OSError as err:
        raise LedgerError(f"{label} {dst}: {err.strerror or err}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        _remove_sidecars(tmp)


# --- files --------------------------------------------------------------------------------


def _inode(path: Path) -> tuple[int, int] | None:
    """The file's identity (device, inode), None if it is gone."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _busy(err: sqlite3.OperationalError) -> bool:
    """Whether ``err`` is SQLite's "database is locked" (SQLITE_BUSY, any variant)."""
    return getattr(err, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


def lookup_connection(path: str) -> sqlite3.Connection:
    """A connection to the ledger file ``path`` that never waits for a lock, as the
    lookups' own (:meth:`SQLiteStore.meta_at_once`): for a reader in another process
    (the server's gate, :mod:`dpcurator.service.gate`)."""
    return _connect(path, busy_ms=0)


def _connect(path: str, busy_ms: int = 60_000) -> sqlite3.Connection:
    """A connection to an existing file (SQLite never creates one here), or to memory;
    it waits up to ``busy_ms`` for another connection's lock."""
    uri = ":memory:" if path == ":memory:" else Path(path).absolute().as_uri() + "?mode=rw"
    db = sqlite3.connect(
        uri,
        timeout=busy_ms / 1000,
        isolation_level=None,
        check_same_thread=False,
        uri=uri != ":memory:",
    )
    db.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    db.execute("PRAGMA trusted_schema=OFF")
    return db


_EXPECTED: list[tuple] | None = None


def _expected_objects() -> list[tuple]:
    """What ``sqlite_master`` of a ledger holds: its tables, exactly as created."""
    global _EXPECTED
    if _EXPECTED is None:
        db = sqlite3.connect(":memory:")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        _EXPECTED = db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        db.close()
    return _EXPECTED


def _initialise(db: sqlite3.Connection, meta: Sequence[tuple[str, str]]) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.executemany("INSERT INTO meta VALUES (?, ?)", list(meta))


def _probe(path: Path) -> None:
    """Refuse, before SQLite opens it, what cannot be a ledger: a directory, an empty
    file (SQLite would take it for a new database and write to it).

    Only SQLite ever opens a ledger file in this process. Closing *any* descriptor of a
    file drops every POSIX lock the process holds on it, SQLite's included (SQLite keeps
    its own descriptors open while any of its connections holds a lock, but cannot know
    of ours): a probe that opened and closed the file while a transaction of this
    process held the write lock (the background verification opens a store of its
    own) let another process write at the same time, and two processes appended the same
    charge. So this looks at the file's metadata only; :func:`_check_header` reads its
    header through SQLite."""
    try:
        st = path.stat()
    except OSError as err:
        raise LedgerError(f"ledger {path}: cannot be read: {err.strerror or err}") from None
    if stat.S_ISDIR(st.st_mode):
        raise LedgerError(f"ledger {path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(f"ledger {path}: not a regular file")
    if st.st_size == 0:
        raise LedgerError(
            f"ledger {path}: the file is empty (0 bytes), not a ledger; if it was one, its "
            "charges are lost: restore it from a backup, never start it afresh"
        )
    if st.st_size < _HEADER_BYTES:  # SQLite would read it as a database of no tables
        raise LedgerError(f"ledger {path}: not a dpcurator ledger (not an SQLite database)")


def _check_header(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a file that is not an SQLite database (SQLite reads its header; nothing is
    written), closing ``db``."""
    try:
        db.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as err:
        db.close()
        if "not a database" in str(err):
            raise LedgerError(
                f"ledger {path}: not a dpcurator ledger (not an SQLite database)"
            ) from None
        raise


def _create(path: Path, meta: Sequence[tuple[str, str]]) -> None:
    """Create a complete ledger at ``path``, atomically: it is built beside the path and
    linked into place, so no process ever sees a half-made ledger. If another process
    creates it first, theirs is kept."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            _initialise(db, meta)
            db.execute("COMMIT")
        finally:
            db.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:
            if not path.exists():  # a file system without hard links
                os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, sqlite3.DatabaseError) as err:
        raise LedgerError(f"ledger {path}: cannot be created: {err}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        _remove_sidecars(tmp)


def _remove_sidecars(path: Path) -> None:
    for suffix in ("-journal", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            path.with_name(path.name + suffix).unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a file's creation or rename in ``path`` durable (best effort: some file
    systems refuse to fsync a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
