"""The dashboard: ``GET /dashboard`` and the ``/v1/dashboard/...`` routes behind it.

The page itself is static (HTML, one stylesheet, one small script, all served from the
package: nothing is fetched from elsewhere) and holds no data. It asks for a token, keeps
it in the browser's session storage, and sends it as a bearer header to the JSON routes
below, which show each token exactly what ``/v1`` would show it: an analyst sees her
own charges, answers, quota and refusals, and the remaining budget (a public quantity:
it depends on queries and costs only); an administrator sees everyone's.

- ``GET /v1/dashboard/overview``: the budget and whom it protects (the privacy unit,
  and ``unit_text`` in words), what is left at the worst point, the analysts (an
  analyst: herself) with what they were charged and have left of their quota, and the
  spend over time as SVG.
- ``GET /v1/dashboard/answers``: the latest charges with their answers and 95%
  intervals (error bars as SVG).
- ``GET /v1/dashboard/refusals``: recent refusals. The ledger records only what was
  charged, so the service keeps the last ``MAX_REFUSALS`` refusals in memory (time,
  analyst, request, cost, what was left), fed by the 409 answers; they are lost when the
  server stops, and each server process keeps its own.
- ``GET /v1/dashboard/heatmap``: the remaining budget on every cell of a two-attribute
  grid (:mod:`dpcurator.curator.landscape`), bounded in cells and time and cached per
  ledger version.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
import time
from collections import OrderedDict, deque
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from dpcurator.curator import AnalystSession, Curator
from dpcurator.curator.credentials import Principal
from dpcurator.curator.landscape import (
    MAX_BINS,
    GridAxis,
    Losses,
    cell_losses,
    cell_text,
    grid_axis,
    remaining_grid,
    snapshot,
    worst_loss,
)
from dpcurator.curator.ledger import ChargeRow
from dpcurator.curator.privacy_unit import unit_text
from dpcurator.curator.statistics import recorded_results
from dpcurator.errors import DpCuratorError, InvalidParameter, QueryError, TooLarge
from dpcurator.mechanisms import DiscreteGaussianNoise, DiscreteLaplaceNoise
from dpcurator.service import charts
from dpcurator.service.callers import Caller, ServiceError

#: Refusals kept in memory.
MAX_REFUSALS = 500
#: Charges the answers route returns at most.
MAX_ANSWERS = 200
#: Cells of one answer listed at most (a large histogram is cut).
MAX_CELLS_SHOWN = 60
#: Answers drawn with error bars.
PANELS = 6
#: Points of one analyst's spend line (more are thinned out, keeping the last).
MAX_POINTS = 400
#: Analysts whose worst-point spend is computed for the overview, and the time it may take.
MAX_ANALYSTS = 50
OVERVIEW_TIME_LIMIT = 2.0
#: Heat maps and their figures kept (per ledger version).
CACHE_SIZE = 16
#: A charge made without an analyst (in process, by the custodian).
NOBODY = "(no analyst)"

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}


def _asset(name: str) -> bytes:
    return (resources.files("dpcurator.service") / "static" / name).read_bytes()


@lru_cache(maxsize=256)
def half_width(noise: str) -> int | None:
    """The 95% half-width of the noise a ledger row names (``DiscreteLaplace(scale=10)``,
    ``DiscreteGaussian(sigma=7/2)``); None if it is not one of those."""
    m = re.fullmatch(
        r"Discrete(Laplace|Gaussian)\((?:scale|sigma)=(\d{1,400}(?:/\d{1,400})?)\)", noise
    )
    if m is None:
        return None
    try:
        p = Fraction(m.group(2))
        dist = DiscreteLaplaceNoise(p) if m.group(1) == "Laplace" else DiscreteGaussianNoise(p)
        return int(dist.interval(0.05))
    except (ValueError, ZeroDivisionError, DpCuratorError):
        return None


def _short(x: float, up: bool) -> float:
    """x to 6 significant digits, rounded outward (an interval's end never moves in)."""
    if not math.isfinite(x) or x == 0:
        return x
    step = 10.0 ** (math.floor(math.log10(abs(x))) - 5)
    return (math.ceil if up else math.floor)(x / step) * step


def statistic_cells(results: list[object]) -> list[dict[str, Any]]:
    """The results of a statistic's record as answer cells: the group (and q, and the
    rank-error bound of a quantile), the value, and the 95% interval of a mean, variance
    or standard deviation, shortened for reading."""
    cells = []
    for r in results:
        if not isinstance(r, dict):
            continue
        value, group, q = r.get("value"), r.get("group"), r.get("q")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        label = group if isinstance(group, str) and group else "all rows"
        if isinstance(q, int | float) and not isinstance(q, bool):
            label += f", q = {q:g}"
        rank = r.get("rank_error")
        if isinstance(rank, int) and not isinstance(rank, bool):
            label += f" (rank within {rank} rows)"
        iv = r.get("interval")
        low = high = None
        if (
            isinstance(iv, list)
            and len(iv) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in iv)
        ):
            low, high = _short(float(iv[0]), False), _short(float(iv[1]), True)
        shown = (
            round(value, 6 - 1 - math.floor(math.log10(abs(value))))
            if (isinstance(value, float) and math.isfinite(value) and value != 0)
            else value
        )
        cells.append({"label": label, "value": shown, "low": low, "high": high})
    return cells


