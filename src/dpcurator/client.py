"""A Python client of ``dpcurator serve``: the analyst session, over HTTP.

:class:`Client` has the methods of the in-process
:class:`~dpcurator.curator.curator.AnalystSession`, with the same arguments, the same
return types (:class:`~dpcurator.curator.answers.Answer`,
:class:`~dpcurator.curator.answers.TableAnswer`, ...) and the same exceptions
(:class:`~dpcurator.errors.BudgetExceeded`, :class:`~dpcurator.errors.QueryError`, ...),
so a script moves from one to the other by changing the line that makes the session::

    session = curator.analyst("alice")                               # in process
    session = Client("https://curator.example:8443", token=TOKEN)     # over HTTP
"""

from __future__ import annotations

import datetime as dt
import email.utils
import itertools
import json
import math
import os
import ssl
import time
from collections.abc import Iterable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import httpx
import numpy as np

from dpcurator import errors
from dpcurator.curator.answers import (
    Answer,
    DerivedAnswer,
    HistoryEntry,
    Statistic,
    StatisticAnswer,
    TableAnswer,
)
from dpcurator.curator.curator import Estimate, Remaining
from dpcurator.curator.privacy_unit import DEFAULT_NAME, PrivacyUnit
from dpcurator.queries.statistic_request import STATISTICS, StatisticRequest, statistic_method
from dpcurator.queries.values import decimal_text
from dpcurator.sql.result import SqlResult

#: The exception each error reason of the service becomes.
_ERRORS: dict[str, type[errors.DpCuratorError]] = {
    "budget_exceeded": errors.BudgetExceeded,
    "invalid_query": errors.QueryError,
    "invalid_parameter": errors.InvalidParameter,
    "invalid_request": errors.InvalidParameter,
    "unsupported_media_type": errors.InvalidParameter,
    "not_found": errors.InvalidParameter,
    "method_not_allowed": errors.InvalidParameter,
    "invalid_workload": errors.WorkloadError,
    "invalid_schema": errors.SchemaError,
    "invalid_spec": errors.SpecError,
    "too_large": errors.TooLarge,
    "unauthorized": errors.AuthenticationError,
    "forbidden": errors.AuthenticationError,
    "rate_limited": errors.RateLimited,
}


#: The most items taken from an iterable argument (more are refused by the curator).
_MAX_ITEMS = 1_000_001


def _plain(v: Any) -> Any:
    """``v`` as JSON carries it: numpy scalars and arrays, tuples, ranges and generators
    become Python numbers and lists, as the in-process session takes them."""
    if v is None or isinstance(v, str | bool | int | float):
        return v
    tolist = getattr(v, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, Iterable) and not isinstance(v, bytes | bytearray):
        return [_plain(x) for x in itertools.islice(v, _MAX_ITEMS)]
    return v


def _answer(d: dict[str, Any]) -> Answer:
    return Answer(
        d["query"],
        d["value"],
        d["noise"]["name"],
        d["noise"]["parameter"],
        d["cost"]["amount"],
        d["cost"]["currency"],
        d["half_width"],
        d["remaining"],
        d["charge_id"],
        d.get("remaining_exact", True),
    )


def _table(d: dict[str, Any]) -> TableAnswer:
    return TableAnswer(
        d["request"],
        tuple(_answer(c) for c in d["cells"]),
        d["cost"]["amount"],
        d["cost"]["currency"],
        d["remaining"],
        d["charge_id"],
        d.get("remaining_exact", True),
    )


