"""The anchor: the ledger's heads, appended to a file outside the ledger's store.

Why. The hash chains (:mod:`dpcurator.curator.ledger`) detect a row that was edited,
but not a *rollback*: whoever can write the store can delete the newest charges and
rewrite the head (or put back an older copy), and what is left is a valid, shorter
chain that hands spent budget back. So every process that commits to the ledger also
appends the heads it committed to the anchor, a file the store's writers need not be
able to touch; a ledger whose chain does not contain the last anchored heads (it is
shorter than them, or holds another hash at that position) is refused.

One line per commit (or per batch of charges committed together), ``\\n``-terminated::

    <charge id> <its hash> <analyst entry> <its hash> <genesis> [<checkpoint> <its hash>]

the two chains' heads, the genesis hash, and (once the ledger has one) the last
checkpoint's number and hash (:mod:`dpcurator.curator.checkpoint`; lines without it,
written before checkpoints, still read), so that a rehashed checkpoint is refused like
a rehashed charge. The genesis hash binds the line to one ledger's
format and identity (budget and schemas), so that another ledger's anchor is refused
by name rather than as a rollback. Each line is written with one ``write`` on a file
opened ``O_APPEND`` and ``fsync``-ed before the commit's answer is released. Reading
takes the last :data:`TAIL_BYTES` of the file and the furthest entry among its whole
lines (appenders sharing one file may finish out of commit order); a line cut short by
a crash (no ``\\n``, or not an entry) is skipped, and the next appender terminates it
first. Heads only grow, so the furthest entry alone says everything the anchor knows.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dpcurator.curator.stores.sqlite import fsync_dir
from dpcurator.errors import LedgerError

#: How much of the file's end is read: about 300 entries, far more than concurrent
#: appenders can leave out of order.
TAIL_BYTES = 65_536

_HEX = "[0-9a-f]{64}"
_N = "(0|[1-9][0-9]{0,18})"
_LINE = re.compile(rf"{_N} ({_HEX}) {_N} ({_HEX}) ({_HEX})(?: ([1-9][0-9]{{0,18}}) ({_HEX}))?")


@dataclass(frozen=True)
class Heads:
    """Where a ledger's chains end: (charge id, hash), (analyst entry, hash), the
    genesis hash of the ledger they belong to, and (checkpoint, hash) (0, "": none) (all
    hex)."""

    charges: int
    charges_hash: str
    analysts: int
    analysts_hash: str
    genesis: str
    checkpoints: int = 0
    checkpoints_hash: str = ""

    def line(self) -> bytes:
        last = f" {self.checkpoints} {self.checkpoints_hash}" if self.checkpoints else ""
        return (
            f"{self.charges} {self.charges_hash} {self.analysts} {self.analysts_hash} "
            f"{self.genesis}{last}\n"
        ).encode()

    def within(self, other: Heads) -> bool:
        """Whether every chain ends no further than ``other``'s (of the same ledger)."""
        return (
            self.genesis == other.genesis
            and self.charges <= other.charges
            and self.analysts <= other.analysts
            and self.checkpoints <= other.checkpoints
        )


def parse(line: bytes) -> Heads | None:
    """The entry a whole line holds, or None."""
    m = _LINE.fullmatch(line.decode("ascii", "replace"))
    if m is None:
        return None
    c, ch, a, ah, g, k, kh = m.groups()
    return Heads(int(c), ch, int(a), ah, g, int(k or 0), kh or "")


