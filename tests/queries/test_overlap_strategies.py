"""Each maximum-overlap strategy alone, against brute force over every point of the domain.

Exact strategies must equal the brute-force maximum; bounds must not be below it; every
witness must be a point covered by exactly the weight reported. Then the dispatcher:
which strategy ``max_overlap`` reports on representative workloads.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcurator.cli import main
from dpcurator.queries import (
    Attribute,
    Query,
    Schema,
    colouring_bound,
    max_overlap,
    overlap_graph,
    parse_workload,
)
from dpcurator.queries.overlap.atoms import atoms, best_atom
from dpcurator.queries.overlap.boxes import box_max, box_max_slabs, solve_boxes
from dpcurator.queries.overlap.component import Component, Solution
from dpcurator.queries.overlap.dense import dense_max_overlap
from dpcurator.queries.overlap.eliminate import reduce_to_core, solve_eliminated
from dpcurator.queries.overlap.milp import solve_milp
from dpcurator.queries.overlap.search import branch_and_bound
from dpcurator.queries.overlap.split import Split, prepare, split_components
from dpcurator.queries.predicates import normalize

Case = tuple[Schema, list[Query], np.ndarray]
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------- brute force


def covers_grid(schema: Schema, q: Query) -> np.ndarray:
    """Boolean array over every point of the domain: q covers it."""
    sizes = [a.size for a in schema.attributes]
    out = np.zeros(sizes, bool)
    for box in q.boxes:
        term = np.ones(sizes, bool)
        for p in box.predicates:
            j = schema.index(p.attribute.name)
            mask = np.zeros(sizes[j], bool)
            for s, e in p.coverage:
                mask[s:e] = True
            shape = [1] * len(sizes)
            shape[j] = sizes[j]
            term &= mask.reshape(shape)
        out |= term
    return out


def brute(schema: Schema, queries: list[Query], w: np.ndarray) -> float:
    """max over every point of the domain of the weight of the queries covering it."""
    total = np.zeros([a.size for a in schema.attributes])
    for q, wq in zip(queries, w, strict=True):
        total += wq * covers_grid(schema, q)
    return float(total.max())


def weight_at(schema: Schema, queries: list[Query], w: np.ndarray, pos: list[int]) -> float:
    point = {a.name: a.value(p) for a, p in zip(schema.attributes, pos, strict=True)}
    return math.fsum(float(wq) for q, wq in zip(queries, w, strict=True) if q.covers(point))


# --------------------------------------------------------------------- workloads


@st.composite
def workloads(draw: st.DrawFn, max_attrs: int = 4, intervals: bool = False) -> Case:
    """Up to ``max_attrs`` small attributes, up to 14 queries on random subsets (or
    single intervals), random weights (integers or not)."""
    attrs = [
        Attribute(f"a{i}", "integer", min=0, max=draw(st.integers(1, 5)))
        for i in range(draw(st.integers(1, max_attrs)))
    ]
    schema = Schema(tuple(attrs))
    queries = []
    for _ in range(draw(st.integers(1, 14))):
        cov = {}
        for a in attrs:
            if draw(st.integers(0, 3)) == 0:
                continue
            if intervals or draw(st.booleans()):
                s = draw(st.integers(0, a.size - 1))
                cov[a.name] = ((s, draw(st.integers(s + 1, a.size))),)
            else:
                members = draw(st.lists(st.booleans(), min_size=a.size, max_size=a.size))
                cov[a.name] = normalize((p, p + 1) for p, m in enumerate(members) if m)
        queries.append(Query.from_coverages(schema, cov))
    choices = [1.0, 2.0, 3.0] if draw(st.booleans()) else [0.0, 0.5, 1.0, 2.25]
    w = [draw(st.sampled_from(choices)) for _ in queries]
    return schema, queries, np.asarray(w, dtype=np.float64)


@st.composite
def trees(draw: st.DrawFn) -> Case:
    """Queries on one attribute or on both ends of an edge of a random tree of
    attributes, sometimes one more edge closing a cycle (a small core)."""
    n = draw(st.integers(2, 5))
    attrs = [Attribute(f"a{i}", "integer", min=0, max=draw(st.integers(1, 3))) for i in range(n)]
    schema = Schema(tuple(attrs))
    edges = [(draw(st.integers(0, i - 1)), i) for i in range(1, n)]
    if n >= 3 and draw(st.booleans()):
        edges.append((0, n - 1))
    queries = []
    for _ in range(draw(st.integers(6, 16))):
        cov = {}
        singles = [(i,) for i in range(n)]
        for i in draw(st.sampled_from(edges) | st.sampled_from(singles)):
            members = draw(st.lists(st.booleans(), min_size=attrs[i].size, max_size=attrs[i].size))
            cov[attrs[i].name] = normalize((p, p + 1) for p, m in enumerate(members) if m)
        queries.append(Query.from_coverages(schema, cov))
    w = [draw(st.sampled_from([0.5, 1.0, 2.0, 0.0])) for _ in queries]
    return schema, queries, np.asarray(w, dtype=np.float64)


def split(case: Case) -> Split:
    _, queries, w = case
    qs, w, integral = prepare(queries, w)
    return split_components(qs, w, 0.0 if integral else 1e-9 * max(1.0, float(w.sum())))


def component_brute(case: Case, comp: Component) -> float:
    schema, queries, w = case
    members = [int(i) for i in comp.local]
    return brute(schema, [queries[i] for i in members], w[members])


def check_solution(case: Case, parts: Split, comp: Component, sol: Solution, exact: bool) -> None:
    """``sol`` against brute force on the component's queries; its point (completed
    with the split's fixed values) must carry exactly ``sol.value``."""
    schema, queries, w = case
    best = component_brute(case, comp)
    members = [int(i) for i in comp.local]
    pos = list(parts.point)
    for ai, p in sol.assign.items():
        pos[comp.attr_ids[ai]] = p
    got = weight_at(schema, [queries[i] for i in members], w[members], pos)
    assert got == pytest.approx(sol.value, abs=1e-9)
    assert sol.value <= best + 1e-9
    assert sol.upper >= best - 1e-9
    if exact:
        assert sol.exact
        assert sol.value == pytest.approx(best, abs=1e-9)


