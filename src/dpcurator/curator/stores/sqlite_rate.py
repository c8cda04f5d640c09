"""Request-rate buckets every process of one host shares, in a file beside an SQLite ledger.

Several ``dpcurator serve`` processes may serve one ledger file (``--workers N`` starts
them for you). With a token bucket per process, an analyst could send ``rate`` requests
a second to *each*. Here each analyst's bucket is one row of an SQLite file of its own,
``<ledger>.rate``, and every process draws from the same row:

* a request takes one token if there is one; the decision and the new level are one
  ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` statement, which SQLite runs
  atomically under its write lock, so two processes never both take the last token;
* the bucket refills at ``rate`` tokens a second by the host's clock (one clock for
  every process of the host; a clock set back refills nothing for that request, and
  the bucket refills from its new reading on, see :data:`SLACK`);
* ``rate`` and ``burst`` are each process's own settings, used for the requests it
  receives: ``--workers`` gives every worker the same;
* a refused request takes nothing.

The buckets are not part of the ledger: no charge, no chain, not in a backup. The file
is written without waiting for the disk (``synchronous=OFF``, write-ahead log), since
losing it only refills the buckets (so does deleting it while no server runs; a
missing file is made again). What a bucket holds
depends only on the times of an analyst's requests, never on the data.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable

from dpcurator.errors import LedgerError

#: Seconds a statement waits for another process's (a few microseconds long) write.
BUSY_SECONDS = 5.0

#: The statement that takes a token (see the module doc); SQLite evaluates every
#: expression of the ``SET`` against the row as it was.
_TAKE = """
INSERT INTO buckets (analyst, tokens, at, allowed) VALUES (:who, :burst - 1, :now, 1)
ON CONFLICT (analyst) DO UPDATE SET
  allowed = min(:burst, tokens + max(0, excluded.at - at) * :rate) >= 1,
  tokens = min(:burst, tokens + max(0, excluded.at - at) * :rate)
    - (min(:burst, tokens + max(0, excluded.at - at) * :rate) >= 1),
  at = CASE WHEN excluded.at < at - :slack THEN excluded.at ELSE max(at, excluded.at) END
RETURNING tokens, allowed
"""
#: Seconds the host's clock may go back (processes reading it a moment apart) before
#: a bucket takes its new reading as the time it was last filled: a clock set back an
#: hour would otherwise refill no bucket for an hour.
SLACK = 1.0


def rate_file(ledger: str) -> str:
    """Where the buckets of the ledger file ``ledger`` are kept."""
    return f"{ledger}.rate"


class FileBuckets:
    """Token buckets in the file ``path`` (see the module doc). The file is opened (and
    made, if missing) here, so that one that cannot be used is refused when the server
    starts. Thread-safe. ``clock``: seconds of the host's clock (for tests)."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        _plain_file(path)
        try:
            self._db = sqlite3.connect(
                path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as err:
            raise LedgerError(f"rate limit file {path}: cannot be used: {_say(err)}") from None
        try:
            self._db.execute("PRAGMA trusted_schema=OFF")
            # nothing is written to a file that holds anything but buckets (a ledger)
            held = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
            if not held <= {"buckets", "sqlite_autoindex_buckets_1"}:
                raise sqlite3.DatabaseError(
                    f"it is not a rate limit file (it holds {', '.join(sorted(held))})"
                )
            _write_ahead(self._db)
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS buckets (analyst TEXT PRIMARY KEY NOT NULL, "
                "tokens REAL NOT NULL, at REAL NOT NULL, allowed INTEGER NOT NULL)"
            )
            columns = [r[1] for r in self._db.execute("PRAGMA table_info(buckets)")]
            if columns != ["analyst", "tokens", "at", "allowed"]:
                raise sqlite3.DatabaseError(f"its table buckets has columns {columns}")
        except sqlite3.Error as err:
            self._db.close()
            raise LedgerError(f"rate limit file {path}: cannot be used: {_say(err)}") from None

    def take(self, analyst: str, rate: float, burst: int) -> float:
        """0 if ``analyst`` may send a request now (and it is counted), else the seconds
        until a token is there. Raises :class:`LedgerError` when the file cannot be
        written (the request is then answered like any ledger failure)."""
        args = {
            "who": analyst, "rate": float(rate), "burst": float(burst), "now": self._clock(),
            "slack": SLACK,
        }  # fmt: skip
        with self._lock:
            try:
                tokens, allowed = self._db.execute(_TAKE, args).fetchone()
            except sqlite3.Error as err:
                raise LedgerError(f"rate limit file {self.path}: {_say(err)}") from None
        return 0.0 if allowed else max(0.0, (1.0 - float(tokens)) / float(rate))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _plain_file(path: str) -> None:
    """Refuse a symbolic link or a file with several names: the buckets are written, and
    such a path could name a ledger (SQLite would turn it to write-ahead logging)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise LedgerError(f"rate limit file {path}: cannot be used: {err.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        raise LedgerError(
            f"rate limit file {path}: cannot be used: not a plain file (a link, or a file "
            "with several names); remove it, and it is made again"
        )


def _write_ahead(db: sqlite3.Connection) -> None:
    """Switch to write-ahead logging; processes starting together may find the file
    locked for a moment by another doing the same (SQLite does not wait there)."""
    until = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > until:
                raise
            time.sleep(0.01)


def _say(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = ["FileBuckets", "rate_file"]
