"""Plots for the CLI (matplotlib is imported only when a plot is asked for)."""

from __future__ import annotations

import numpy as np

from dpcurator.privacy.composition import Accountant
from dpcurator.privacy.tradeoff import TradeOff, f_eps_delta, grid


def composed_tradeoff(acc: Accountant, alpha: np.ndarray, points: int = 80) -> TradeOff | None:
    """The trade-off curve a method certifies: sup over its (eps, delta(eps)) pairs.

    Each pair is a valid (eps, delta) guarantee of that method, so the supremum of the
    f_{eps,delta} is valid too (Dong, Roth & Su 2022, Prop. 2.12).
    """
    eps_max = acc.epsilon(1e-9)
    if eps_max is None or eps_max <= 0:
        return None
    beta = np.zeros_like(alpha)
    for eps in np.linspace(0.0, eps_max * 1.2, points):
        d = acc.delta(float(eps))
        if d < 1:
            beta = np.maximum(beta, f_eps_delta(float(eps), d, alpha).beta)
    return TradeOff(alpha, beta, acc.method)


def plot_tradeoffs(accountants: list[Accountant], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alpha = grid(801)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.plot(alpha, 1 - alpha, color="grey", linestyle=":", label="perfect privacy (1 - alpha)")
    for acc in accountants:
        curve = composed_tradeoff(acc, alpha)
        if curve is None:
            continue
        style = "-" if acc.rigorous else "--"
        label = acc.method if acc.rigorous else f"{acc.method} (approximation)"
        ax.plot(curve.alpha, curve.beta, style, label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("type I error alpha")
    ax.set_ylabel("type II error beta (higher is more private)")
    ax.set_title(f"Composed trade-off curves\n{title}" if title else "Composed trade-off curves")
    ax.legend(loc="upper right")
    ax.set_aspect("equal")
    fig.tight_layout()
    from dpcurator.cli.output import save_figure

    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


# --- a released workload -------------------------------------------------------------


def _cell(text: str) -> str:
    """A cell's label by its values: "race = 'White' AND sex = 'Male'" -> "White · Male"."""
    parts = text.split(" AND ")
    if len(parts) < 2 or not all(" = " in p for p in parts):
        return text
    return " · ".join(p.split(" = ", 1)[1].strip("'") for p in parts)


def _short(text: str, n: int = 34) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def per_answer_errors(plan) -> dict[str, list[float]]:
    """Expected |error| of every answer under each allocation (planning only: costs and
    their noise, no data). The plan's own allocation is taken as planned."""
    from dpcurator.planner.allocation import allocate

    out: dict[str, list[float]] = {}
    cache: dict[float, float] = {}

    def err(v: float) -> float:
        if v not in cache:
            cache[v] = plan.budget.noise(v).expected_abs()
        return cache[v]

    w = np.asarray(plan.weights, float)
    for name in ("sequential", "uniform", "optimal"):
        if name == plan.allocation.name:
            out[name] = [n.expected_abs() for n in plan.noises]
            continue
        known = plan.allocations.get(name)
        if known is not None:  # as planned (optimal: for the plan's objective)
            out[name] = [err(plan.budget.value(float(c))) for c in known.costs]
            continue
        if name == "sequential" or (name == "uniform" and np.all(w == w[0])):
            # B w_q / sum(w), and B / gamma for equal weights (gamma is in the plan)
            share = w / w.sum() if name == "sequential" else np.full(len(w), 1 / plan.gamma)
            costs = [float(plan.budget.amount) * x * (1 - 1e-9) for x in share]
        else:
            costs = [
                float(c) for c in allocate(name, plan.queries, plan.weights, plan.budget).costs
            ]
        out[name] = [err(plan.budget.value(c)) for c in costs]
    return out


def _wrap(text: str, width: int = 48, lines: int = 3) -> str:
    """A workload line's label, wrapped (never cut) at commas and spaces; only a query
    too long for ``lines`` lines is cut, with an ellipsis."""
    import textwrap

    parts = textwrap.wrap(text, width, break_on_hyphens=False)
    if len(parts) > lines:
        parts = [*parts[: lines - 1], _short(" ".join(parts[lines - 1 :]), width)]
    return "\n".join(parts)


def _merge(series: list[tuple[str, str, str, str, str, list[float], bool]]) -> list[tuple]:
    """Series whose values coincide (to 1e-9) drawn once, with every name in the label:
    three allocations that give the same errors are one line, said to be three.
    A series is (name, its total, color, marker, line style, values, released)."""
    out: list[list] = []
    for name, total, color, marker, ls, ys, released in series:
        named = name + (" (released)" if released else "")
        for m in out:
            if np.allclose(m[5], ys, rtol=1e-9, atol=0):
                m[0].append(named)
                break
        else:
            out.append([[named], total, color, marker, ls, ys])
    return [(f"{' = '.join(m[0])}: {m[1]}", *m[2:]) for m in out]


def _decades(ax, values: list[float]) -> None:
    """A log axis from the decade below the smallest value to the decade above the
    largest: every decade the data spans has its labelled ticks, the top one too."""
    positive = [v for v in values if v > 0]
    if positive:
        lo = 10.0 ** np.floor(np.log10(min(positive)))
        hi = 10.0 ** np.ceil(np.log10(max(positive)))
        ax.set_ylim(lo, hi if hi > lo else lo * 10)


def release_figure(
    plan,
    rows,
    *,
    table_line: int | None = None,
    line_text: dict[int, str] | None = None,
    title: str = "",
    splits: list | None = None,
):
    """The figure of :func:`plot_release` (a matplotlib Figure; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpcurator.cli.output import error_figure

    lines = sorted({q.line for q in plan.queries})
    text_of = dict(line_text or {})
    for q, r in zip(plan.queries, rows, strict=True):
        text_of.setdefault(q.line, r["query"])
    sizes = {ln: sum(1 for q in plan.queries if q.line == ln) for ln in lines}
    if table_line is None:  # the largest table of at most 24 cells, else the first line
        small = [ln for ln in lines if sizes[ln] <= 24]
        table_line = max(small, key=lambda ln: (sizes[ln], -ln)) if small else lines[0]
    shown = [r for r in rows if r["line"] == table_line][:40]
    errors = per_answer_errors(plan)
    per_line: dict[str, list[float]] = {k: [] for k in errors}
    cost_line: list[float] = []
    cells: list[int] = []
    for ln in lines:
        idx = [i for i, q in enumerate(plan.queries) if q.line == ln]
        for k in errors:
            per_line[k].append(float(np.mean([errors[k][i] for i in idx])))
        cost_line.append(float(np.mean([plan.values[i] for i in idx])))  # the direct split's
        cells.append(len(idx))
    # (c) only when the costs differ: equal bars would say nothing a sentence cannot
    costs = [float(c) for c in plan.values]  # the direct split's, as (c) draws them
    one_cost = bool(costs) and max(costs) == min(costs)

    fig = plt.figure(figsize=(12, 11 if one_cost else 15.5), layout="constrained")
    heights = [max(2.2, 0.32 * len(shown) + 1.2), 4.2] + ([] if one_cost else [3.6])
    gs = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    ax = fig.add_subplot(gs[0])
    conf = rows[0]["confidence"] if rows else 0.95
    ys = np.arange(len(shown))[::-1]
    vals = np.array([r["answer"] for r in shown], float)
    lo = np.array([r["interval_low"] for r in shown], float)
    hi = np.array([r["interval_high"] for r in shown], float)
    ax.errorbar(
        vals,
        ys,
        xerr=[vals - lo, hi - vals],
        fmt="o",
        color="tab:blue",
        ecolor="tab:blue",
        elinewidth=2,
        capsize=5,
        ms=7,
    )
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_ylim(-0.6, len(shown) - 0.4)
    ax.set_yticks(ys)
    ax.set_yticklabels([_short(_cell(str(r["query"])), 48) for r in shown], fontsize=9)
    method = shown[0]["interval"] if shown else ""
    ax.set_title(
        f"(a) One released table, {text_of.get(table_line, '')} "
        f"(line {table_line}), with {conf:.0%} intervals\n"
        f"released answers only, never a true count; intervals: {method}",
        fontsize=11,
        loc="left",
    )
    ax.set_xlabel("released count")
    ax.grid(axis="x", alpha=0.3)

    x = np.arange(len(lines))
    labels = [_wrap(f"{text_of[ln]} ({cells[i]})") for i, ln in enumerate(lines)]
    ax = fig.add_subplot(gs[1])
    styles = {
        "sequential": ("tab:red", "s"),
        "uniform": ("tab:orange", "^"),
        "optimal": ("tab:green", "o"),
    }
    series = []  # (name, color, marker, line style, values by line, released)
    if splits is None:
        for k, ys_ in per_line.items():
            color, marker = styles[k]
            name = f"{k} ({plan.objective})" if k == "optimal" else k
            total = f"total E|error| {sum(errors[k]):,.1f}"
            series.append((name, total, color, marker, "-", ys_, k == plan.allocation.name))
        ylabel = "expected |error| of one answer"
    else:
        more = {"total": ("tab:purple", "D", "--"), "max": ("tab:brown", "v", ":")}
        for e in splits:
            if e.objective is None:
                color, marker = styles[e.allocation]
                ls = "-"
            else:
                color, marker, ls = more.get(e.objective, (*styles["optimal"], "-"))
            released = e.allocation == plan.allocation.name and e.objective in (
                None,
                plan.objective,
            )
            ys_ = [float(np.sqrt(e.line(ln))) for ln in lines]
            total = f"total squared error {error_figure(e.total)}"
            series.append((e.label, total, color, marker, ls, ys_, released))
        ylabel = "standard deviation of one answer's noise"
    drawn = _merge(series)
    for label, color, marker, ls, ys_ in drawn:
        ax.plot(x, ys_, marker=marker, color=color, lw=1.2, ls=ls, ms=5, label=label)
    ax.set_yscale("log")
    _decades(ax, [v for *_, ys_ in drawn for v in ys_])
    ax.set_ylabel(ylabel)
    title_b = "(b) Expected error of each answer, by workload line, under each allocation"
    if len(drawn) < len(series):
        title_b += "\n(allocations that give the same errors are one line, named together)"
    if one_cost:
        cur = rows[0]["currency"] if rows else ""
        which = "answer" if getattr(plan, "strategy", None) is None else "query of the direct split"
        title_b += (
            f"\nevery {which} costs the same, {costs[0]:g} {cur} "
            f"({plan.allocation.name} allocation): the cells of a line share one cost, "
            "disjoint cells share the budget"
        )
    ax.set_title(title_b, fontsize=11, loc="left")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    _xlabels(ax, x, labels)

    if not one_cost:
        ax = fig.add_subplot(gs[2])
        cur = rows[0]["currency"] if rows else ""
        objective = f", objective {plan.objective}" if plan.allocation.name == "optimal" else ""
        ax.bar(x, cost_line, color="tab:green" if plan.allocation.name == "optimal" else "tab:blue")
        ax.set_ylabel(f"cost of one answer ({cur})")
        ax.set_title(
            f"(c) Budget spent per query ({plan.allocation.name} allocation{objective})\n"
            "the cells of a line share one cost; disjoint cells share the budget",
            fontsize=11,
            loc="left",
        )
        ax.grid(axis="y", alpha=0.3)
        _xlabels(ax, x, labels)
    if title:
        fig.suptitle(title, fontsize=13)
    return fig


def plot_release(
    plan,
    rows,
    path: str,
    *,
    table_line: int | None = None,
    line_text: dict[int, str] | None = None,
    title: str = "",
    splits: list | None = None,
) -> None:
    """Two or three panels: (a) one released table with its intervals (the released
    answers only, never a true count); (b) the expected error of each answer under
    sequential, uniform and optimal allocation (with ``splits``, from
    :func:`dpcurator.planner.compare_objectives`: the standard deviation of each answer
    under each of them, the optimal one for every objective), allocations with the same
    errors drawn as one line named for all of them, on a log axis whose every decade is
    labelled; (c) the budget each answer cost, when the costs differ (else (b) says the
    one cost)."""
    import matplotlib.pyplot as plt

    from dpcurator.cli.output import save_figure

    fig = release_figure(
        plan, rows, table_line=table_line, line_text=line_text, title=title, splits=splits
    )
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


def _xlabels(ax, x, labels) -> None:
    if len(labels) <= 45:
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=60, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_xlabel("workload line (cells)")
    else:
        ax.set_xlabel(f"workload line (1 to {len(labels)})")
