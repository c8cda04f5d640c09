"""The curator as an HTTP service: FastAPI routes that only translate.

Every route authenticates the caller (a bearer token whose hash the ledger holds),
turns the JSON body into a call on the in-process analyst session, and turns the result
or the error into JSON. The curator decides everything else: what a request may
contain, what it costs, whether the budget and the caller's quota admit it. No route
returns a row, and no message, status or header depends on the data: errors come from
the public schema, the public costs and the ledger, never from a count; the data's own
load errors stay in the server's log.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dpcurator.curator import (
    AnalystSession,
    Answer,
    Curator,
    DerivedAnswer,
    StatisticAnswer,
    TableAnswer,
)
from dpcurator.curator.credentials import Principal
from dpcurator.errors import DpCuratorError, InvalidParameter, LedgerError
from dpcurator.service import models as m
from dpcurator.service import request_errors
from dpcurator.service.callers import (
    STATUS,
    Admin,
    Caller,
    ServiceError,
    bearer,
    checked,
    error_response,
    one_hop,
    refusal,
    refuse_unknown,
    unavailable,
    unverified_caller,
)
from dpcurator.service.dashboard import install as install_dashboard
from dpcurator.service.fast_lane import FastLane
from dpcurator.service.limits import BodySizeLimit, Limits, rate_limiter

log = logging.getLogger("dpcurator.service")

#: Where an analyst finds the routes (said by / and by a 404).
_MAP = (
    "the API is described at /docs (OpenAPI: /openapi.json), the budget dashboard is at "
    "/dashboard, and every /v1 route but /v1/health needs Authorization: Bearer TOKEN"
)

#: Request fields holding a query, a condition or attribute names: a value of the wrong
#: type there is an ``invalid_query``, as the in-process session reports it.
_QUERY_FIELDS = frozenset({"query", "where", "attribute", "attributes", "by"})


def _answer(a: Answer) -> m.AnswerOut:
    return m.AnswerOut(
        query=a.query,
        value=a.value,
        interval=a.interval,
        half_width=a.half_width,
        cost=m.CostOut(amount=a.cost, currency=a.currency),
        noise=m.NoiseOut(name=a.noise, parameter=a.noise_parameter),
        remaining=a.remaining,
        charge_id=a.charge_id,
        remaining_exact=a.remaining_exact,
    )


def _derived(a: DerivedAnswer) -> m.DerivedAnswerOut:
    return m.DerivedAnswerOut(
        query=a.query,
        value=a.value,
        variance=a.variance,
        interval=a.interval,
        half_width=a.half_width,
        strategy=a.strategy,
        currency=a.currency,
        remaining=a.remaining,
        charge_ids=list(a.charge_ids),
    )


def _table(t: TableAnswer) -> m.TableAnswerOut:
    return m.TableAnswerOut(
        request=t.request,
        cells=[_answer(a) for a in t.cells],
        cost=m.CostOut(amount=t.cost, currency=t.currency),
        remaining=t.remaining,
        charge_id=t.charge_id,
        remaining_exact=t.remaining_exact,
    )


def _statistic(a: StatisticAnswer, position: int | None = None) -> m.StatisticAnswerOut:
    return m.StatisticAnswerOut(
        request=a.request,
        statistic=a.statistic,
        results=[m.StatisticOut(**vars(r)) for r in a.results],
        mechanism=a.mechanism,
        cost=m.CostOut(amount=a.cost, currency=a.currency),
        remaining=a.remaining,
        charge_id=a.charge_id,
        position=position,
    )


def create_app(curator: Curator, limits: Limits | None = None) -> FastAPI:
    """The FastAPI application serving ``curator`` (which it does not close)."""
    limits = limits or Limits()
    ledger = curator.ledger
    rate = rate_limiter(limits, ledger)
    app = FastAPI(
        title="dpcurator",
        version="1",
        description="Differentially private counts, histograms, marginals, sums, means, "
        "variances, standard deviations and quantiles under an overlap-aware budget. Every "
        "route but /, /v1/health and this document needs `Authorization: Bearer TOKEN`.",
        responses={
            400: {"model": m.ErrorOut},
            401: {"model": m.ErrorOut},
            403: {"model": m.ErrorOut},
            404: {"model": m.ErrorOut},
            409: {"model": m.ErrorOut},
            413: {"model": m.ErrorOut},
            415: {"model": m.ErrorOut},
            422: {"model": m.ErrorOut},
            429: {"model": m.ErrorOut},
            503: {"model": m.ErrorOut},
        },
    )
    # (the last added is the outermost: the lane is given bodies already read whole)
    app.add_middleware(
        FastLane, api=app, bearer=bearer, refuse=refuse_unknown, caller=unverified_caller
    )
    app.add_middleware(BodySizeLimit, limit=limits.max_body_bytes)
    app.state.ledger = ledger
    app.state.rate = rate

    # --- errors -------------------------------------------------------------------------

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, err: ServiceError) -> JSONResponse:
        return refusal(err)

    @app.exception_handler(LedgerError)
    async def _ledger_error(_: Request, err: LedgerError) -> JSONResponse:
        return unavailable(err)

    @app.exception_handler(DpCuratorError)
    async def _curator_error(_: Request, err: DpCuratorError) -> JSONResponse:
        retry = {"Retry-After": "1"} if err.reason == "undecided" else {}
        return error_response(STATUS.get(err.reason, 400), err.reason, str(err), **retry)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        refused = await checked(request)
        if refused is not None:
            return refused
        first = err.errors()[0] if err.errors() else {}
        if isinstance(first.get("input"), bytes):  # a body not declared as JSON, unread
            return error_response(
                415,
                "unsupported_media_type",
                "send the body as JSON, with Content-Type: application/json",
            )
        model = request_errors.body_model(request.scope.get("route"))
        field, message = request_errors.describe(err.errors(), model, err.body)
        # a query, condition or attribute that is not text: what the curator calls it
        reason = "invalid_query" if field in _QUERY_FIELDS else "invalid_request"
        return error_response(422, reason, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        refused = await checked(request)
        if refused is not None:
            return refused
        reason = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(
            err.status_code, "http_error"
        )
        message = str(err.detail)
        if err.status_code == 404 and message == "Not Found":  # no such route
            message = f"no route {request.url.path[:200]!r}; {_MAP}"
        return error_response(err.status_code, reason, message)

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:
        log.exception("internal error")
        return error_response(500, "internal", "internal error; see the server log")

    def session(who: Principal) -> AnalystSession:
        return AnalystSession(curator, who.name)

    hop = one_hop(app.state)

    # --- routes -------------------------------------------------------------------------

    @app.get("/", tags=["service"])
    def index() -> dict[str, str]:
        """Where things are: the API's reference, its schema, the dashboard."""
        return {
            "service": "dpcurator",
            "api": "/docs",
            "openapi": "/openapi.json",
            "dashboard": "/dashboard",
            "health": "/v1/health",
            "message": _MAP,
        }

    @app.get("/v1/health", response_model=m.HealthOut, tags=["service"])
    def health() -> m.HealthOut:
        return m.HealthOut(status="ok")

    @app.get("/v1/schema", response_model=m.SchemaOut, tags=["service"])
    @hop
    def schema(who: Caller) -> m.SchemaOut:
        return m.SchemaOut(
            tables={n: curator.schema(n).to_dict() for n in curator.tables},
            budget=curator.budget.describe(),
            currency=curator.budget.currency,
            privacy_unit=None
            if curator.privacy_unit is None
            else m.PrivacyUnitOut(**curator.privacy_unit.to_dict()),
        )

    @app.post("/v1/count", response_model=m.AnswerOut, tags=["queries"])
    @hop
    def count(body: m.CountRequest, who: Caller) -> m.AnswerOut:
        return _answer(session(who).count(**body.args()))

    @app.post("/v1/units", response_model=m.AnswerOut, tags=["queries"])
    @hop
    def units(body: m.UnitsRequest, who: Caller) -> m.AnswerOut:
        return _answer(session(who).units(**body.args()))

    @app.post("/v1/sql", response_model=m.SqlOut, tags=["queries"])
    @hop
    def sql(body: m.SqlRequest, who: Caller) -> m.SqlOut:
        """One SELECT WITH DIFFERENTIAL_PRIVACY: one charge of its OPTIONS cost, the answer
        as a table (EXPLAIN SELECT: its cost and errors, nothing charged)."""
        return m.SqlOut(**session(who).sql(body.query).to_dict())

    @app.post("/v1/histogram", response_model=m.TableAnswerOut, tags=["queries"])
    @hop
    def histogram(body: m.HistogramRequest, who: Caller) -> m.TableAnswerOut:
        return _table(session(who).histogram(**body.args()))

    @app.post("/v1/marginal", response_model=m.TableAnswerOut, tags=["queries"])
    @hop
    def marginal(body: m.MarginalRequest, who: Caller) -> m.TableAnswerOut:
        return _table(session(who).marginal(**body.args()))

    @app.post("/v1/sum", response_model=m.AnswerOut, tags=["queries"])
    @hop
    def sum_(body: m.SumRequest, who: Caller) -> m.AnswerOut:
        return _answer(session(who).sum(**body.args()))

    @app.post("/v1/mean", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def mean(body: m.MomentsRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).mean(**body.args()))

    @app.post("/v1/variance", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def variance(body: m.MomentsRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).variance(**body.args()))

    @app.post("/v1/stdev", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def stdev(body: m.MomentsRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).stdev(**body.args()))

    @app.post("/v1/share", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def share(body: m.ShareRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).share(**body.args()))

    @app.post("/v1/quantile", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def quantile(body: m.QuantileRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).quantile(**body.args()))

    @app.post("/v1/quantiles", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def quantiles(body: m.QuantilesRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).quantiles(**body.args()))

    @app.post("/v1/median", response_model=m.StatisticAnswerOut, tags=["statistics"])
    @hop
    def median(body: m.MedianRequest, who: Caller) -> m.StatisticAnswerOut:
        return _statistic(session(who).median(**body.args()))

    @app.post("/v1/release", response_model=m.ReleaseOut, tags=["queries"])
    @hop
    def release(body: m.ReleaseRequest, who: Caller) -> m.ReleaseOut:
        s = session(who)
        if body.workload is None:
            if body.queries is None or body.costs is None:
                raise InvalidParameter("give a workload, or queries and costs")
            cur = curator.budget.currency
            if any(getattr(body, c) is not None for c in ("epsilon", "rho", "mu")):
                raise InvalidParameter(f"a batch gives one cost per query in costs (in {cur})")
            answers = s.release(body.queries, body.costs, table=body.table)
            return m.ReleaseOut(answers=[_answer(a) for a in answers])
        if body.queries is not None or body.costs is not None:
            raise InvalidParameter("give a workload, or queries and costs, not both")
        plan, answers = s.release_workload(
            body.workload,
            epsilon=body.epsilon,
            rho=body.rho,
            mu=body.mu,
            allocation=body.allocation,
            objective=body.objective,
            strategy=body.strategy,
            table=body.table,
        )
        direct = plan.strategy is None
        stats = [_statistic(a, i) for i, a in enumerate(answers) if isinstance(a, StatisticAnswer)]
        counted = [a for a in answers if not isinstance(a, StatisticAnswer)]
        return m.ReleaseOut(
            answers=[_answer(a) for a in counted] if direct else [],  # type: ignore[arg-type]
            statistics=stats,
            derived=[] if direct else [_derived(a) for a in answers],  # type: ignore[arg-type]
            strategy=plan.strategy_name,
            strategies=[m.StrategyOut(**c.to_dict()) for c in plan.candidates],
            allocation=plan.allocation.name,
            objective=plan.objective,
            gamma=plan.gamma,
            utility_gain=plan.utility_gain,
            notes=list(plan.notes),
        )

    @app.post("/v1/estimate", response_model=m.EstimateOut, tags=["queries"])
    @hop
    def estimate(body: m.EstimateRequest, who: Caller) -> m.EstimateOut:
        stray = body.stray()
        if stray:
            raise InvalidParameter(f"{body.kind} takes no {', '.join(stray)}")
        e = session(who).estimate(body.kind, **body.args())
        return m.EstimateOut(
            kind=e.kind,
            request=e.request,
            cells=e.cells,
            cost=m.CostOut(amount=e.cost, currency=e.currency),
            noise=m.NoiseOut(name=e.noise, parameter=e.noise_parameter),
            expected_abs_error=e.expected_abs_error,
            half_width=e.half_width,
            admitted=e.admitted,
            exact=e.exact,
            error_scale=e.error_scale,
            error=e.error,
        )

    @app.get("/v1/budget", response_model=m.BudgetOut, tags=["budget"])
    @hop
    def budget(
        who: Caller,
        query: str | None = None,
        table: str | None = None,
    ) -> m.BudgetOut:
        r = session(who).remaining_detail(query, table=table)
        quota = ledger.quota(who.name)
        return m.BudgetOut(
            budget=curator.budget.describe(),
            currency=curator.budget.currency,
            remaining=r.value,
            remaining_budget=r.budget,
            quota=None if quota in (None, False) else curator.budget.display(quota),
            quota_remaining=r.quota,
            query=query,
            exact=r.exact,
        )

    @app.get("/v1/history", response_model=list[m.HistoryOut], tags=["budget"])
    @hop
    def history(who: Caller) -> list[m.HistoryOut]:
        return [m.HistoryOut(**vars(h)) for h in session(who).history()]

    # --- administration -------------------------------------------------------------------

    @app.get("/v1/admin/analysts", response_model=list[m.AnalystOut], tags=["admin"])
    def analysts(who: Admin) -> list[m.AnalystOut]:
        return [_analyst(curator, a) for a in ledger.credentials()]

    @app.post("/v1/admin/analysts", response_model=m.NewAnalystOut, status_code=201, tags=["admin"])
    def add_analyst(body: m.AddAnalystRequest, who: Admin) -> m.NewAnalystOut:
        token = curator.add_analyst(body.name, quota=body.quota, admin=body.admin)
        (record,) = [a for a in ledger.credentials() if a.name == body.name]
        return m.NewAnalystOut(**_analyst(curator, record).model_dump(), token=token)

    @app.delete("/v1/admin/analysts/{name}", response_model=m.AnalystOut, tags=["admin"])
    def revoke(name: str, who: Admin) -> m.AnalystOut:
        if name not in {a.name for a in ledger.credentials()}:
            raise ServiceError("not_found", f"no analyst {name[:200]!r}")
        ledger.revoke(name)
        (record,) = [a for a in ledger.credentials() if a.name == name]
        return _analyst(curator, record)

    @app.get("/v1/admin/ledger", response_model=list[m.HistoryOut], tags=["admin"])
    def whole_ledger(who: Admin) -> list[m.HistoryOut]:
        return [m.HistoryOut(**vars(h)) for h in curator.history()]

    install_dashboard(app, curator)  # GET /dashboard and its routes
    return app


def _analyst(curator: Curator, record: Any) -> m.AnalystOut:
    return m.AnalystOut(
        name=record.name,
        quota=None if record.quota is None else curator.budget.display(record.quota),
        admin=record.admin,
        active=record.active,
    )