# -------------------------------------------------------------- the strategies


@SLOW
@given(workloads(max_attrs=1))
def test_atoms_best_atom_is_exact_on_one_attribute(case: Case) -> None:
    parts = split(case)
    for comp in parts.components:
        assert len(comp.attr_ids) == 1
        value, atom = best_atom(comp.attrs[0], comp.w, np.ones(len(comp.w), bool))
        sol = Solution(value, value, {0: int(comp.attrs[0].pos[atom])}, True)
        check_solution(case, parts, comp, sol, exact=True)


@SLOW
@given(workloads())
def test_atoms_keep_an_optimal_value_of_every_attribute(case: Case) -> None:
    # every value's covering set is contained in some atom's (dominance is safe), and
    # each atom's representative value is covered by exactly the atom's queries
    schema, queries, _ = case
    for a in schema.attributes:
        covs = [q.coverage(a.name) for q in queries]
        at = atoms(a.size, covs, np.arange(len(queries)))
        member = np.array([[any(s <= v < e for s, e in c) for c in covs] for v in range(a.size)])
        assert (member[at.pos] == at.cover).all()
        for row in member:
            assert any((at.cover[k] | ~row).all() for k in range(len(at.cover)))


@SLOW
@given(workloads())
def test_families_are_pairwise_disjoint_and_bound_from_above(case: Case) -> None:
    schema, queries, _ = case
    parts = split(case)
    for comp in parts.components:
        fams = comp.families
        for fam in np.split(fams.order, fams.starts[1:]):
            grids = [covers_grid(schema, queries[int(comp.local[k])]) for k in fam]
            for g1, g2 in itertools.combinations(grids, 2):
                assert not (g1 & g2).any()
        assert comp.bound(np.ones(len(comp.w), bool)) >= component_brute(case, comp) - 1e-9


