"""Where a ledger's rows live, chosen by what names it.

- a path, or ``sqlite:///PATH`` (``sqlite:////srv/l.db`` for an absolute path): an SQLite
  file on this host, the embedded default (:mod:`.sqlite`); ``None`` or ``":memory:"``:
  a ledger in memory that dies with the process;
- ``postgresql://user@host:port/dbname[?schema=NAME]`` (or libpq's
  ``postgresql:///dbname?host=/run/postgresql``): a PostgreSQL database that several
  servers on several hosts share (:mod:`.postgres`, the ``postgres`` extra). Messages
  and outputs name it without its password or any ``*password*`` parameter
  (:func:`location_of`).

A store runs transactions and knows its tables; the hash chains, their verification and
everything a charge means live in :mod:`dpcurator.curator.ledger`, the same for both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from dpcurator.curator.stores.postgres_text import is_url, read_url, unknown_scheme
from dpcurator.curator.stores.protocol import Busy, Store
from dpcurator.curator.stores.rows import Dump, Rows
from dpcurator.errors import LedgerError

__all__ = [
    "Busy",
    "Dump",
    "Rows",
    "Store",
    "is_url",
    "location_of",
    "open_store",
    "target_of",
    "template_of",
    "write_copy",
]


_SQLITE = "sqlite:///"
#: A PostgreSQL URL mistyped (``postgresql:/...``, ``postgres//...``): refused rather than
#: taken for a file name, which messages would print with its password.
_MISTYPED = re.compile(r"(?i)postgres(ql)?(:|//)")


def target_of(target: str | Path | None) -> str | None:
    """A ledger's name as a store reads it: ``sqlite:///PATH`` becomes PATH; any other
    URL scheme is refused."""
    if target is None:
        return None
    text = str(target)
    if text.startswith(_SQLITE):
        path = text[len(_SQLITE) :]
        if not path:
            raise LedgerError(f"ledger {text}: give a file after sqlite:///")
        return path
    if is_url(text):
        return text
    if "://" in text:
        raise LedgerError(
            f"{unknown_scheme(text)}; give a file path, "
            "sqlite:///PATH or postgresql://user@host/dbname"
        )
    if _MISTYPED.match(text):
        raise LedgerError(
            "the ledger URL: write it postgresql://user@host/dbname (a scheme, then ://)"
        )
    return text


def location_of(target: str) -> str:
    """How messages name the ledger at ``target``: a file as given, a URL without its
    password or any ``*password*`` parameter."""
    name = target_of(target)
    assert name is not None
    if is_url(name):
        return read_url(name).shown
    return name


def template_of(target: str) -> str:
    """``target`` as a command to type again may show it: a URL with ``PASSWORD`` in
    place of each secret."""
    name = target_of(target)
    assert name is not None
    if is_url(name):
        return read_url(name).template
    return str(target)


def open_store(target: str | Path | None, initial_meta: Sequence[tuple[str, str]] | None) -> Store:
    """The store ``target`` names, created with ``initial_meta`` if nothing is there (and
    ``initial_meta`` is given)."""
    name = target_of(target)
    if name is not None and is_url(name):
        from dpcurator.curator.stores.postgres import PostgresStore

        return PostgresStore(name, initial_meta)
    from dpcurator.curator.stores.sqlite import SQLiteStore

    return SQLiteStore(name, initial_meta)


def write_copy(
    target: str, dump: Dump, *, force: bool, verify: Callable[[str], None], label: str
) -> None:
    """Write ``dump`` as a new ledger at ``target``, ``verify`` it where it was built,
    and only then put it in place (see each store's ``write_copy``)."""
    name = target_of(target)
    assert name is not None
    if is_url(name):
        from dpcurator.curator.stores import postgres

        postgres.write_copy(name, dump, force=force, verify=verify, label=label)
    else:
        from dpcurator.curator.stores import sqlite

        sqlite.write_copy(name, dump, force=force, verify=verify, label=label)
