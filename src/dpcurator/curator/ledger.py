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

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpcurator.curator import checkpoint as cp
from dpcurator.curator import ledger_chain as chain
from dpcurator.curator import unit_key as unit_key_of
from dpcurator.curator.ledger_analysts import AnalystsChain
from dpcurator.curator.ledger_anchoring import Anchoring, anchor_file, verify_interval
from dpcurator.curator.ledger_chain import FORMAT, TransactionAborted, retried
from dpcurator.curator.ledger_checkpoints import Checkpoints, Opened
from dpcurator.curator.ledger_identity import mismatch_message
from dpcurator.curator.stores import (
    Rows,
    is_url,
    location_of,
    open_store,
    target_of,
    write_copy,
)
from dpcurator.errors import LedgerError

_META_KEYS = frozenset({"format", "identity", "genesis", "charges_head", "analysts_head"})


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
class Coverage:
    """A charge's coverage checked and encoded by :meth:`Ledger.coverage` (``text``, as
    stored), with its hull (:func:`dpcurator.curator.checkpoint.hull_of`)."""

    text: str
    hull: tuple[int, dict[str, tuple[int, int]]]


@dataclass(frozen=True)
class BackupReport:
    """What :meth:`Ledger.backup` or :func:`copy_ledger` wrote, after verifying it."""

    source: str
    target: str
    charges: int
    analysts: int
    head: str