def test_families_of_marginals_are_the_tables() -> None:
    schema = Schema(tuple(Attribute(x, "integer", min=0, max=2) for x in "xyzu"))
    text = "marginal(x, y)\nmarginal(y, z)\nmarginal(x, z, u)\nhistogram(u)\n"
    parts = split((schema, list(parse_workload(text, schema).queries), np.ones(9 + 9 + 27 + 3)))
    (comp,) = parts.components
    assert len(comp.families.starts) == 4
    assert comp.bound(np.ones(len(comp.w), bool)) == 4


@SLOW
@given(workloads(max_attrs=3, intervals=True))
def test_boxes_slab_sweep_is_exact(case: Case) -> None:
    parts = split(case)
    for comp in parts.components:
        if len(comp.attr_ids) <= 3 and comp.single:
            everything = list(range(len(comp.attr_ids)))
            sol = solve_boxes(comp, np.ones(len(comp.w), bool), everything, math.inf)
            check_solution(case, parts, comp, sol, exact=True)
            stopped = solve_boxes(comp, np.ones(len(comp.w), bool), everything, -math.inf)
            check_solution(case, parts, comp, stopped, exact=False)


@SLOW
@given(st.data())
def test_box_depth_searches_match_a_dense_sweep(data: st.DataObject) -> None:
    k = data.draw(st.integers(1, 3))
    sizes = [data.draw(st.integers(1, 9)) for _ in range(k)]
    n = data.draw(st.integers(1, 20))
    lo = np.array([[data.draw(st.integers(0, s - 1)) for s in sizes] for _ in range(n)])
    hi = np.array(
        [[data.draw(st.integers(lo[i, d] + 1, s)) for d, s in enumerate(sizes)] for i in range(n)]
    )
    w = np.array([data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) for _ in range(n)])
    depth = np.zeros(sizes)
    for i in range(n):
        depth[tuple(slice(int(a), int(b)) for a, b in zip(lo[i], hi[i], strict=True))] += w[i]
    slabs = box_max_slabs(lo, hi, w, sizes, math.inf, 1e-9)
    for got in (slabs, box_max(lo, hi, w, sizes, math.inf, 1e-9)):
        assert got is not None
        best, upper, point, exact = got
        assert exact and best == pytest.approx(depth.max()) and upper >= best
        assert depth[tuple(point)] == pytest.approx(best)


@SLOW
@given(workloads())
def test_dense_grid_is_exact(case: Case) -> None:
    schema, queries, w = case
    ints = np.round(w)
    got = dense_max_overlap(queries, ints)
    assert got is not None
    value, point, covering = got
    assert value == brute(schema, queries, ints)
    assert covering == tuple(i for i, q in enumerate(queries) if q.covers(dict(point)))
    assert math.fsum(ints[list(covering)]) == value
    assert dense_max_overlap(queries, ints, limit=0) is None or len(queries) == 0


@SLOW
@given(trees())
def test_eliminate_is_exact_on_forests_and_small_cores(case: Case) -> None:
    parts = split(case)
    for comp in parts.components:
        for fold in (True, False):
            sol = solve_eliminated(comp, reduce_to_core(comp, fold=fold))
            assert sol is not None  # small cores are enumerated
            check_solution(case, parts, comp, sol, exact=True)


@SLOW
@given(workloads())
def test_search_is_exact(case: Case) -> None:
    parts = split(case)
    for comp in parts.components:
        check_solution(case, parts, comp, branch_and_bound(comp, math.inf), exact=True)


@SLOW
@given(st.one_of(workloads(), trees()), st.booleans())
def test_milp_is_exact_on_cores(case: Case, fold: bool) -> None:
    _, _, w = case
    integral = bool(np.all(w == np.round(w)))
    parts = split(case)
    for comp in parts.components:
        core = reduce_to_core(comp, fold=fold)
        if len(core.attrs):  # an empty core is decided by elimination
            check_solution(case, parts, comp, solve_milp(comp, core, None, integral), exact=True)


@SLOW
@given(workloads())
def test_colouring_bounds_from_above_and_graph_is_pairwise_overlap(case: Case) -> None:
    schema, queries, w = case
    assert colouring_bound(queries, w).value >= brute(schema, queries, w) - 1e-9
    grids = [covers_grid(schema, q) for q in queries]
    adj = overlap_graph(queries)
    for a, b in itertools.combinations(range(len(queries)), 2):
        assert adj[a, b] == adj[b, a] == bool((grids[a] & grids[b]).any())


