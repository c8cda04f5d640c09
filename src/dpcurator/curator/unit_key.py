"""The key that chooses a privacy unit's rows, kept in the ledger for the ledger's life.

Each unit keeps k of its rows, ranked by a keyed hash of their content
(:mod:`dpcurator.backends.unit_rows`). The accounting needs the kept rows to be the same
for as long as the ledger's charges are: a unit's loss is bounded by the mean of its
*kept* rows' per-point losses (docs/design.md §3), and a unit whose kept rows changed
between two processes could be charged on up to 2k rows against a bound made for k. So
the key is drawn once, from the operating system's CSPRNG, when a curator creates the
ledger, and every later process reads it from there.

Where it is kept: in the ledger's identity (the JSON its genesis hash is computed from),
under ``unit_key``, so the hash chain seals it: a key changed in the store breaks the
genesis, and the ledger is refused like any other tampering. The identity a curator
*asks for* carries no key (it cannot know an existing ledger's), so identities are
compared without it (:func:`public`), and :attr:`Ledger.identity` never shows it.

With the key, a new ledger keeps the *scheme* of the choice (``unit_rows``: 2, copies of
a row told apart and ids read as numbers where they are integers; see
:mod:`dpcurator.backends.unit_rows`), sealed alike, so that a later dpcurator that
chooses otherwise still keeps this ledger's rows. A ledger with a key and no scheme was
made before schemes were kept: scheme 1.

A ledger created before keys were kept has none: its key is derived from its genesis
hash (:func:`key_of`), as stable and as sealed, though not secret. Secrecy is not what
privacy rests on: the choice reads only the unit's own rows for *any* key; the key only
keeps the choice unpredictable to whoever knows a unit's rows.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

from dpcurator.backends.unit_rows import KEY_BYTES, SCHEME, SCHEMES, check_unit_key
from dpcurator.errors import LedgerError

#: The identity field that holds the key (hex).
FIELD = "unit_key"
#: The identity field that holds the scheme of the choice.
SCHEME_FIELD = "unit_rows"


def sealed(identity: str, given: bytes | None) -> str:
    """The identity a new ledger is created with: ``identity`` plus a key when it has a
    privacy unit (``given``, or 32 fresh bytes from the CSPRNG)."""
    d = json.loads(identity)
    if not d.get("privacy_unit"):
        return identity
    key = check_unit_key(given) if given is not None else secrets.token_bytes(KEY_BYTES)
    d[FIELD] = key.hex()
    d[SCHEME_FIELD] = SCHEME
    return json.dumps(d, sort_keys=True)


def public(identity: str) -> dict[str, object]:
    """The identity without its key and scheme: what curators compare and what commands
    show (a curator asks for a table and a unit, not for how rows were chosen)."""
    d = json.loads(identity)
    d.pop(FIELD, None)
    d.pop(SCHEME_FIELD, None)
    return d


def scheme_of(identity: str, location: str) -> int:
    """The scheme of the ledger's choice of rows: the one sealed in its identity, or 1
    for a ledger made before schemes were kept."""
    scheme = json.loads(identity).get(SCHEME_FIELD, 1)
    if type(scheme) is not int or scheme not in SCHEMES:  # sealed: only a writer of ours
        raise LedgerError(
            f"ledger {location}: its unit rows scheme {scheme!r} is unknown to this dpcurator"
        )
    return int(scheme)


def key_of(identity: str, genesis: bytes, location: str) -> bytes:
    """The ledger's unit key: the one sealed in its identity, or for a ledger created
    before keys were kept, SHA-256 of its genesis hash under a label of its own."""
    text = json.loads(identity).get(FIELD)
    if text is None:
        return hashlib.sha256(b"dpcurator unit key\x00" + genesis).digest()
    try:
        key = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:  # sealed by the genesis, so only a writer of ours errs here
        raise LedgerError(f"ledger {location}: its unit key is malformed; restore it from a backup")
    return key


def check_same(kept: bytes, given: bytes | None, location: str) -> None:
    """Refuse a key given for a ledger that keeps another (without showing either)."""
    if given is not None and not hmac.compare_digest(kept, check_unit_key(given)):
        raise LedgerError(
            f"ledger {location} keeps another unit key: its units' rows were chosen with "
            "that one for every charge; open it without unit_key="
        )
