"""SQL as analysts write it: Google BigQuery's ``SELECT WITH DIFFERENTIAL_PRIVACY``.

Pure: text in, a checked :class:`~dpcurator.sql.select.SelectRequest` out (no data, no
noise, no budget). The text is read by sqlglot (BigQuery's dialect: backticks for names
such as ```hours-per-week```, single-quoted strings escaped with a backslash) after a
small pre-pass (:mod:`dpcurator.sql.text`): the ``WITH DIFFERENTIAL_PRIVACY
OPTIONS(...)`` clause, which sqlglot does not know, is taken out and read here, and the
DP aggregates are renamed so that sqlglot keeps their ``name => value`` arguments (its
built-in ``AVG`` takes one argument and refuses the rest). The curator
(:mod:`dpcurator.curator.sql_requests`) plans, charges and answers the request.
"""

from typing import Any

__all__ = ["Aggregate", "Options", "SelectRequest", "SqlResult", "parse_select"]


def __getattr__(name: str) -> Any:
    """The package's names, imported when first used: sqlglot is loaded only when SQL
    is read, not by every ``import dpcurator``."""
    if name == "SqlResult":
        from dpcurator.sql.result import SqlResult

        return SqlResult
    if name in __all__:
        from dpcurator.sql import select

        return getattr(select, name)
    raise AttributeError(name)