class Anchor:
    """The anchor file at ``path``, created by the first append."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None
        self._last: Heads | None = None  # the furthest entry this process read or wrote

    def latest(self) -> Heads | None:
        """The furthest entry in the file's tail (None: no file, or no entry yet)."""
        try:  # never blocks: a FIFO or device put in its place is refused, not waited on
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise LedgerError(
                f"anchor {self.path}: cannot be read: {err.strerror or err}"
            ) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise LedgerError(f"anchor {self.path}: not a regular file; give an anchor file")
            start = max(0, st.st_size - TAIL_BYTES)
            f.seek(start)
            data = f.read(st.st_size - start)
        lines = data.split(b"\n")[:-1]  # what follows the last newline is not a whole line
        if start > 0 and lines:
            lines = lines[1:]  # the tail began inside a line
        found = [h for h in map(parse, lines) if h is not None]
        if not found:
            return None
        # Each chain's furthest head on its own: a process whose view of the other chain
        # is old (a curator that has not re-read the analysts since another process
        # revoked one) appends lines that are further in one chain and behind in the other.
        far = max(found, key=lambda h: (h.charges, h.analysts))
        mine = [h for h in found if h.genesis == far.genesis]
        who = max(mine, key=lambda h: h.analysts)
        sealed = max(mine, key=lambda h: h.checkpoints)
        best = Heads(
            far.charges, far.charges_hash, who.analysts, who.analysts_hash, far.genesis,
            sealed.checkpoints, sealed.checkpoints_hash,
        )  # fmt: skip
        with self._lock:
            if self._last is None or not best.within(self._last):
                self._last = best
        return best

    def append(self, heads: Heads) -> None:
        """Append ``heads`` (durably) unless this process anchored them, or further, already."""
        with self._lock:
            if self._last is not None and heads.within(self._last):
                return
            try:
                fd = self._open()
                os.write(fd, heads.line())
                os.fsync(fd)
            except OSError as err:
                raise LedgerError(
                    f"anchor {self.path}: cannot be written: {err.strerror or err}; "
                    "nothing is charged or answered until it can be"
                ) from None
            self._last = heads

    def _open(self) -> int:
        """The file, open for appending; opened again if it was moved or replaced."""
        if self._fd is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._inode:
                    return self._fd
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None
        existed = os.path.exists(self.path)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(self.path, flags, 0o644)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            if st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n":
                os.write(fd, b"\n")  # a line cut short by a crash: end it, so it is skipped
            if not existed:
                fsync_dir(Path(self.path).absolute().parent)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._inode = fd, (st.st_dev, st.st_ino)
        return fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def problem(
    path: str, source: str, anchored: Heads, have: Heads, hash_at: Callable[[str, int], object]
) -> str | None:
    """Why the ledger at ``path``, whose chains end at ``have``, does not extend the heads
    ``source`` (``"its anchor FILE"``) records (None: it does). ``hash_at(chain, n)``
    reads the verified hash of charge (``chain="charges"``), analyst entry
    (``"analysts"``) or checkpoint (``"checkpoints"``) ``n``."""
    if anchored.genesis != have.genesis:
        return (
            f"ledger {path}: {source} records another ledger (genesis "
            f"{anchored.genesis[:16]}, this one's is {have.genesis[:16]}: another budget, "
            "schemas or ledger); give this ledger's anchor"
        )
    for chain, what, n, h, mine in (
        ("charges", "charge", anchored.charges, anchored.charges_hash, have.charges),
        ("analysts", "analyst entry", anchored.analysts, anchored.analysts_hash, have.analysts),
        ("checkpoints", "checkpoint", anchored.checkpoints, anchored.checkpoints_hash,
         have.checkpoints),
    ):  # fmt: skip
        if n > mine:
            held = {"charges": "charges", "analysts": "analyst entries"}.get(chain, chain)
            return (
                f"ledger {path}: rolled back: it holds {mine} {held}, but {source} records "
                f"{what} {n} ({h[:16]}): the newest were removed or an older copy put in its "
                f"place, which hands spent budget back; restore a backup that holds {what} {n}"
            )
        if n > 0 and hash_at(chain, n) != h:
            return (
                f"ledger {path}: its {what} {n} is not the one {source} records ({h[:16]}): "
                "the chain was rewritten or replaced; restore it from a backup"
            )
    return None