class _Rows:
    """The ledger's charges, read once and then only what is new: a charge whose answer
    was not yet recorded (it is recorded just after the charge) is read again."""

    def __init__(self, curator: Curator) -> None:
        self._ledger = curator.ledger
        self._rows: list[ChargeRow] = []
        self._lock = threading.Lock()

    def get(self) -> list[ChargeRow]:
        with self._lock:
            recent = time.time() - 300
            waiting = [r.id for r in self._rows if r.answer is None and r.created > recent]
            start = min(waiting) - 1 if waiting else (self._rows[-1].id if self._rows else 0)
            new = self._ledger.charges_after(start)
            self._rows = [r for r in self._rows if r.id <= start] + new
            return self._rows


class Refusals:
    """The latest refusals (409 answers), newest last; thread-safe and bounded."""

    _PATTERN = re.compile(
        r"refused: (?P<request>.*) costs (?P<cost>\S+) (?P<currency>\w+), but the points it "
        r"covers have (?P<left>\S+)(?: \(at most[^)]*\))? left of (?P<of>.*)"
    )

    def __init__(self, size: int = MAX_REFUSALS) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=size)
        self._lock = threading.Lock()

    def record(self, analyst: str | None, route: str, message: str) -> None:
        m = self._PATTERN.fullmatch(message)
        item: dict[str, Any] = {
            "time": time.time(),
            "analyst": analyst,
            "route": route,
            "request": m.group("request") if m else None,
            "cost": _number(m.group("cost")) if m else None,
            "left": _number(m.group("left")) if m else None,
            "of": m.group("of") if m else None,
            "message": message,
        }
        with self._lock:
            self._items.append(item)

    def latest(self, analyst: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first; only ``analyst``'s when given."""
        with self._lock:
            items = list(self._items)
        mine = [r for r in reversed(items) if analyst is None or r["analyst"] == analyst]
        return mine[:limit]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _edges(text: str | None, what: str) -> list[int] | None:
    if text is None or not text.strip():
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > MAX_BINS + 1:
        raise TooLarge(f"{what}: at most {MAX_BINS} bins")
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise InvalidParameter(
            f"{what} must be comma-separated integer bin edges, e.g. 17,30,50,91"
        ) from None


class Dashboard:
    """What the dashboard's routes show, computed from the curator and cached per
    ledger version (the id of the last charge)."""

    def __init__(self, curator: Curator) -> None:
        self.curator = curator
        self.refusals = Refusals()
        self.rows = _Rows(curator)
        self._lock = threading.Lock()  # one heat map or overview computation at a time
        self._cache: OrderedDict[tuple, Any] = OrderedDict()

    # --- caching -------------------------------------------------------------------------

    def _cached(self, key: tuple, make: Any) -> Any:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            value = make()
            self._cache[key] = value
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return value

    # --- who may see what ------------------------------------------------------------------

    @staticmethod
    def whose(who: Principal, analyst: str | None) -> str | None:
        """Whose records a request may see: an analyst only her own (naming someone else
        is forbidden), an administrator everyone's or the one named."""
        if who.admin:
            return analyst
        if analyst is not None and analyst != who.name:
            raise ServiceError("forbidden", "an analyst sees only her own records")
        return who.name

    # --- overview --------------------------------------------------------------------------

    def overview(self, who: Principal) -> dict[str, Any]:
        c = self.curator
        budget = c.budget
        rows = self.rows.get()
        quota = c.ledger.quota(who.name)
        quota = None if quota is False else quota
        visible = rows if who.admin else [r for r in rows if r.analyst == who.name]
        version = rows[-1].id if rows else 0
        spent = self._cached(("spent", version), lambda: self._spent(version))
        people = self._people(who, visible, spent)
        # what GET /v1/budget says at the worst point, from the same figures
        everyone, exact = spent.get(None, (None, False))
        if everyone is None:
            left = AnalystSession(c, who.name).remaining_detail()
            here = (left.value, left.budget, left.quota, left.exact)
        else:
            budget_left = budget.amount - everyone
            nothing = not any(r.analyst == who.name for r in rows)  # then she lost nothing
            mine = (
                spent.get(who.name, (Fraction(0), True) if nothing else None)
                if quota is not None
                else None
            )
            if mine is None and quota is not None:
                left = AnalystSession(c, who.name).remaining_detail()
                here = (left.value, left.budget, left.quota, left.exact)
            else:
                quota_left = None if mine is None else quota - mine[0]
                both = budget_left if quota_left is None else min(budget_left, quota_left)
                exact = exact and (mine is None or mine[1])
                here = (
                    budget.display(both),
                    budget.display(budget_left),
                    None if quota_left is None else budget.display(quota_left),
                    exact,
                )
        series: dict[str, list[tuple[float, float]]] = {}
        totals: dict[str, Fraction] = {}
        root = budget.currency == "mu"  # mu adds up as mu squared
        for r in visible:
            name = r.analyst or NOBODY
            totals[name] = totals.get(name, Fraction(0)) + r.cost
            y = float(totals[name])  # a point of a chart: a float is close enough
            series.setdefault(name, []).append((r.created, y**0.5 if root else y))
        ranked = sorted(series, key=lambda n: -totals[n])
        lines = [(n, _thin(series[n])) for n in ranked]
        total = budget.display(budget.amount)
        return {
            "you": {"name": who.name, "admin": who.admin},
            "budget": budget.describe(),
            "currency": budget.currency,
            "privacy_unit": None if c.privacy_unit is None else c.privacy_unit.to_dict(),
            "unit_text": unit_text(c.privacy_unit),
            "total": total,
            "remaining": {
                "remaining": here[0],
                "remaining_budget": here[1],
                "quota": None if quota is None else budget.display(quota),
                "quota_remaining": here[2],
                "exact": here[3],
            },
            "charges": len(visible),
            "version": version,
            "tables": {
                t: [
                    {"name": a.name, "type": a.type, "size": a.size} for a in c.schema(t).attributes
                ]
                for t in c.tables
            },
            "analysts": people,
            "spend": {
                "series": [{"analyst": n, "points": pts} for n, pts in lines],
                "svg": charts.spend_chart(lines, total, budget.currency),
            },
        }

    def _people(
        self,
        who: Principal,
        visible: list[ChargeRow],
        spent: dict[str | None, tuple[Fraction, bool]],
    ) -> list[dict]:
        """Each visible analyst: role, quota, what she was charged, and the most any one
        person lost to her answers (exact unless the time limit cut it short)."""
        c = self.curator
        budget = c.budget
        creds = {a.name: a for a in c.ledger.credentials()}
        charged: dict[str | None, Fraction] = {}
        counts: dict[str | None, int] = {}
        for r in visible:
            charged[r.analyst] = charged.get(r.analyst, Fraction(0)) + r.cost
            counts[r.analyst] = counts.get(r.analyst, 0) + 1
        names: list[str | None] = sorted(
            set(creds) | set(charged), key=lambda n: (n is None, n or "")
        )
        if not who.admin:
            names = [who.name]
        out = []
        for n in names:
            cred = creds.get(n) if n is not None else None
            quota = cred.quota if cred is not None else None
            loss, exact = spent.get(n, (None, False)) if n is not None else (None, False)
            if loss is None and n is not None and n not in charged:
                loss, exact = Fraction(0), True
            out.append(
                {
                    "name": n or NOBODY,
                    "admin": bool(cred and cred.admin),
                    "active": bool(cred and cred.active),
                    "quota": None if quota is None else budget.display(quota),
                    "charges": counts.get(n, 0),
                    "charged": budget.display(charged.get(n, Fraction(0))),
                    "spent": None if loss is None else budget.display(loss),
                    "quota_remaining": None
                    if quota is None or loss is None
                    else budget.display(quota - loss),
                    "exact": exact,
                }
            )
        return out

    def _spent(self, version: int) -> dict[str | None, tuple[Fraction, bool]]:
        """The most any one person lost: to everyone's charges (key None) and to each
        analyst's own (at most MAX_ANALYSTS of them, within the time limit)."""
        filt = snapshot(self.curator)
        tables = list(self.curator.tables)
        deadline = time.monotonic() + OVERVIEW_TIME_LIMIT
        out: dict[str | None, tuple[Fraction, bool]] = {
            None: worst_loss(filt, tables, deadline=deadline)
        }
        names = sorted({c.analyst for t in tables for c in filt.charges(t)} - {None})
        for n in names[:MAX_ANALYSTS]:
            if time.monotonic() > deadline:
                break
            out[n] = worst_loss(filt, tables, n, deadline=deadline)
        return out

    # --- answers ---------------------------------------------------------------------------

    def answers(self, who: Principal, analyst: str | None, limit: int) -> dict[str, Any]:
        c = self.curator
        whose = self.whose(who, analyst)
        rows = self.rows.get()
        chosen = [r for r in reversed(rows) if whose is None or r.analyst == whose][:limit]
        items = []
        panels = []
        for r in chosen:
            hw = half_width(r.noise)
            cells = []
            answer = r.answer if isinstance(r.answer, dict) else {}
            # a strategy's table: its noisy cells, the release's charges, and (on the
            # release's first charge) the asked answers derived from all of them
            part = answer.get("part") if r.kind == "strategy" else None
            release = None
            if (
                isinstance(part, list)
                and len(part) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in part)
                and 0 <= part[0] < part[1] <= 10**6
            ):
                release = list(range(r.id - part[0], r.id - part[0] + part[1]))
            derived = answer.get("derived") if release is not None else None
            if release is not None:
                answer = answer.get("cells") if isinstance(answer.get("cells"), dict) else {}
            results = recorded_results(answer, c.schema(r.table), MAX_CELLS_SHOWN)
            if results is not None:  # a mean, variance, stdev or quantile(s)
                cells = statistic_cells(results)
                every = answer.get("rows", answer.get("results"))
                answer = dict.fromkeys(range(len(every) if isinstance(every, list) else 0))
            for label, value in list(answer.items())[:MAX_CELLS_SHOWN]:
                if isinstance(value, int) and not isinstance(value, bool):
                    cells.append(
                        {
                            "label": str(label),
                            "value": value,
                            "low": None if hw is None else value - hw,
                            "high": None if hw is None else value + hw,
                        }
                    )
            items.append(
                {
                    "charge_id": r.id,
                    "created": r.created,
                    "analyst": r.analyst,
                    "table": r.table,
                    "kind": r.kind,
                    "request": r.request,
                    "cost": c.budget.display(r.cost),
                    "currency": c.budget.currency,
                    "noise": r.noise,
                    "half_width": hw,
                    "confidence": 0.95,
                    "answered": r.answer is not None,
                    "cells": cells,
                    "cells_total": len(answer),
                }
            )
            if release is not None:
                items[-1]["release"] = release
                if isinstance(derived, dict):
                    items[-1]["derived"] = [
                        {"query": str(q), "value": v}
                        for q, v in list(derived.items())[:MAX_CELLS_SHOWN]
                        if isinstance(v, int | float) and not isinstance(v, bool)
                    ]
                    items[-1]["derived_total"] = len(derived)
            if cells and hw is not None and len(panels) < PANELS:
                title = f"#{r.id} {r.request}"
                if len(answer) > 30:
                    title += f" (the first 30 of {len(answer)} cells)"
                panels.append(
                    {
                        "charge_id": r.id,
                        "title": title,
                        "svg": charts.error_bars(
                            title, [(x["label"], x["value"], hw) for x in cells[:30]]
                        ),
                    }
                )
        return {"answers": items, "panels": panels}

    # --- heat map --------------------------------------------------------------------------

    def heatmap(
        self,
        who: Principal,
        table: str | None,
        rows: str | None,
        cols: str | None,
        row_bins: str | None,
        col_bins: str | None,
    ) -> dict[str, Any]:
        c = self.curator
        from dpcurator.curator import requests

        t = requests.table_name(table, list(c.tables))
        schema = c.schema(t)
        if len(schema) < 2:
            raise QueryError(f"table {t!r} has one attribute; a heat map needs two")
        rows = rows or schema.names[0]
        cols = cols or next(n for n in schema.names if n != rows)
        if rows == cols:
            raise QueryError("pick two different attributes")
        r_axis = grid_axis(schema, rows, _edges(row_bins, "row_bins"))
        c_axis = grid_axis(schema, cols, _edges(col_bins, "col_bins"))
        quota = c.ledger.quota(who.name)
        mine = who.name if quota not in (None, False) else None
        filt = snapshot(c)
        key = ("grid", filt.last_id, filt.version, t, r_axis.axis, c_axis.axis)
        start = time.monotonic()
        cached = key in self._cache
        every: Losses = self._cached(
            key, lambda: cell_losses(filt, t, r_axis, c_axis, deadline=time.monotonic() + 2.0)
        )
        grid = self._cached(
            ("remaining", *key, mine, quota),
            lambda: remaining_grid(c, t, r_axis, c_axis, analyst=mine, filt=filt, everyone=every),
        )
        total = c.budget.display(c.budget.amount)
        svg = self._cached(
            ("svg", *key, mine, quota),
            lambda: charts.heatmap(
                rows,
                r_axis.labels,
                cols,
                c_axis.labels,
                grid.remaining,
                grid.exact,
                total,
                c.budget.currency,
            ),
        )
        return {
            "table": t,
            "rows": _axis_out(r_axis),
            "cols": _axis_out(c_axis),
            "remaining": grid.remaining,
            "remaining_budget": grid.remaining_budget,
            "quota_remaining": grid.quota_remaining,
            "exact": all(all(r) for r in grid.exact),
            "inexact_cells": sum(not x for r in grid.exact for x in r),
            "cell_exact": grid.exact,
            "method": grid.method,
            "version": grid.version,
            "cached": cached,
            "seconds": time.monotonic() - start,
            "total": total,
            "currency": c.budget.currency,
            "example": cell_text(schema, r_axis, 0, c_axis, 0),
            "svg": svg,
        }


def _axis_out(g: GridAxis) -> dict[str, Any]:
    return {"attribute": g.attribute, "labels": list(g.labels)}


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most MAX_POINTS points of a step line, always keeping the last."""
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    keep = sorted({int(i * step) for i in range(MAX_POINTS)} | {len(points) - 1})
    return [points[i] for i in keep]


def router(dash: Dashboard) -> APIRouter:
    """The dashboard's page, its assets and its JSON routes."""
    api = APIRouter()

    @api.get("/dashboard", include_in_schema=False)
    def page() -> Response:
        return Response(
            _asset("dashboard.html"), media_type="text/html; charset=utf-8", headers=_HEADERS
        )

    @api.get("/dashboard/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in _ASSETS:
            raise ServiceError("not_found", "no such file")
        return Response(_asset(name), media_type=_ASSETS[name], headers=_HEADERS)

    @api.get("/v1/dashboard/overview", tags=["dashboard"])
    def overview(who: Caller) -> dict[str, Any]:
        """The budget, what is left at the worst point, the analysts this token may see
        and their spend over time (SVG)."""
        return dash.overview(who)

    @api.get("/v1/dashboard/answers", tags=["dashboard"])
    def answers(
        who: Caller,
        analyst: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_ANSWERS)] = 20,
    ) -> dict[str, Any]:
        """The latest charges (an analyst: her own) with answers and 95% intervals."""
        return dash.answers(who, analyst, limit)

    @api.get("/v1/dashboard/refusals", tags=["dashboard"])
    def refusals(
        who: Caller,
        analyst: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_REFUSALS)] = 20,
    ) -> dict[str, Any]:
        """Recent refusals seen by this server process (an analyst: her own)."""
        whose = dash.whose(who, analyst)
        return {"refusals": dash.refusals.latest(whose, limit), "kept": MAX_REFUSALS}

    @api.get("/v1/dashboard/heatmap", tags=["dashboard"])
    def heatmap(
        who: Caller,
        table: Annotated[str | None, Query(max_length=200)] = None,
        rows: Annotated[str | None, Query(max_length=200)] = None,
        cols: Annotated[str | None, Query(max_length=200)] = None,
        row_bins: Annotated[str | None, Query(max_length=2000)] = None,
        col_bins: Annotated[str | None, Query(max_length=2000)] = None,
    ) -> dict[str, Any]:
        """The remaining budget on each cell of ``rows`` x ``cols`` (at most 100 bins
        each), as ``GET /v1/budget?query=CELL`` gives it to this token."""
        return dash.heatmap(who, table, rows, cols, row_bins, col_bins)

    return api


def install(app: FastAPI, curator: Curator) -> Dashboard:
    """Serve the dashboard from ``app``, and record the refusals its 409 handler sends."""
    dash = Dashboard(curator)
    app.state.dashboard = dash
    app.include_router(router(dash))
    inner = app.exception_handlers[DpCuratorError]

    async def recording(request: Request, err: Exception) -> Response:
        response = inner(request, err)
        if inspect.isawaitable(response):
            response = await response
        if response.status_code == 409:
            scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
            who = (
                await run_in_threadpool(curator.ledger.authenticate, token.strip())
                if scheme.lower() == "bearer"
                else None
            )  # (reads the ledger: not on the event loop)
            route = request.url.path.rsplit("/", 1)[-1]
            dash.refusals.record(who.name if who else None, route, str(err))
        return response

    app.add_exception_handler(DpCuratorError, recording)
    return dash
