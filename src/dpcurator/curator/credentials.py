"""Analysts' bearer tokens: made here, kept in the ledger only as hashes.

A token is ``dpc_<key>_<secret>``: ``key`` (8 random bytes, hex) names the credential so
that it can be found without comparing secrets, and ``secret`` (32 random bytes from the
operating system's CSPRNG, via :mod:`secrets`) is what proves it. The ledger stores the
key and SHA-256 of the secret; a presented token is looked up by its key and its
secret's hash compared with :func:`hmac.compare_digest`, so the time taken does not
depend on how much of a guessed secret is right. A 256-bit secret needs no slow hash:
it cannot be guessed, only stolen, and a stolen ledger file reveals no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from fractions import Fraction

_TOKEN = re.compile(r"dpc_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class Principal:
    """Who a request comes from, once the token is verified."""

    name: str
    admin: bool


@dataclass(frozen=True)
class Credential:
    """An analyst as the ledger records them (never the token itself)."""

    name: str
    quota: Fraction | None
    admin: bool
    active: bool  # has a token that works


def new_token() -> tuple[str, str, str]:
    """(token, key, secret hash): the token is shown once; key and hash are stored."""
    key = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"dpc_{key}_{secret}", key, secret_hash(secret)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


#: The 401 messages: no ``Authorization`` header, and any other token refused.
MISSING_TOKEN = "missing Authorization: Bearer TOKEN"
REFUSED_TOKEN = "unknown or revoked token"


def bearer_token(authorization: str) -> str | None:
    """The well-formed token of an ``Authorization`` header's value ``Bearer TOKEN``
    (the scheme in any case, the token stripped), else None (a :data:`REFUSED_TOKEN`).
    One reading for the server and its gate, so that they refuse the same headers."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or split_token(token) is None:
        return None
    return token


def split_token(token: object) -> tuple[str, str] | None:
    """(key, secret) of a well-formed token, else None."""
    if not isinstance(token, str):
        return None
    m = _TOKEN.fullmatch(token)
    return (m.group(1), m.group(2)) if m else None


def matches(secret: str, stored_hash: str) -> bool:
    """Whether ``secret`` hashes to ``stored_hash`` (constant time in the secret)."""
    return hmac.compare_digest(secret_hash(secret), stored_hash)
