"""The error hierarchy of dpcurator, in one place.

Every error a user can provoke is a :class:`DpCuratorError`; the CLI and the HTTP
service turn it into one line (or a 4xx with ``reason``) without a traceback.
Errors about bad values also subclass :class:`ValueError` so that ordinary Python
code can catch them the usual way.
"""

from __future__ import annotations


class DpCuratorError(Exception):
    """Base class of every error dpcurator raises on purpose."""

    #: A short machine-readable reason, used by the HTTP service.
    reason = "error"


class InvalidParameter(DpCuratorError, ValueError):
    """A privacy parameter, cost, count or option is out of its valid range."""

    reason = "invalid_parameter"


class TooLarge(InvalidParameter):
    """A request is larger than the curator's limits (cells, queries, text, body)."""

    reason = "too_large"


class SpecError(InvalidParameter):
    """A mechanism spec on the command line (``KIND:PARAMS[xCOUNT]``) is malformed."""

    reason = "invalid_spec"


class SchemaError(DpCuratorError, ValueError):
    """A schema file or dictionary is malformed."""

    reason = "invalid_schema"


class QueryError(DpCuratorError, ValueError):
    """A query is not a valid predicate query over the schema."""

    reason = "invalid_query"


class WorkloadError(DpCuratorError, ValueError):
    """A workload file is malformed; the message names the file and line."""

    reason = "invalid_workload"


class DataError(DpCuratorError, ValueError):
    """The data does not match its schema (missing or out-of-domain values)."""

    reason = "invalid_data"


class LedgerError(DpCuratorError):
    """The ledger file does not belong to this curator, or cannot be used."""

    reason = "ledger_error"


class LedgerMissing(LedgerError):
    """No ledger is where one was to be opened without creating it."""


class BudgetExceeded(DpCuratorError):
    """A query was refused because it would exceed the privacy budget.

    The refusal depends only on the public queries and their costs, never on the
    data (Dwork & Roth 2014, Lemma 2.6), so it discloses nothing.
    """

    reason = "budget_exceeded"


class Undecided(DpCuratorError):
    """A request could not be decided within its time limit (or its turn at the exact
    solver did not come in time), so nothing was charged and nothing released. Depends
    on the public requests and the server's load, never on the data."""

    reason = "undecided"


class AuthenticationError(DpCuratorError):
    """The HTTP service did not accept the credentials (missing, unknown or revoked
    token), or the caller is not allowed this route."""

    reason = "unauthorized"


class RateLimited(DpCuratorError):
    """The HTTP service refused a request because the caller sent too many."""

    reason = "rate_limited"


class ServiceUnavailable(DpCuratorError):
    """The HTTP service could not answer (its ledger is unusable, or it failed)."""

    reason = "unavailable"
