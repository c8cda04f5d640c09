"""The durable ledger: every charge is on disk before its answer exists.

One SQLite file, ``synchronous=FULL`` with a rollback journal in ``TRUNCATE`` mode: when
a commit returns, the charge is in the main database file itself, so that file alone is
always the whole ledger (a WAL database keeps its latest commits in a ``-wal`` file that a
plain copy of the ``.db`` misses). The check and the charge happen inside one
``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock, so concurrent threads
and processes are serialised and never overspend together; a process first reads the
charges other processes committed since it last looked. The noisy answer is computed only
after the commit, and recorded in a second transaction: a crash in between wastes budget
but never releases an uncharged answer.

Tamper evidence. Every charge row stores ``hash = SHA-256(previous hash || canonical
encoding of id, created, analyst, table, kind, request, coverage, cost, level, noise)``;
the first charge chains from a *genesis* hash over the format version and the identity
(budget and schemas), and ``meta`` records the head of the chain (count and last hash).
The analysts' quotas form a second chain (each registration or quota change is a new
row; the latest row of a name is in force) anchored the same way. Answers are not in the
chain, since they are recorded later: each is *sealed* on its own as
``SHA-256(charge hash || answer)``. The whole ledger is verified on open, and each read
of new rows verifies them against the head. A charge or quota that was edited, deleted,
added or reordered, an altered identity, a lowered level and an edited answer are
refused with :class:`LedgerError`. The hash is not keyed: someone who can write the file
and recomputes the whole chain is not detected; that needs a copy kept elsewhere (see
:meth:`Ledger.backup`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpcurator.curator.credentials import (
    Credential,
    Principal,
    matches,
    new_token,
    split_token,
)
from dpcurator.errors import InvalidParameter, LedgerError

#: The ledger format this code reads and writes; any other is refused.
FORMAT = "2"

_MAGIC = b"SQLite format 3\x00"

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
"""

_META_KEYS = frozenset({"format", "identity", "genesis", "charges_head", "analysts_head"})

_COLUMNS = (
    "id, created, analyst, table_name, kind, request, coverage, cost, level, noise, hash, "
    "answer, answer_hash"
)


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
    hash: str = ""


@dataclass(frozen=True)
class _Entry:
    """An analyst's entry in force: quota, role, and the hash of their token (if any)."""

    quota: Fraction | None
    admin: bool = False
    token_key: str | None = None
    token_hash: str | None = None


@dataclass(frozen=True)
class BackupReport:
    """What :meth:`Ledger.backup` wrote, after verifying it."""

    source: str
    target: str
    charges: int
    analysts: int
    head: str


# --- hashing ---------------------------------------------------------------------------


def _by_key(entries: dict[str, _Entry]) -> dict[str, tuple[str, _Entry]]:
    return {e.token_key: (n, e) for n, e in entries.items() if e.token_key}


def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def _genesis(fmt: str, identity: str) -> bytes:
    return _digest(b"dpcurator ledger\x00", fmt.encode(), b"\x00", identity.encode())


def _analysts_genesis(genesis: bytes) -> bytes:
    return _digest(b"dpcurator analysts\x00", genesis)


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _encode(fields: tuple[object, ...]) -> bytes:
    """Canonical, unambiguous bytes of a row's fields: a compact JSON array in UTF-8."""
    return _JSON.encode(fields).encode()


def _charge_hash(prev: bytes, fields: tuple[object, ...]) -> bytes:
    return hashlib.sha256(prev + _JSON.encode(fields).encode()).digest()


def _answer_seal(charge_hash: bytes, answer: str) -> str:
    return hashlib.sha256(b"answer\x00" + charge_hash + answer.encode()).hexdigest()


# --- validation --------------------------------------------------------------------------


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and text[0] != "0"


def _ratio(text: object) -> tuple[int, int] | None:
    """(n, d) if ``text`` spells a positive fraction n/d exactly as ``str(Fraction)``
    would (lowest terms, no sign, "n" for d = 1), else None."""
    if type(text) is not str:
        return None
    num, slash, den = text.partition("/")
    if not _digits(num):
        return None
    if not slash:
        return int(num), 1
    if not _digits(den):
        return None
    n, d = int(num), int(den)
    return (n, d) if d > 1 and math.gcd(n, d) == 1 else None


def _positive(text: object) -> Fraction | None:
    r = _ratio(text)
    return None if r is None else Fraction(*r)


