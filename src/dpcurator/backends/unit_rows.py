"""Which rows of a privacy unit are kept: a keyed, uniformly random choice of k rows.

With ``privacy_unit=("tailnum", k)`` a unit (person, aircraft, ...) with more than ``k``
rows keeps ``k`` of them. Each row is ranked by a keyed hash of its *content*: SHA-256 of
the text :func:`row_text` (the key in hex, the row's attribute codes, the row's copy
number, then its unit id), written identically in DuckDB (``sha256``) and Spark
(``sha2(.., 256)``); a unit keeps its ``k`` rows of smallest hash (hex text order).

Why this is the right choice:

- **Sensitivity.** Whether a row is kept depends on the key, the row and the other rows
  of the same unit, nothing else: adding or removing one unit's rows changes the kept
  table by at most ``k`` rows, the group size the curator calibrates noise to (k-fold
  group privacy: Dwork & Roth 2014, Lemma 2.8). This holds for every key; privacy never
  depends on the key staying secret.
- **Uniformity.** Keyed with 256 secret random bits, SHA-256 with the key as prefix is
  modelled as a pseudorandom function (the secret-prefix / NMAC construction: Bellare,
  Canetti & Krawczyk 1996): to anyone without the key, the hashes of distinct texts are
  i.i.d. uniform. Identical rows of a unit (the same codes) are told apart by their copy
  number, 0 for the first, 1 for the second, ... (which copy is which cannot matter:
  they are the same row), so every row has a text of its own. The ``k`` smallest of ``n``
  i.i.d. continuous values are each of the ``C(n, k)`` subsets with equal probability, so
  each unit keeps a uniformly random ``k``-subset of its rows, whatever the file order,
  and neither a data owner nor the order of the file can steer which rows are kept.
- **Stability.** The choice depends on the rows' content and the key only: a restart, a
  second process, a replica, a shuffled or re-sorted copy of the file keep exactly the
  same rows for the same key (kept in the ledger, with the scheme, below); so do another
  format of it and the other backend, for every id the two engines write alike (below).

The unit id (:func:`canonical_id`). An id is the id column's value written as text,
stripped of surrounding whitespace; one that reads as a decimal number (``7``, ``7.0``,
``+7``, ``007``, ``7e0``) whose value is an integer below 2^53 in magnitude is written as
that integer. So a CSV file (ids are text), a Parquet file and a DataFrame (ids typed:
integers, floats such as pandas' integers with a missing value, decimals, strings) of the
same ids group the same rows into the same units and keep the same rows. Merging texts
that name one number is safe: it can only join rows into one unit (which then keeps at
most ``k`` of them), never split one unit's rows. Other values are written as the engine
writes them (DuckDB and Spark agree for text, booleans, dates, decimals and the
integer-valued numbers above, a 32-bit float read as the double it is; they may write
other floats, NaN and timestamps differently, and then keep different, equally random,
rows: a table whose ids are such values should stay on one backend for its ledger's
life).

The text is unambiguous: codes and the copy number are decimal integers without ``|``,
and there is a fixed number of them, so everything after the last one's ``|`` is the unit
id, whatever it contains.

Schemes. A ledger keeps the scheme its rows were chosen with, for its life
(:mod:`dpcurator.curator.unit_key`). Scheme 2 (:data:`SCHEME`, every ledger made since)
is the one above. Scheme 1, of ledgers made before it, ranked identical rows alike (no
copy number: a unit kept a uniform choice over its *distinct* rows, which over-keeps a
unit's rare rows) and grouped ids by their stripped text alone (``7`` and ``7.0`` in a
CSV file were two units). It is kept for those ledgers: changing the rows a ledger's
charges were made on would void its accounting.

The pure-Python functions here (:func:`row_hash`, :func:`choose_rows`) are the reference
the backends are tested against. :class:`UnitReport` summarises a load for the custodian.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dpcurator.errors import InvalidParameter

#: Bytes of a unit key (256 bits, from the operating system's CSPRNG).
KEY_BYTES = 32
#: Separator of the fields of :func:`row_text`.
SEPARATOR = "|"
#: Largest float below which every integer is exact (float ids up to it are integers).
FLOAT_INTEGERS = 2.0**53
#: The scheme that chooses the rows of a new ledger's units (see the module docstring).
SCHEME = 2
#: The schemes a ledger may keep.
SCHEMES = (1, 2)
#: An id text that reads as a decimal number (ASCII digits only), as DuckDB's
#: ``regexp_full_match`` and Spark's ``rlike`` (anchored) read it.
NUMBER = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"
_NUMBER = re.compile(NUMBER)
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


def check_scheme(scheme: object) -> int:
    """The scheme, checked to be one of :data:`SCHEMES`."""
    if type(scheme) is not int or scheme not in SCHEMES:  # (not True, 2.0, "2")
        raise InvalidParameter(f"unit_rows must be one of {list(SCHEMES)}, got {scheme!r}")
    return scheme


def canonical_id(text: str) -> str:
    """Reference (scheme 2): an id's text (already stripped) as a unit is named: one that
    reads as a decimal number whose value is an integer below 2^53 in magnitude, as that
    integer in decimal (``"7.0"``, ``"+7"``, ``"007"``, ``"7e0"`` -> ``"7"``); any other
    as it is. The value is the correctly rounded double of the text, as DuckDB and Spark
    read it."""
    if not _NUMBER.fullmatch(text):
        return text
    value = float(text)
    if not math.isfinite(value) or abs(value) >= FLOAT_INTEGERS or value != math.floor(value):
        return text
    return str(int(value))


def row_text(key: bytes, codes: Sequence[int], unit_id: str, copy: int | None = None) -> str:
    """The hashed text of one row: ``hexkey|c0|c1|...|c{n-1}|copy|id`` (scheme 2: ``copy``
    is the row's number among the unit's rows of the same codes, from 0), or
    ``hexkey|c0|c1|...|c{n-1}|id`` (scheme 1: ``copy`` None)."""
    fields = [key_text(key), *(str(int(c)) for c in codes)]
    if copy is not None:
        fields.append(str(int(copy)))
    return SEPARATOR.join([*fields, unit_id])


def row_hash(key: bytes, codes: Sequence[int], unit_id: str, copy: int | None = None) -> str:
    """A row's rank: SHA-256 of its text (UTF-8) in lowercase hex, compared as text."""
    return hashlib.sha256(row_text(key, codes, unit_id, copy).encode("utf-8")).hexdigest()


