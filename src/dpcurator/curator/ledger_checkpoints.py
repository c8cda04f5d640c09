"""The ledger's checkpoints (a mixin of :class:`~dpcurator.curator.ledger.Ledger`): a
curator's open from the last one, their full verification, and writing them.

What a checkpoint is, and why, is in :mod:`dpcurator.curator.checkpoint` (pure: bytes
and text); this module is where they meet the store: opening at the last checkpoint
(its chain and segments verified, then only the charges after it), rebuilding every
checkpoint from its charges when the whole ledger is verified, and appending one after
a commit once :attr:`checkpoint_every` charges follow the last.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpcurator.curator import checkpoint as cp
from dpcurator.curator import ledger_chain as chain
from dpcurator.curator.ledger_chain import retried
from dpcurator.errors import LedgerError

if TYPE_CHECKING:
    from dpcurator.curator.stores import Rows

log = logging.getLogger("dpcurator.ledger")


@dataclass(frozen=True)
class Opened:
    """What a curator's open found at the ledger's last checkpoint: the charges 1 to
    ``upto`` as its segments hold them, and its summary (verified: see
    :mod:`dpcurator.curator.checkpoint`)."""

    upto: int
    segments: tuple[cp.TableSegment, ...]
    summary: cp.Summary


class Checkpoints:
    """The checkpoint half of the ledger; the attributes it uses are the ledger's."""

    # the ledger's state and helpers this mixin uses (see Ledger)
    checkpoint_every: int
    path: str
    durable: bool
    _lock: Any
    _genesis: bytes
    _head: tuple[int, bytes]
    _checkpoints: list[cp.Checkpoint]
    _has_checkpoints: bool
    _at_checkpoint: Opened | None
    _checkpointing: bool
    _written: list[tuple]
    _opened: Any

    def _open_at_checkpoint(self) -> bool:
        """Verify the analysts, the checkpoints' chain and segments, and the charges after
        the last checkpoint; keep those charges and the checkpoint's state (False: there
        is no checkpoint)."""
        with self._lock:
            self._from_genesis()
            with self._snapshot() as rows:
                stored = rows.checkpoints()
                if not stored:
                    return False
                self._read_analysts()
                segments = dict(rows.segments(1))
                last = stored[-1]
                at = rows.charge_hash(last[1]) if type(last[1]) is int else None
                if at != last[3]:
                    raise self._broken(
                        f"checkpoint {last[0]} does not end at the hash of charge {last[1]!r}"
                    )
                self._head = (last[1], self._stored_hash(at, f"charge {last[1]}"))
                fetched = self._fetch_after(last[1])
            verified = cp.check_chain(self.path, self._genesis, stored, segments)
            try:
                parts = tuple(p for c in verified for p in cp.decode_segment(segments[c.seq]))
                summary = cp.Summary.parse(verified[-1].summary)
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                raise LedgerError(
                    f"ledger {self.path}: a checkpoint's segment or summary is malformed; "
                    "restore the ledger from a backup"
                ) from None
            self._opened = self._verify_after(*fetched, build=True)
            self._checkpoints = verified
            self._at_checkpoint = Opened(verified[-1].upto, parts, summary)
            return True

    def at_checkpoint(self) -> Opened | None:
        """The last checkpoint's state, as verified when a curator opened this ledger
        (then None: it is read once)."""
        with self._lock:
            opened, self._at_checkpoint = self._at_checkpoint, None
            return opened

    def _check_checkpoints(
        self, stored: list[tuple], segments: dict[int, bytes], charges: list[tuple]
    ) -> None:
        """Each checkpoint (chained, its segment's hash right) rebuilt from the verified
        ``charges`` it covers: its segment and summary must be what they say."""
        verified = cp.check_chain(self.path, self._genesis, stored, segments)
        summary = cp.Summary({})
        start = 0
        for c in verified:
            what = f"ledger {self.path}: checkpoint {c.seq}"
            if c.upto > len(charges) or charges[c.upto - 1][10] != c.charge_hash:
                raise self._broken(f"checkpoint {c.seq} does not end at charge {c.upto}")
            seg = cp.build_segment(_segment_input(r) for r in charges[start : c.upto])
            summary = summary.plus(seg)
            if cp.encode_segment(seg) != segments[c.seq] or summary.text() != c.summary:
                raise LedgerError(
                    f"{what} does not hold what the charges it covers say; restore the "
                    "ledger from a backup"
                )
            start = c.upto
        self._checkpoints = verified

    def checkpoint(self) -> bool:
        """Append a checkpoint if :attr:`checkpoint_every` charges or more follow the last
        one (see :mod:`dpcurator.curator.checkpoint`); whether one was written. The
        charges it covers are read and verified again, in its write transaction. A
        ledger in memory has none (it is never opened again)."""
        with self._lock:
            last = self._checkpoints[-1].upto if self._checkpoints else 0
            due = self._head[0] - last >= self.checkpoint_every
            if not (self._has_checkpoints and self.durable and due):
                return False
            return self._write_checkpoint()

    def _since(
        self, upto: int, head: tuple[int, str], rows: Rows, last: cp.Checkpoint | None
    ) -> list[cp.SegmentInput]:
        """The charges after ``upto`` up to ``head``, for a checkpoint: as this process
        wrote them, when it wrote them all (the common case: nothing to read back), else
        read from the store and their hashes checked from ``upto``'s."""
        mine = self._written
        whole = len(mine) == head[0] - upto  # ids only grow: then they are upto+1..head
        if mine and whole and (mine[-1][0], mine[-1][6]) == head:
            return [(*r[:6], r[7]) for r in mine]
        if last is not None and rows.charge_hash(upto) != last.charge_hash:
            raise self._broken(f"checkpoint {last.seq} does not end at charge {upto}")
        prev = self._genesis if last is None else bytes.fromhex(last.charge_hash)
        stored = rows.charges_after(upto)
        self._check_hashes(upto, head, prev, stored)
        return [_segment_input(r) for r in stored]

    def _check_hashes(
        self, last_id: int, head: tuple[int, str], prev: bytes, rows: list[tuple]
    ) -> None:
        """The stored charges after ``last_id`` chain from ``prev`` to ``head`` (their
        hashes only: each was verified in full when this process first read or wrote
        it, and an edit since changes its hash)."""
        expect = last_id + 1
        for r in rows:
            if r[0] != expect or chain.charge_hash(prev, r[:10]).hex() != r[10]:
                raise self._broken(f"charge {expect} was altered or removed")
            prev = bytes.fromhex(r[10])
            expect += 1
        if (expect - 1, prev.hex()) != head:
            raise self._broken(f"charge {expect - 1} was altered or removed")

    @retried
    def _write_checkpoint(self) -> bool:
        with self._lock, self.transaction() as rows:
            stored = rows.checkpoints()
            found = cp.check_chain(self.path, self._genesis, stored, None)
            for mine, theirs in zip(self._checkpoints, found, strict=False):
                if mine.hash != theirs.hash:
                    raise self._broken(f"checkpoint {mine.seq} was altered or removed")
            if len(found) < len(self._checkpoints):
                raise self._broken(f"checkpoint {len(found) + 1} was removed")
            last = found[-1] if found else None
            upto = last.upto if last else 0
            del self._written[: _first_after(self._written, upto)]  # sealed already
            head = self._meta_head("charges_head")
            if head[0] - upto < self.checkpoint_every:
                self._checkpoints = found
                return False
            charges = self._since(upto, head, rows, last)
            try:
                seg = cp.build_segment(charges)
            except (ValueError, TypeError, AttributeError, IndexError, KeyError):
                raise self._broken("a charge after the last checkpoint is malformed") from None
            try:
                before = cp.Summary({}) if last is None else cp.Summary.parse(last.summary)
            except (ValueError, KeyError, TypeError):
                raise self._broken(f"checkpoint {len(found)} has a malformed summary") from None
            data = cp.encode_segment(seg)
            seq = len(found) + 1
            fields = (seq, head[0], time.time(), head[1], before.plus(seg).text(),
                      cp.segment_hash(data))  # fmt: skip
            prev_cp = (
                cp.checkpoints_genesis(self._genesis) if last is None else bytes.fromhex(last.hash)
            )
            h = cp.checkpoint_hash(prev_cp, fields).hex()
            rows.insert_checkpoint((*fields, h, data))
            self._checkpoints = [*found, cp.Checkpoint(*fields, h)]
            return True

    def _checkpoint_quietly(self) -> None:
        """After a commit: a checkpoint if one is due. A checkpoint only saves time on
        the next open, so a failure to write one is logged, not raised: the commit
        stands, and the next verification reports a damaged ledger."""
        self._checkpointing = True
        try:
            self.checkpoint()
        except Exception as err:  # the commit stands whatever happens here
            log.error("ledger %s: no checkpoint written: %s", self.path, err)
        finally:
            self._checkpointing = False


def _first_after(written: list[tuple], upto: int) -> int:
    """The position of the first of ``written`` (in id order) past charge ``upto``."""
    lo, hi = 0, len(written)
    while lo < hi:
        mid = (lo + hi) // 2
        if written[mid][0] <= upto:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _segment_input(r: tuple) -> cp.SegmentInput:
    """What a checkpoint's segment holds of a stored (verified) charge row."""
    return (r[0], r[2], r[3], r[6], r[7], r[8])