def _valid_coverage(text: object) -> dict[str, list[list[int]]] | None:
    if not isinstance(text, str):
        return None
    try:
        cov = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cov, dict):
        return None
    union = cov.get("|")
    if len(cov) == 1 and isinstance(union, list) and union and isinstance(union[0], dict):
        # a boolean query: {"|": [box, box, ...]}, each box as below
        ok = all(isinstance(b, dict) and _valid_box(b) for b in union)
        return cov if ok else None
    return cov if _valid_box(cov) else None


def _valid_box(cov: dict) -> bool:
    for name, ivs in cov.items():
        if not isinstance(name, str) or not isinstance(ivs, list):
            return False
        for iv in ivs:
            if (
                not isinstance(iv, list)
                or len(iv) != 2
                or type(iv[0]) is not int
                or type(iv[1]) is not int
                or not 0 <= iv[0] <= iv[1]
            ):
                return False
    return True


class Ledger:
    """One SQLite file shared by every curator process that serves the same data.

    ``Ledger(path, identity)`` opens the ledger at ``path``, verifying all of it, or
    creates it if (and only if) no file is there. ``identity`` (budget and schemas) must
    match the one the ledger was created with; ``identity=None`` opens any valid ledger
    and never creates one. ``path=None`` or ``":memory:"`` gives a fresh ledger in memory
    that dies with the process: then :attr:`durable` is False.
    """

    def __init__(
        self,
        path: str | Path | None,
        identity: dict[str, object] | None = None,
        *,
        create: bool = True,
    ) -> None:
        self._lock = threading.RLock()
        self.durable = not (path is None or str(path) == ":memory:")
        self.path = str(path) if self.durable else ":memory:"
        self._closed = False
        self._inode: tuple[int, int] | None = None
        self._at_head = False  # inside a write transaction, once the chain's tail is checked
        self._opened: list[ChargeRow] | None = None
        self._identity = "{}"
        self._genesis = b""
        self._head: tuple[int, bytes] = (0, b"")
        self._analysts: dict[str, _Entry] = {}
        self._analysts_head: tuple[int, bytes] = (0, b"")
        # authentication's own connection and verified view (see authenticate)
        self._auth_lock = threading.Lock()
        self._auth_db: sqlite3.Connection | None = None
        self._auth_view: tuple[tuple[int, bytes], dict[str, _Entry], dict] = ((0, b""), {}, {})
        want = None if identity is None else json.dumps(identity, sort_keys=True)
        try:
            if not self.durable:
                self._db = _connect(":memory:")
                with self._write():
                    _initialise(self._db, want or "{}")
            else:
                p = Path(self.path)
                if not p.exists():
                    if not create or want is None:
                        raise LedgerError(f"ledger {self.path}: no such file")
                    _create(p, want)
                _probe(p)
                self._db = _connect(self.path)
                self._inode = _inode(p)
            try:
                self._open(want)
            except BaseException:
                self._db.close()
                raise
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"ledger {self.path}: cannot be used: {err}") from None

    # --- opening and verifying --------------------------------------------------------

    def _open(self, want: str | None) -> None:
        with self._snapshot():
            self._check_format()
        if self.durable:
            mode = self._db.execute("PRAGMA journal_mode=TRUNCATE").fetchone()[0]
            if mode != "truncate":
                raise LedgerError(
                    f"ledger {self.path}: it is in journal mode {mode!r} and open in another "
                    "program; close that program first"
                )
            self._db.execute("PRAGMA synchronous=FULL")
        # A curator reads every charge right after opening: keep what was verified.
        self._opened = self._verify_all(keep=want is not None)
        if want is not None and self._identity != want:
            have = json.loads(self._identity)
            raise LedgerError(
                f"ledger {self.path} belongs to another curator (budget {have.get('budget')}, "
                f"tables {sorted(have.get('tables', {}))}); open it with the same budget and "
                "schemas, or use a new ledger file"
            )

    def _check_format(self) -> None:
        """Refuse an SQLite database that is not a ledger of this format, before any write."""
        objects = self._db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        tables = sorted(name for kind, name, _, _ in objects if kind == "table")
        if "meta" not in tables:
            what = f"tables {', '.join(tables)}" if tables else "no tables"
            raise LedgerError(
                f"ledger {self.path}: not a dpcurator ledger (an SQLite database with {what})"
            )
        try:
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError:
            raise LedgerError(
                f"ledger {self.path}: not a dpcurator ledger (its meta table is foreign)"
            ) from None
        fmt = meta.get("format")
        if fmt is None and "identity" in meta:
            raise LedgerError(
                f"ledger {self.path}: written by an older dpcurator (ledger format 1, without "
                f"integrity protection); this version reads ledger format {FORMAT} only"
            )
        if fmt is None:
            raise LedgerError(f"ledger {self.path}: not a dpcurator ledger (no format in meta)")
        if fmt != FORMAT:
            raise LedgerError(
                f"ledger {self.path}: written in ledger format {fmt!r}; this dpcurator reads "
                f"format {FORMAT} only"
            )
        if objects != _expected_objects():
            raise LedgerError(
                f"ledger {self.path}: its table definitions were altered (constraints, "
                "tables, indexes or triggers differ from a dpcurator ledger); restore it from "
                "a backup"
            )
        if set(meta) != _META_KEYS:
            odd = sorted(set(meta) ^ _META_KEYS)
            raise LedgerError(
                f"ledger {self.path}: its meta table was altered (entries {', '.join(odd)}); "
                "restore it from a backup"
            )
        identity = meta["identity"]
        genesis = _genesis(FORMAT, identity)
        if meta["genesis"] != genesis.hex():
            raise LedgerError(
                f"ledger {self.path}: its identity (budget and schemas) was altered; restore "
                "it from a backup"
            )
        self._identity = identity
        self._genesis = genesis
        self._head = (0, genesis)  # the last verified charge: (id, hash)
        self._analysts = {}
        self._analysts_head = (0, _analysts_genesis(genesis))

    def _verify_all(self, *, keep: bool = False) -> list[ChargeRow] | None:
        with self._lock:
            self._head = (0, self._genesis)
            self._analysts = {}
            self._analysts_head = (0, _analysts_genesis(self._genesis))
            with self._snapshot():
                self._read_analysts()
                fetched = self._fetch_after(0)
            rows = self._verify_after(*fetched, build=keep)
            return rows if keep else None

    def verify(self) -> int:
        """Verify the whole ledger again (as on open); return the number of charges."""
        try:
            self._verify_all()
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"ledger {self.path}: cannot be read: {err}") from None
        return self._head[0]

    def _meta_head(self, key: str, db: sqlite3.Connection | None = None) -> tuple[int, str]:
        row = (db or self._db).execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        try:
            n, h = row[0].split(" ")
            return int(n), h
        except (TypeError, ValueError, AttributeError):
            raise LedgerError(
                f"ledger {self.path}: its meta entry {key} was altered; restore it from a backup"
            ) from None

    def _broken(self, what: str) -> LedgerError:
        return LedgerError(
            f"ledger {self.path}: {what} (hash chain broken); restore it from a backup"
        )

    def _read_after(self, last_id: int, *, build: bool = True) -> list[ChargeRow]:
        """The charges after ``last_id``, each verified against the chain and the head
        (returned only if ``build``). Call inside a snapshot. Advances the verified head."""
        return self._verify_after(*self._fetch_after(last_id), build=build)

    def _fetch_after(self, last_id: int) -> tuple[int, tuple[int, str], bytes, list[tuple]]:
        """What :meth:`_verify_after` checks, read in the caller's snapshot; the hashing
        can then run after the snapshot ends, so that writers never wait for it."""
        head = self._meta_head("charges_head")
        if last_id == self._head[0]:
            prev = self._head[1]
        elif last_id == 0:
            prev = self._genesis
        else:
            r = self._db.execute("SELECT hash FROM charges WHERE id = ?", (last_id,)).fetchone()
            if r is None:
                raise self._broken(f"charge {last_id} was removed")
            prev = bytes.fromhex(r[0])
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM charges WHERE id > ? ORDER BY id", (last_id,)
        ).fetchall()
        return last_id, head, prev, rows

    def _verify_after(
        self,
        last_id: int,
        head: tuple[int, str],
        prev: bytes,
        rows: list[tuple],
        *,
        build: bool,
    ) -> list[ChargeRow]:
        head_n, head_h = head
        out = []
        expect = last_id + 1
        for r in rows:
            if r[0] > head_n:
                raise self._broken(
                    f"charge {r[0]} was added outside dpcurator (the ledger records {head_n} "
                    "charges)"
                )
            if r[0] != expect:
                raise self._broken(f"charge {expect} was removed")
            row, prev = self._verify_row(r, prev, build)
            if row is not None:
                out.append(row)
            expect += 1
        n = expect - 1
        if n != head_n or prev.hex() != head_h:
            if n < head_n:
                raise self._broken(
                    f"charge {n + 1} was removed (the ledger records {head_n} charges)"
                )
            if n > head_n:
                raise self._broken(
                    f"charge {head_n + 1} was added outside dpcurator (the ledger records "
                    f"{head_n} charges)"
                )
            raise self._broken(f"charge {n} was altered or removed")
        if n >= self._head[0]:
            self._head = (n, prev)
        return out

    def _verify_row(self, r: tuple, prev: bytes, build: bool) -> tuple[ChargeRow | None, bytes]:
        cid = r[0]
        cost, level, cov = _ratio(r[7]), _ratio(r[8]), _valid_coverage(r[6])
        if cost is None or level is None or level[0] * cost[1] < cost[0] * level[1]:
            raise LedgerError(
                f"ledger {self.path}: charge {cid} has an invalid cost {r[7]!r} or level "
                f"{r[8]!r} (each must be a positive fraction, the level at least the cost); "
                "restore the ledger from a backup"
            )
        if cov is None:
            raise LedgerError(
                f"ledger {self.path}: charge {cid} has malformed coverage; restore the ledger "
                "from a backup"
            )
        if (
            type(r[1]) is not float
            or not math.isfinite(r[1])
            or not all(type(r[i]) is str for i in (3, 4, 5, 9, 10))
            or not (r[2] is None or type(r[2]) is str)
        ):
            raise LedgerError(
                f"ledger {self.path}: charge {cid} has a field of the wrong type; restore "
                "the ledger from a backup"
            )
        h = _charge_hash(prev, r[:10])
        if h.hex() != r[10]:
            raise self._broken(f"charge {cid} was altered or removed")
        answer = None
        if r[11] is not None or r[12] is not None:
            if r[11] is None or r[12] != _answer_seal(h, r[11]):
                raise LedgerError(
                    f"ledger {self.path}: the answer of charge {cid} was altered (its seal "
                    "does not match); restore the ledger from a backup"
                )
            if build:
                answer = json.loads(r[11])
        if not build:
            return None, h
        row = ChargeRow(
            id=cid,
            created=r[1],
            analyst=r[2],
            table=r[3],
            kind=r[4],
            request=r[5],
            coverage=cov,
            cost=Fraction(*cost),
            level=Fraction(*level),
            noise=r[9],
            answer=answer,
            hash=r[10],
        )
        return row, h

    def _read_analysts(self) -> None:
        """Bring the verified analysts up to the head of their chain. Call inside a snapshot."""
        got = self._analysts_after(self._db, self._analysts_head, self._analysts)
        if got is not None:
            self._analysts, self._analysts_head = got

    def _analysts_after(
        self,
        db: sqlite3.Connection,
        have: tuple[int, bytes],
        entries: dict[str, _Entry],
    ) -> tuple[dict[str, _Entry], tuple[int, bytes]] | None:
        """The analysts' entries verified from ``have`` (a chain position and the entries
        in force there) up to the head ``db`` records, or None when nothing changed.
        Call inside a snapshot of ``db``."""
        head_n, head_h = self._meta_head("analysts_head", db)
        n, prev = have
        if (head_n, head_h) == (n, prev.hex()):
            return None
        entries = dict(entries)
        rows = db.execute(
            "SELECT seq, created, name, quota, admin, token_key, token_hash, hash FROM analysts "
            "WHERE seq > ? ORDER BY seq",
            (n,),
        ).fetchall()
        for seq, created, name, quota, admin, key, token_hash, stored in rows:
            if seq != n + 1:
                raise self._broken(f"analyst entry {n + 1} was removed")
            q = None if quota is None else _positive(quota)
            if (
                (quota is not None and q is None)
                or not isinstance(name, str)
                or not name
                or not isinstance(created, float)
                or admin not in (0, 1)
                or (key is None) != (token_hash is None)
            ):
                raise LedgerError(
                    f"ledger {self.path}: analyst entry {seq} is malformed; restore the ledger "
                    "from a backup"
                )
            h = _digest(prev, _encode((seq, created, name, quota, admin, key, token_hash)))
            if h.hex() != stored:
                raise self._broken(f"analyst entry {seq} ({name!r}) was altered or removed")
            entries[name] = _Entry(q, bool(admin), key, token_hash)
            n, prev = seq, h
        if (n, prev.hex()) != (head_n, head_h):
            raise self._broken(
                f"analyst entries were removed or added (the ledger records {head_n}, found {n})"
            )
        return entries, (n, prev)

    # --- transactions -------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: the write lock is held for the whole block.

        Any failure of the storage (a file made read-only, deleted or full, a disk
        error) is a :class:`LedgerError` and leaves nothing committed."""
        with self._lock:
            saved = (self._head, self._analysts, self._analysts_head)
            if self.durable and _inode(Path(self.path)) != self._inode:
                # a charge written now would go to a file no one will open again
                raise LedgerError(
                    f"ledger {self.path}: the file was removed or replaced while open; "
                    "restore it from a backup and restart"
                )
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                raise self._unusable(err) from None
            try:
                yield self._db
            except BaseException as err:
                self._rollback()
                self._head, self._analysts, self._analysts_head = saved
                if isinstance(err, sqlite3.Error):
                    raise self._unusable(err) from None
                raise
            else:
                try:
                    self._db.execute("COMMIT")
                except sqlite3.Error as err:
                    self._rollback()
                    self._head, self._analysts, self._analysts_head = saved
                    raise self._unusable(err) from None
            finally:
                self._at_head = False

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    def _unusable(self, err: sqlite3.Error) -> LedgerError:
        return LedgerError(f"ledger {self.path}: cannot be written: {err}")

    @contextmanager
    def _write(self) -> Iterator[None]:
        """Join the caller's transaction, or run in a transaction of our own."""
        if self._db.in_transaction:
            yield
        else:
            with self.transaction():
                yield

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Read in one consistent snapshot (the caller's transaction, or a read one)."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def identity(self) -> dict[str, object]:
        """The identity (budget and schemas) the ledger was created with."""
        return json.loads(self._identity)

    @property
    def head(self) -> tuple[int, str]:
        """The last verified charge: (id, hex hash); (0, genesis hash) if none."""
        return self._head[0], self._head[1].hex()

    # --- charges --------------------------------------------------------------------------

    def charges_after(self, last_id: int) -> list[ChargeRow]:
        """The charges with an id above ``last_id``, oldest first, each verified (the
        first call after opening gets the rows verified by the opening)."""
        with self._lock:
            opened, self._opened = self._opened, None
            if opened and last_id < opened[-1].id:
                later = self.charges_after(opened[-1].id)
                return [r for r in opened if r.id > last_id] + later
            try:
                with self._snapshot():
                    fetched = self._fetch_after(last_id)
                return self._verify_after(*fetched, build=True)
            except sqlite3.DatabaseError as err:
                raise LedgerError(f"ledger {self.path}: cannot be read: {err}") from None

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
        answer: object = None,
    ) -> int:
        """Append a charge to the chain (inside the caller's transaction, if any), with
        its answer (sealed, see the module docstring) when it is known already."""
        cost, level = Fraction(cost), Fraction(level)
        if cost <= 0 or level < cost:
            raise LedgerError(
                f"ledger {self.path}: refusing to record a charge of cost {cost} at level "
                f"{level} (the cost must be > 0 and the level at least the cost)"
            )
        cov = json.dumps(coverage) if isinstance(coverage, dict) else None
        if cov is None or _valid_coverage(cov) is None:
            raise LedgerError(f"ledger {self.path}: refusing to record malformed coverage")
        with self._lock, self._write():
            if not self._at_head:
                head_n, head_h = self._meta_head("charges_head")
                if (head_n, head_h) != (self._head[0], self._head[1].hex()):
                    self._read_after(self._head[0])  # others appended: verify first
                self._check_charges_tail()
                self._at_head = True  # until this transaction ends, only we append
            cid = self._head[0] + 1
            fields = (
                cid,
                time.time(),
                analyst,
                table,
                kind,
                request,
                cov,
                str(cost),
                str(level),
                noise,
            )
            h = _charge_hash(self._head[1], fields)
            text = seal = None
            if answer is not None:
                text = json.dumps(answer)
                seal = _answer_seal(h, text)
            self._db.execute(
                "INSERT INTO charges (id, created, analyst, table_name, kind, request, "
                "coverage, cost, level, noise, hash, answer, answer_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*fields, h.hex(), text, seal),
            )
            self._db.execute(
                "UPDATE meta SET value = ? WHERE key = 'charges_head'", (f"{cid} {h.hex()}",)
            )
            self._head = (cid, h)
            return cid

    def record_answer(self, charge_id: int, answer: object) -> None:
        self.record_answers([(charge_id, answer)])

    def record_answers(self, answers: list[tuple[int, object]]) -> None:
        """Record (and seal) answers of committed charges, in one transaction."""
        if not answers:
            return
        with self._lock, self.transaction() as db:
            ids = [cid for cid, _ in answers]
            hashes = dict(
                db.execute(
                    "SELECT id, hash FROM charges WHERE id BETWEEN ? AND ?", (min(ids), max(ids))
                ).fetchall()
            )
            rows = []
            for cid, a in answers:
                if cid not in hashes:
                    raise LedgerError(f"ledger {self.path}: no charge {cid} to answer")
                text = json.dumps(a)
                rows.append((text, _answer_seal(bytes.fromhex(hashes[cid]), text), cid))
            db.executemany("UPDATE charges SET answer = ?, answer_hash = ? WHERE id = ?", rows)

    # --- analysts and quotas ---------------------------------------------------------------

    def _refresh_analysts(self) -> None:
        try:
            with self._snapshot():
                self._read_analysts()
        except sqlite3.DatabaseError as err:
            raise LedgerError(f"ledger {self.path}: cannot be read: {err}") from None

    def quota(self, analyst: str) -> Fraction | bool | None:
        """The analyst's quota; None for no quota; False if the analyst is unknown."""
        with self._lock:
            self._refresh_analysts()
            entry = self._analysts.get(analyst)
            return False if entry is None else entry.quota

    def analysts(self) -> dict[str, Fraction | None]:
        """Every registered analyst and the quota in force (None: no quota of their own)."""
        with self._lock:
            self._refresh_analysts()
            return {name: e.quota for name, e in self._analysts.items()}

    # --- credentials for the HTTP service ---------------------------------------------------

    def add_credential(
        self, name: str, *, quota: Fraction | None = None, admin: bool = False
    ) -> str:
        """Give ``name`` a new bearer token (registering them if new) and return it; only
        its hash is kept, in the analysts' chain. ``quota`` None keeps the quota in force
        (none for a new analyst); a quota given here is an administrator's explicit
        change. A previous token of ``name`` stops working."""
        q = self._check_quota(name, quota)
        token, key, token_hash = new_token()
        with self._lock, self._write():
            self._read_analysts()
            have = self._analysts.get(name)
            keep = have.quota if have is not None else None
            self._append_analyst(
                name, keep if q is None else q, admin=bool(admin), key=key, token_hash=token_hash
            )
        return token

    def revoke(self, name: str) -> None:
        """Stop ``name``'s token from working (at once, in every process); their charges
        and quota stay."""
        with self._lock, self._write():
            self._read_analysts()
            have = self._analysts.get(name)
            if have is None:
                raise InvalidParameter(f"no analyst {name!r} in ledger {self.path}")
            if have.token_key is not None or have.admin:
                self._append_analyst(name, have.quota, admin=False, key=None, token_hash=None)

    def credentials(self) -> list[Credential]:
        """Every analyst: quota, role, and whether they hold a working token."""
        with self._lock:
            self._refresh_analysts()
            return [
                Credential(n, e.quota, e.admin, e.token_key is not None)
                for n, e in sorted(self._analysts.items())
            ]

    def authenticate(self, token: object) -> Principal | None:
        """Who holds ``token``, or None (unknown, malformed or revoked).

        Never waits for the write lock: tokens are looked up in a verified view of the
        analysts' chain, brought up to the head on a read-only connection of its own
        before each lookup (one small read), so a revocation committed by any process
        applies to every request that starts after its commit. While another process is
        committing (the file is locked for that instant), the view as it was is used."""
        parts = split_token(token)
        key, secret = parts if parts is not None else ("", "")
        found = self._tokens().get(key) if key else None
        name, entry = found if found is not None else (None, None)
        stored = entry.token_hash if entry is not None and entry.token_hash else "0" * 64
        if not matches(secret, stored) or entry is None or name is None:
            return None
        return Principal(name, entry.admin)

    def _tokens(self) -> dict[str, tuple[str, _Entry]]:
        """token key -> (analyst, entry), for the tokens in force (see authenticate)."""
        if not self.durable:  # in memory: this object is the only writer
            with self._lock:
                self._refresh_analysts()
                return _by_key(self._analysts)
        with self._auth_lock:
            if self._closed:
                raise LedgerError(f"ledger {self.path}: closed")
            head, entries, by_key = self._auth_view
            if not head[1]:
                head = (0, _analysts_genesis(self._genesis))
            try:
                if self._auth_db is None:
                    self._auth_db = _connect(self.path, busy_ms=0)
                db = self._auth_db
                db.execute("BEGIN")
                try:
                    got = self._analysts_after(db, head, entries)
                finally:
                    db.execute("COMMIT")
            except sqlite3.OperationalError as err:
                if "locked" in str(err) or "busy" in str(err):
                    return by_key  # a commit in progress: not in force yet
                raise LedgerError(f"ledger {self.path}: cannot be read: {err}") from None
            except sqlite3.DatabaseError as err:
                raise LedgerError(f"ledger {self.path}: cannot be read: {err}") from None
            if got is not None:
                entries, head = got
                by_key = _by_key(entries)
                self._auth_view = (head, entries, by_key)
            return by_key

    def _check_charges_tail(self) -> None:
        """Before extending the chain, verify its last charge again, in full."""
        n, h = self._head
        if n > 0:
            self._read_after(n - 1, build=False)
            if self._head != (n, h):
                raise self._broken(f"charge {n} was altered or removed")

    def _check_analysts_tail(self) -> None:
        """Before extending the quotas' chain, verify its last entry again, in full."""
        n, h = self._analysts_head
        if n == 0:
            return
        if n == 1:
            prev = _analysts_genesis(self._genesis)
        else:
            r = self._db.execute("SELECT hash FROM analysts WHERE seq = ?", (n - 1,)).fetchone()
            prev = b"" if r is None else bytes.fromhex(r[0])
        r = self._db.execute(
            "SELECT seq, created, name, quota, admin, token_key, token_hash FROM analysts "
            "WHERE seq = ?",
            (n,),
        ).fetchone()
        if r is None or _digest(prev, _encode(tuple(r))) != h:
            raise self._broken(f"analyst entry {n} was altered or removed")

    def _append_analyst(
        self,
        name: str,
        quota: Fraction | None,
        *,
        admin: bool | None = None,
        key: str | bool | None = False,
        token_hash: str | None = None,
    ) -> None:
        """Append an entry for ``name``; role and token carry over unless given
        (``key=False``: keep the current token)."""
        self._check_analysts_tail()
        n, prev = self._analysts_head
        have = self._analysts.get(name, _Entry(None))
        if admin is None:
            admin = have.admin
        if key is False:
            key, token_hash = have.token_key, have.token_hash
        seq = n + 1
        text = None if quota is None else str(quota)
        created = time.time()
        fields = (seq, created, name, text, int(admin), key, token_hash)
        h = _digest(prev, _encode(fields))
        self._db.execute(
            "INSERT INTO analysts (seq, created, name, quota, admin, token_key, token_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*fields, h.hex()),
        )
        self._db.execute(
            "UPDATE meta SET value = ? WHERE key = 'analysts_head'", (f"{seq} {h.hex()}",)
        )
        self._analysts = {**self._analysts, name: _Entry(quota, admin, key, token_hash)}  # type: ignore[arg-type]
        self._analysts_head = (seq, h)

    @staticmethod
    def _check_quota(name: str, quota: Fraction | None) -> Fraction | None:
        if not isinstance(name, str) or not name:
            raise InvalidParameter("an analyst needs a non-empty name")
        if quota is None:
            return None
        q = Fraction(quota)
        if q <= 0:
            raise InvalidParameter(f"a quota must be > 0, got {quota}")
        return q

    def register_analyst(self, name: str, quota: Fraction | None = None) -> Fraction | None:
        """Register ``name`` (with ``quota``, None for none), or find them registered.

        A registered analyst keeps the quota in force: ``quota=None`` (or the same quota)
        changes nothing, and a different quota is refused with :class:`InvalidParameter`;
        only :meth:`set_quota` changes a quota. Returns the quota in force."""
        q = self._check_quota(name, quota)
        with self._lock, self._write():
            self._read_analysts()
            if name in self._analysts:
                have = self._analysts[name].quota
                if q is None or q == have:
                    return have
                now = "has no quota" if have is None else f"has the quota {have}"
                raise InvalidParameter(
                    f"analyst {name!r} {now} in ledger {self.path}; a quota, once set, is "
                    "changed only by an explicit set_quota"
                )
            self._append_analyst(name, q)
            return q

    def set_quota(self, analyst: str, quota: Fraction | None) -> None:
        """An administrator's change: ``analyst``'s quota becomes ``quota`` (None removes
        it), registering them if needed. Recorded in the analysts' chain."""
        q = self._check_quota(analyst, quota)
        with self._lock, self._write():
            self._read_analysts()
            if analyst in self._analysts and self._analysts[analyst].quota == q:
                return
            self._append_analyst(analyst, q)

    # --- copies ---------------------------------------------------------------------------------

    def backup(self, target: str | Path, *, force: bool = False) -> BackupReport:
        """Verify this ledger, copy it live with SQLite's online backup API, verify the copy.

        The copy is one consistent snapshot holding at least every charge committed before
        the call, and it must extend the chain verified here; it is written beside
        ``target`` and moved into place only once verified. An existing ``target`` is
        refused unless ``force``."""
        return self._backup(Path(target), force=force, verified=False)

    def _backup(self, dst: Path, *, force: bool, verified: bool) -> BackupReport:
        if dst.exists() and not force:
            raise LedgerError(f"backup {dst}: the file exists; refusing to overwrite it")
        if self.durable and dst.exists() and os.path.samefile(dst, self.path):
            raise LedgerError(f"backup {dst}: is the ledger itself")
        with self._lock:
            if not verified:
                self.verify()
            before, before_hash = self.head
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            try:
                out = sqlite3.connect(tmp, isolation_level=None)
                try:
                    with self._lock:
                        self._db.backup(out)  # all pages in one step: one snapshot
                finally:
                    out.close()
                _fsync(tmp)
            except sqlite3.DatabaseError as err:
                raise LedgerError(f"backup {dst}: cannot write it: {err}") from None
            try:
                copy = Ledger(tmp, None, create=False)
            except LedgerError as err:  # changed since it was verified here: say where
                raise LedgerError(str(err).replace(str(tmp), self.path)) from None
            try:
                n = copy.head[0]
                ok = n >= before and (
                    before == 0
                    or copy._db.execute(
                        "SELECT hash FROM charges WHERE id = ?", (before,)
                    ).fetchone()
                    == (before_hash,)
                )
                if not ok:
                    raise LedgerError(
                        f"backup {dst}: the copy does not hold the {before} verified charges "
                        f"of {self.path}"
                    )
                report = BackupReport(self.path, str(dst), n, len(copy.analysts()), copy.head[1])
            finally:
                copy.close()
            _remove_sidecars(tmp)
            if force:
                os.replace(tmp, dst)
            else:
                try:
                    os.link(tmp, dst)
                except FileExistsError:
                    raise LedgerError(
                        f"backup {dst}: the file exists; refusing to overwrite it"
                    ) from None
            _fsync_dir(dst.parent)
            return report
        except OSError as err:
            raise LedgerError(f"backup {dst}: {err.strerror or err}") from None
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
            _remove_sidecars(tmp)

    def close(self) -> None:
        """Close the file. A TRUNCATE journal stays behind, empty, after every commit; on
        the way out the connection switches to DELETE mode, which removes it once SQLite
        holds the write lock (never while another connection writes through it), so no
        empty ``-journal`` file is left beside the ledger."""
        with self._lock, self._auth_lock:
            if not self._closed:
                self._closed = True
                if self.durable:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("PRAGMA journal_mode=DELETE")
                self._db.close()
                if self._auth_db is not None:
                    self._auth_db.close()


