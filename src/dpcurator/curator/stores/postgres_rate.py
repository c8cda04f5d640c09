"""Request-rate buckets several servers share, kept beside a PostgreSQL ledger.

Replicas serving one PostgreSQL ledger share its budget; with a token bucket per server,
an analyst could send ``rate`` requests a second to *each* of them. Here the buckets live
in the database, one row per analyst, and every replica draws from the same row:

* the bucket of an analyst holds at most ``burst`` tokens and refills at ``rate`` tokens
  a second, by the *database server's* clock (``clock_timestamp()``), so the replicas'
  clocks do not matter;
* a request takes one token if there is one: that decision and the new level are one
  ``INSERT ... ON CONFLICT DO UPDATE`` statement, which PostgreSQL runs atomically on
  the analyst's row, so concurrent requests at different replicas never both take the
  last token;
* ``rate`` and ``burst`` are each server's own settings, used for the requests it
  receives: give every replica the same;
* a request refused is not counted; the level is not part of the ledger (losing it in a
  database crash only refills the buckets), so the statement commits without waiting
  for the disk (``synchronous_commit = off``).

The rows are in a schema of their own, ``<ledger schema>_rate`` (the ledger's schema
must hold exactly the ledger's tables: it is fingerprinted), created on first use. What
a bucket holds depends only on the times of an analyst's requests, never on the data.
"""

from __future__ import annotations

import threading
from typing import Any

from dpcurator.errors import LedgerError

#: The statement that takes a token (see the module doc). ``b`` is the row before.
_TAKE = """
INSERT INTO {buckets} AS b (analyst, tokens, at, allowed)
VALUES (%(who)s, %(burst)s - 1, extract(epoch FROM clock_timestamp()), true)
ON CONFLICT (analyst) DO UPDATE SET
  allowed = LEAST(%(burst)s, b.tokens + GREATEST(0, EXCLUDED.at - b.at) * %(rate)s) >= 1,
  tokens = LEAST(%(burst)s, b.tokens + GREATEST(0, EXCLUDED.at - b.at) * %(rate)s)
    - CASE WHEN LEAST(%(burst)s, b.tokens + GREATEST(0, EXCLUDED.at - b.at) * %(rate)s) >= 1
      THEN 1 ELSE 0 END,
  at = GREATEST(b.at, EXCLUDED.at)
RETURNING tokens, allowed
"""


def rate_schema(ledger_schema: str) -> str:
    """The schema of the buckets beside the ledger in ``ledger_schema`` (at most 63
    characters, PostgreSQL's limit)."""
    return f"{ledger_schema[:58]}_rate"


class SharedBuckets:
    """Token buckets in the database (see the module doc), on a connection of their own."""

    def __init__(self, connect: Any, schema: str, say: Any, errors: tuple[type, ...]) -> None:
        self._connect = connect
        self.schema = rate_schema(schema)
        self._say = say
        self._errors = errors
        self._conn: Any = None
        self._lock = threading.Lock()
        self._statement: Any = None

    def _open(self) -> Any:
        import hashlib

        from psycopg import sql

        conn = self._connect()
        conn.execute("SET synchronous_commit = off")
        ident = sql.Identifier(self.schema)
        # replicas starting together: one creates the schema and table at a time (an
        # advisory lock of this schema's own), so none sees the schema without its table
        key = int.from_bytes(
            hashlib.sha256(b"dpcurator rate\x00" + self.schema.encode()).digest()[:8],
            "big",
            signed=True,
        )
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.buckets (analyst text PRIMARY KEY, "
                    "tokens double precision NOT NULL, at double precision NOT NULL, "
                    "allowed boolean NOT NULL)"
                ).format(ident)
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        self._statement = sql.SQL(_TAKE).format(buckets=sql.Identifier(self.schema, "buckets"))
        return conn

    def take(self, analyst: str, rate: float, burst: int) -> float:
        """0 if ``analyst`` may send a request now (and it is counted), else the seconds
        until a token is there. Raises :class:`LedgerError` when the database cannot
        be reached (the request is then answered like any ledger failure)."""
        args = {"who": analyst, "rate": float(rate), "burst": float(burst)}
        with self._lock:
            for attempt in (0, 1):  # a session that ended while idle is opened once more
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = self._open()
                    tokens, allowed = self._conn.execute(self._statement, args).fetchone()
                    break
                except self._errors as err:
                    broken = self._conn is None or self._conn.closed or self._conn.broken
                    if attempt == 0 and broken:
                        self._conn = None
                        continue
                    raise LedgerError(f"rate limit: {self._say(err)}") from None
        return 0.0 if allowed else max(0.0, (1.0 - float(tokens)) / float(rate))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["SharedBuckets", "rate_schema"]
