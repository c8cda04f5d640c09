"""The test suite's hypothesis profiles, and the ledger stores its tests run on.

``ci`` (the default, what ``.ci/run`` and the README's test command use) draws a fixed,
derandomized set of examples, keeps no example database and sets no deadline: a run
never depends on which random examples it draws, nor on how loaded the machine is.
``HYPOTHESIS_PROFILE=explore`` draws new random examples on every run (and remembers
the failing ones), to look for bugs the fixed set misses; a failure it finds becomes a
deterministic test.

Ledger stores for the tests: an SQLite file, and a schema of a real PostgreSQL server.
The PostgreSQL server is the one ``DPCURATOR_TEST_POSTGRES_URL`` names (CI starts one
and sets it); without it, one is started for the session from Debian's ``postgresql``
binaries (``tests/postgres_server.py``) when they are installed, and the tests that need
it are skipped otherwise. Each test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from ledger_places import KINDS, Stores
from postgres_server import URL_VARIABLE, binaries, temporary

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a PostgreSQL server the tests may create schemas in."""
    url = os.environ.get(URL_VARIABLE)
    if url:
        importlib.import_module("psycopg")  # CI installs the postgres extra: never skipped
        yield url
        return
    pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
    if binaries() is None:
        pytest.skip(f"no PostgreSQL: set {URL_VARIABLE} or install Debian's postgresql")
    try:
        cluster = temporary()
    except RuntimeError as err:  # e.g. root, and no user to run the server as
        pytest.skip(f"cannot start a PostgreSQL server ({err}): set {URL_VARIABLE}")
    try:
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(cluster.directory, ignore_errors=True)


@pytest.fixture(params=KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """Places for ledgers, once with each store."""
    server = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    s = Stores(request.param, tmp_path, server)
    try:
        yield s
    finally:
        s.drop()


@pytest.fixture
def place(stores: Stores) -> Any:
    """A place for one new ledger, once with each store."""
    return stores.new()


@pytest.fixture
def postgres_stores(postgres_url: str, tmp_path: Path) -> Iterator[Stores]:
    """Places for PostgreSQL ledgers only."""
    s = Stores("postgresql", tmp_path, postgres_url)
    try:
        yield s
    finally:
        s.drop()
