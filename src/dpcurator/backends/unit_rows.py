"""Which rows of a privacy unit are kept: a keyed, uniformly random choice of k rows.

With ``privacy_unit=("tailnum", k)`` a unit (person, aircraft, ...) with more than ``k``
rows keeps ``k`` of them. Each row is ranked by a keyed hash of its *content*: SHA-256 of
the text :func:`row_text` (the key in hex, the row's attribute codes, then its unit id),
written identically in DuckDB (``sha256``) and Spark (``sha2(.., 256)``); a unit keeps its
``k`` rows of smallest hash (hex text order).

Why this is the right choice:

- **Sensitivity.** Whether a row is kept depends on the key, the row and the other rows
  of the same unit, nothing else: adding or removing one unit's rows changes the kept
  table by at most ``k`` rows, the group size the curator calibrates noise to (k-fold
  group privacy: Dwork & Roth 2014, Lemma 2.8). This holds for every key; privacy never
  depends on the key staying secret.
- **Uniformity.** Keyed with 256 secret random bits, SHA-256 with the key as prefix is
  modelled as a pseudorandom function (the secret-prefix / NMAC construction: Bellare,
  Canetti & Krawczyk 1996): to anyone without the key, the hashes of distinct rows are
  i.i.d. uniform. The ``k`` smallest of ``n`` i.i.d. continuous values are each of the
  ``C(n, k)`` subsets with equal probability, so each unit keeps a uniformly random
  ``k``-subset of its rows, whatever the file order, and neither a data owner nor the
  order of the file can steer which rows are kept. Identical rows of a unit hash alike;
  which of them is kept cannot matter (they give the same table).
- **Stability.** The choice depends on the rows' content and the key only: a restart, a
  second process, a replica, a shuffled or re-sorted copy of the file and the other
  backend keep exactly the same rows for the same key (kept in the ledger).

The text is unambiguous: codes are decimal integers without ``|`` and there is a fixed
number of them, so everything after the last code's ``|`` is the unit id, whatever it
contains. The unit id is written as the id column's text, stripped of surrounding
whitespace (every CSV id); an integer id in decimal; a float id that is an integer below
2^53 as that integer (``12345.0`` -> ``12345``); other types as the engine writes them
(DuckDB and Spark agree for booleans, decimals and dates; they may write other floats and
timestamps differently, and then keep different, equally random, rows).

The pure-Python functions here (:func:`row_hash`, :func:`choose_rows`) are the reference
the backends are tested against. :class:`UnitReport` summarises a load for the custodian.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dpcurator.errors import InvalidParameter

#: Bytes of a unit key (256 bits, from the operating system's CSPRNG).
KEY_BYTES = 32
#: Separator of the fields of :func:`row_text`.
SEPARATOR = "|"
#: Largest float below which every integer is exact (float ids up to it are integers).
FLOAT_INTEGERS = 2.0**53
#: Column of a backend's stored table holding each kept row's unit id (only with a
#: privacy unit): read only as the number of distinct ids among the rows a query covers.
UNIT_COLUMN = "__unit"
#: Percentiles of rows per unit in the report.
PERCENTILES = (50, 90, 99)


def check_unit_key(key: object) -> bytes:
    """The key, checked to be 32 bytes; the message never shows its value."""
    if not isinstance(key, bytes):
        raise InvalidParameter(
            f"unit_key must be {KEY_BYTES} random bytes (secrets.token_bytes({KEY_BYTES})), "
            f"got {type(key).__name__}"
        )
    if len(key) != KEY_BYTES:
        raise InvalidParameter(
            f"unit_key must be {KEY_BYTES} random bytes (secrets.token_bytes({KEY_BYTES})), "
            f"got {len(key)} bytes"
        )
    return key


def key_text(key: bytes) -> str:
    """The key as it starts every hashed text: 64 lowercase hex digits."""
    return key.hex()


def row_text(key: bytes, codes: Sequence[int], unit_id: str) -> str:
    """The hashed text of one row: ``hexkey|c0|c1|...|c{n-1}|id``."""
    return SEPARATOR.join([key_text(key), *(str(int(c)) for c in codes), unit_id])


def row_hash(key: bytes, codes: Sequence[int], unit_id: str) -> str:
    """A row's rank: SHA-256 of its text (UTF-8) in lowercase hex, compared as text."""
    return hashlib.sha256(row_text(key, codes, unit_id).encode("utf-8")).hexdigest()


