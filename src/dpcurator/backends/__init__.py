"""Data backends: exact counts and clipped sums over a validated table, nothing else.

A backend never adds noise, never sees a budget and never returns rows.
:class:`DuckDBBackend` is the embedded default; :class:`SparkBackend` (the ``spark``
extra: pyspark and Java 17) gives the same answers on a Spark cluster. See
``docs/backends.md``.
"""

from typing import Any

from dpcurator.backends.base import Backend
from dpcurator.backends.duckdb_backend import DENSE_LIMIT, DuckDBBackend, LoadReport, load_table
from dpcurator.backends.unit_rows import UnitReport

# SparkBackend is left out of __all__: a star import must not need pyspark.
__all__ = ["DENSE_LIMIT", "Backend", "DuckDBBackend", "LoadReport", "UnitReport", "load_table"]


def __getattr__(name: str) -> Any:
    # pyspark is optional: import the Spark backend only when it is asked for.
    if name == "SparkBackend":
        from dpcurator.backends.spark_backend import SparkBackend

        return SparkBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
