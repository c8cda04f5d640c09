"""Checkpoints: the filter's state at a point of the ledger, sealed, so that a curator
opens a long ledger without re-reading and re-hashing every charge.

Why. Opening a ledger verified every charge and rebuilt the filter from it: about 0.1 ms
per charge, so a restart (or a new replica) at 10^6 charges waited minutes. Every few
thousand charges the curator now appends a *checkpoint* to the ledger: the *segment* of
the charges since the last one, in the compact form the filter keeps (each charge's
per-attribute hull, float level, analyst and cost as small integers, its exact level and
coverage as text), and a *summary* of everything up to it (per table: how many charges,
the largest level, each analyst's summed costs). A checkpoint's hash chains from the
previous checkpoint's and covers its fields, the SHA-256 of its segment and the hash of
the charge it ends at, so it is bound to that point of the charge chain. A curator
opening the ledger checks the checkpoints' chain and segments (hashing a few bytes per
charge), loads the segments into the filter as arrays, and verifies in full only the
charges after the last checkpoint (see :mod:`dpcurator.curator.ledger`). ``dpcurator
ledger verify`` still verifies every charge from the genesis, and rebuilds each
checkpoint from the charges it covers: a checkpoint that does not say what its charges
say is refused, and so is a charge edited before a checkpoint.

Everything here is pure: bytes and text in, values out. A segment is built from the
stored rows alone (no schema: an attribute a charge leaves whole is stored as such and
widened to its domain on loading), so anyone holding the ledger can rebuild it.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpcurator.curator.ledger_chain import digest, encode
from dpcurator.errors import LedgerError

#: Charges between two checkpoints: a restart re-verifies at most this many charges.
EVERY = 4096

#: What a charge's coverage is, as far as the filter's fast paths care.
BOX, UNION, EMPTY = 0, 1, 2

_MAGIC = b"dpcurator segment 1\n"
_HEADER = struct.Struct("<Q")  # the header's length
#: A stored charge's fields a segment is built from: id, analyst, table, and the texts of
#: its coverage, cost and level; then, optionally, what :func:`hull_of` gives of its
#: coverage (a writer that has the coverage parsed computes it once, as it writes).
SegmentInput = tuple  # (int, str | None, str, str, str, str[, (int, dict)])


def checkpoints_genesis(ledger_genesis: bytes) -> bytes:
    return digest(b"dpcurator checkpoints\x00", ledger_genesis)


@dataclass(frozen=True)
class TableSegment:
    """One table's charges of a segment, in id order: ``lo``/``hi`` per attribute of
    ``attrs`` (hi = -1: the charge leaves that attribute whole), ``level`` its level
    rounded up to a float, ``shape`` :data:`BOX` (one interval per attribute: the hull
    is the coverage), :data:`UNION` or :data:`EMPTY`; ``analyst``/``cost`` index
    ``analysts`` (-1: none) and ``costs``; ``levels``/``coverages`` the exact texts."""

    table: str
    ids: np.ndarray
    attrs: tuple[str, ...]
    lo: np.ndarray
    hi: np.ndarray
    level: np.ndarray
    shape: np.ndarray
    analyst: np.ndarray
    analysts: tuple[str, ...]
    cost: np.ndarray
    costs: tuple[str, ...]
    levels: tuple[str, ...]
    coverages: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Summary:
    """Per table, up to a checkpoint: how many charges, the largest level, and each
    analyst's summed costs (``None`` for charges without an analyst)."""

    tables: dict[str, tuple[int, Fraction, dict[str | None, Fraction]]]

    def text(self) -> str:
        out = {
            t: {
                "charges": n,
                "top": str(top),
                "spent": [[who, str(v)] for who, v in sorted(spent.items(), key=_who)],
            }
            for t, (n, top, spent) in sorted(self.tables.items())
        }
        return json.dumps(out, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def parse(text: str) -> Summary:
        """The summary a checkpoint stores (:class:`LedgerError`-free: raises
        ``ValueError`` on anything malformed; the caller says which checkpoint)."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        tables = {}
        for t, entry in raw.items():
            n, top, spent = entry["charges"], _fraction(entry["top"]), {}
            if type(n) is not int or n < 0:
                raise ValueError("charges")
            for who, v in entry["spent"]:
                if who is not None and type(who) is not str:
                    raise ValueError("analyst")
                spent[who] = _fraction(v)
            tables[t] = (n, top, spent)
        out = Summary(tables)
        if out.text() != text:
            raise ValueError("not canonical")
        return out

    def plus(self, segment: Sequence[TableSegment]) -> Summary:
        """This summary with the charges of ``segment`` added."""
        tables = {t: (n, top, dict(spent)) for t, (n, top, spent) in self.tables.items()}
        for s in segment:
            n, top, spent = tables.get(s.table, (0, Fraction(0), {}))
            costs = [Fraction(c) for c in s.costs]
            # each (analyst, cost) pair once, times how often it occurs
            pairs, counts = np.unique(
                np.stack([s.analyst.astype(np.int64), s.cost.astype(np.int64)]),
                axis=1,
                return_counts=True,
            )
            for (a, c), m in zip(pairs.T.tolist(), counts.tolist(), strict=True):
                who = None if a < 0 else s.analysts[a]
                spent[who] = spent.get(who, Fraction(0)) + m * costs[c]
            # the largest level is among those of the largest float (rounded up)
            peak = np.flatnonzero(s.level == s.level.max()).tolist()
            top = max([top, *(Fraction(s.levels[i]) for i in peak)])
            tables[s.table] = (n + s.n, top, spent)
        return Summary(tables)


def _who(item: tuple[str | None, Fraction]) -> tuple[bool, str]:
    return (item[0] is not None, item[0] or "")


def _fraction(text: object) -> Fraction:
    if type(text) is not str:
        raise ValueError("a fraction")
    v = Fraction(text)
    if v < 0 or str(v) != text:
        raise ValueError("a fraction")
    return v


# --- building a segment from rows --------------------------------------------------------


def _box_hull(box: dict[str, list[list[int]]]) -> dict[str, tuple[int, int]] | None:
    """Per attribute the box constrains, [lo, hi) around its coverage; None if empty."""
    out = {}
    for name, ivs in box.items():
        ivs = [iv for iv in ivs if iv[0] < iv[1]]  # an empty interval holds no value
        if not ivs:
            return None
        out[name] = (min(ivs)[0], max(map(_end, ivs)))
    return out


def _end(interval: Sequence[int]) -> int:
    return interval[1]


def hull_of(coverage: dict[str, Any]) -> tuple[int, dict[str, tuple[int, int]]]:
    """(shape, hull) of a stored coverage: the attributes every non-empty box constrains
    and the smallest interval holding them there (as :func:`dpcurator.queries.boolean.hull`
    computes it of the query), the others left whole."""
    union = coverage.get("|")
    if len(coverage) == 1 and isinstance(union, list) and union and isinstance(union[0], dict):
        spans: dict[str, tuple[int, int]] | None = None
        for b in union:
            mine = _box_hull(b)
            if mine is None:
                continue
            if spans is None:
                spans = mine
            else:
                spans = {
                    n: (min(lo, mine[n][0]), max(hi, mine[n][1]))
                    for n, (lo, hi) in spans.items()
                    if n in mine
                }
        return (EMPTY, {}) if spans is None else (UNION, spans)
    spans = _box_hull(coverage)
    if spans is None:
        return EMPTY, {}
    single = all(sum(s < e for s, e in ivs) == 1 for ivs in coverage.values())
    return (BOX if single else UNION), spans


def build_segment(rows: Iterable[SegmentInput]) -> tuple[TableSegment, ...]:
    """The segment of these charges (in id order), one part per table, tables by name.
    ``ValueError`` if a coverage or a level is malformed."""
    by_table: dict[str, list[SegmentInput]] = {}
    for r in rows:
        by_table.setdefault(r[2], []).append(r)
    return tuple(_table_segment(t, rs) for t, rs in sorted(by_table.items()))


def _table_segment(table: str, rows: list[SegmentInput]) -> TableSegment:
    hulls = []
    for r in rows:
        if len(r) > 6:
            hulls.append(r[6])
            continue
        coverage = json.loads(r[3])
        if not isinstance(coverage, dict):
            raise ValueError(f"charge {r[0]}: a coverage that is not an object")
        hulls.append(hull_of(coverage))
    attrs = tuple(sorted({a for _, h in hulls for a in h}))
    col = {a: j for j, a in enumerate(attrs)}
    n, k = len(rows), len(attrs)
    lo = np.zeros((n, k), np.int64)
    hi = np.full((n, k), -1, np.int64)
    shape = np.zeros(n, np.uint8)
    for i, (s, h) in enumerate(hulls):
        shape[i] = s
        if s == EMPTY:
            hi[i] = 0
        for a, (x, y) in h.items():
            lo[i, col[a]], hi[i, col[a]] = x, y
    analysts = tuple(sorted({r[1] for r in rows if r[1] is not None}))
    who = {a: j for j, a in enumerate(analysts)}
    costs = tuple(sorted({r[4] for r in rows}))
    which = {c: j for j, c in enumerate(costs)}
    return TableSegment(
        table=table,
        ids=np.array([r[0] for r in rows], np.int64),
        attrs=attrs,
        lo=lo,
        hi=hi,
        level=np.array([float_up_text(r[5]) for r in rows], np.float64),
        shape=shape,
        analyst=np.array([-1 if r[1] is None else who[r[1]] for r in rows], np.int32),
        analysts=analysts,
        cost=np.array([which[r[4]] for r in rows], np.int32),
        costs=costs,
        levels=tuple(r[5] for r in rows),
        coverages=tuple(r[3] for r in rows),
    )


def float_up_text(text: str) -> float:
    """The smallest float at least the fraction ``text`` spells ("n" or "n/d", as the
    ledger stores it): Python's int division rounds correctly, and one integer
    comparison says whether that was down."""
    num, _, den = text.partition("/")
    n, d = int(num), int(den or 1)
    try:
        f = n / d
    except OverflowError:
        return math.inf
    a, b = f.as_integer_ratio()
    return f if a * d >= n * b else math.nextafter(f, math.inf)


# --- bytes --------------------------------------------------------------------------------

_ARRAYS = (("ids", "<i8"), ("lo", "<i8"), ("hi", "<i8"), ("level", "<f8"), ("shape", "u1"),
           ("analyst", "<i4"), ("cost", "<i4"))  # fmt: skip


def encode_segment(parts: Sequence[TableSegment]) -> bytes:
    """The segment's bytes: a JSON header (tables, attributes, names, texts' lengths),
    then each table's arrays (little-endian) and texts, in a fixed order: equal segments
    encode to equal bytes."""
    header = []
    blobs = []
    for s in parts:
        levels = "\n".join(s.levels).encode()
        coverages = "\n".join(s.coverages).encode()
        header.append(
            {
                "table": s.table,
                "n": s.n,
                "attrs": list(s.attrs),
                "analysts": list(s.analysts),
                "costs": list(s.costs),
                "levels": len(levels),
                "coverages": len(coverages),
            }
        )
        for name, dtype in _ARRAYS:
            blobs.append(np.ascontiguousarray(getattr(s, name), dtype=dtype).tobytes())
        blobs += [levels, coverages]
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    return b"".join([_MAGIC, _HEADER.pack(len(head)), head, *blobs])


def decode_segment(data: bytes) -> tuple[TableSegment, ...]:
    """The segment ``data`` encodes; ``ValueError`` if it is not one exactly."""
    try:
        return _decode(data)
    except (struct.error, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
        raise ValueError(f"not a segment ({type(err).__name__})") from None


def _decode(data: bytes) -> tuple[TableSegment, ...]:
    if not data.startswith(_MAGIC):
        raise ValueError("not a segment")
    at = len(_MAGIC)
    (size,) = _HEADER.unpack_from(data, at)
    at += _HEADER.size
    header = json.loads(data[at : at + size])
    at += size
    if not isinstance(header, list):
        raise ValueError("header")
    out = []
    for h in header:
        n, k = h["n"], len(h["attrs"])
        if type(n) is not int or n < 1 or not all(type(a) is str for a in h["attrs"]):
            raise ValueError("header")
        if type(h["table"]) is not str or not all(type(a) is str for a in h["analysts"]):
            raise ValueError("header")
        for c in h["costs"]:
            if _fraction(c) <= 0:
                raise ValueError("a cost")
        arrays = {}
        for name, dtype in _ARRAYS:
            count = n * k if name in ("lo", "hi") else n
            width = np.dtype(dtype).itemsize * count
            if at + width > len(data):
                raise ValueError("short")
            a = np.frombuffer(data, dtype, count, at).astype(np.dtype(dtype).newbyteorder("="))
            arrays[name] = a.reshape(n, k) if name in ("lo", "hi") else a
            at += width
        texts = []
        for name in ("levels", "coverages"):
            width = h[name]
            if type(width) is not int or width < 0 or at + width > len(data):
                raise ValueError("short")
            texts.append(tuple(data[at : at + width].decode().split("\n")))
            at += width
        if any(len(t) != n for t in texts):
            raise ValueError("texts")
        codes_ok = (
            (arrays["analyst"] >= -1).all()
            and (arrays["analyst"] < len(h["analysts"])).all()
            and (arrays["cost"] >= 0).all()
            and (arrays["cost"] < len(h["costs"])).all()
            and (arrays["shape"] <= EMPTY).all()
            and (arrays["ids"] >= 1).all()
            and (np.diff(arrays["ids"]) > 0).all()
            and not np.isnan(arrays["level"]).any()
        )
        if not codes_ok:
            raise ValueError("codes")
        out.append(
            TableSegment(
                table=h["table"],
                attrs=tuple(h["attrs"]),
                analysts=tuple(h["analysts"]),
                costs=tuple(h["costs"]),
                levels=texts[0],
                coverages=texts[1],
                **arrays,
            )
        )
    if at != len(data):
        raise ValueError("trailing bytes")
    return tuple(out)


# --- the checkpoints' chain ------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as stored (its segment apart): ``upto`` is the last charge it covers,
    ``charge_hash`` that charge's hash (hex), ``segment_hash`` the SHA-256 of the
    segment's bytes (hex)."""

    seq: int
    upto: int
    created: float
    charge_hash: str
    summary: str
    segment_hash: str
    hash: str