def kept_by_unit(
    rows: Iterable[tuple[str, Sequence[int]]], k: int, key: bytes, scheme: int = SCHEME
) -> dict[str, list[tuple[int, ...]]]:
    """Reference: each unit's kept rows' codes (its ``k`` rows of smallest hash), by unit
    id, from ``(unit id text, codes)`` pairs (rows already valid and with an id; the text
    stripped, as a CSV file gives it or as the engine writes a typed id)."""
    check_scheme(scheme)
    units: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    copies: dict[tuple[str, tuple[int, ...]], int] = {}
    for text, codes in rows:
        c = tuple(int(x) for x in codes)
        if scheme == 1:
            units.setdefault(text, []).append((row_hash(key, c, text), c))
            continue
        unit_id = canonical_id(text)
        copy = copies.get((unit_id, c), 0)
        copies[(unit_id, c)] = copy + 1
        units.setdefault(unit_id, []).append((row_hash(key, c, unit_id, copy), c))
    return {u: [c for _, c in sorted(ranked)[:k]] for u, ranked in units.items()}


def choose_rows(
    rows: Iterable[tuple[str, Sequence[int]]], k: int, key: bytes, scheme: int = SCHEME
) -> list[tuple[int, ...]]:
    """Reference: the codes of every kept row (:func:`kept_by_unit`), sorted."""
    return sorted(c for kept in kept_by_unit(rows, k, key, scheme).values() for c in kept)


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
