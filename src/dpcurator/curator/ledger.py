"""The durable ledger: every charge is stored before its answer leaves the curator.

The rows live in a store (:mod:`dpcurator.curator.stores`): an SQLite file on one host
(the default), or a PostgreSQL database that several servers share. This module holds
what is the same in both: the hash chains, their verification, and what a charge, an
analyst or an answer is. The check and the charge happen inside one write transaction,
which the store serialises across every thread, process and host that shares the ledger
(SQLite's ``BEGIN IMMEDIATE`` write lock; a PostgreSQL advisory lock), so they never
overspend together; a process first reads the charges others committed since it last
looked. An answer is recorded in the transaction of its charge and leaves only after
the commit: a crash in between wastes budget but never releases an uncharged answer.

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
refused with :class:`LedgerError`. The hash is not keyed, and a shorter chain (the
newest rows deleted, the head rewritten) verifies on its own: a rewrite or a rollback is
detected against the ledger's anchor, a file outside the store that receives the heads
after each commit (:mod:`dpcurator.curator.ledger_anchoring`), and against copies kept
elsewhere (see :meth:`Ledger.backup`). A chain does not depend on its store: a ledger
copied from one store to the other (:func:`copy_ledger`) verifies the same, to the same
head.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

from dpcurator.curator import unit_key as unit_key_of
from dpcurator.curator.credentials import (
    Credential,
    Principal,
    matches,
    new_token,
    split_token,
)
from dpcurator.curator.ledger_anchoring import Anchoring, anchor_file, verify_interval
from dpcurator.curator.stores import (
    Rows,
    is_url,
    location_of,
    open_store,
    target_of,
    write_copy,
)
from dpcurator.errors import InvalidParameter, LedgerError

#: The ledger format this code reads and writes; any other is refused.
FORMAT = "2"

#: How often a write of the ledger's own (analysts, answers) is tried when the database
#: aborts it (see :class:`TransactionAborted`).
WRITE_ATTEMPTS = 3

F = TypeVar("F", bound=Callable[..., Any])

_META_KEYS = frozenset({"format", "identity", "genesis", "charges_head", "analysts_head"})


class TransactionAborted(LedgerError):
    """The database aborted a write transaction before it committed (a serialisation
    failure, a deadlock, a connection lost before the commit): nothing of it was
    written, and it may be run again."""


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
    """What :meth:`Ledger.backup` or :func:`copy_ledger` wrote, after verifying it."""

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


def _initial_meta(identity: str) -> list[tuple[str, str]]:
    """The meta rows of a new, empty ledger of ``identity``."""
    genesis = _genesis(FORMAT, identity)
    return [
        ("format", FORMAT),
        ("identity", identity),
        ("genesis", genesis.hex()),
        ("charges_head", f"0 {genesis.hex()}"),
        ("analysts_head", f"0 {_analysts_genesis(genesis).hex()}"),
    ]


def _retried(method: F) -> F:
    """Run a write of the ledger's own again when the database aborted it (nothing was
    written), a few times; inside a caller's transaction, the caller decides."""

    @functools.wraps(method)
    def run(self: Ledger, *args: Any, **kw: Any) -> Any:
        if self._writing:
            return method(self, *args, **kw)
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return method(self, *args, **kw)
            except TransactionAborted:
                pass
        return method(self, *args, **kw)

    return run  # type: ignore[return-value]


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