def checkpoint_hash(prev: bytes, fields: tuple[int, int, float, str, str, str]) -> bytes:
    """SHA-256(previous checkpoint's hash || the canonical fields)."""
    return digest(prev, encode(fields))


def segment_hash(data: bytes) -> str:
    return digest(b"segment\x00", data).hex()


def check_chain(
    path: str, genesis: bytes, stored: Sequence[tuple], segments: dict[int, bytes] | None
) -> list[Checkpoint]:
    """The stored checkpoints, verified: ids 1..n in order, each ``upto`` above the
    last, each hash chaining from the previous one, and (``segments`` given) each
    segment's bytes matching its hash. Raises :class:`LedgerError`."""
    prev = checkpoints_genesis(genesis)
    out = []
    last_upto = 0
    for r in stored:
        seq, upto, created, charge_hash, summary, seg_hash, h = r
        what = f"ledger {path}: checkpoint {seq}"
        ok = (
            type(seq) is int
            and seq == len(out) + 1
            and type(upto) is int
            and upto > last_upto
            and type(created) is float
            and all(type(x) is str for x in (charge_hash, summary, seg_hash, h))
        )
        if not ok:
            raise LedgerError(f"{what} was altered, removed or reordered; restore it from a backup")
        if segments is not None and segment_hash(segments.get(seq, b"")) != seg_hash:
            raise LedgerError(
                f"{what}: its segment was altered (hash chain broken); restore the ledger "
                "from a backup"
            )
        fields = (seq, upto, created, charge_hash, summary, seg_hash)
        got = checkpoint_hash(prev, fields)
        if got.hex() != h:
            raise LedgerError(
                f"{what} was altered (hash chain broken); restore the ledger from a backup"
            )
        out.append(Checkpoint(seq, upto, created, charge_hash, summary, seg_hash, h))
        prev, last_upto = got, upto
    return out
