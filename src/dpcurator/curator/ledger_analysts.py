"""The analysts' chain of a ledger: quotas, roles and token hashes, each change a new
entry chained like the charges (see :mod:`dpcurator.curator.ledger`), and the lookup
of bearer tokens that never waits for a check-and-charge.

A mixin of :class:`~dpcurator.curator.ledger.Ledger`, whose store, locks, snapshots and
transactions it uses.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from dpcurator.curator import ledger_chain as chain
from dpcurator.curator.credentials import Credential, Principal, matches, new_token, split_token
from dpcurator.curator.ledger_chain import retried
from dpcurator.curator.stores import Busy, Rows
from dpcurator.errors import InvalidParameter, LedgerError


def _holder(tokens: dict[str, tuple[str, chain.Entry]], token: object) -> Principal | None:
    """Who holds ``token`` among ``tokens``: its key looked up, its secret's hash compared
    in constant time (with a dummy hash for an unknown key, so that the time does not say
    whether the key exists)."""
    parts = split_token(token)
    key, secret = parts if parts is not None else ("", "")
    found = tokens.get(key) if key else None
    name, entry = found if found is not None else (None, None)
    stored = entry.token_hash if entry is not None and entry.token_hash else "0" * 64
    if not matches(secret, stored) or entry is None or name is None:
        return None
    return Principal(name, entry.admin)


class AnalystsChain:
    """The analysts' part of the ledger (mixed into
    :class:`~dpcurator.curator.ledger.Ledger`)."""

    _analysts: dict[str, chain.Entry]
    _analysts_head: tuple[int, bytes]
    _auth_view: tuple[tuple[int, bytes], dict[str, chain.Entry], dict]
    _genesis: bytes
    _store: Any
    _lock: Any
    _auth_lock: Any
    _closed: bool
    durable: bool
    path: str

    def _read_analysts(self) -> None:
        """Bring the verified analysts up to the head of their chain. Call inside a snapshot."""
        got = self._analysts_after(self._rows(), self._analysts_head, self._analysts)
        if got is not None:
            self._analysts, self._analysts_head = got

    def _analysts_after(
        self,
        rows: Rows,
        have: tuple[int, bytes],
        entries: dict[str, chain.Entry],
    ) -> tuple[dict[str, chain.Entry], tuple[int, bytes]] | None:
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
            q = None if quota is None else chain.positive(quota)
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
            h = chain.digest(
                prev, chain.encode((seq, created, name, quota, admin, key, token_hash))
            )
            if h.hex() != stored:
                raise self._broken(f"analyst entry {seq} ({name!r}) was altered or removed")
            entries[name] = chain.Entry(q, bool(admin), key, token_hash)
            n, prev = seq, h
        if (n, prev.hex()) != (head_n, head_h):
            raise self._broken(
                f"analyst entries were removed or added (the ledger records {head_n}, found {n})"
            )
        return entries, (n, prev)

    # --- analysts and quotas ---------------------------------------------------------------

    def _refresh_analysts(self) -> None:
        try:
            with self._snapshot():
                self._read_analysts()
        except self._store.errors as err:
            raise self._unreadable(err) from None

    def quota(self, analyst: str, *, fresh: bool = True) -> Fraction | bool | None:
        """The analyst's quota; None for no quota; False if the analyst is unknown.
        ``fresh=False``: as this process last read it, when it knows the analyst (what
        a decision to be re-validated needs: the write transaction reads it again),
        without waiting for the lock a commit being written holds (the view is replaced
        whole, never changed in place)."""
        if not fresh:
            known = self._analysts.get(analyst)
            if known is not None:
                return known.quota
        with self._lock:
            if fresh or analyst not in self._analysts:
                self._refresh_analysts()
            entry = self._analysts.get(analyst)
            return False if entry is None else entry.quota

    def analysts(self) -> dict[str, Fraction | None]:
        """Every registered analyst and the quota in force (None: no quota of their own)."""
        with self._lock:
            self._refresh_analysts()
            return {name: e.quota for name, e in self._analysts.items()}

    # --- credentials for the HTTP service ---------------------------------------------------

    @retried
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

    @retried
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

    def shared_buckets(self) -> Any:
        """Request-rate buckets every server on this ledger shares: in a PostgreSQL
        ledger's database (:mod:`dpcurator.curator.stores.postgres_rate`) or in a file
        beside a ledger file (:mod:`dpcurator.curator.stores.sqlite_rate`); None for a
        ledger in memory (one process's)."""
        make = getattr(self._store, "buckets", None)
        return None if make is None else make()

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
        found = self._tokens(wait=True)
        assert found is not None
        return _holder(found, token)

    def refused_at_once(self, token: object) -> bool:
        """Whether ``token`` is refused (unknown, malformed or revoked), known without
        waiting; False when it may be valid or telling would wait (then
        :meth:`authenticate` decides).

        Why. The service refuses such a token in its event loop with this rather than in
        a worker thread: under a flood the interpreter lock is handed between many busy
        threads, and each handover on a 401's way through a thread cost milliseconds. A
        token the last view accepts is left to :meth:`authenticate` at once, with no
        read (it is the common case, and its lookup reads again anyway); any other is
        judged on a view brought up to the head, when that read need not wait (on SQLite
        while no commit is being written and no other lookup reads; never on
        PostgreSQL, whose read is a round trip). The time taken does not depend on
        whether the token's key exists, only on whether the token was accepted."""
        if _holder(self._auth_view[2], token) is not None:
            return False
        found = self._tokens(wait=False)
        return found is not None and _holder(found, token) is None

    def tokens_in_force(self) -> tuple[str, dict[str, str]] | None:
        """The analysts' chain head as the store records it, and each token in force
        (its key and its secret's hash), read up to that head; None for a ledger in
        memory or on PostgreSQL.

        For the server's gate (:mod:`dpcurator.service.gate`), a process of its own that
        refuses an unknown token without this ledger, and only while the SQLite file's
        analysts' head is still this one (a read that never waits)."""
        if self.analysts_file is None:
            return None
        self._tokens(wait=True)
        head, _, by_key = self._auth_view  # one tuple: the head and the tokens it holds
        if not head[1]:
            head = (0, chain.analysts_genesis(self._genesis))
        tokens = {key: entry.token_hash for key, (_, entry) in by_key.items() if entry.token_hash}
        return chain.head_text(*head), tokens

    @property
    def analysts_file(self) -> str | None:
        """The SQLite file whose meta row ``analysts_head`` the gate reads (None when the
        ledger is not one)."""
        from dpcurator.curator.stores.sqlite import SQLiteStore

        store = self._store
        return store.location if isinstance(store, SQLiteStore) and store.durable else None

    def _tokens(self, *, wait: bool) -> dict[str, tuple[str, chain.Entry]] | None:
        """token key -> (analyst, entry), for the tokens in force (see authenticate);
        None, without ``wait``, where reading them would wait."""
        if not self.durable:  # in memory: this object is the only writer
            if not self._lock.acquire(blocking=wait):
                return None
            try:
                self._refresh_analysts()
                return chain.by_key(self._analysts)
            finally:
                self._lock.release()
        if not self._auth_lock.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                raise LedgerError(f"ledger {self.path}: closed")
            self._usable()
            head, entries, by_key = self._auth_view
            if not head[1]:
                head = (0, chain.analysts_genesis(self._genesis))
            try:
                # the common case, in one statement: nothing changed since the view
                if self._store.meta_at_once("analysts_head") == chain.head_text(*head):
                    return by_key
            except Busy:
                if not wait:
                    return None
            except self._store.errors as err:
                raise self._unreadable(err) from None
            read = self._store.read_now if wait else self._store.read_at_once
            try:
                got = read(lambda rows: self._analysts_after(rows, head, entries))
            except Busy:
                return None
            except self._store.errors as err:
                raise self._unreadable(err) from None
            if got is not None:
                entries, head = got
                by_key = chain.by_key(entries)
                self._auth_view = (head, entries, by_key)
            return by_key
        finally:
            self._auth_lock.release()

    def _check_analysts_tail(self) -> None:
        """Before extending the quotas' chain, verify its last entry again, in full."""
        n, h = self._analysts_head
        if n == 0:
            return
        rows = self._rows()
        if n == 1:
            prev = chain.analysts_genesis(self._genesis)
        else:
            r = rows.analyst(n - 1)
            prev = b"" if r is None else self._stored_hash(r[7], f"analyst entry {n - 1}")
        r = rows.analyst(n)
        if r is None or chain.digest(prev, chain.encode(tuple(r[:7]))) != h:
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
        have = self._analysts.get(name, chain.Entry(None))
        if admin is None:
            admin = have.admin
        if key is False:
            key, token_hash = have.token_key, have.token_hash
        seq = n + 1
        text = None if quota is None else str(quota)
        created = time.time()
        fields = (seq, created, name, text, int(admin), key, token_hash)
        h = chain.digest(prev, chain.encode(fields))
        rows = self._rows()
        rows.insert_analyst((*fields, h.hex()))
        rows.set_meta("analysts_head", chain.head_text(seq, h))
        self._analysts = {**self._analysts, name: chain.Entry(quota, admin, key, token_hash)}  # type: ignore[arg-type]
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

    @retried
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

    @retried
    def set_quota(self, analyst: str, quota: Fraction | None) -> None:
        """An administrator's change: ``analyst``'s quota becomes ``quota`` (None removes
        it), registering them if needed. Recorded in the analysts' chain."""
        q = self._check_quota(analyst, quota)
        with self._lock, self._write():
            self._read_analysts()
            if analyst in self._analysts and self._analysts[analyst].quota == q:
                return
            self._append_analyst(analyst, q)
