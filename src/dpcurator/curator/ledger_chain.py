"""What the ledger's parts share: its hash chains and the validation of what a store
returns (pure functions of bytes and text), and the retry of the ledger's own writes.
Used by the ledger (:mod:`dpcurator.curator.ledger`), its analysts' chain
(:mod:`dpcurator.curator.ledger_analysts`) and its anchor
(:mod:`dpcurator.curator.ledger_anchoring`). See the ledger's module doc for what is
chained and why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from dpcurator.errors import LedgerError

#: The ledger format this code reads and writes; any other is refused.
FORMAT = "2"

#: How often a write of the ledger's own (analysts, answers) is tried when the database
#: aborts it (see :class:`TransactionAborted`).
WRITE_ATTEMPTS = 3

F = TypeVar("F", bound=Callable[..., Any])


class TransactionAborted(LedgerError):
    """The database aborted a write transaction before it committed (a serialisation
    failure, a deadlock, a connection lost before the commit): nothing of it was
    written, and it may be run again."""


@dataclass(frozen=True)
class Entry:
    """An analyst's entry in force: quota, role, and the hash of their token (if any)."""

    quota: Fraction | None
    admin: bool = False
    token_key: str | None = None
    token_hash: str | None = None


# --- hashing ---------------------------------------------------------------------------


def by_key(entries: dict[str, Entry]) -> dict[str, tuple[str, Entry]]:
    return {e.token_key: (n, e) for n, e in entries.items() if e.token_key}


def digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def genesis(fmt: str, identity: str) -> bytes:
    return digest(b"dpcurator ledger\x00", fmt.encode(), b"\x00", identity.encode())


def analysts_genesis(ledger_genesis: bytes) -> bytes:
    return digest(b"dpcurator analysts\x00", ledger_genesis)


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode(fields: tuple[object, ...]) -> bytes:
    """Canonical, unambiguous bytes of a row's fields: a compact JSON array in UTF-8."""
    return _JSON.encode(fields).encode()


def charge_hash(prev: bytes, fields: tuple[object, ...]) -> bytes:
    return hashlib.sha256(prev + _JSON.encode(fields).encode()).digest()


def answer_seal(charge: bytes, answer: str) -> str:
    return hashlib.sha256(b"answer\x00" + charge + answer.encode()).hexdigest()


def head_text(n: int, h: bytes) -> str:
    """How the meta rows ``charges_head`` and ``analysts_head`` record a chain's head:
    its last entry's number and hash (the lookups compare this text, see
    :meth:`~dpcurator.curator.ledger.Ledger.authenticate`)."""
    return f"{n} {h.hex()}"


def initial_meta(identity: str) -> list[tuple[str, str]]:
    """The meta rows of a new, empty ledger of ``identity``."""
    first = genesis(FORMAT, identity)
    return [
        ("format", FORMAT),
        ("identity", identity),
        ("genesis", first.hex()),
        ("charges_head", head_text(0, first)),
        ("analysts_head", head_text(0, analysts_genesis(first))),
    ]


# --- validation --------------------------------------------------------------------------


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and text[0] != "0"


def ratio(text: object) -> tuple[int, int] | None:
    """(n, d) if ``text`` spells a positive fraction n/d exactly as ``str(Fraction)``
    would (lowest terms, no sign, "n" for d = 1), else None."""
    if type(text) is not str:
        return None
    num, slash, den = text.partition("/")
    if not _digits(num):
        return None
    if not slash:
        return int(num), 1
    if not _digits(den):
        return None
    n, d = int(num), int(den)
    return (n, d) if d > 1 and math.gcd(n, d) == 1 else None


def positive(text: object) -> Fraction | None:
    r = ratio(text)
    return None if r is None else Fraction(*r)


def valid_coverage(text: object) -> dict[str, list[list[int]]] | None:
    if not isinstance(text, str):
        return None
    try:
        cov = json.loads(text)
    except ValueError:
        return None
    if not isinstance(cov, dict):
        return None
    union = cov.get("|")
    if len(cov) == 1 and isinstance(union, list) and union and isinstance(union[0], dict):
        # a boolean query: {"|": [box, box, ...]}, each box as below
        ok = all(isinstance(b, dict) and _valid_box(b) for b in union)
        return cov if ok else None
    return cov if _valid_box(cov) else None


def _valid_box(cov: dict) -> bool:
    for name, ivs in cov.items():
        if not isinstance(name, str) or not isinstance(ivs, list):
            return False
        for iv in ivs:
            if (
                not isinstance(iv, list)
                or len(iv) != 2
                or type(iv[0]) is not int
                or type(iv[1]) is not int
                or not 0 <= iv[0] <= iv[1]
            ):
                return False
    return True


def retried(method: F) -> F:
    """Run a write of the ledger's own again when the database aborted it (nothing was
    written), a few times; inside a caller's transaction, the caller decides."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kw: Any) -> Any:
        if self._writing:
            return method(self, *args, **kw)
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return method(self, *args, **kw)
            except TransactionAborted:
                pass
        return method(self, *args, **kw)

    return run  # type: ignore[return-value]
