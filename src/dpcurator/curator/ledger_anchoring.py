"""Rollback and tamper detection for a ledger in use: its anchor, and its
re-verification in the background (a mixin of :class:`~dpcurator.curator.ledger.Ledger`).

The hash chains are verified in full when a ledger is opened, and what other processes
append is verified when it is read; two things escape that, and are handled here:

- *A rollback* (the newest rows deleted and the head rewritten, or an older copy put
  back) leaves a valid chain. The ledger's :class:`~dpcurator.curator.anchor.Anchor`, a
  file outside its store, receives the heads after every commit that moves one (before
  the commit's answer leaves), and a ledger that does not extend the anchored heads is
  refused when it is opened or verified. By default an SQLite ledger's anchor is
  ``<ledger file>.anchor`` beside it; a PostgreSQL ledger has none unless given one.
- *An old row changed under a running process* is seen by the next process that opens
  the ledger, not by one that already verified it. With ``verify_every=S``, a thread of
  the process re-verifies the whole ledger every ``S`` seconds (or ten times as long as
  the last verification took, whichever is longer, so that it never takes more than a
  tenth of a core), on a connection of its own, reading a page of charges per snapshot
  so that writers never wait long. It also checks that the chains still contain what
  this process verified and what the anchor records, and anchors the heads it verified.
  Once it finds a fault, this process refuses every charge, read and authentication
  with that :class:`LedgerError`, and logs it (logger ``dpcurator.ledger``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcurator.curator.anchor import Anchor, Heads, problem
from dpcurator.curator.checkpoint import check_chain
from dpcurator.curator.ledger_chain import analysts_genesis
from dpcurator.curator.stores import Store, is_url, open_store, target_of
from dpcurator.errors import InvalidParameter, LedgerError

if TYPE_CHECKING:
    from dpcurator.curator.stores import Rows

log = logging.getLogger("dpcurator.ledger")

#: Charges read per snapshot by the background verification.
PAGE = 2_000
#: The background verification pauses at least this many times as long as it ran.
SPACING = 10


def anchor_file(target: object, anchor: object = True) -> str | None:
    """The anchor file ``anchor`` names for the ledger at ``target``: ``True``, the
    default, is ``<file>.anchor`` beside an SQLite file (none for PostgreSQL or in
    memory); ``None`` or ``False`` none; or a file name."""
    name = target_of(None if target is None else str(target))
    memory = name is None or name == ":memory:"
    if anchor is None or anchor is False:
        return None
    if anchor is True:
        return None if memory or is_url(name or "") else f"{name}.anchor"
    if not isinstance(anchor, str | Path) or not str(anchor):
        raise InvalidParameter(f"anchor must be a file name, True or None, got {anchor!r}")
    if memory:
        raise InvalidParameter("an anchor is for a durable ledger, not one in memory")
    if name is not None and not is_url(name) and _same_file(str(anchor), name):
        raise InvalidParameter(
            f"anchor {anchor} is the ledger itself (or another name of it); give a file of its own"
        )
    return str(anchor)


def _same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one existing file (by metadata: no file is opened,
    since closing a descriptor of the ledger would drop this process's locks on it)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def verify_interval(every: object) -> float | None:
    """``verify_every`` checked: None, or seconds in (0, 86400]."""
    if every is None:
        return None
    if isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every <= 86_400:
        raise InvalidParameter(
            f"verify_every must be None or a number of seconds in (0, 86400], got {every!r}"
        )
    return float(every)


class _Stopped(Exception):
    """The ledger is closing: the background verification ends."""


class Anchoring:
    """What a :class:`~dpcurator.curator.ledger.Ledger` does about rollbacks and rows
    changed under it (see the module docstring)."""

    # provided by Ledger
    path: str
    durable: bool
    _store: Store
    _target: Any
    _lock: threading.RLock
    _genesis: bytes
    _head: tuple[int, bytes]
    _analysts_head: tuple[int, bytes]
    _anchor: Anchor | None = None
    #: Whether this open anchored a ledger that had rows and an anchor without entries
    #: (a ledger written before anchors existed, or an anchor removed): worth saying.
    anchor_started = False
    _failure: LedgerError | None = None
    _verifier: threading.Thread | None = None
    _stopping: threading.Event | None = None

    # --- the anchor -------------------------------------------------------------------

    def _read_anchor(self, path: str | None) -> Heads | None:
        """Open the ledger's anchor file and read it: before the ledger is verified,
        since an entry read after the verification's snapshot may record a commit made
        since."""
        if path is None:
            return None
        self._anchor = Anchor(path)
        return self._anchor.latest()

    def _setup_anchor(self, anchored: Heads | None, *, curator: bool) -> None:
        """Check the verified ledger against what its anchor recorded before; a curator's
        open also anchors the heads it found (a ledger without an anchor yet is anchored
        from here on)."""
        if self._anchor is None:
            return
        self._check_anchor(anchored)
        began = self._head[0] > 0 or self._analysts_head[0] > 0
        self.anchor_started = curator and began and anchored is None
        if curator:
            self._anchor_heads()

    @property
    def anchor(self) -> str | None:
        """The anchor file (None: this ledger is not checked against one)."""
        return None if self._anchor is None else self._anchor.path

    @property
    def heads(self) -> Heads:
        """Where the verified chains end, as the anchor records it."""
        sealed = self._checkpoints  # type: ignore[attr-defined]
        return Heads(
            self._head[0],
            self._head[1].hex(),
            self._analysts_head[0],
            self._analysts_head[1].hex(),
            self._genesis.hex(),
            len(sealed),
            sealed[-1].hash if sealed else "",
        )

    def anchored(self) -> Heads | None:
        """The furthest heads the anchor records (None: no anchor, or nothing in it)."""
        return None if self._anchor is None else self._anchor.latest()

    def _check_anchor(self, anchored: Heads | None) -> None:
        """Refuse a ledger whose verified chains do not contain the ``anchored`` heads
        (read before the verification)."""
        if anchored is None or self._anchor is None:
            return
        source = f"its anchor {self._anchor.path}"
        why = problem(self.path, source, anchored, self.heads, self.hash_at)
        if why is not None:
            raise LedgerError(why)

    def _anchor_heads(self, heads: Heads | None = None) -> None:
        """Append the verified heads to the anchor (nothing if they are anchored)."""
        if self._anchor is not None:
            self._anchor.append(heads or self.heads)

    def hash_at(self, chain: str, n: int) -> object:
        """The stored hash of charge ``n`` (``chain="charges"``) or analyst entry ``n``
        (``"analysts"``), None if there is none (verified if the ledger was)."""
        with self._lock, self._snapshot() as rows:  # type: ignore[attr-defined]
            if chain == "charges":
                return rows.charge_hash(n)
            if chain == "checkpoints":
                return self._checkpoint_hash(rows, n)
            r = rows.analyst(n)
            return None if r is None else r[7]

    def _checkpoint_hash(self, rows: Rows, seq: int) -> object:
        """The stored hash of checkpoint ``seq`` (None: none, or no checkpoints table)."""
        if not self._has_checkpoints:  # type: ignore[attr-defined]
            return None
        return next((r[6] for r in rows.checkpoints() if r[0] == seq), None)

    def _usable(self) -> None:
        """Refuse to go on once the background verification found a fault."""
        if self._failure is not None:
            raise LedgerError(str(self._failure))

    # --- verifying in the background ----------------------------------------------------

    def _start_verifying(self, every: float | None) -> None:
        if every is None or not self.durable:
            return  # in memory, nothing but this object can change it
        self._stopping = threading.Event()
        self._verifier = threading.Thread(
            target=self._verify_loop, args=(every,), name="dpcurator-verify", daemon=True
        )
        self._verifier.start()

    def _stop_verifying(self) -> None:
        if self._stopping is not None and self._verifier is not None:
            self._stopping.set()
            if self._verifier is not threading.current_thread():
                self._verifier.join()

    def _verify_loop(self, every: float) -> None:
        assert self._stopping is not None
        store: Store | None = None
        wait = every
        try:
            while not self._stopping.wait(wait):
                began = time.monotonic()
                if store is None:
                    try:
                        store = open_store(self._target, None)
                    except LedgerError as err:  # cannot connect: no fault of the ledger's
                        log.warning("ledger %s: cannot re-verify it now: %s", self.path, err)
                        continue
                try:
                    self._reverify(store)
                except _Stopped:
                    return
                except store.errors as err:  # unreachable, or a lock: try again later
                    log.warning("ledger %s: cannot re-verify it now: %s", self.path, err)
                    store.close()
                    store = None
                except LedgerError as err:
                    self._fail(err)
                    return
                wait = max(every, SPACING * (time.monotonic() - began))
        finally:
            if store is not None:
                store.close()

    def _fail(self, err: LedgerError) -> None:
        self._failure = LedgerError(
            f"{err} (found by re-verifying the ledger in use; this process charges "
            "nothing more until restarted on a sound ledger)"
        )
        log.error("%s", self._failure)

    def _reverify(self, store: Store) -> None:
        """Verify every row the store holds now, and that the chains contain what this
        process verified and what the anchor records; then anchor the heads verified."""
        assert self._stopping is not None
        mine = self.heads  # without the lock: each head is one verified state, and grows
        anchored = self.anchored()
        refs = [("the ledger this process verified earlier", mine)]
        if anchored is not None and self._anchor is not None:
            refs.append((f"its anchor {self._anchor.path}", anchored))
        wanted = {
            "charges": {r.charges for _, r in refs},
            "analysts": {r.analysts for _, r in refs},
            "checkpoints": {r.checkpoints for _, r in refs},
        }
        sealed: list = []
        found: dict[tuple[str, int], object] = {}
        n, prev = 0, self._genesis
        while True:
            if self._stopping.is_set():
                raise _Stopped
            rows = store.begin_read()
            try:
                page = rows.charges_page(n, PAGE)
                final = len(page) < PAGE
                if final:
                    head = self._meta_head("charges_head", rows)  # type: ignore[attr-defined]
                    analysts = self._all_analysts(rows)
                    for seq in wanted["analysts"]:
                        r = rows.analyst(seq)
                        found["analysts", seq] = None if r is None else r[7]
                    if self._has_checkpoints:  # type: ignore[attr-defined]
                        sealed = check_chain(self.path, self._genesis, rows.checkpoints(), None)
                        for c in sealed:
                            found["checkpoints", c.seq] = c.hash
            except BaseException:
                store.rollback()
                raise
            store.end_read()
            for r in page:
                if r[0] != n + 1:
                    raise self._broken(f"charge {n + 1} was removed")  # type: ignore[attr-defined]
                _, prev = self._verify_row(r, prev, False)  # type: ignore[attr-defined]
                n += 1
                if n in wanted["charges"]:
                    found["charges", n] = prev.hex()
            if final:
                break
        if (n, prev.hex()) != head:
            raise self._broken(  # type: ignore[attr-defined]
                f"the charges end at {n}, not at the head the ledger records ({head[0]})"
            )
        have = Heads(
            n, prev.hex(), analysts[0], analysts[1].hex(), self._genesis.hex(),
            len(sealed), sealed[-1].hash if sealed else "",
        )  # fmt: skip
        for source, ref in refs:
            why = problem(self.path, source, ref, have, lambda c, k: found.get((c, k)))
            if why is not None:
                raise LedgerError(why)
        self._anchor_heads(have)

    def _all_analysts(self, rows: Rows) -> tuple[int, bytes]:
        """The head of the analysts' chain, verified from its genesis in ``rows``."""
        start = (0, analysts_genesis(self._genesis))
        got = self._analysts_after(rows, start, {})  # type: ignore[attr-defined]
        return start if got is None else got[1]
