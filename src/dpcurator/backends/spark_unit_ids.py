"""A privacy unit's id as Spark writes it into the hashed row, exactly as DuckDB does
(:mod:`dpcurator.backends.unit_rows`; DuckDB's side is in ``duckdb_load``): the two
backends must keep the same rows for the same key, so each expression here has its
DuckDB twin, and tests compare the kept rows."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpcurator.backends.unit_rows import FLOAT_INTEGERS, NUMBER


def canonical_id_column(ident: Column, dtype: T.DataType) -> Column:
    """:func:`~dpcurator.backends.unit_rows.canonical_id` of the id column ``ident`` of
    type ``dtype`` written as text (scheme 2), as DuckDB's ``_canonical_id`` computes it:
    a 32-bit float as the double it is, as DuckDB casts it; a NaN id missing."""
    if isinstance(dtype, T.FloatType | T.DoubleType):  # NaN is no id (DuckDB: the same)
        ident = F.when(~F.isnan(ident), ident.cast("double"))
    text = ident.cast("string")
    # cast only what reads as a number: under ANSI mode (Spark 4's default) a cast of any
    # other text is an error, and pyspark 3.5 has no try_cast. \z, not $: Java's $ also
    # matches before a final line terminator (U+0085, U+2028, ...), which the cast refuses
    d = F.when(text.rlike(f"^(?:{NUMBER})\\z"), text.cast("double"))
    number = ~F.isnan(d) & (F.abs(d) < F.lit(FLOAT_INTEGERS)) & (F.rint(d) == d)
    return F.when(number, d.cast("bigint").cast("string")).otherwise(text)


def id_text_column(ident: Column, dtype: T.DataType, scheme: int) -> Column:
    """The unit id's text in the hashed row, as DuckDB writes it (see
    :mod:`dpcurator.backends.unit_rows`). Scheme 2: the stage's id, already canonical
    text. Scheme 1: text as stripped, integers in decimal, a float that is an integer
    below 2^53 as that integer, anything else as Spark writes it."""
    if scheme != 1:
        return ident
    if isinstance(dtype, T.FloatType | T.DoubleType):
        d = ident.cast("double")
        exact = (F.rint(d) == d) & (F.abs(d) < F.lit(FLOAT_INTEGERS))
        return F.when(exact, d.cast("bigint").cast("string")).otherwise(ident.cast("string"))
    return ident.cast("string")
