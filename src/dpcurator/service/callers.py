"""Who is asking: the bearer token, its lookup in the ledger, the caller's rate, and
the HTTP errors these give (FastAPI dependencies the routes and the dashboard share).

A missing or malformed token is refused in the event loop (it needs no ledger); an
unknown or revoked one there too when the ledger can say so without waiting
(:meth:`~dpcurator.curator.ledger.Ledger.refused_at_once`); every other lookup, and the
rate (a shared rate limit is a database), runs in a worker thread.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dpcurator.curator.credentials import (
    MISSING_TOKEN,
    REFUSED_TOKEN,
    Principal,
    bearer_token,
)
from dpcurator.errors import LedgerError

log = logging.getLogger("dpcurator.service")
R = TypeVar("R")

#: HTTP status of each error reason; any other DpCuratorError is a 400.
STATUS = {
    "budget_exceeded": 409,
    "undecided": 503,
    "too_large": 413,
    "unauthorized": 401,
    "forbidden": 403,
    "rate_limited": 429,
    "not_found": 404,
    "unsupported_media_type": 415,
}


class ServiceError(Exception):
    """An error of the HTTP layer itself (authentication, authorisation, rate)."""

    def __init__(self, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


def error_response(status: int, reason: str, message: str, **headers: str) -> JSONResponse:
    # A message may quote what the request sent, lone surrogates included: escape them,
    # so that every error can be written as UTF-8 JSON.
    text = " ".join(str(message).split()).encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse(
        {"error": reason, "message": text}, status_code=status, headers=headers or None
    )


# --- who is asking ------------------------------------------------------------------------


def bearer(authorization: str | None) -> str:
    """The well-formed bearer token of an ``Authorization`` header, else a 401.

    A missing, non-bearer or malformed token is refused in the event loop: it needs no
    ledger, so its 401 never waits for a thread while the server is busy (it reveals
    nothing the sender does not know: the shape of what they sent)."""
    if authorization is None:
        raise ServiceError("unauthorized", MISSING_TOKEN)
    token = bearer_token(authorization)
    if token is None:
        raise ServiceError("unauthorized", REFUSED_TOKEN)
    return token


async def caller(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The analyst a request comes from: a valid bearer token (:func:`bearer`), within
    its rate, looked up in a worker thread (the ledger reads the analysts' chain, and a
    shared rate limit is a database)."""
    token = bearer(authorization)
    refuse_unknown(request.app.state, token)
    return await run_in_threadpool(known_caller, request.app.state, token)


def refuse_unknown(state: Any, token: str) -> None:
    """A 401 for an unknown or revoked token, here in the event loop when the ledger can
    say so without waiting (:meth:`Ledger.refused_at_once`); otherwise the lookup in a
    worker thread decides. Under a flood of exact checks a 401 that went through a
    thread waited for several handovers of the interpreter lock."""
    if state.ledger.refused_at_once(token):
        raise ServiceError("unauthorized", REFUSED_TOKEN)


class _Unverified:
    """A well-formed token not looked up yet (see :func:`one_hop`); ``checked`` once it
    has been."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.checked = False


async def unverified_caller(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> _Unverified:
    """The caller of a :func:`one_hop` route: a well-formed token (else 401 here),
    looked up later in the route's own thread; kept on the request, so that an error
    raised before the route runs (an invalid body) looks it up first (:func:`checked`)."""
    unverified = _Unverified(bearer(authorization))
    refuse_unknown(request.app.state, unverified.token)
    request.state.unverified = unverified
    return unverified


def one_hop(state: Any) -> Callable[[Callable[..., R]], Callable[..., Awaitable[R]]]:
    """A decorator for a synchronous route of a ``who: Caller`` parameter that runs it in
    one worker thread, its caller looked up (token, then rate) there, first.

    Why. FastAPI runs a synchronous route in three worker-thread trips (the caller's
    lookup, the route, the check of its response), and every trip hands the
    interpreter lock between the event loop and a thread that must be woken: under 16
    clients each trip cost about 0.4 ms of the server's CPU per count. The order of the
    answers is unchanged: a missing or malformed token is still 401 before anything;
    an unknown or revoked token is 401, and an analyst over their rate 429, before the
    route runs and before an invalid body's 422 (:func:`checked`)."""

    def decorate(route: Callable[..., R]) -> Callable[..., Awaitable[R]]:
        hints = typing.get_type_hints(route, include_extras=True)
        signature = inspect.signature(route)
        parameters = [
            p.replace(annotation=Unverified if p.name == "who" else hints.get(p.name, p.annotation))
            for p in signature.parameters.values()
        ]

        @functools.wraps(route)
        async def run(**values: Any) -> R:
            unverified: _Unverified = values.pop("who")

            def work() -> R:
                who = known_caller(state, unverified.token)
                unverified.checked = True
                return route(who=who, **values)

            return await run_in_threadpool(work)

        def lane_call(token: str, body: Any) -> R:  # the fast lane's (fast_lane.Lane)
            return route(who=known_caller(state, token), body=body)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=hints.get("return", Any)
        )
        run.one_hop = lane_call  # type: ignore[attr-defined]
        return run

    return decorate


async def checked(request: Request) -> JSONResponse | None:
    """For an error raised before a :func:`one_hop` route ran: the 401 or 429 its token
    or rate gets (the answer the caller would have had first), or None (go on)."""
    unverified = getattr(request.state, "unverified", None)
    if not isinstance(unverified, _Unverified) or unverified.checked:
        return None
    try:
        await run_in_threadpool(known_caller, request.app.state, unverified.token)
    except ServiceError as err:
        return refusal(err)
    except LedgerError as err:
        return unavailable(err)
    finally:
        unverified.checked = True
    return None


def refusal(err: ServiceError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.reason == "unauthorized" else {}
    if err.retry_after is not None:
        headers["Retry-After"] = str(err.retry_after)
    return error_response(STATUS[err.reason], err.reason, str(err), **headers)


def unavailable(err: LedgerError) -> JSONResponse:
    log.error("ledger error: %s", err)
    return error_response(
        503, "ledger_unavailable", "the ledger cannot be used; see the server log"
    )


def known_caller(state: Any, token: str) -> Principal:
    who = state.ledger.authenticate(token)
    if who is None:
        raise ServiceError("unauthorized", REFUSED_TOKEN)
    wait = state.rate.wait(who.name)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise ServiceError("rate_limited", f"too many requests; retry in {seconds} s", seconds)
    return who


async def admin(who: Annotated[Principal, Depends(caller)]) -> Principal:
    if not who.admin:
        raise ServiceError("forbidden", "this route is for administrators")
    return who


Caller = Annotated[Principal, Depends(caller)]
Admin = Annotated[Principal, Depends(admin)]
Unverified = Annotated[_Unverified, Depends(unverified_caller)]