class Ledger(Anchoring):
    """A ledger shared by every curator process that serves the same data.

    ``Ledger(target, identity)`` opens the ledger that ``target`` names, verifying all
    of it, or creates it if (and only if) nothing is there: a file path (or
    ``sqlite:///PATH``), or ``postgresql://user@host/dbname[?schema=NAME]`` (see
    :mod:`dpcurator.curator.stores`). ``identity`` (budget and schemas) must match the one
    the ledger was created with; ``identity=None`` opens any valid ledger and never
    creates one. ``target=None`` or ``":memory:"`` gives a fresh ledger in memory that
    dies with the process: then :attr:`durable` is False. :attr:`path` names the ledger
    in messages (a URL without its password).

    ``anchor``: the file outside the store where the chains' heads are appended after
    each commit, and against which the ledger is checked on open, so that a rollback is
    refused (see :mod:`dpcurator.curator.ledger_anchoring`): ``True`` (the default) is
    ``<file>.anchor`` beside an SQLite ledger and none for PostgreSQL, ``None`` none.
    Opened with an ``identity`` (by a curator), the heads found are anchored at once.
    ``verify_every``: seconds between re-verifications of the whole ledger by a thread
    of this process (None, the default: only on open and by :meth:`verify`).
    """

    def __init__(
        self,
        path: str | Path | None,
        identity: dict[str, object] | None = None,
        *,
        create: bool = True,
        anchor: str | Path | bool | None = True,
        verify_every: float | None = None,
        unit_key: bytes | None = None,
    ) -> None:
        anchor_path = anchor_file(path, anchor)  # bad arguments change nothing
        every = verify_interval(verify_every)
        self._lock = threading.RLock()
        self._target = path
        self._closed = False
        self._at_head = False  # inside a write transaction, once the chain's tail is checked
        self._opened: list[ChargeRow] | None = None
        self._identity = "{}"
        self._genesis = b""
        self._head: tuple[int, bytes] = (0, b"")
        self._analysts: dict[str, _Entry] = {}
        self._analysts_head: tuple[int, bytes] = (0, b"")
        self._tx: Rows | None = None  # the transaction (read or write) in progress
        self._writing = False
        # authentication's own connection and verified view (see authenticate)
        self._auth_lock = threading.Lock()
        self._auth_view: tuple[tuple[int, bytes], dict[str, _Entry], dict] = ((0, b""), {}, {})
        want = None if identity is None else json.dumps(identity, sort_keys=True)
        memory = path is None or str(path) == ":memory:"
        initial = None
        if memory:
            initial = _initial_meta(unit_key_of.sealed(want or "{}", unit_key))
        elif create and want is not None:
            initial = _initial_meta(unit_key_of.sealed(want, unit_key))
        self._store = open_store(path, initial)
        self.durable = self._store.durable
        self.path = self._store.location
        try:
            anchored = self._read_anchor(anchor_path)
            self._open(want)
            if want is not None and json.loads(want).get("privacy_unit"):
                unit_key_of.check_same(self.unit_key, unit_key, self.path)
            self._setup_anchor(anchored, curator=want is not None)
            self._start_verifying(every)
        except BaseException as err:
            if self._anchor is not None:
                self._anchor.close()
            self._store.close()
            if isinstance(err, self._store.errors):
                raise LedgerError(
                    f"ledger {self.path}: cannot be used: {self._store.say(err)}"
                ) from None
            raise

    # --- opening and verifying --------------------------------------------------------

    def _open(self, want: str | None) -> None:
        with self._snapshot():
            self._check_format()
        self._store.prepare()
        # A curator reads every charge right after opening: keep what was verified.
        self._opened = self._verify_all(keep=want is not None)
        if want is not None and unit_key_of.public(self._identity) != json.loads(want):
            have = json.loads(self._identity)
            raise LedgerError(
                f"ledger {self.path} belongs to another curator (budget {have.get('budget')}, "
                f"tables {sorted(have.get('tables', {}))}); open it with the same budget and "
                "schemas, or use a new ledger"
            )

    def _check_format(self) -> None:
        """Refuse a database that is not a ledger of this format, before any write."""
        rows = self._rows()
        tables = self._store.tables()
        if "meta" not in tables:
            raise LedgerError(
                f"ledger {self.path}: not a dpcurator ledger ({self._store.foreign(tables)})"
            )
        try:
            meta = rows.meta()
        except self._store.errors:
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
        if self._store.altered():
            raise LedgerError(
                f"ledger {self.path}: its table definitions were altered (constraints, "
                "tables, indexes or triggers differ from a dpcurator ledger); restore it from "
                "a backup"
            )
        if set(meta) != _META_KEYS:
            odd = sorted(map(str, set(meta) ^ _META_KEYS))
            raise LedgerError(
                f"ledger {self.path}: its meta table was altered (entries {', '.join(odd)}); "
                "restore it from a backup"
            )
        identity = meta["identity"]
        genesis = _genesis(FORMAT, str(identity))
        if not isinstance(identity, str) or meta["genesis"] != genesis.hex():
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
        """Verify the whole ledger again (as on open, against its anchor too); return the
        number of charges."""
        anchored = self.anchored()  # before the snapshot, which holds what it records
        try:
            self._verify_all()
        except self._store.errors as err:
            raise self._unreadable(err) from None
        self._check_anchor(anchored)
        return self._head[0]

    def _rows(self) -> Rows:
        assert self._tx is not None, "inside a transaction only"
        return self._tx

    def _meta_head(self, key: str, rows: Rows | None = None) -> tuple[int, str]:
        value = (rows or self._rows()).meta_value(key)
        try:
            n, h = value.split(" ")  # type: ignore[attr-defined]
            return int(n), h
        except (TypeError, ValueError, AttributeError):
            raise LedgerError(
                f"ledger {self.path}: its meta entry {key} was altered; restore it from a backup"
            ) from None

    def _broken(self, what: str) -> LedgerError:
        return LedgerError(
            f"ledger {self.path}: {what} (hash chain broken); restore it from a backup"
        )

    def _unreadable(self, err: BaseException) -> LedgerError:
        return LedgerError(f"ledger {self.path}: cannot be read: {self._store.say(err)}")

    def _stored_hash(self, value: object, what: str) -> bytes:
        try:
            return bytes.fromhex(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._broken(f"{what} was altered or removed") from None

    def _read_after(self, last_id: int, *, build: bool = True) -> list[ChargeRow]:
        """The charges after ``last_id``, each verified against the chain and the head
        (returned only if ``build``). Call inside a snapshot. Advances the verified head."""
        return self._verify_after(*self._fetch_after(last_id), build=build)

    def _fetch_after(self, last_id: int) -> tuple[int, tuple[int, str], bytes, list[tuple]]:
        """What :meth:`_verify_after` checks, read in the caller's snapshot; the hashing
        can then run after the snapshot ends, so that writers never wait for it."""
        rows = self._rows()
        head = self._meta_head("charges_head")
        if last_id == self._head[0]:
            prev = self._head[1]
        elif last_id == 0:
            prev = self._genesis
        else:
            stored = rows.charge_hash(last_id)
            if stored is None:
                raise self._broken(f"charge {last_id} was removed")
            prev = self._stored_hash(stored, f"charge {last_id}")
        return last_id, head, prev, rows.charges_after(last_id)

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
        got = self._analysts_after(self._rows(), self._analysts_head, self._analysts)
        if got is not None:
            self._analysts, self._analysts_head = got

    def _analysts_after(
        self,
        rows: Rows,
        have: tuple[int, bytes],
        entries: dict[str, _Entry],
    ) -> tuple[dict[str, _Entry], tuple[int, bytes]] | None:
        """The analysts' entries verified from ``have`` (a chain position and the entries
        in force there) up to the head ``rows`` records, or None when nothing changed.
        Call inside a snapshot of ``rows``."""
        head_n, head_h = self._meta_head("analysts_head", rows)
        n, prev = have
        if (head_n, head_h) == (n, prev.hex()):
            return None
        entries = dict(entries)
        for seq, created, name, quota, admin, key, token_hash, stored in rows.analysts_after(n):
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
    def transaction(self) -> Iterator[Rows]:
        """A write transaction: the store's write lock (SQLite's ``BEGIN IMMEDIATE``, a
        PostgreSQL advisory lock) is held for the whole block, so no other thread,
        process or host writes this ledger until it commits.

        Any failure of the storage (a file made read-only, deleted or full, a disk
        error, a database that cannot be reached) is a :class:`LedgerError` and leaves
        nothing committed; :class:`TransactionAborted` when the database aborted it and
        it may be run again."""
        with self._lock:
            self._usable()
            self._anchor_heads()  # an earlier commit's, if it failed: then nothing is written
            store = self._store
            saved = (self._head, self._analysts, self._analysts_head)
            try:
                rows = store.begin_write()
            except store.errors as err:
                raise self._unusable(err, committing=False) from None
            self._tx, self._writing = rows, True
            try:
                yield rows
            except BaseException as err:
                store.rollback()
                self._head, self._analysts, self._analysts_head = saved
                if isinstance(err, store.errors):
                    raise self._unusable(err, committing=False) from None
                raise
            else:
                try:
                    store.commit()
                except store.errors as err:
                    store.rollback()
                    self._head, self._analysts, self._analysts_head = saved
                    raise self._unusable(err, committing=True) from None
                self._anchor_heads()  # before the commit's answers leave
            finally:
                self._tx, self._writing = None, False
                self._at_head = False

    def _unusable(self, err: BaseException, *, committing: bool) -> LedgerError:
        if self._store.retryable(err, committing=committing):
            return TransactionAborted(
                f"ledger {self.path}: the database aborted the transaction, nothing was "
                f"written: {self._store.say(err)}"
            )
        return LedgerError(f"ledger {self.path}: cannot be written: {self._store.say(err)}")

    @contextmanager
    def _write(self) -> Iterator[None]:
        """Join the caller's transaction, or run in a transaction of our own."""
        if self._writing:
            yield
        else:
            with self.transaction():
                yield

    @contextmanager
    def _snapshot(self) -> Iterator[Rows]:
        """Read in one consistent snapshot (the caller's transaction, or a read one)."""
        self._usable()
        if self._tx is not None:
            yield self._tx
            return
        rows = self._store.begin_read()
        self._tx = rows
        try:
            yield rows
        except BaseException:
            self._tx = None
            self._store.rollback()
            raise
        self._tx = None
        self._store.end_read()

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def kind(self) -> str:
        """The store: ``"sqlite"`` or ``"postgresql"``."""
        return self._store.kind

    @property
    def identity(self) -> dict[str, object]:
        """The identity (budget and schemas) the ledger was created with (its unit key
        left out: see :attr:`unit_key`)."""
        return unit_key_of.public(self._identity)

    @property
    def unit_key(self) -> bytes:
        """The key that chooses each privacy unit's rows, sealed in the identity
        (:mod:`dpcurator.curator.unit_key`): the same rows for the ledger's life."""
        return unit_key_of.key_of(self._identity, self._genesis, self.path)

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
            except self._store.errors as err:
                raise self._unreadable(err) from None

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
            rows = self._rows()
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
            rows.insert_charge((*fields, h.hex(), text, seal))
            rows.set_meta("charges_head", f"{cid} {h.hex()}")
            self._head = (cid, h)
            return cid

    def record_answer(self, charge_id: int, answer: object) -> None:
        self.record_answers([(charge_id, answer)])

    @_retried
    def record_answers(self, answers: list[tuple[int, object]]) -> None:
        """Record (and seal) answers of committed charges, in one transaction."""
        if not answers:
            return
        with self._lock, self.transaction() as rows:
            ids = [cid for cid, _ in answers]
            hashes = rows.charge_hashes(min(ids), max(ids))
            out = []
            for cid, a in answers:
                if cid not in hashes:
                    raise LedgerError(f"ledger {self.path}: no charge {cid} to answer")
                text = json.dumps(a)
                seal = _answer_seal(self._stored_hash(hashes[cid], f"charge {cid}"), text)
                out.append((text, seal, cid))
            rows.set_answers(out)

    # --- analysts and quotas ---------------------------------------------------------------

    def _refresh_analysts(self) -> None:
        try:
            with self._snapshot():
                self._read_analysts()
        except self._store.errors as err:
            raise self._unreadable(err) from None

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

    @_retried
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

    @_retried
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

        Never waits for a check-and-charge: tokens are looked up in a verified view of
        the analysts' chain, brought up to the head on a read-only connection of its own
        before each lookup (one small read), so a revocation committed by any process
        applies to every request that starts after its commit. An SQLite file is locked
        for readers only while a commit is written, which this read waits for (at most
        5 s, then :class:`LedgerError`); PostgreSQL readers never wait. A view older than
        the ledger's is never used: a token just revoked, or just made, is never judged
        by one."""
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
            self._usable()
            head, entries, by_key = self._auth_view
            if not head[1]:
                head = (0, _analysts_genesis(self._genesis))
            try:
                got = self._store.read_now(lambda rows: self._analysts_after(rows, head, entries))
            except self._store.errors as err:
                raise self._unreadable(err) from None
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
        rows = self._rows()
        if n == 1:
            prev = _analysts_genesis(self._genesis)
        else:
            r = rows.analyst(n - 1)
            prev = b"" if r is None else self._stored_hash(r[7], f"analyst entry {n - 1}")
        r = rows.analyst(n)
        if r is None or _digest(prev, _encode(tuple(r[:7]))) != h:
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
        rows = self._rows()
        rows.insert_analyst((*fields, h.hex()))
        rows.set_meta("analysts_head", f"{seq} {h.hex()}")
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

    @_retried
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

    @_retried
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
        """Verify this ledger, write one snapshot of it to the SQLite file ``target``,
        verify the copy.

        The copy holds at least every charge committed before the call, and it must
        extend the chain verified here; it is written beside ``target`` and moved into
        place only once verified. An existing ``target`` is refused unless ``force``.
        A ledger of either store backs up to a file (:func:`copy_ledger` writes one into
        a database)."""
        return self._copy(_backup_file(target), force=force, verified=False, label="backup")

    def _charge_hash(self, cid: int) -> object:
        with self._lock, self._snapshot() as rows:
            return rows.charge_hash(cid)

    def _copy(self, target: str, *, force: bool, verified: bool, label: str) -> BackupReport:
        """Write one verified snapshot of this ledger to ``target`` (see :func:`copy_ledger`)."""
        shown = location_of(target)
        if self._store.same_place(target_of(target) or ""):
            raise LedgerError(f"{label} {shown}: is the ledger itself")
        with self._lock:
            if not verified:
                self.verify()
            before, before_hash = self.head
            try:
                with self._snapshot() as rows:
                    dump = rows.dump()
            except self._store.errors as err:
                raise self._unreadable(err) from None
        made: list[BackupReport] = []

        def check(where: str) -> None:
            """The copy, where it was built: a whole ledger extending the verified chain."""
            try:
                copy = Ledger(where, None, create=False, anchor=None)
            except LedgerError as err:  # changed since it was verified here: say where
                raise LedgerError(str(err).replace(location_of(where), self.path)) from None
            try:
                n = copy.head[0]
                if n < before or (before and copy._charge_hash(before) != before_hash):
                    raise LedgerError(
                        f"{label} {shown}: the copy does not hold the {before} verified "
                        f"charges of {self.path}"
                    )
                made.append(BackupReport(self.path, shown, n, len(copy.analysts()), copy.head[1]))
            finally:
                copy.close()

        write_copy(target, dump, force=force, verify=check, label=label)
        (report,) = made
        placed = Ledger(target, None, create=False, anchor=None)  # verified again, in place
        try:
            if placed.head != (report.charges, report.head):
                raise LedgerError(
                    f"{label} {shown}: changed while it was put in place (head "
                    f"{placed.head[1][:16]}, expected {report.head[:16]})"
                )
        finally:
            placed.close()
        return report

    def close(self) -> None:
        """Close the file. A TRUNCATE journal stays behind, empty, after every commit; on
        the way out the connection switches to DELETE mode, which removes it once SQLite
        holds the write lock (never while another connection writes through it), so no
        empty ``-journal`` file is left beside the ledger."""
        self._stop_verifying()
        with self._lock, self._auth_lock:
            if not self._closed:
                self._closed = True
                self._store.close()
                if self._anchor is not None:
                    self._anchor.close()


def _backup_file(target: str | Path) -> str:
    """The file a backup goes to (never a database)."""
    name = target_of(str(target))
    assert name is not None
    if is_url(name):
        raise LedgerError(
            f"backup {location_of(name)}: a backup is a file; copy_ledger (dpcurator ledger "
            "copy) writes a ledger into a database"
        )
    return name


def backup_ledger(
    source: str | Path,
    target: str | Path,
    *,
    force: bool = False,
    anchor: str | Path | bool | None = True,
) -> BackupReport:
    """Verify the ledger at ``source`` (against its ``anchor``, see :class:`Ledger`) and
    copy it, live, to the file ``target`` (see :meth:`Ledger.backup`)."""
    name = _backup_file(target)
    if Path(name).exists() and not force:
        raise LedgerError(f"backup {name}: the file exists; refusing to overwrite it")
    led = Ledger(source, None, create=False, anchor=anchor)  # verifies all of it
    try:
        return led._copy(name, force=force, verified=True, label="backup")
    finally:
        led.close()


def copy_ledger(
    source: str | Path,
    target: str | Path,
    *,
    force: bool = False,
    anchor: str | Path | bool | None = True,
) -> BackupReport:
    """Copy the ledger at ``source`` to ``target``, from either store to either store
    (SQLite to PostgreSQL and back): ``source`` is verified in full, one snapshot of its
    rows (at least every charge committed before the call, taken while curators keep
    charging) is written where it is built (beside a file, or in a scratch schema),
    verified there, put in place, and verified again. Rows are copied as stored, so the
    copy's chains and head are the source's (the source's ``anchor``, checked first,
    serves the copy too). A ``target`` that holds a ledger (a file that exists; a schema
    with a ledger's tables) is replaced only if ``force``."""
    led = Ledger(source, None, create=False, anchor=anchor)
    try:
        return led._copy(str(target), force=force, verified=True, label="copy")
    finally:
        led.close()