def _retry_after(r: httpx.Response) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait (a number of seconds or an HTTP
    date), or None when there is none or it cannot be read."""
    value = r.headers.get("retry-after", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _statistic(d: dict[str, Any]) -> StatisticAnswer:
    results = []
    for r in d["results"]:
        iv = r.get("interval")
        results.append(
            Statistic(
                r["group"],
                r["value"],
                r.get("q"),
                None if iv is None else (iv[0], iv[1]),
                r.get("rank_error"),
                r.get("std_error"),
                r.get("count"),
                bool(r.get("small_group", False)),
            )
        )
    return StatisticAnswer(
        d["request"],
        d["statistic"],
        tuple(results),
        d["mechanism"],
        d["cost"]["amount"],
        d["cost"]["currency"],
        d["remaining"],
        d["charge_id"],
    )


def _wire(value: Any) -> Any:
    """A value as JSON carries it exactly: a Decimal or a decimal Fraction as its decimal
    text ("30.5"), a datetime or date as ISO 8601 text, numpy numbers as Python's; lists
    element by element; anything else as it is (the server validates it)."""
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else value
    if isinstance(value, Fraction):
        try:
            return decimal_text(value)
        except ValueError:
            return float(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _what(request: object) -> str:
    """What was given instead of a statistic request, in a few words (never its repr)."""
    if isinstance(request, StatisticRequest):
        return f"a request of kind {str(request.kind)[:40]!r}"
    return f"a {type(request).__name__}"


class Client:
    """An analyst's connection to a dpcurator service (``url``, bearer ``token``).

    ``verify``: TLS verification: True (the system's certificate authorities), False
    (none), the path of a CA bundle or of the server's own certificate, or an
    :class:`ssl.SSLContext`. Use it as a context manager, or call :meth:`close`.

    ``retry``: a request refused for the token's rate (HTTP 429, which the server sends
    before the curator sees the request, so nothing was charged) is sent again after the
    ``Retry-After`` the server gave, as long as the waits of one call add up to at most
    ``max_wait`` seconds; past that, or with ``retry=False``, it raises
    :class:`~dpcurator.errors.RateLimited`.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 120.0,
        verify: bool | str | os.PathLike[str] | ssl.SSLContext = True,
        retry: bool = True,
        max_wait: float = 60.0,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise errors.InvalidParameter("a token is needed (dpcurator analysts add prints one)")
        if not isinstance(retry, bool):
            raise errors.InvalidParameter(f"retry must be True or False, got {retry!r}")
        if (
            isinstance(max_wait, bool)
            or not isinstance(max_wait, int | float)
            or not (math.isfinite(max_wait) and max_wait >= 0)
        ):
            raise errors.InvalidParameter(
                f"max_wait must be a number of seconds >= 0, got {max_wait!r}"
            )
        self._retry, self._max_wait = retry, float(max_wait)
        if isinstance(verify, str | os.PathLike):
            path = os.fspath(verify)
            try:
                verify = ssl.create_default_context(
                    capath=path if os.path.isdir(path) else None,
                    cafile=None if os.path.isdir(path) else path,
                )
            except (OSError, ssl.SSLError) as err:
                raise errors.InvalidParameter(
                    f"verify={path}: not a readable certificate file: {err}"
                ) from None
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ---------------------------------------------------------------------

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        if "json" in kw:  # NaN and infinities are sent too: the curator refuses them
            try:
                content = json.dumps(_plain(kw.pop("json")), allow_nan=True)
            except (TypeError, ValueError) as err:
                raise errors.InvalidParameter(f"cannot send the request as JSON: {err}") from None
            kw["content"] = content.encode()
            kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
        waited = 0.0
        while True:
            r = self._send(method, path, **kw)
            wait = _retry_after(r) if r.status_code == 429 and self._retry else None
            if wait is None or waited + wait > self._max_wait:
                break
            time.sleep(wait)  # a 429 was refused before the curator saw it: safe to resend
            waited += wait
        if r.status_code < 400:
            return r.json()
        try:
            body = r.json()
            reason, message = body["error"], body["message"]
        except (ValueError, KeyError, TypeError):
            reason, message = "unavailable", f"HTTP {r.status_code}"
        raise _ERRORS.get(reason, errors.ServiceUnavailable)(message)

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as err:
            raise errors.ServiceUnavailable(f"cannot reach the curator: {err}") from None
        except httpx.HTTPError as err:  # sent, but no answer came back
            raise errors.ServiceUnavailable(
                f"the curator did not answer ({type(err).__name__}: {err}); the request may "
                "have been charged all the same: see history() before asking again"
            ) from None

    @staticmethod
    def _body(**fields: Any) -> dict[str, Any]:
        return {k: _wire(v) for k, v in fields.items() if v is not None}

    # --- the analyst session -----------------------------------------------------------

    def count(
        self,
        query: str | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> Answer:
        body = self._body(query=query, epsilon=epsilon, rho=rho, mu=mu, table=table)
        return _answer(self._call("POST", "/v1/count", json=body))

    def units(
        self,
        condition: str | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> Answer:
        """The noisy number of privacy units with a kept row satisfying ``condition``
        (see :meth:`dpcurator.Curator.units`); the answer's cost is what was charged."""
        body = self._body(query=condition, epsilon=epsilon, rho=rho, mu=mu, table=table)
        return _answer(self._call("POST", "/v1/units", json=body))

    def sql(self, query: str) -> SqlResult:
        """Answer a DP SELECT (see :meth:`dpcurator.Curator.sql`) as a table, with
        ``.rows``, ``.columns``, ``.to_pandas()`` and ``.to_arrow()``."""
        d = self._call("POST", "/v1/sql", json={"query": query})
        return SqlResult(
            d["query"],
            tuple(d["columns"]),
            tuple(tuple(r) for r in d["rows"]),
            d["cost"],
            d["currency"],
            d["remaining"],
            d.get("charge_id"),
            d.get("remaining_exact", True),
            d.get("explain", False),
            d.get("admitted"),
        )

    def histogram(
        self,
        attribute: str,
        bins: Sequence[float | int | str] | None = None,
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> TableAnswer:
        body = self._body(
            attribute=attribute,
            bins=bins,
            where=where,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return _table(self._call("POST", "/v1/histogram", json=body))

    def marginal(
        self,
        attributes: Sequence[str],
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> TableAnswer:
        body = self._body(
            attributes=attributes, where=where, epsilon=epsilon, rho=rho, mu=mu, table=table
        )
        return _table(self._call("POST", "/v1/marginal", json=body))

    def sum(
        self,
        attribute: str,
        lower: float | int | str | Decimal,
        upper: float | int | str | Decimal,
        where: str | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> Answer:
        body = self._body(
            attribute=attribute,
            lower=lower,
            upper=upper,
            where=where,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            table=table,
        )
        return _answer(self._call("POST", "/v1/sum", json=body))

    def statistic(
        self,
        request: StatisticRequest,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        table: str | None = None,
    ) -> StatisticAnswer:
        """Answer a statistic request (see :meth:`dpcurator.Curator.statistic`):
        ``POST /v1/<kind>`` with the request's arguments."""
        if not isinstance(request, StatisticRequest) or request.kind not in STATISTICS:
            raise errors.InvalidParameter(
                "a statistic is a StatisticRequest of a mean, variance, stdev, share, "
                f"quantile, quantiles or median, got {_what(request)}"
            )
        body = self._body(**request.args(), epsilon=epsilon, rho=rho, mu=mu, table=table)
        return _statistic(self._call("POST", f"/v1/{request.kind}", json=body))

    mean = statistic_method("mean")
    variance = statistic_method("variance")
    stdev = statistic_method("stdev")
    share = statistic_method("share")
    quantile = statistic_method("quantile")
    quantiles = statistic_method("quantiles")
    median = statistic_method("median")

    def release(
        self, queries: Sequence[str], costs: Sequence[float], *, table: str | None = None
    ) -> list[Answer]:
        body = self._body(queries=queries, costs=costs, table=table)
        return [_answer(a) for a in self._call("POST", "/v1/release", json=body)["answers"]]

    def release_workload(
        self,
        workload: str,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        allocation: str = "optimal",
        objective: str = "per-table",
        strategy: str = "auto",
        table: str | None = None,
    ) -> tuple[dict[str, Any], list[Answer] | list[DerivedAnswer]]:
        """Plan and release a workload; returns (the plan's summary, the answers).
        ``objective``: what the optimal allocation minimises (``total``, ``per-table``
        or ``max``) and ``strategy`` what is measured (``auto``, ``direct``,
        ``marginals``, ``identity`` or ``tree``), as in :meth:`Curator.release_workload`:
        :class:`Answer` objects for ``direct``, :class:`DerivedAnswer` objects (least-
        squares estimates) otherwise; the summary's ``strategies`` has every candidate."""
        body = self._body(
            workload=workload,
            epsilon=epsilon,
            rho=rho,
            mu=mu,
            allocation=allocation,
            objective=objective,
            strategy=strategy,
            table=table,
        )
        out = self._call("POST", "/v1/release", json=body)
        summary = {k: v for k, v in out.items() if k not in ("answers", "derived", "statistics")}
        if out.get("strategy", "direct") != "direct":
            return summary, [
                DerivedAnswer(
                    a["query"],
                    a["value"],
                    a["variance"],
                    a["half_width"],
                    a["strategy"],
                    a["currency"],
                    a["remaining"],
                    tuple(a["charge_ids"]),
                )
                for a in out["derived"]
            ]
        answers: list[Any] = [_answer(a) for a in out["answers"]]
        for st in out.get("statistics", []):  # a workload's statistics, in their places
            answers.insert(st["position"], _statistic(st))
        return summary, answers

    def estimate(self, kind: str, **args: Any) -> Estimate:
        if kind == "units" and "condition" in args:  # as Curator.estimate takes it
            args["query"] = args.pop("condition")
        e = self._call("POST", "/v1/estimate", json=self._body(kind=kind, **args))
        return Estimate(
            kind=e["kind"],
            request=e["request"],
            cells=e["cells"],
            cost=e["cost"]["amount"],
            currency=e["cost"]["currency"],
            noise=e["noise"]["name"],
            noise_parameter=e["noise"]["parameter"],
            expected_abs_error=e["expected_abs_error"],
            half_width=e["half_width"],
            admitted=e["admitted"],
            exact=e["exact"],
            error_scale=e.get("error_scale"),
            error=e.get("error", ""),
        )

    def remaining_detail(self, query: str | None = None, *, table: str | None = None) -> Remaining:
        b = self._call("GET", "/v1/budget", params=self._body(query=query, table=table))
        return Remaining(b["remaining"], b["remaining_budget"], b["quota_remaining"], b["exact"])

    def remaining(self, query: str | None = None, *, table: str | None = None) -> float:
        return self.remaining_detail(query, table=table).value

    def history(self) -> list[HistoryEntry]:
        return [HistoryEntry(**h) for h in self._call("GET", "/v1/history")]

    def schema(self) -> dict[str, Any]:
        """The public schema of every table, the budget and its currency, and the privacy
        unit (``{"column": ..., "max_rows": k, "name": ...}``, or None)."""
        return self._call("GET", "/v1/schema")

    def privacy_unit(self) -> PrivacyUnit | None:
        """Whom every cost protects (None: each row on its own); its ``describe()`` says
        it in words: ``per aircraft (tailnum), up to 50 rows each``."""
        unit = self.schema().get("privacy_unit")
        if unit is None:
            return None
        return PrivacyUnit(unit["column"], unit["max_rows"], unit.get("name", DEFAULT_NAME))