@SLOW
@given(workloads())
def test_split_components_add_up(case: Case) -> None:
    schema, queries, w = case
    parts = split(case)
    seen: set[int] = set()
    for comp in parts.components:
        assert not seen & set(comp.attr_ids)  # components share no attribute
        seen |= set(comp.attr_ids)
    covered = [i for i in np.flatnonzero(parts.covered).tolist()]
    assert weight_at(schema, [queries[i] for i in covered], w[covered], parts.point) == (
        pytest.approx(parts.total)
    )
    optimum = parts.total + sum(component_brute(case, c) for c in parts.components)
    assert optimum == pytest.approx(brute(schema, queries, w))


# ------------------------------------------------------------------ the dispatcher


def _grid(n: int, size: int) -> Schema:
    return Schema(tuple(Attribute(f"x{i}", "integer", min=0, max=size - 1) for i in range(n)))


def _random_boxes(rng: np.random.Generator, schema: Schema, n: int) -> list[Query]:
    out = []
    for _ in range(n):
        cov = {}
        for a in schema.attributes:
            lo, hi = sorted(int(v) for v in rng.integers(0, a.size, 2))
            cov[a.name] = ((lo, hi + 1),)
        out.append(Query.from_coverages(schema, cov))
    return out


def _random_subsets(rng: np.random.Generator, schema: Schema, n: int) -> list[Query]:
    out = []
    for _ in range(n):
        cov = {}
        for j in rng.choice(len(schema) - 1, size=int(rng.integers(2, 4)), replace=False):
            a = schema.attributes[int(j)]
            cov[a.name] = normalize(
                (int(v), int(v) + 1) for v in np.flatnonzero(rng.random(a.size) < 0.5)
            )
        out.append(Query.from_coverages(schema, cov))
    return out


def test_method_names_the_strategy_that_decided() -> None:
    rng = np.random.default_rng(7)
    small = _grid(3, 4)
    assert max_overlap([]).method == "empty"
    marginals = parse_workload("marginal(x0, x1)\nhistogram(x2)", small)
    assert max_overlap(marginals).method == "dense"
    # fractional weights skip the dense grid; every constraint shares a value
    shared = parse_workload("x0 <= 2 @ 0.5\nx0 >= 1 AND x1 = 3 @ 0.5\nx2 = 1 @ 0.5", small)
    assert max_overlap(shared).method == "atoms"
    one_attr = parse_workload("histogram(x0) @ 0.5\nx0 <= 1 @ 0.5", small)
    assert max_overlap(one_attr).method == "atoms"
    boxes = _random_boxes(rng, _grid(3, 10**6), 200)
    assert max_overlap(boxes).method == "boxes"
    path = parse_workload("\n".join(f"marginal(x{i}, x{i + 1})" for i in range(29)), _grid(30, 3))
    assert max_overlap(path).method == "eliminate"
    cube = _grid(6, 6)
    three_way = "\n".join(
        f"marginal({', '.join(c)}) @ 0.5"
        for c in itertools.combinations([a.name for a in cube.attributes], 3)
    )
    res = max_overlap(parse_workload(three_way, cube))
    assert (res.method, res.value, res.exact) == ("search", 10.0, True)
    # a pendant attribute folds away; the rest is too large to enumerate and has no
    # families: branch and bound with the Lagrangian bound (a grid core: the 0/1 program,
    # tests/queries/test_overlap_hard.py)
    core = _grid(9, 10)
    hard = _random_subsets(rng, core, 40)  # on x0..x7
    hard.append(Query.from_coverages(core, {"x7": ((0, 5),), "x8": ((2, 4),)}))
    res = max_overlap(hard)
    assert res.exact and res.method == "lagrangian"
    assert max_overlap(boxes, time_limit=0.0).method == "bound"


def test_cli_json_reports_the_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(_grid(30, 3).to_dict()))
    workload = tmp_path / "w.txt"
    workload.write_text("\n".join(f"marginal(x{i}, x{i + 1})" for i in range(29)))
    assert main(["overlap", "--schema", str(schema), "--workload", str(workload), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "eliminate" and out["exact"] is True
