"""The ledger's rows, read and written with SQL that SQLite and PostgreSQL both run.

A :class:`Rows` wraps one open connection (``sqlite3`` or ``psycopg``, both DB-API) in
the transaction its store began; it knows nothing of hashes or chains. The ledger's
three tables are the same in both stores (see ``stores/sqlite.py`` and
``stores/postgres.py`` for their definitions and CHECK constraints), so every value
round-trips exactly and a chain computed in one store verifies in the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: A charge row: what the chain hashes (the first 10), its hash, the answer and its seal.
CHARGE_COLUMNS = (
    "id",
    "created",
    "analyst",
    "table_name",
    "kind",
    "request",
    "coverage",
    "cost",
    "level",
    "noise",
    "hash",
    "answer",
    "answer_hash",
)
#: A checkpoint row (:mod:`dpcurator.curator.checkpoint`): what its hash covers (the
#: first 6), its hash, and its segment's bytes.
CHECKPOINT_COLUMNS = (
    "seq",
    "upto",
    "created",
    "charge_hash",
    "summary",
    "segment_hash",
    "hash",
    "segment",
)
#: An analyst row: what the analysts' chain hashes (the first 7) and its hash.
ANALYST_COLUMNS = ("seq", "created", "name", "quota", "admin", "token_key", "token_hash", "hash")

_CHARGES = ", ".join(CHARGE_COLUMNS)
_ANALYSTS = ", ".join(ANALYST_COLUMNS)
_CHECKPOINTS = ", ".join(CHECKPOINT_COLUMNS)
_CHECKPOINT_FIELDS = ", ".join(CHECKPOINT_COLUMNS[:7])

_SQL = {
    "meta": "SELECT key, value FROM meta",
    "meta_value": "SELECT value FROM meta WHERE key = ?",
    "set_meta": "UPDATE meta SET value = ? WHERE key = ?",
    "insert_meta": "INSERT INTO meta (key, value) VALUES (?, ?)",
    "charge_hash": "SELECT hash FROM charges WHERE id = ?",
    "charge_hashes": "SELECT id, hash FROM charges WHERE id BETWEEN ? AND ?",
    "charges_after": f"SELECT {_CHARGES} FROM charges WHERE id > ? ORDER BY id",
    "charges_page": f"SELECT {_CHARGES} FROM charges WHERE id > ? ORDER BY id LIMIT ?",
    "insert_charge": f"INSERT INTO charges ({_CHARGES}) VALUES ({', '.join('?' * 13)})",
    "set_answer": "UPDATE charges SET answer = ?, answer_hash = ? WHERE id = ?",
    "analysts_after": f"SELECT {_ANALYSTS} FROM analysts WHERE seq > ? ORDER BY seq",
    "analyst": f"SELECT {_ANALYSTS} FROM analysts WHERE seq = ?",
    "insert_analyst": f"INSERT INTO analysts ({_ANALYSTS}) VALUES ({', '.join('?' * 8)})",
    "checkpoints": f"SELECT {_CHECKPOINT_FIELDS} FROM checkpoints ORDER BY seq",
    "segments": "SELECT seq, segment FROM checkpoints WHERE seq >= ? ORDER BY seq",
    "all_checkpoints": f"SELECT {_CHECKPOINTS} FROM checkpoints ORDER BY seq",
    "insert_checkpoint": (
        f"INSERT INTO checkpoints ({_CHECKPOINTS}) VALUES ({', '.join('?' * 8)})"
    ),
}


@dataclass(frozen=True)
class Dump:
    """Every row of a ledger, as stored, read in one snapshot (what a copy writes)."""

    meta: tuple[tuple[str, str], ...]
    analysts: tuple[tuple, ...]
    charges: tuple[tuple, ...]
    checkpoints: tuple[tuple, ...] = ()


class Rows:
    """The ledger's tables through one connection; ``placeholder`` is the driver's
    parameter marker (``?`` for sqlite3, ``%s`` for psycopg)."""

    def __init__(self, conn: Any, placeholder: str = "?") -> None:
        self._conn = conn
        self._sql = (
            _SQL
            if placeholder == "?"
            else {k: v.replace("?", placeholder) for k, v in _SQL.items()}
        )

    def _one(self, name: str, *args: object) -> tuple | None:
        return self._conn.execute(self._sql[name], args).fetchone()

    def _all(self, name: str, *args: object) -> list[tuple]:
        return [tuple(r) for r in self._conn.execute(self._sql[name], args).fetchall()]

    def _many(self, name: str, rows: Iterable[Sequence[object]]) -> None:
        cur = self._conn.cursor()
        try:
            cur.executemany(self._sql[name], list(rows))
        finally:
            cur.close()

    # --- meta ---

    def meta(self) -> dict[object, object]:
        return dict(self._all("meta"))

    def meta_value(self, key: str) -> object:
        r = self._one("meta_value", key)
        return None if r is None else r[0]

    def set_meta(self, key: str, value: str) -> None:
        self._conn.execute(self._sql["set_meta"], (value, key))

    # --- charges ---

    def charge_hash(self, cid: int) -> object:
        r = self._one("charge_hash", cid)
        return None if r is None else r[0]

    def charge_hashes(self, low: int, high: int) -> dict[int, str]:
        return dict(self._all("charge_hashes", low, high))

    def charges_after(self, cid: int) -> list[tuple]:
        return self._all("charges_after", cid)

    def charges_page(self, cid: int, limit: int) -> list[tuple]:
        """The first ``limit`` charges after ``cid``."""
        return self._all("charges_page", cid, limit)

    def insert_charge(self, row: Sequence[object]) -> None:
        self._conn.execute(self._sql["insert_charge"], tuple(row))

    def set_answers(self, answers: Iterable[tuple[str, str, int]]) -> None:
        """(answer, seal, charge id) for each."""
        self._many("set_answer", answers)

    # --- analysts ---

    def analysts_after(self, seq: int) -> list[tuple]:
        return self._all("analysts_after", seq)

    def analyst(self, seq: int) -> tuple | None:
        r = self._one("analyst", seq)
        return None if r is None else tuple(r)

    def insert_analyst(self, row: Sequence[object]) -> None:
        self._conn.execute(self._sql["insert_analyst"], tuple(row))

    # --- checkpoints ---

    def checkpoints(self) -> list[tuple]:
        """Every checkpoint's fields and hash (not its segment), in order."""
        return self._all("checkpoints")

    def segments(self, seq: int) -> list[tuple[int, bytes]]:
        """(seq, segment bytes) of the checkpoints from ``seq`` on."""
        return [(s, bytes(b)) for s, b in self._all("segments", seq)]

    def insert_checkpoint(self, row: Sequence[object]) -> None:
        self._conn.execute(self._sql["insert_checkpoint"], tuple(row))

    # --- whole ledgers ---

    def dump(self, checkpoints: bool = True) -> Dump:
        """Every row as stored (call inside one snapshot); ``checkpoints``: whether the
        ledger has a checkpoints table (one an older dpcurator made has none until a curator opens it)."""
        return Dump(
            tuple(sorted((str(k), str(v)) for k, v in self.meta().items())),
            tuple(self.analysts_after(0)),
            tuple(self.charges_after(0)),
            tuple((*r[:7], bytes(r[7])) for r in self._all("all_checkpoints"))
            if checkpoints
            else (),
        )

    def load(self, dump: Dump) -> None:
        """Write every row of ``dump`` into empty tables."""
        self._many("insert_meta", dump.meta)
        self._many("insert_analyst", dump.analysts)
        self._many("insert_charge", dump.charges)
        self._many("insert_checkpoint", dump.checkpoints)
