"""The fast lane: a well-formed JSON request to a query route answered without
FastAPI's per-request machinery, exactly as FastAPI would answer it.

Why. Under sixteen clients the server is bound by its one interpreter lock, and about a
third of the lock's time went to the event loop: for each count FastAPI builds a
request, solves its dependencies, validates the body and re-validates the answer,
through three more layers of middleware. A count's own work (the curator's) is the
same either way. Measured on 2 cores (benchmarks/service.py --quick): what HTTP adds to
a count fell from 2.7 to 2.2 ms, and the event loop's CPU per count from 1.18 to
0.83 ms.

What it takes. Only a request that FastAPI would hand to the route as it is: POST to
the exact path of a one-hop route (:func:`dpcurator.service.callers.one_hop`), one
``Authorization`` header holding a well-formed bearer token, one ``Content-Type:
application/json``, and a body (already read whole, under the size limit, by
:class:`~dpcurator.service.limits.BodySizeLimit`) that is a JSON object the route's
own body model accepts. Everything else, every malformed, unusual or invalid request
included, goes to FastAPI unchanged (its body replayed), so every error keeps the
answer it had.

How it answers. With the route's own code: a token the ledger can tell at once is
unknown is refused in the event loop (as the route's own dependency refuses it), else
the caller is looked up and the route runs in one worker thread (``one_hop``'s), the route's response model is validated and written
by FastAPI's own ``serialize_response`` into the same ``Response`` FastAPI builds, and an
exception the route raises goes to the application's handler for it, found as
Starlette's ``ExceptionMiddleware`` finds it (by the exception's classes in order); one
with no handler is raised, to the server-error handler, as before. Tests compare the
two paths' statuses, headers and bodies (``tests/service/test_fast_lane.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute, serialize_response
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The one header value of a body the lane takes (FastAPI takes more: those go to it).
_JSON = b"application/json"
#: Bodies longer than this go to FastAPI: the lane saves a fixed cost per request, and
#: a long body it read and found invalid would be read twice.
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Lane:
    """One route the lane answers: its FastAPI route and its one-hop call."""

    route: APIRoute
    #: (token, body) -> the route's result, run in a worker thread: the caller's lookup
    #: (token, then rate), then the route (``one_hop``).
    call: Callable[[str, Any], Any]


def lanes(api: FastAPI, caller: Callable[..., Any]) -> dict[str, Lane]:
    """The routes of ``api`` the lane can answer, by path: POST one-hop routes of one
    JSON body parameter (``body``) and one dependency, ``caller`` (the one-hop caller),
    and nothing else."""
    found: dict[str, Lane] = {}
    for route in api.routes:
        call = getattr(getattr(route, "endpoint", None), "one_hop", None)
        if not isinstance(route, APIRoute) or call is None or route.methods != {"POST"}:
            continue
        d = route.dependant
        if (
            route.body_field is None
            or [p.name for p in d.body_params] != ["body"]
            or [sub.call for sub in d.dependencies] != [caller]  # and nothing else
            or getattr(route, "max_body_size", None) is not None  # (FastAPI's own limit)
            or d.path_params
            or d.query_params
            or d.header_params
            or d.cookie_params
            or route.param_convertors
            or route.response_field is None
            or not isinstance(route.response_class, DefaultPlaceholder)
        ):
            continue
        if _first_match(api, route.path) is route:  # no earlier route takes its requests
            found[route.path] = Lane(route, call)
    return found


def _first_match(api: FastAPI, path: str) -> object:
    """The route Starlette's router gives a POST to ``path`` (the first that matches
    it fully), or None."""
    scope = {"type": "http", "method": "POST", "path": path, "root_path": ""}
    for route in api.router.routes:
        if route.matches(scope)[0] == Match.FULL:
            return route
    return None


class FastLane:
    """ASGI middleware, inside :class:`~dpcurator.service.limits.BodySizeLimit` (see the
    module docstring); ``api`` is the application whose routes it answers."""

    def __init__(
        self,
        app: ASGIApp,
        api: FastAPI,
        bearer: Callable[[str | None], str],
        refuse: Callable[[Any, str], None],
        caller: Callable[..., Any],
    ) -> None:
        self.app = app
        self.api = api
        self.bearer = bearer
        self.refuse = refuse
        # built with the middleware stack, at the first request: every route exists
        self.lanes = lanes(api, caller)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = (
            self.lanes.get(scope["path"])
            if scope["type"] == "http"
            and scope["method"] == "POST"
            and not scope.get("root_path")
            and not self.api.dependency_overrides  # (tests': FastAPI applies them)
            else None
        )
        if lane is None:
            await self.app(scope, receive, send)
            return
        message = await receive()
        taken = self._take(scope, message)
        if taken is None:
            await self.app(scope, _replay(message, receive), send)
            return
        token, body = taken
        try:
            self.refuse(self.api.state, token)
            result = await run_in_threadpool(lane.call, token, body)
            route = lane.route
            content = await serialize_response(
                field=route.response_field,
                response_content=result,
                include=route.response_model_include,
                exclude=route.response_model_exclude,
                by_alias=route.response_model_by_alias,
                exclude_unset=route.response_model_exclude_unset,
                exclude_defaults=route.response_model_exclude_defaults,
                exclude_none=route.response_model_exclude_none,
                is_coroutine=True,
                dump_json=True,
            )
            response = Response(
                content=content, media_type="application/json", status_code=route.status_code or 200
            )
        except Exception as err:
            handler = self._handler(err)
            if handler is None:
                raise
            request = Request(scope, receive)
            response = (
                await handler(request, err)
                if is_async_callable(handler)
                else await run_in_threadpool(handler, request, err)
            )
            err.__traceback__ = None  # (as Starlette: a reused exception keeps none)
        await response(scope, receive, send)

    def _take(self, scope: Scope, message: Message) -> tuple[str, Any] | None:
        """The token and validated body of a request the lane answers, else None."""
        if (
            message["type"] != "http.request"
            or message.get("more_body", False)
            or len(message.get("body", b"")) > MAX_BODY
        ):
            return None
        authorization: list[bytes] = []
        content_type: list[bytes] = []
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization.append(value)
            elif name == b"content-type":
                content_type.append(value)
        if len(authorization) != 1 or len(content_type) != 1 or content_type[0].lower() != _JSON:
            return None
        field = self.lanes[scope["path"]].route.body_field
        assert field is not None  # (lanes() takes only routes with a body)
        try:
            token = self.bearer(authorization[0].decode("latin-1"))
            document = json.loads(message.get("body", b""))
            if type(document) is not dict:
                return None
            body, errors = field.validate(document, {}, loc=("body",))
        except Exception:  # FastAPI answers it (401, 422, 400): not the lane's to phrase
            return None
        return None if errors else (token, body)

    def _handler(self, err: Exception) -> Callable[..., Any] | None:
        """The application's handler of ``err``, as Starlette's ExceptionMiddleware
        looks it up: an HTTPException's by its status, else by the exception's classes
        (the server-error handler, of ``Exception`` or 500, is not one of them)."""
        handlers = self.api.exception_handlers
        if isinstance(err, HTTPException) and err.status_code != 500:
            by_status = handlers.get(err.status_code)
            if by_status is not None:
                return by_status
        for cls in type(err).__mro__:
            if cls is Exception:
                return None
            if cls in handlers:
                return handlers[cls]
        return None


def _replay(first: Message, receive: Receive) -> Receive:
    """``receive`` with ``first`` given back first (the lane read it, and let it go)."""
    pending: list[Message] = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay
