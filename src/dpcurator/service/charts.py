"""Server-rendered SVG for the dashboard: the spend chart, the heat map, error bars.

Pure functions from figures to SVG text; no JavaScript library and nothing fetched at
run time. Every piece of text (analyst names, query text, attribute values) is escaped,
so the page may insert the SVG as markup. Colours are presentation attributes (no style
attributes, so the page's Content-Security-Policy needs no inline styles); text is dark
on light and every mark has a text equivalent (``<title>``, the legend, and the tables
the page builds from the same JSON).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from html import escape

#: Okabe & Ito's palette (distinguishable with the common colour-vision deficiencies),
#: the yellow left out (too light on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000")
INK = "#1a1a1a"
MUTED = "#595959"  # 7:1 on white
GRID = "#d9d9d9"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"

#: Heat-map colours from "untouched" (light) to "exhausted" (dark): a sequential
#: yellow-orange-red-purple ramp, monotone in lightness.
RAMP = (
    "#ffffcc",
    "#ffeda0",
    "#fed976",
    "#feb24c",
    "#fd8d3c",
    "#fc4e2a",
    "#e31a1c",
    "#bd0026",
    "#800026",
    "#4a0014",
)
NONE_LEFT = "#000000"


def _t(text: object) -> str:
    return escape(str(text), quote=True)


def _num(x: float) -> str:
    """A short number for a label."""
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def _svg(width: int, height: int, label: str, body: list[str], extra: str = "") -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_t(label)}" '
        f'font-family="{FONT}" font-size="12" fill="{INK}"{extra}>'
        f"<title>{_t(label)}</title>" + "".join(body) + "</svg>"
    )


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round ticks covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 2.5, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


#: Steps between time ticks, in seconds.
_TIME_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
    2592000,
    7776000,
    31536000,
)


def _time_ticks(t0: float, t1: float, n: int = 5) -> list[float]:
    """At most about ``n`` ticks at round times (whole seconds, minutes, hours, days)."""
    step = next((s for s in _TIME_STEPS if (t1 - t0) / s <= n), _TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    return [first + i * step for i in range(int((t1 - first) / step) + 1)]


def _clock(t: float, span: float) -> str:
    """A time label in UTC: the date when the chart spans days, else the time of day."""
    fmt = "%Y-%m-%d" if span > 3 * 86400 else "%H:%M:%S" if span < 300 else "%H:%M"
    return time.strftime(fmt, time.gmtime(t))


# --- the spend chart ------------------------------------------------------------------------


def spend_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    budget: float,
    currency: str,
    *,
    width: int = 760,
    height: int = 320,
) -> str:
    """Cumulative cost charged to each analyst over time (a step line each), with the
    budget as a dashed line. ``series``: (name, [(time, cumulative cost), ...])."""
    left, right, top, bottom = 64, 170, 16, 44
    w, h = width - left - right, height - top - bottom
    times = [t for _, pts in series for t, _ in pts]
    label = "Spend over time: the cost charged to each analyst, added up"
    if not times:
        body = [
            f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" fill="{MUTED}">'
            "no charges yet</text>"
        ]
        return _svg(width, height, label, body)
    t0, t1 = min(times), max(times)
    if t1 - t0 < 1:
        t0, t1 = t0 - 1, t1 + 1
    ymax = max([budget] + [v for _, pts in series for _, v in pts]) * 1.05
    x = lambda t: left + (t - t0) / (t1 - t0) * w  # noqa: E731
    y = lambda v: top + h - v / ymax * h  # noqa: E731
    body = []
    for v in _ticks(0, ymax):
        if v <= ymax:
            body.append(
                f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="{GRID}"/>'
                f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_num(v)}</text>'
            )
    for t in _time_ticks(t0, t1, 4):
        if t0 <= t <= t1:
            body.append(
                f'<text x="{x(t):.1f}" y="{top + h + 18}" text-anchor="middle">'
                f"{_t(_clock(t, t1 - t0))}</text>"
            )
    body.append(
        f'<text x="{left + w / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="{MUTED}">'
        "time (UTC)</text>"
        f'<text x="14" y="{top + h / 2:.0f}" text-anchor="middle" fill="{MUTED}" '
        f'transform="rotate(-90 14 {top + h / 2:.0f})">{_t(currency)} charged</text>'
        f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="{INK}"/>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="{INK}"/>'
    )
    by = y(budget)
    body.append(
        f'<line x1="{left}" x2="{left + w}" y1="{by:.1f}" y2="{by:.1f}" stroke="{INK}" '
        f'stroke-dasharray="6 4" stroke-width="1.5"/>'
    )
    legend_x = left + w + 14
    body.append(
        f'<line x1="{legend_x}" x2="{legend_x + 22}" y1="{top + 8}" y2="{top + 8}" '
        f'stroke="{INK}" stroke-dasharray="6 4" stroke-width="1.5"/>'
        f'<text x="{legend_x + 28}" y="{top + 12}">budget {_num(budget)}</text>'
    )
    for k, (name, pts) in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        path = []
        prev = 0.0
        for t, v in pts:
            path.append(f"{x(t):.1f},{y(prev):.1f} {x(t):.1f},{y(v):.1f}")
            prev = v
        path.append(f"{x(t1):.1f},{y(prev):.1f}")
        dash = ' stroke-dasharray="2 2"' if k >= len(PALETTE) else ""
        body.append(
            f'<polyline points="{" ".join(path)}" fill="none" stroke="{colour}" '
            f'stroke-width="2"{dash}><title>{_t(name)}: {_num(prev)} {_t(currency)} '
            f"charged in all</title></polyline>"
        )
        ly = top + 30 + 20 * k
        if ly < height - 10:
            short = name if len(name) <= 16 else name[:15] + "…"
            body.append(
                f'<line x1="{legend_x}" x2="{legend_x + 22}" y1="{ly - 4}" y2="{ly - 4}" '
                f'stroke="{colour}" stroke-width="3"{dash}/>'
                f'<text x="{legend_x + 28}" y="{ly}">{_t(short)}</text>'
            )
    return _svg(width, height, label, body)


# --- the heat map ----------------------------------------------------------------------------


def colour(fraction_left: float) -> str:
    """The colour of a cell with ``fraction_left`` of the budget left (0..1): one of ten
    equal buckets [k/10, (k+1)/10) of the ramp, or black when nothing is left."""
    if fraction_left <= 0:
        return NONE_LEFT
    k = min(len(RAMP) - 1, math.floor(fraction_left * len(RAMP) + 1e-9))
    return RAMP[len(RAMP) - 1 - k]


def _text_colour(fill: str) -> str:
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def heatmap(
    row_name: str,
    row_labels: Sequence[str],
    col_name: str,
    col_labels: Sequence[str],
    remaining: Sequence[Sequence[float]],
    exact: Sequence[Sequence[bool]],
    total: float,
    currency: str,
) -> str:
    """The remaining budget of each cell as a colour (runs of equal colour in a row are
    one rectangle), with the row and column labels that fit and a legend. The page reads
    ``data-*`` to find the cell under the pointer or the keyboard's cursor."""
    nr, nc = len(row_labels), len(col_labels)
    cw = max(6, min(56, 720 // max(1, nc)))
    ch = max(6, min(30, 600 // max(1, nr)))
    longest = max((len(s) for s in row_labels), default=1)
    left = min(150, 24 + 7 * min(longest, 18))
    top = 14
    col_room = min(130, 16 + 7 * min(max((len(s) for s in col_labels), default=1), 16))
    gw, gh = cw * nc, ch * nr
    width = left + gw + 130
    height = max(top + gh + col_room + 30, top + 20 + 18 * (len(RAMP) + 1) + 8)
    body = []
    for i, row in enumerate(remaining):
        j = 0
        while j < nc:
            fill = colour(row[j] / total if total > 0 else 0.0)
            k = j + 1
            while k < nc and colour(row[k] / total if total > 0 else 0.0) == fill:
                k += 1
            body.append(
                f'<rect x="{left + j * cw}" y="{top + i * ch}" width="{(k - j) * cw}" '
                f'height="{ch}" fill="{fill}"/>'
            )
            j = k
    if cw >= 40 and ch >= 18:  # room for the figures themselves
        for i, row in enumerate(remaining):
            for j, v in enumerate(row):
                fill = colour(v / total if total > 0 else 0.0)
                mark = "" if exact[i][j] else "≥"
                body.append(
                    f'<text x="{left + j * cw + cw / 2:.1f}" y="{top + i * ch + ch / 2 + 4:.1f}" '
                    f'text-anchor="middle" font-size="11" fill="{_text_colour(fill)}">'
                    f"{mark}{_num(v)}</text>"
                )
    for i in range(nr):  # inexact cells: a dotted outline
        for j in range(nc):
            if not exact[i][j]:
                body.append(
                    f'<rect x="{left + j * cw + 1}" y="{top + i * ch + 1}" width="{cw - 2}" '
                    f'height="{ch - 2}" fill="none" stroke="{INK}" stroke-dasharray="2 2"/>'
                )
    body.append(
        f'<rect x="{left}" y="{top}" width="{gw}" height="{gh}" fill="none" stroke="{INK}"/>'
    )
    every_r = max(1, math.ceil(13 / ch))
    for i in range(0, nr, every_r):
        text = row_labels[i] if len(row_labels[i]) <= 18 else row_labels[i][:17] + "…"
        body.append(
            f'<text x="{left - 5}" y="{top + i * ch + ch / 2 + 4:.1f}" text-anchor="end">'
            f"{_t(text)}</text>"
        )
    every_c = max(1, math.ceil(13 / cw))
    for j in range(0, nc, every_c):
        text = col_labels[j] if len(col_labels[j]) <= 16 else col_labels[j][:15] + "…"
        cx, cy = left + j * cw + cw / 2 + 4, top + gh + 8
        body.append(
            f'<text x="{cx:.1f}" y="{cy}" text-anchor="end" '
            f'transform="rotate(-60 {cx:.1f} {cy})">{_t(text)}</text>'
        )
    body.append(
        f'<text x="{left + gw / 2:.0f}" y="{height - 6}" text-anchor="middle" '
        f'font-weight="bold">{_t(col_name)}</text>'
        f'<text x="12" y="{top + gh / 2:.0f}" text-anchor="middle" font-weight="bold" '
        f'transform="rotate(-90 12 {top + gh / 2:.0f})">{_t(row_name)}</text>'
    )
    # the legend: one swatch per colour, from "untouched" to "exhausted"
    lx = left + gw + 20
    body.append(f'<text x="{lx}" y="{top + 10}" font-weight="bold">{_t(currency)} left</text>')
    n = len(RAMP)
    for k, fill in enumerate(RAMP):
        hi = total * (n - k) / n
        lo = total * (n - k - 1) / n
        yy = top + 20 + 18 * k
        body.append(
            f'<rect x="{lx}" y="{yy}" width="16" height="16" fill="{fill}" stroke="{MUTED}"/>'
            f'<text x="{lx + 22}" y="{yy + 12}">{_num(lo)}–{_num(hi)}</text>'
        )
    yy = top + 20 + 18 * n
    body.append(
        f'<rect x="{lx}" y="{yy}" width="16" height="16" fill="{NONE_LEFT}" stroke="{MUTED}"/>'
        f'<text x="{lx + 22}" y="{yy + 12}">none left</text>'
    )
    body.append(
        f'<rect id="hm-cursor" x="{left}" y="{top}" width="{cw}" height="{ch}" fill="none" '
        f'stroke="#0050ff" stroke-width="2" visibility="hidden"/>'
    )
    label = (
        f"Heat map of the {currency} left on each cell of {row_name} by {col_name}: "
        f"{nr} rows, {nc} columns"
    )
    data = (
        f' data-left="{left}" data-top="{top}" data-cw="{cw}" data-ch="{ch}" '
        f'data-rows="{nr}" data-cols="{nc}"'
    )
    return _svg(width, height, label, body, data)


# --- answers with their 95% intervals --------------------------------------------------------


def short_label(label: str) -> str:
    """A cell's label without attribute names: ``race = 'White' AND sex = 'Female'``
    becomes ``White, Female``, ``age BETWEEN 25 AND 49`` becomes ``25–49``."""
    name = r"(?:\"[^\"]*\"|[A-Za-z_][\w.\-]*)"
    text = re.sub(name + r" = ('(?:[^']|'')*'|-?\d+)", r"\1", label)
    text = re.sub(
        name + r" BETWEEN ('(?:[^']|'')*'|-?\d+) AND ('(?:[^']|'')*'|-?\d+)", r"\1–\2", text
    )
    text = re.sub(r"'((?:[^']|'')*)'", lambda m: m.group(1).replace("''", "'"), text)
    return text.replace(" AND ", ", ")


def error_bars(
    title: str, cells: Sequence[tuple[str, int, int]], *, width: int = 340, height: int = 190
) -> str:
    """One answer: each cell's value (a dot) and 95% interval (a bar), on its own axis.
    ``cells``: (label, value, half_width)."""
    left, right, top, bottom = 72, 12, 10, 64
    w, h = width - left - right, height - top - bottom
    lows = [v - hw for _, v, hw in cells]
    highs = [v + hw for _, v, hw in cells]
    lo, hi = min([0, *lows]), max([1, *highs])
    pad = (hi - lo) * 0.05
    lo, hi = lo - (pad if lo < 0 else 0), hi + pad
    y = lambda v: top + h - (v - lo) / (hi - lo) * h  # noqa: E731
    body = []
    for v in _ticks(lo, hi, 4):
        if lo <= v <= hi:
            body.append(
                f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="{GRID}"/>'
                f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{_num(v)}</text>'
            )
    body.append(
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="{INK}"/>'
        f'<line x1="{left}" x2="{left + w}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="{MUTED}"/>'
    )
    n = len(cells)
    step = w / max(1, n)
    every = max(1, math.ceil(16 / step))
    room = 16 if n <= 6 else 10
    for k, (name, v, hw) in enumerate(cells):
        cx = left + step * (k + 0.5)
        body.append(
            f"<g><title>{_t(name)}: {v} (95% interval {v - hw} to {v + hw})</title>"
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(v + hw):.1f}" y2="{y(v - hw):.1f}" '
            f'stroke="{PALETTE[0]}" stroke-width="2"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y(v + hw):.1f}" y2="{y(v + hw):.1f}" '
            f'stroke="{PALETTE[0]}" stroke-width="2"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y(v - hw):.1f}" y2="{y(v - hw):.1f}" '
            f'stroke="{PALETTE[0]}" stroke-width="2"/>'
            f'<circle cx="{cx:.1f}" cy="{y(v):.1f}" r="3.5" fill="{INK}"/></g>'
        )
        if k % every == 0:
            short = short_label(name)
            short = short if len(short) <= room else short[: room - 1] + "…"
            ty = top + h + 10
            body.append(
                f'<text x="{cx + 3:.1f}" y="{ty}" text-anchor="end" font-size="11" '
                f'transform="rotate(-55 {cx + 3:.1f} {ty})">{_t(short)}</text>'
            )
    return _svg(width, height, f"{title}: values with 95% intervals", body)
