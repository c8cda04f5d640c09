"""Data backends: exact counts and clipped sums over a validated table, nothing else.

A backend never adds noise, never sees a budget and never returns rows.
:class:`DuckDBBackend` is the embedded default; see ``docs/backends.md``.
"""

from dpcurator.backends.base import Backend
from dpcurator.backends.duckdb_backend import DENSE_LIMIT, DuckDBBackend, LoadReport, load_table

__all__ = ["DENSE_LIMIT", "Backend", "DuckDBBackend", "LoadReport", "load_table"]
