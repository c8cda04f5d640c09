"""A whole request's cells (``max_request_cells``), counted from the public request
before anything is read or charged, through the Python API on real DuckDB and a real
SQLite ledger; and a grouped statistic's compact ledger row."""

from __future__ import annotations

import json
import sqlite3
import time

import numpy as np
import pandas as pd
import pytest

from dpcurator import Curator
from dpcurator.curator.requests import RequestLimits
from dpcurator.curator.statistics import expanded_record
from dpcurator.errors import InvalidParameter, TooLarge, WorkloadError
from dpcurator.privacy import PureDP
from dpcurator.queries import Schema, Workload, parse_workload_text

#: Two attributes of 120 x 148 values: a statistic by both has 17,760 groups.
GRID = {
    "attributes": [
        {"name": "a", "type": "integer", "min": 0, "max": 119},
        {"name": "b", "type": "integer", "min": 0, "max": 147},
        {"name": "v", "type": "integer", "min": 0, "max": 99},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
    ]
}
GROUPS = 120 * 148
MEAN = "mean(v, 0, 99, by=[a, b])"
#: What a served curator allows by default.
SERVED = {"max_cells": 50_000, "max_queries": 10_000, "max_charges": 10_000}


@pytest.fixture
def grid(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    df = pd.DataFrame(
        {
            "a": rng.integers(0, 120, n),
            "b": rng.integers(0, 148, n),
            "v": rng.integers(0, 100, n),
            "sex": rng.choice(["F", "M"], n),
        }
    )
    data = tmp_path / "grid.csv"
    df.to_csv(data, index=False)
    schema = tmp_path / "grid.json"
    schema.write_text(json.dumps(GRID))
    return data, schema


def open_(grid, tmp_path, **limits):
    data, schema = grid
    return Curator.open(
        data=data,
        schema=schema,
        budget=PureDP(100.0),
        ledger=tmp_path / "ledger.db",
        limits=RequestLimits(**limits),
    )


def rows(ledger) -> list[tuple]:
    with sqlite3.connect(ledger) as con:
        return con.execute("SELECT id, request, coverage, answer FROM charges").fetchall()


def test_twenty_lines_of_grouped_means_are_refused_at_once(grid, tmp_path):
    """The review's workload: 20 lines of a mean by 17,760 groups, each line within
    max_cells, 355,200 groups in all. Refused whole, at once, charging nothing."""
    with open_(grid, tmp_path, **SERVED, max_request_cells=50_000) as c:
        before = c.remaining()
        t0 = time.monotonic()
        with pytest.raises(TooLarge) as err:
            c.release_workload(f"{MEAN}\n" * 20, epsilon=1.0)
        assert time.monotonic() - t0 < 10
        assert str(err.value) == (
            "this workload asks for 355200 cells in all, over the limit "
            "max_request_cells = 50000; split it"
        )
        assert c.remaining() == before and c.history() == []
        _, (one,) = c.release_workload(f"{MEAN}\n", epsilon=1.0)  # one line of them fits
        assert len(one.results) == GROUPS
    assert len(rows(tmp_path / "ledger.db")) == 1


def test_a_grouped_statistic_at_the_limit_answers_with_a_compact_row(grid, tmp_path):
    """At exactly the limit a grouped mean is answered; one count more is refused. Its
    ledger row is one charge on the statistic's coverage (every point: not a union of
    17,760 boxes) with its results as rows without their groups' conditions, and history
    shows them labelled as before."""
    with open_(grid, tmp_path, max_request_cells=GROUPS) as c:
        with pytest.raises(TooLarge, match=f"{GROUPS + 1} cells in all"):
            c.release_workload(f"{MEAN}\nv < 50\n", epsilon=1.0)
        assert c.history() == []
        _, (a,) = c.release_workload(f"{MEAN}\n", epsilon=1.0)
        c.mean("v", 0, 99, by=["a", "b"], epsilon=1.0)  # alone, not in a workload
        (h, hb) = c.history()
    ((_, request, coverage, answer), (_, _, _, answer_b)) = rows(tmp_path / "ledger.db")
    assert request == MEAN and coverage == "{}"
    stored = json.loads(answer)
    assert stored["by"] == ["a", "b"] and stored["groups"] == GROUPS
    assert {"value", "interval", "std_error", "count"} <= set(stored["columns"])
    assert len(stored["rows"]) == GROUPS
    assert len(answer) < 100 * GROUPS  # was some 120 bytes a group, labels included
    legacy = json.dumps(h.answer)  # what the ledger stored before: a labelled object each
    assert len(answer) < len(legacy) / 2
    results = h.answer["results"]
    assert [r["group"] for r in results[:2]] == ["a = 0 AND b = 0", "a = 0 AND b = 1"]
    assert results[-1]["group"] == "a = 119 AND b = 147"
    for got, r in zip(results, a.results, strict=True):
        small = {"small_group": True} if r.small_group else {}
        assert got == {
            "group": r.group,
            "value": r.value,
            "interval": list(r.interval),
            "std_error": r.std_error,
            "count": r.count,
            **small,
        }
    assert len(json.loads(answer_b)["rows"]) == GROUPS and len(hb.answer["results"]) == GROUPS


def test_a_grouped_quantile_row_and_its_candidates(grid, tmp_path):
    """A quantile's cells are groups x candidates x quantiles, in a workload and alone;
    its row keeps q and the rank-error bound beside each value."""
    line = "quantiles(v, [0.25, 0.75], by=a, candidates=[10, 20, 30, 40, 50])"
    with open_(grid, tmp_path, max_request_cells=1199) as c:
        with pytest.raises(TooLarge, match="1200 cells in all"):
            c.release_workload(line, epsilon=1.0)
        with pytest.raises(TooLarge, match="over the limit max_request_cells = 1199"):
            c.quantiles("v", [0.25, 0.75], by="a", candidates=[10, 20, 30, 40, 50], epsilon=1)
        assert c.history() == []
    with open_(grid, tmp_path, max_request_cells=1200) as c:
        _, (q,) = c.release_workload(line, epsilon=1.0)
        (h,) = c.history()
    assert len(q.results) == 240
    stored = json.loads(rows(tmp_path / "ledger.db")[0][3])
    assert stored["columns"] == ["value", "q", "rank_error"] and stored["groups"] == 120
    assert [r["group"] for r in h.answer["results"][:3]] == ["a = 0", "a = 0", "a = 1"]
    assert [(r.group, r.q, r.value) for r in q.results] == [
        (r["group"], r["q"], r["value"]) for r in h.answer["results"]
    ]


def test_a_batch_counts_its_queries(grid, tmp_path):
    with open_(grid, tmp_path, max_request_cells=5) as c:
        with pytest.raises(TooLarge) as err:
            c.release(["v < 10"] * 6, [0.1] * 6)
        assert "a batch of 6 queries asks for 6 cells in all" in str(err.value)
        assert "max_request_cells = 5" in str(err.value) and "\n" not in str(err.value)
        assert c.history() == []
        assert len(c.release(["v < 10"] * 5, [0.1] * 5)) == 5


def test_histograms_and_marginals_sum_over_the_limit(grid, tmp_path):
    """Each line within max_cells, together over max_request_cells: refused whole."""
    with open_(grid, tmp_path, max_request_cells=300) as c:
        with pytest.raises(TooLarge, match="this workload asks for 301 cells in all"):
            c.release_workload("histogram(v)\nmarginal(sex, v)\nv < 3", epsilon=1.0)
        with pytest.raises(TooLarge, match="302 cells"):  # the same with a statistic
            c.release_workload("histogram(v)\nmean(v, 0, 99, by=sex)\nmarginal(v, sex)", epsilon=1)
        assert c.history() == []
        _, answers = c.release_workload("histogram(v)\nmarginal(sex, v)", epsilon=1.0)
        assert len(answers) == 300


def test_one_request_over_the_whole_request_limit(grid, tmp_path):
    """max_request_cells below max_cells: one histogram, marginal or statistic is the
    whole request, and the message names the smaller limit; estimates too."""
    with open_(grid, tmp_path, max_request_cells=100) as c:
        for ask in (
            lambda: c.histogram("a", epsilon=1),
            lambda: c.marginal(["sex", "v"], epsilon=1),
            lambda: c.mean("v", 0, 99, by="a", epsilon=1),
            lambda: c.median("a", epsilon=1),
            lambda: c.estimate("histogram", attribute="a", epsilon=1),
            lambda: c.estimate("mean", attribute="v", lower=0, upper=99, by="a", epsilon=1),
        ):
            with pytest.raises(TooLarge, match="the limit max_request_cells = 100"):
                ask()
        assert c.history() == []
        assert len(c.histogram("v", epsilon=1).cells) == 100


def test_a_hand_built_workload_is_counted_too(grid, tmp_path):
    _, schema = grid
    s = Schema.load(schema)
    wl = parse_workload_text(f"{MEAN}\n" * 3, s)
    with open_(grid, tmp_path, max_request_cells=50_000) as c:
        with pytest.raises(TooLarge, match="53280 cells in all"):
            c.release_workload(wl, epsilon=1.0)
        broken = Workload(wl.queries, wl.weights, statistics=("mean",) * 3)  # type: ignore[arg-type]
        with pytest.raises(WorkloadError):
            c.release_workload(broken, epsilon=1.0)
        assert c.history() == []


@pytest.mark.parametrize("bad", [0, -1, 10**9, 1.5, True, "100"])
def test_the_limit_must_be_a_positive_integer(bad):
    with pytest.raises(InvalidParameter, match="max_request_cells"):
        RequestLimits(max_request_cells=bad)


def test_history_shows_other_answers_as_recorded(grid):
    """Counts and ungrouped statistics are recorded as before; what history cannot read
    as a grouped statistic's rows it shows as recorded."""
    s = Schema.of(GRID)
    for answer in (
        {"v < 3": 17},
        {"statistic": "mean", "results": [{"group": "", "value": 1.5}]},
        {"statistic": "mean", "by": ["nope"], "groups": 2, "columns": ["value"], "rows": []},
        None,
    ):
        assert expanded_record(answer, s) == answer