class Ledger(AnalystsChain, Anchoring, Checkpoints):
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
        #: Charges between checkpoints this process writes (see :meth:`checkpoint`).
        self.checkpoint_every = cp.EVERY
        self._checkpoints: list[cp.Checkpoint] = []  # verified, in order
        self._has_checkpoints = False  # whether the store has their table
        self._at_checkpoint: Opened | None = None
        self._checkpointing = False
        # the charges this process appended since its last checkpoint, as it wrote them
        self._written: list[tuple] = []
        every = verify_interval(verify_every)
        self._lock = threading.RLock()
        self._target = path
        self._closed = False
        self._at_head = False  # inside a write transaction, once the chain's tail is checked
        self._opened: list[ChargeRow] | None = None
        self._identity = "{}"
        self._genesis = b""
        self._head: tuple[int, bytes] = (0, b"")
        self._analysts: dict[str, chain.Entry] = {}
        self._analysts_head: tuple[int, bytes] = (0, b"")
        self._tx: Rows | None = None  # the transaction (read or write) in progress
        self._writing = False
        # authentication's own connection and verified view (see authenticate)
        self._auth_lock = threading.Lock()
        self._auth_view: tuple[tuple[int, bytes], dict[str, chain.Entry], dict] = ((0, b""), {}, {})
        want = None if identity is None else json.dumps(identity, sort_keys=True)
        memory = path is None or str(path) == ":memory:"
        initial = None
        if memory:
            initial = chain.initial_meta(unit_key_of.sealed(want or "{}", unit_key))
        elif create and want is not None:
            initial = chain.initial_meta(unit_key_of.sealed(want, unit_key))
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
        if want is not None and self.durable:
            self._has_checkpoints = self._store.upgrade()
        else:
            self._has_checkpoints = "checkpoints" in self._store.tables()
        # A curator reads every charge right after opening: keep what was verified; it
        # starts from the last checkpoint, if there is one, and verifies what follows.
        if want is None or not self._has_checkpoints or not self._open_at_checkpoint():
            self._opened = self._verify_all(keep=want is not None)
            if self._has_checkpoints:  # their chain, for the heads (verify checks them all)
                with self._snapshot() as rows:
                    self._checkpoints = cp.check_chain(
                        self.path, self._genesis, rows.checkpoints(), None
                    )
        if want is not None and unit_key_of.public(self._identity) != json.loads(want):
            have = unit_key_of.public(self._identity)
            raise LedgerError(mismatch_message(self.path, have, json.loads(want)))

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
        genesis = chain.genesis(FORMAT, str(identity))
        if not isinstance(identity, str) or meta["genesis"] != genesis.hex():
            raise LedgerError(
                f"ledger {self.path}: its identity (budget and schemas) was altered; restore "
                "it from a backup"
            )
        self._identity = identity
        self._genesis = genesis
        self._head = (0, genesis)  # the last verified charge: (id, hash)
        self._analysts = {}
        self._analysts_head = (0, chain.analysts_genesis(genesis))

    def _from_genesis(self) -> None:
        """Forget what was verified: the next reads verify from the genesis."""
        self._head = (0, self._genesis)
        self._analysts = {}
        self._analysts_head = (0, chain.analysts_genesis(self._genesis))

    def _verify_all(self, *, keep: bool = False) -> list[ChargeRow] | None:
        with self._lock:
            self._from_genesis()
            with self._snapshot():
                self._read_analysts()
                fetched = self._fetch_after(0)
            rows = self._verify_after(*fetched, build=keep)
            return rows if keep else None

    def verify(self) -> int:
        """Verify the whole ledger again (as on open, against its anchor too), every
        charge from the genesis and every checkpoint against the charges it covers;
        return the number of charges."""
        anchored = self.anchored()  # before the snapshot, which holds what it records
        try:
            with self._lock:
                self._from_genesis()
                with self._snapshot() as rows:
                    self._read_analysts()
                    fetched = self._fetch_after(0)
                    stored = rows.checkpoints() if self._has_checkpoints else []
                    segments = dict(rows.segments(1)) if stored else {}
                self._verify_after(*fetched, build=False)
                self._check_checkpoints(stored, segments, fetched[3])
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
        cost, level, cov = chain.ratio(r[7]), chain.ratio(r[8]), chain.valid_coverage(r[6])
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
        h = chain.charge_hash(prev, r[:10])
        if h.hex() != r[10]:
            raise self._broken(f"charge {cid} was altered or removed")
        answer = None
        if r[11] is not None or r[12] is not None:
            if r[11] is None or r[12] != chain.answer_seal(h, r[11]):
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
            saved = (self._head, self._analysts, self._analysts_head, self._checkpoints)
            written = len(self._written)
            try:
                rows = store.begin_write()
            except store.errors as err:
                raise self._unusable(err, committing=False) from None
            self._tx, self._writing = rows, True
            try:
                yield rows
            except BaseException as err:
                store.rollback()
                self._head, self._analysts, self._analysts_head, self._checkpoints = saved
                del self._written[written:]
                if isinstance(err, store.errors):
                    raise self._unusable(err, committing=False) from None
                raise
            else:
                try:
                    store.commit()
                except store.errors as err:
                    store.rollback()
                    self._head, self._analysts, self._analysts_head, self._checkpoints = saved
                    del self._written[written:]
                    raise self._unusable(err, committing=True) from None
                self._anchor_heads()  # before the commit's answers leave
            finally:
                self._tx, self._writing = None, False
                self._at_head = False
            if not self._checkpointing:
                self._checkpoint_quietly()

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
    def unit_rows(self) -> int:
        """The scheme that chose the privacy unit's rows (:mod:`dpcurator.curator.unit_key`):
        the same for the ledger's life."""
        return unit_key_of.scheme_of(self._identity, self.path)

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
        coverage: dict[str, list[list[int]]] | Coverage,
        cost: Fraction,
        level: Fraction,
        noise: str,
        answer: object = None,
    ) -> int:
        """Append a charge to the chain (inside the caller's transaction, if any), with
        its answer (sealed, see the module docstring) when it is known already. The
        coverage as a dict, or as :meth:`coverage` checked and encoded it already (what a
        writer holding the lock for many charges does first)."""
        cost, level = Fraction(cost), Fraction(level)
        if cost <= 0 or level < cost:
            raise LedgerError(
                f"ledger {self.path}: refusing to record a charge of cost {cost} at level "
                f"{level} (the cost must be > 0 and the level at least the cost)"
            )
        checked = coverage if isinstance(coverage, Coverage) else self.coverage(coverage)
        cov = checked.text
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
            h = chain.charge_hash(self._head[1], fields)
            text = seal = None
            if answer is not None:
                text = json.dumps(answer)
                seal = chain.answer_seal(h, text)
            rows.insert_charge((*fields, h.hex(), text, seal))
            rows.set_meta("charges_head", chain.head_text(cid, h))
            self._head = (cid, h)
            # what the next checkpoint seals of it, as written (see _write_checkpoint)
            if self._has_checkpoints and self.durable:  # its hull: not again at the checkpoint
                self._written.append(
                    (cid, analyst, table, cov, fields[7], fields[8], h.hex(), checked.hull)
                )
            return cid

    def coverage(self, coverage: object) -> Coverage:
        """``coverage`` (``{attribute: [[start, end], ...]}`` or ``{"|": [box, ...]}``)
        checked and encoded as the ledger stores it, with its hull for checkpoints: the
        work of a charge that needs no lock. :class:`LedgerError` if it is malformed."""
        cov = json.dumps(coverage) if isinstance(coverage, dict) else None
        parsed = None if cov is None else chain.valid_coverage(cov)
        if parsed is None:
            raise LedgerError(f"ledger {self.path}: refusing to record malformed coverage")
        return Coverage(cov, cp.hull_of(parsed))  # type: ignore[arg-type]

    def record_answer(self, charge_id: int, answer: object) -> None:
        self.record_answers([(charge_id, answer)])

    @retried
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
                seal = chain.answer_seal(self._stored_hash(hashes[cid], f"charge {cid}"), text)
                out.append((text, seal, cid))
            rows.set_answers(out)

    def _check_charges_tail(self) -> None:
        """Before extending the chain, verify its last charge again, in full."""
        n, h = self._head
        if n > 0:
            self._read_after(n - 1, build=False)
            if self._head != (n, h):
                raise self._broken(f"charge {n} was altered or removed")

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
                    dump = rows.dump(self._has_checkpoints)
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