def backup_ledger(source: str | Path, target: str | Path, *, force: bool = False) -> BackupReport:
    """Verify the ledger at ``source`` and copy it, live, to ``target`` (see
    :meth:`Ledger.backup`)."""
    if Path(target).exists() and not force:
        raise LedgerError(f"backup {target}: the file exists; refusing to overwrite it")
    led = Ledger(source, None, create=False)  # verifies all of it
    try:
        return led._backup(Path(target), force=force, verified=True)
    finally:
        led.close()


# --- files --------------------------------------------------------------------------------


def _inode(path: Path) -> tuple[int, int] | None:
    """The file's identity (device, inode), None if it is gone."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


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


def _initialise(db: sqlite3.Connection, identity: str) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    genesis = _genesis(FORMAT, identity)
    db.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("format", FORMAT),
            ("identity", identity),
            ("genesis", genesis.hex()),
            ("charges_head", f"0 {genesis.hex()}"),
            ("analysts_head", f"0 {_analysts_genesis(genesis).hex()}"),
        ],
    )


def _probe(path: Path) -> None:
    """Refuse, before SQLite sees it, a file that cannot be a ledger."""
    try:
        if path.is_dir():
            raise LedgerError(f"ledger {path}: is a directory")
        with open(path, "rb") as f:
            head = f.read(len(_MAGIC))
    except OSError as err:
        raise LedgerError(f"ledger {path}: cannot be read: {err.strerror or err}") from None
    if not head:
        raise LedgerError(
            f"ledger {path}: the file is empty (0 bytes), not a ledger; if it was one, its "
            "charges are lost: restore it from a backup, never start it afresh"
        )
    if head != _MAGIC:
        raise LedgerError(f"ledger {path}: not a dpcurator ledger (not an SQLite database)")


def _create(path: Path, identity: str) -> None:
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
            _initialise(db, identity)
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
        _fsync_dir(path.parent)
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


def _fsync_dir(path: Path) -> None:
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
