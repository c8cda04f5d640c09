"""``max_overlap(..., decide_at=T)`` and the 0/1 program deciding a threshold, against
brute force over every point of small domains.

Whatever the threshold, the result's bounds must stay safe (``upper_bound`` never below
the maximum, the witness carrying exactly ``lower_bound``), and when the answer is
claimed settled (``upper_bound <= T`` or ``lower_bound > T``) it must be the brute-force
answer. The 0/1 program is forced on every component so that the threshold path runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dpcurator.queries.overlap as overlap
from dpcurator.queries import Attribute, Query, Schema, max_overlap
from dpcurator.queries.overlap import milp as milp_module
from dpcurator.queries.overlap.eliminate import reduce_to_core
from dpcurator.queries.overlap.milp import solve_milp

from .test_overlap_strategies import (
    Case,
    brute,
    check_solution,
    component_brute,
    split,
    trees,
    workloads,
)

#: Many draws: most components are decided before the 0/1 program, or are trivial.
SLOW = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def integral(case: Case) -> Case:
    """The case with integer weights (the threshold path needs them)."""
    schema, queries, w = case
    return schema, queries, np.round(w * 4)


def forced_milp(monkeypatch: pytest.MonkeyPatch, fold: bool = False) -> None:
    """Every component goes to the 0/1 program (no dense grid, no cheaper strategy)."""
    monkeypatch.setattr(overlap, "_DENSE", False)
    monkeypatch.setattr(overlap, "_decide", lambda comp, *_: reduce_to_core(comp, fold=fold))


def check_threshold(case: Case, res, t: float) -> bool:
    """The result against brute force; returns whether it settled "<= t"."""
    schema, queries, w = case
    best = brute(schema, queries, w)
    assert res.upper_bound >= best - 1e-9
    assert res.lower_bound <= best + 1e-9
    point_weight = math.fsum(
        float(wq) for q, wq in zip(queries, w, strict=True) if q.covers(res.witness)
    )
    assert point_weight == pytest.approx(res.lower_bound, abs=1e-9)
    if res.exact:
        assert res.value == pytest.approx(best, abs=1e-9)
    if res.upper_bound <= t:
        assert best <= t
        return True
    if res.lower_bound > t:
        assert best > t
        return True
    return False


@SLOW
@given(st.one_of(workloads(), trees()), st.integers(-2, 30), st.booleans())
def test_component_threshold_agrees_with_brute_force(case: Case, t: int, fold: bool) -> None:
    case = integral(case)
    parts = split(case)
    for comp in parts.components:
        core = reduce_to_core(comp, fold=fold)
        if not len(core.attrs):
            continue
        sol = solve_milp(comp, core, None, True, decide_at=float(t))
        check_solution(case, parts, comp, sol, exact=False)
        best = component_brute(case, comp)
        # without a time limit the threshold is always settled, one way or the other
        assert sol.upper <= t or sol.value > t
        assert (sol.upper <= t) == (best <= t)


@SLOW
@given(st.one_of(workloads(), trees()), st.integers(-2, 30))
def test_max_overlap_threshold_agrees_with_brute_force(case: Case, t: int) -> None:
    case = integral(case)
    with pytest.MonkeyPatch.context() as mp:
        forced_milp(mp)
        res = max_overlap(case[1], case[2], decide_at=t)
    assert check_threshold(case, res, t)


@SLOW
@given(st.one_of(workloads(), trees()), st.integers(0, 30))
def test_threshold_near_the_maximum(case: Case, offset: int) -> None:
    # thresholds just at, below and above the maximum: the hardest to settle
    case = integral(case)
    best = round(brute(*case))
    for t in (best, best - 1, best + 1, best - offset):
        with pytest.MonkeyPatch.context() as mp:
            forced_milp(mp)
            res = max_overlap(case[1], case[2], decide_at=t)
        assert check_threshold(case, res, t)


def _timed_out(comp, core, time_limit):
    """The 0/1 program as if the time limit stopped it after it found its best point but
    before it proved anything (its dual bound: everything)."""
    _, atoms, _ = real_milp_core(comp, core, None)
    everything = float(sum(u.max() for u in core.unary if len(u))) + float(comp.w.sum())
    return everything, atoms, False


real_milp_core = milp_module.milp_core


@SLOW
@given(st.one_of(workloads(), trees()))
def test_threshold_settles_where_the_exact_computation_times_out(case: Case) -> None:
    case = integral(case)
    # one component left for the 0/1 program (with several, no threshold is passed on)
    assume(len(split(case).components) == 1)
    best = brute(*case)
    with pytest.MonkeyPatch.context() as mp:
        forced_milp(mp)
        mp.setattr(milp_module, "milp_core", _timed_out)
        plain = max_overlap(case[1], case[2], time_limit=1.0)
        below = max_overlap(case[1], case[2], time_limit=1.0, decide_at=best - 1)
        at = max_overlap(case[1], case[2], time_limit=1.0, decide_at=best)
    assert plain.upper_bound >= best - 1e-9
    # just below the maximum: the point found refutes "at most best - 1"
    assert check_threshold(case, below, best - 1)
    assert below.lower_bound > best - 1
    # at the maximum: settled (by the families' bound) or not, never wrongly
    check_threshold(case, at, best)


def test_families_bound_settles_without_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    # a grid of 3 x 4 cells plus two 2-way marginals: the families' bound is 3 (one
    # cell of each table), so any threshold >= 3 is settled before HiGHS is called
    from dpcurator.queries import Attribute, Query, Schema

    schema = Schema(tuple(Attribute(f"a{i}", "integer", min=0, max=3) for i in range(3)))
    queries = [
        Query.from_coverages(schema, {x: ((i, i + 1),), y: ((j, j + 1),)})
        for x, y in (("a0", "a1"), ("a1", "a2"), ("a0", "a2"))
        for i in range(4)
        for j in range(4)
    ]
    w = np.ones(len(queries))

    def fail(*args, **kwargs):
        raise AssertionError("the 0/1 program should not run")

    forced_milp(monkeypatch)
    monkeypatch.setattr(milp_module, "milp_core", fail)
    res = max_overlap(queries, w, decide_at=3)
    assert res.upper_bound <= 3
    assert brute(schema, queries, w) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"decide_at": float("nan")},
        {"decide_at": float("inf")},
        {"decide_at": -1e400},
        {"decide_at": "3"},
        {"decide_at": True},
        {"decide_at": [3]},
        {"time_limit": -5e-324},
        {"time_limit": float("nan")},
        {"time_limit": "1"},
        {"time_limit": False},
    ],
)
def test_bad_thresholds_and_time_limits_are_one_clear_error(kwargs) -> None:
    schema = Schema((Attribute("a", "integer", min=0, max=3),))
    qs = [Query.from_coverages(schema, {"a": ((0, 2),)})] * 2
    with pytest.raises(ValueError, match=r"decide_at|time_limit"):
        max_overlap(qs, **kwargs)
    # extremes that are numbers are fine: a huge integer threshold, no time limit
    assert max_overlap(qs, decide_at=10**400).upper_bound >= 2
    assert max_overlap(qs, time_limit=float("inf"), decide_at=-(10**400)).value == 2
