"""The release figure (``--plot`` of ``answer`` and ``demo``): every series visible,
every decade labelled, every label whole, no panel that says nothing, and the figures
of its legend written as the summaries write them."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from dpcurator.cli.output import error_figure
from dpcurator.cli.plots import release_figure
from dpcurator.planner import compare_objectives, make_plan
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, parse_workload

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema.load(ROOT / "examples" / "adult" / "schema.json")
MIXTURE = ROOT / "examples" / "adult" / "mixture.txt"


def rows_for(plan) -> list[dict]:
    """Rows as ``rows_of`` writes them (released answers are not what is drawn here)."""
    return [
        {
            "query": q.text,
            "line": q.line,
            "answer": 100 + i,
            "interval_low": 90 + i,
            "interval_high": 110 + i,
            "confidence": 0.95,
            "interval": "exact",
            "cost": cost,
            "currency": "epsilon",
        }
        for i, (q, cost) in enumerate(zip(plan.queries, plan.values, strict=True))
    ]


def line_texts(path: Path) -> dict[int, str]:
    return {n: ln.strip() for n, ln in enumerate(path.read_text().splitlines(), start=1)}


@pytest.fixture(scope="module")
def mixture():
    wl = parse_workload(MIXTURE, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0))
    return plan, compare_objectives(plan)


def test_coinciding_allocations_are_one_line_named_for_all(mixture) -> None:
    plan, splits = mixture
    # per-table and max both come to the equal split here: three of five series coincide
    fig = release_figure(plan, rows_for(plan), line_text=line_texts(MIXTURE), splits=splits)
    try:
        ax = fig.axes[1]
        labels = [ln.get_label() for ln in ax.lines]
        assert len(ax.lines) == 3, labels
        (merged,) = [lb for lb in labels if lb.startswith("uniform")]
        assert merged.startswith("uniform = optimal (per-table) (released) = optimal (max): ")
        # each total as the demo's summary writes it (one figure, one form)
        by = {e.label: e for e in splits}
        assert merged.endswith(f"total squared error {error_figure(by['uniform'].total)}")
        (seq,) = [lb for lb in labels if lb.startswith("sequential")]
        assert seq == f"sequential: total squared error {error_figure(by['sequential'].total)}"
        assert "named together" in ax.get_title(loc="left")
    finally:
        plt.close(fig)


def test_every_decade_is_labelled_the_top_one_too(mixture) -> None:
    plan, splits = mixture
    fig = release_figure(plan, rows_for(plan), line_text=line_texts(MIXTURE), splits=splits)
    try:
        ax = fig.axes[1]
        values = np.concatenate([ln.get_ydata() for ln in ax.lines])
        lo, hi = ax.get_ylim()
        assert lo == 10.0 ** math.floor(math.log10(values.min()))
        assert hi == 10.0 ** math.ceil(math.log10(values.max())) and hi >= values.max()
        fig.canvas.draw()
        labelled = [
            t.get_position()[1]
            for t in ax.yaxis.get_majorticklabels()
            if t.get_text() and lo <= t.get_position()[1] <= hi
        ]
        decades = round(math.log10(hi / lo))
        assert len(labelled) == decades + 1 and max(labelled) == hi
    finally:
        plt.close(fig)


def test_labels_are_whole_and_equal_costs_are_said_not_drawn(mixture) -> None:
    plan, splits = mixture
    texts = line_texts(MIXTURE)
    fig = release_figure(plan, rows_for(plan), line_text=texts, splits=splits)
    try:
        assert len(fig.axes) == 2  # every answer cost eps/8: no panel of 8 equal bars
        which = "answer" if plan.strategy is None else "query of the direct split"
        said = f"every {which} costs the same, {plan.values[0]:g} epsilon"
        assert said in fig.axes[1].get_title(loc="left")
        shown = [t.get_text().replace("\n", " ") for t in fig.axes[1].get_xticklabels()]
        lines = sorted({q.line for q in plan.queries})
        for label, ln in zip(shown, lines, strict=True):
            assert label.startswith(texts[ln]) and "…" not in label, label
    finally:
        plt.close(fig)
    # the long lines of the demo's workload, whole too
    marginals = ROOT / "examples" / "adult" / "marginals.txt"
    wl = parse_workload(marginals, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), "uniform", compare=False)
    texts = line_texts(marginals)
    fig = release_figure(plan, rows_for(plan), line_text=texts)
    try:
        shown = [t.get_text().replace("\n", " ") for t in fig.axes[1].get_xticklabels()]
        assert "marginal(education, marital-status) (112)" in shown
        assert all("…" not in s for s in shown)
    finally:
        plt.close(fig)


def test_differing_costs_get_their_panel() -> None:
    wl = parse_workload(MIXTURE, SCHEMA)
    plan = make_plan(wl.queries, wl.weights, PureDP(1.0), objective="total")
    fig = release_figure(plan, rows_for(plan), line_text=line_texts(MIXTURE))
    try:
        assert len(fig.axes) == 3
        heights = [p.get_height() for p in fig.axes[2].patches]
        assert len(heights) == 8 and max(heights) > 2 * min(heights)
        # the answer command's legend: total E|error| as its summary prints it
        labels = [ln.get_label() for ln in fig.axes[1].lines]
        assert any(
            lb.endswith(f"total E|error| {plan.expected_abs['uniform']:,.1f}") for lb in labels
        )
    finally:
        plt.close(fig)