def choose_rows(
    rows: Iterable[tuple[str, Sequence[int]]], k: int, key: bytes
) -> list[tuple[int, ...]]:
    """Reference: the codes of the rows kept from ``(unit id text, codes)`` pairs (rows
    already valid and with an id), each unit's ``k`` rows of smallest hash, sorted."""
    units: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for unit_id, codes in rows:
        c = tuple(int(x) for x in codes)
        units.setdefault(unit_id, []).append((row_hash(key, c, unit_id), c))
    kept = [c for ranked in units.values() for _, c in sorted(ranked)[:k]]
    return sorted(kept)


def candidate_ks(largest: int) -> tuple[int, ...]:
    """The k a custodian may weigh: 1, 2, 5, 10, 20, 50, ... below the largest unit, and
    the largest unit's rows (the k that keeps every row)."""
    out: list[int] = []
    step = 1
    while largest > 0:
        for m in (1, 2, 5):
            if m * step >= largest:
                return (*out, largest)
            out.append(m * step)
        step *= 10
    return ()


@dataclass(frozen=True)
class UnitReport:
    """The privacy unit on load, for the data custodian only (it describes the data).

    ``units``: units with at least one valid row; ``rows``: rows kept (every unit's first
    ``min(k, its rows)`` by hash); ``dropped_by_cap``: valid rows of units beyond ``k``;
    ``dropped_missing_id``: rows without an id (under ``on_invalid="drop"``).
    ``p50``, ``p90``, ``p99``, ``max``: valid rows per unit before the cap (the
    nearest-rank percentile: the smallest size at least that share of units do not
    exceed); ``kept_by_k``: ``(k, rows kept)`` for each of :func:`candidate_ks`, to choose k.
    """

    column: str
    k: int
    units: int
    rows: int
    dropped_by_cap: int
    dropped_missing_id: int
    p50: int
    p90: int
    p99: int
    max: int
    kept_by_k: tuple[tuple[int, int], ...] = field(default=())

    @classmethod
    def from_sizes(
        cls, column: str, k: int, sizes: Mapping[int, int], dropped_missing_id: int
    ) -> UnitReport:
        """The report from the number of units of each size (valid rows per unit), as
        the engine's one aggregate query returns it."""
        ordered = sorted((int(s), int(n)) for s, n in sizes.items() if int(n) > 0)
        units = sum(n for _, n in ordered)
        before = sum(s * n for s, n in ordered)

        def kept(cap: int) -> int:
            return sum(min(s, cap) * n for s, n in ordered)

        def percentile(pct: int) -> int:
            if not units:
                return 0
            rank, seen = -(-units * pct // 100), 0  # ceil(units * pct / 100) >= 1
            for s, n in ordered:
                seen += n
                if seen >= rank:
                    return s
            raise AssertionError("unreachable")  # pragma: no cover

        rows = kept(k)
        largest = ordered[-1][0] if ordered else 0
        p50, p90, p99 = (percentile(p) for p in PERCENTILES)
        return cls(
            column=column,
            k=k,
            units=units,
            rows=rows,
            dropped_by_cap=before - rows,
            dropped_missing_id=dropped_missing_id,
            p50=p50,
            p90=p90,
            p99=p99,
            max=largest,
            kept_by_k=tuple((c, kept(c)) for c in candidate_ks(largest)),
        )
